"""IAM on the local stack: each request signed with a role's access key is allowed only if that
role's policy (template.yaml's, as CloudFormation would resolve it) allows its action on its
resource, as AWS decides it. moto checks no permission by default, and its own enforcement
(INITIAL_NO_AUTH_ACTION_COUNT) works out a request's resource for SQS, IAM, STS and S3 only:
every DynamoDB, SES, Lambda, Scheduler and Secrets Manager request is checked against "*",
which no least-privilege statement names. So a missing or mismatched grant would only be
found on AWS; here it fails the request, as AWS does, and is recorded for the tests to read.

The local simulator (infra/local/src/iam/) registers each stack's roles and gives each
function its role's key, as Lambda gives a function its role's credentials. A request signed
with any other key (the tests', the operator's, the simulator's) is not checked, as an
administrator's would not be.

Control endpoints, JSON:
- POST /mailflow-api/iam/roles     {"roles": [{"key", "stack", "role", "statements": [...]}]}
- POST /mailflow-api/iam/authorize {"key", "action", "resource"}: for what no HTTP request
  carries (Scheduler invoking a schedule's target as the schedule's role); recorded like a
  request.
- GET  /mailflow-api/iam/denials?stack=NAME
"""

import json
import re
import threading
from email.utils import parseaddr
from io import BytesIO
from urllib.parse import parse_qs, unquote, urlparse

from moto.core.models import DEFAULT_ACCOUNT_ID

CONTROL = "/mailflow-api/iam/"

_roles = {}
_denials = []
_lock = threading.Lock()


class Unmodelled(Exception):
    """A request whose action or resource this checker cannot work out: refused, so that every
    request the functions make is one it checks."""


def _wildcard(pattern, ignore_case):
    """IAM's wildcards: `*` any run of characters, `?` one."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(regex, re.IGNORECASE if ignore_case else 0)


def _any_matches(patterns, value, ignore_case):
    return any(_wildcard(p, ignore_case).fullmatch(value) for p in patterns)


# The condition operators the checker evaluates; the simulator refuses any other at
# registration (infra/local/src/iam/policies.rs), so a Deny it cannot evaluate is never skipped.
OPERATORS = ("StringEquals", "ForAllValues:StringEquals")


def _condition_holds(conditions, context):
    """The operators the template uses, with the keys AWS sets for these requests; anything
    else does not hold (a statement this checker cannot evaluate grants nothing)."""
    context = {k.lower(): v for k, v in context.items()}
    for operator, keys in conditions.items():
        for key, wanted in keys.items():
            wanted = wanted if isinstance(wanted, list) else [wanted]
            have = context.get(key.lower())
            if have is None:
                # ForAllValues over no values holds, as on AWS; StringEquals needs the key.
                if operator == "ForAllValues:StringEquals":
                    continue
                return False
            have = have if isinstance(have, list) else [have]
            if operator == "StringEquals":
                if not any(h in wanted for h in have):
                    return False
            elif operator == "ForAllValues:StringEquals":
                if not all(h in wanted for h in have):
                    return False
            else:
                return False
    return True


def _statement_applies(statement, action, resource, context):
    return (
        _any_matches(statement["actions"], action, ignore_case=True)
        and _any_matches(statement["resources"], resource, ignore_case=False)
        and _condition_holds(statement.get("conditions") or {}, context)
    )


def allowed(statements, action, resource, context):
    """AWS's evaluation for one identity policy: an explicit Deny wins, else any Allow."""
    applying = [s for s in statements if _statement_applies(s, action, resource, context)]
    if any(s["effect"] == "Deny" for s in applying):
        return False
    return any(s["effect"] == "Allow" for s in applying)


def _credential(environ):
    """(access key id, region, signing name) from a SigV4 Authorization header."""
    header = environ.get("HTTP_AUTHORIZATION", "")
    match = re.search(r"Credential=([^/,\s]+)/[^/]+/([^/]+)/([^/]+)/aws4_request", header)
    return match.groups() if match else (None, None, None)


def _table_key_value(account, region, table, key):
    """The partition key's value of `key` (a DynamoDB item key), for dynamodb:LeadingKeys."""
    from moto.dynamodb.models import dynamodb_backends

    found = dynamodb_backends[account][region].tables.get(table)
    if found is None or not isinstance(key, dict):
        return None
    value = key.get(found.hash_key_attr) or {}
    return next(iter(value.values()), None) if isinstance(value, dict) else None


def _query_leading_key(account, region, params):
    """The partition key value a Query's KeyConditionExpression names (`#pk = :v`)."""
    from moto.dynamodb.models import dynamodb_backends

    table = dynamodb_backends[account][region].tables.get(params.get("TableName"))
    if table is None:
        return None
    hash_key = table.hash_key_attr
    if params.get("IndexName"):
        for index in table.global_indexes + table.indexes:
            if index.name == params["IndexName"]:
                hash_key = next(k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH")
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    for name, value in re.findall(r"([#\w]+)\s*=\s*(:\w+)", params.get("KeyConditionExpression", "")):
        if names.get(name, name) == hash_key and value in values:
            return next(iter(values[value].values()), None)
    return None


def _secret_arn(account, region, secret_id):
    from moto.secretsmanager.models import secretsmanager_backends

    if secret_id.startswith("arn:"):
        return secret_id
    secret = secretsmanager_backends[account][region].secrets.get(secret_id)
    # An unknown secret: AWS answers ResourceNotFound after authorizing its name.
    return secret.arn if secret is not None else f"arn:aws:secretsmanager:{region}:{account}:secret:{secret_id}"


def _sending_identity(account, region, sender):
    """The identity SES sends as: the address when it is verified itself, else its domain."""
    from moto.ses.models import ses_backends

    address = parseaddr(sender)[1]
    local, _, domain = address.rpartition("@")
    address = f"{local}@{domain.lower()}"
    verified = ses_backends[account][region].list_verified_email_addresses()
    identity = address if address in verified else domain.lower()
    return f"arn:aws:ses:{region}:{account}:identity/{identity}"


def describe(environ, body, region, service, account=DEFAULT_ACCOUNT_ID):
    """The (action, resource, condition context) triples a request needs, as IAM sees them."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    method = environ.get("REQUEST_METHOD", "GET")
    path = unquote(environ.get("PATH_INFO", ""))
    query = parse_qs(environ.get("QUERY_STRING", ""))
    try:
        params = json.loads(body) if body else {}
    except ValueError:
        params = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
    if not isinstance(params, dict):
        raise Unmodelled(f"{service}: a body that is not an object")
    operation = target.rsplit(".", 1)[-1] if target else params.get("Action")

    if service == "sqs":
        queue = urlparse(params.get("QueueUrl", "")).path.rstrip("/").rsplit("/", 1)[-1]
        if not operation or not queue:
            raise Unmodelled(f"sqs {operation or method} without a queue")
        # A batch is authorized as its single action (SendMessageBatch needs sqs:SendMessage).
        action = operation.removesuffix("Batch")
        return [(f"sqs:{action}", f"arn:aws:sqs:{region}:{account}:{queue}", {})]

    if service == "dynamodb":
        if not operation:
            raise Unmodelled("dynamodb without X-Amz-Target")
        table_arn = f"arn:aws:dynamodb:{region}:{account}:table/"
        needs = []
        if "RequestItems" in params:
            for table, request in params["RequestItems"].items():
                keys = request.get("Keys") if isinstance(request, dict) else None
                if keys is None:
                    keys = [
                        (w.get("PutRequest") or {}).get("Item") or (w.get("DeleteRequest") or {}).get("Key")
                        for w in request
                    ]
                leading = sorted({str(_table_key_value(account, region, table, k)) for k in keys})
                needs.append((f"dynamodb:{operation}", table_arn + table, {"dynamodb:LeadingKeys": leading}))
        elif "TransactItems" in params:
            for item in params["TransactItems"]:
                for kind, request in item.items():
                    action = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                              "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}[kind]
                    table = request["TableName"]
                    key = request.get("Key") or request.get("Item")
                    leading = [str(_table_key_value(account, region, table, key))]
                    needs.append((f"dynamodb:{action}", table_arn + table, {"dynamodb:LeadingKeys": leading}))
        elif "TableName" in params:
            resource = table_arn + params["TableName"]
            if params.get("IndexName"):
                resource += "/index/" + params["IndexName"]
            context = {}
            key = params.get("Key") or params.get("Item")
            if key is not None:
                context["dynamodb:LeadingKeys"] = [
                    str(_table_key_value(account, region, params["TableName"], key))
                ]
            elif operation == "Query":
                context["dynamodb:LeadingKeys"] = [str(_query_leading_key(account, region, params))]
            needs.append((f"dynamodb:{operation}", resource, context))
        elif operation == "DescribeLimits":
            needs.append(("dynamodb:DescribeLimits", "*", {}))  # IAM grants it only on *
        else:
            raise Unmodelled(f"dynamodb:{operation} without a table")
        return needs

    if service == "secretsmanager":
        if not operation or "SecretId" not in params:
            raise Unmodelled(f"secretsmanager {operation or method} without a SecretId")
        return [(f"secretsmanager:{operation}", _secret_arn(account, region, params["SecretId"]), {})]

    if service == "ses":
        if method == "POST" and path == "/v2/email/outbound-emails":
            for unmodelled in ("FeedbackForwardingEmailAddressIdentityArn", "ListManagementOptions"):
                if params.get(unmodelled):
                    raise Unmodelled(f"ses SendEmail with {unmodelled}")
            if (params.get("Content") or {}).get("Template"):
                raise Unmodelled("ses SendEmail with a template")
            identity = params.get("FromEmailAddressIdentityArn") or _sending_identity(
                account, region, params.get("FromEmailAddress", "")
            )
            needs = [("ses:SendEmail", identity, {})]
            if params.get("ConfigurationSetName"):
                needs.append((
                    "ses:SendEmail",
                    f"arn:aws:ses:{region}:{account}:configuration-set/{params['ConfigurationSetName']}",
                    {},
                ))
            return needs
        if method == "GET" and path == "/v2/email/account":
            return [("ses:GetAccount", "*", {})]
        raise Unmodelled(f"ses {method} {path}")

    if service == "lambda":
        mapping = re.fullmatch(r"/2015-03-31/event-source-mappings/([^/]+)/?", path)
        if mapping and method in ("GET", "PUT"):
            action = "GetEventSourceMapping" if method == "GET" else "UpdateEventSourceMapping"
            arn = f"arn:aws:lambda:{region}:{account}:event-source-mapping:{mapping.group(1)}"
            return [(f"lambda:{action}", arn, {})]
        invoke = re.fullmatch(r"/2015-03-31/functions/([^/]+)/invocations/?", path)
        if invoke and method == "POST":
            name = invoke.group(1)
            if name.count(":") not in (0, 6, 7):
                raise Unmodelled(f"lambda Invoke of a partial ARN {name}")
            arn = name if name.startswith("arn:") else f"arn:aws:lambda:{region}:{account}:function:{name}"
            qualifier = (query.get("Qualifier") or [None])[0]
            if qualifier:
                arn = f"{arn}:{qualifier}"
            return [("lambda:InvokeFunction", arn, {})]
        if method == "GET" and re.fullmatch(r"/2016-08-19/account-settings/?", path):
            return [("lambda:GetAccountSettings", "*", {})]
        raise Unmodelled(f"lambda {method} {path}")

    if service == "scheduler":
        schedule = re.fullmatch(r"/schedules/([^/]+)/?", path)
        if schedule:
            action = {"POST": "CreateSchedule", "PUT": "UpdateSchedule", "GET": "GetSchedule",
                      "DELETE": "DeleteSchedule"}.get(method)
            if action is None:
                raise Unmodelled(f"scheduler {method} {path}")
            group = params.get("GroupName") or (query.get("groupName") or ["default"])[0]
            needs = [(f"scheduler:{action}",
                      f"arn:aws:scheduler:{region}:{account}:schedule/{group}/{schedule.group(1)}", {})]
            role = (params.get("Target") or {}).get("RoleArn")
            if role and action in ("CreateSchedule", "UpdateSchedule"):
                needs.append(("iam:PassRole", role, {"iam:PassedToService": "scheduler.amazonaws.com"}))
            return needs
        raise Unmodelled(f"scheduler {method} {path}")

    if service == "sts" and operation == "GetCallerIdentity":
        return []  # needs no permission
    raise Unmodelled(f"{service} {operation or method} {path}")


def _record(entry, action, resource, reason):
    denial = {"stack": entry["stack"], "role": entry["role"], "action": action,
              "resource": resource, "reason": reason}
    with _lock:
        _denials.append(denial)
    return denial


def _json(start_response, status, body, headers=()):
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data))), *headers])
    return [data]


def _control(environ, start_response, body):
    path = environ.get("PATH_INFO", "")[len(CONTROL):]
    method = environ.get("REQUEST_METHOD")
    if method == "POST" and path == "roles":
        roles = json.loads(body)["roles"]
        stacks = {role["stack"] for role in roles}
        with _lock:
            # A stack provisioned again starts with no denials (its name may be reused).
            _denials[:] = [d for d in _denials if d["stack"] not in stacks]
            for role in roles:
                _roles[role["key"]] = role
        return _json(start_response, "200 OK", {"registered": len(roles)})
    if method == "POST" and path == "authorize":
        request = json.loads(body)
        entry = _roles.get(request["key"])
        if entry is None:
            return _json(start_response, "404 Not Found", {"message": "no role has that key"})
        ok = allowed(entry["statements"], request["action"], request["resource"], request.get("context") or {})
        if not ok:
            _record(entry, request["action"], request["resource"], "no statement allows it")
        return _json(start_response, "200 OK", {"allowed": ok})
    if method == "GET" and path == "denials":
        stack = (parse_qs(environ.get("QUERY_STRING", "")).get("stack") or [None])[0]
        with _lock:
            found = [d for d in _denials if stack is None or d["stack"] == stack]
        return _json(start_response, "200 OK", {"denials": found})
    return _json(start_response, "404 Not Found", {"message": f"no {method} {path}"})


def _access_denied(start_response, service, entry, denial):
    message = (
        f"User: arn:aws:sts::{DEFAULT_ACCOUNT_ID}:assumed-role/{entry['role']}/local is not "
        f"authorized to perform: {denial['action']} on resource: {denial['resource']} "
        f"because no identity-based policy allows the {denial['action']} action ({denial['reason']})"
    )
    rest = service in ("ses", "lambda", "scheduler")
    headers = [("x-amzn-ErrorType", "AccessDeniedException")]
    if service == "sqs":
        headers.append(("x-amzn-query-error", "AccessDenied;Sender"))
    body = {"message": message} if rest else {"__type": "AccessDeniedException", "message": message}
    return _json(start_response, "403 Forbidden" if rest else "400 Bad Request", body, headers)


def checked(app):
    """`app` behind the IAM check."""

    def middleware(environ, start_response):
        path = environ.get("PATH_INFO", "")
        key, region, service = _credential(environ)
        entry = _roles.get(key) if key else None
        if not path.startswith(CONTROL) and entry is None:
            return app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = BytesIO(body)
        if path.startswith(CONTROL):
            return _control(environ, start_response, body)
        try:
            needs = describe(environ, body, region, service)
        except Unmodelled as unmodelled:
            denial = _record(entry, f"{service}:?", "?", f"not modelled by infra/moto_iam.py: {unmodelled}")
            return _access_denied(start_response, service, entry, denial)
        for action, resource, context in needs:
            if not allowed(entry["statements"], action, resource, context):
                denial = _record(entry, action, resource, "no statement allows it")
                return _access_denied(start_response, service, entry, denial)
        return app(environ, start_response)

    return middleware
