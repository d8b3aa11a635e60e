"""The sends table's writes, as SendEmail makes them, against one DynamoDB endpoint.

For every user: the claim (the conditional UpdateItem of shared/src/adapters/sends/ledger.rs,
ReturnValues ALL_NEW, ReturnValuesOnConditionCheckFailure ALL_OLD), SENT while the claim
holds, then a second delivery's claim, refused. THREADS users at a time, as several SendEmail
environments do. Prints one JSON line: the requests, the wall seconds, and the requests the
endpoint refused or could not answer (by error code).

    python infra/emulator_compare.py ENDPOINT USERS
"""

import collections
import concurrent.futures
import json
import sys
import time

import boto3
import botocore.config
import botocore.exceptions

THREADS = 8
CLAIM = (
    "attribute_not_exists(#status) OR (#status = :in_progress AND leaseUntil <= :now) "
    "OR #status = :dead_lettered"
)
CLAIM_SET = (
    "SET #status = :in_progress, startedAt = :now, leaseUntil = :lease, claimToken = :token, "
    "updatedAt = :now, expiresAt = :expires, campaignShard = :shard, "
    "attempt = if_not_exists(attempt, :zero) + :one"
)
SENT_SET = "SET #status = :sent, sesMessageId = :id, completedAt = :now, updatedAt = :now"
SENT_WHILE = "#status = :in_progress AND claimToken = :token"


def main(endpoint, users):
    client = boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=botocore.config.Config(
            max_pool_connections=THREADS, retries={"max_attempts": 1}
        ),
    )
    table = f"compare-{int(time.time() * 1000)}"
    client.create_table(
        TableName=table,
        KeySchema=[
            {"AttributeName": "userId", "KeyType": "HASH"},
            {"AttributeName": "campaignId", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "userId", "AttributeType": "S"},
            {"AttributeName": "campaignId", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    client.get_waiter("table_exists").wait(TableName=table)
    errors = collections.Counter()

    def call(**kwargs):
        try:
            client.update_item(TableName=table, **kwargs)
            return True
        except botocore.exceptions.ClientError as err:
            errors[err.response["Error"]["Code"]] += 1
            return False

    def one(i):
        now = int(time.time() * 1000)
        key = {"userId": {"S": f"u{i:07d}"}, "campaignId": {"S": "weekly-2026-W47"}}
        values = {
            ":in_progress": {"S": "IN_PROGRESS"},
            ":dead_lettered": {"S": "DEAD_LETTERED"},
            ":shard": {"S": f"weekly-2026-W47#{i % 16}"},
            ":now": {"N": str(now)},
            ":lease": {"N": str(now + 60_000)},
            ":token": {"S": f"request-{i}:message-{i}"},
            ":expires": {"N": str(now // 1000 + 90 * 86400)},
            ":zero": {"N": "0"},
            ":one": {"N": "1"},
        }
        claim = dict(
            Key=key,
            UpdateExpression=CLAIM_SET,
            ConditionExpression=CLAIM,
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        call(**claim)
        call(
            Key=key,
            UpdateExpression=SENT_SET,
            ConditionExpression=SENT_WHILE,
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={
                ":sent": {"S": "SENT"},
                ":id": {"S": f"ses-{i}"},
                ":now": {"N": str(now)},
                ":in_progress": {"S": "IN_PROGRESS"},
                ":token": {"S": f"request-{i}:message-{i}"},
            },
        )
        # A second delivery of the same message: refused, its record read back.
        call(**claim)

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, range(users)))
    wall = time.monotonic() - started
    print(
        json.dumps(
            {
                "requests": users * 3,
                "wallSeconds": round(wall, 2),
                "requestsPerSecond": round(users * 3 / wall, 1),
                "errors": dict(errors),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
