"""moto's server with two fixes, started by infra/local-stack.sh.

1. DynamoDB conditional writes are atomic, as on AWS. moto's server handles requests on
threads and evaluates a ConditionExpression and applies the write without a lock, so two
conditional UpdateItems on one item at the same moment could both succeed. The exactly-once
ledger relies on exactly one of them winning (the chaos run, `mailctl chaos`, caught two
claims of one send both succeeding). Writes now take one lock; reads do not.

2. Deep SQS queues.

moto 5.2.5 builds a queue's whole attribute map, including the three approximate message
counts (each a scan of every message with two clock reads per message), on every message
sent and every message received, only to read one setting (ContentBasedDeduplication,
MessageRetentionPeriod). Sending and receiving are therefore linear in the queue's depth, and
a fan-out of tens of thousands of users quadratic: at 5,000 messages one SendMessageBatch
takes over a second.

While those two internal reads run, the counts are not needed, so they are answered as 0 there;
GetQueueAttributes and everything else still count every message. And the list of visible
messages, which every ReceiveMessage and long poll builds by scanning the whole queue, read the
clock twice per message; it now reads it once per scan, with the same comparisons (a profile of
the chaos run, 18,000 messages queued, showed those clock reads as a fifth of moto's time); so
do the three counts.
Nothing else changes.
"""

import sys
import threading

from moto.dynamodb.models import DynamoDBBackend
from moto.server import main
from moto.sqs import models


_dynamodb_writes = threading.RLock()


def _atomic(method):
    def wrapper(*args, **kwargs):
        with _dynamodb_writes:
            return method(*args, **kwargs)

    return wrapper


for _name in ("put_item", "update_item", "delete_item", "transact_write_items"):
    setattr(DynamoDBBackend, _name, _atomic(getattr(DynamoDBBackend, _name)))

_settings_only = threading.local()


def _count(original):
    def count(queue):
        return 0 if getattr(_settings_only, "active", False) else original(queue)

    return property(count)


def _reading_settings(method):
    def wrapper(*args, **kwargs):
        _settings_only.active = True
        try:
            return method(*args, **kwargs)
        finally:
            _settings_only.active = False

    return wrapper


# The three counts, each with one clock read per scan (moto reads it twice per message).
def _delayed(queue):
    now = models.unix_time_millis()
    return sum(1 for m in queue._messages if now < m.delayed_until)


def _not_visible(queue):
    now = models.unix_time_millis()
    return sum(1 for m in queue._messages if not now > m.visible_at)


for _name, _original in (
    ("approximate_number_of_messages", lambda queue: len(queue.messages)),
    ("approximate_number_of_messages_not_visible", _not_visible),
    ("approximate_number_of_messages_delayed", _delayed),
):
    setattr(models.Queue, _name, _count(_original))

# send_message reads ContentBasedDeduplication; the retention check runs once per message received.
models.SQSBackend.send_message = _reading_settings(models.SQSBackend.send_message)
models.SQSBackend.is_message_valid_based_on_retention_period = _reading_settings(
    models.SQSBackend.is_message_valid_based_on_retention_period
)



def _visible_messages(queue):
    now = models.unix_time_millis()
    return [m for m in queue._messages if now > m.visible_at and not now < m.delayed_until]


models.Queue.messages = property(_visible_messages)

if __name__ == "__main__":
    sys.exit(main())
