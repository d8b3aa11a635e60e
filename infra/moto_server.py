"""moto's server with eleven fixes and IAM (infra/moto_iam.py), started by infra/local-stack.sh.
Nothing else changes.

Each fix replaces moto 5.2.5's internals (the attribute it patches is named below), so the
server refuses to start under any other moto version (PATCHED_FOR): check each fix against
the new version's code, then change PATCHED_FOR and the pin in infra/requirements-local.txt
together (tests/consistency.rs checks that they agree). Two kinds, kept apart:
- correctness (what AWS does and moto does not): 1, 5, 9, 10, 11;
- speed (the same answers, less of moto's time): 2, 3, 4, 6, 7, 8.

1. DynamoDB conditional writes are atomic, as on AWS. moto's server handles requests on
threads and evaluates a ConditionExpression and applies the write without a lock, so two
conditional UpdateItems on one item at the same moment could both succeed. The exactly-once
ledger relies on exactly one of them winning (the chaos run, `mailctl chaos`, caught two
claims of one send both succeeding). Writes now take one lock, from reading the request's old
item to answering the new one; reads do not.

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

3. Receipt handles: DeleteMessage and ChangeMessageVisibility look the message up by handle
instead of scanning the queue (see below).

4. Connections are kept alive. moto serves through werkzeug's development server, which
closes the connection after every response, so every request cost a new TCP connection and a
new thread (and, in the chaos run, two connections through its fault proxy); over a run of
tens of thousands of requests that is a tenth of the CPU time and as many sockets left in
TIME_WAIT. The same WSGI application is served by waitress, which keeps HTTP/1.1 connections
alive, as AWS does, with enough threads for every long poll the tests hold open at once.

5. Event source mappings are records, not pollers. moto invokes a mapping's function itself
(through Docker) whenever a message is sent to its queue. On the local stack the pollers are
the local runner's (infra/local/src/runner/), which reads each mapping's State as Lambda's
pollers do, so that `mailctl pause` (UpdateEventSourceMapping Enabled=false) stops them.
moto keeps every mapping (create, get, list, update) as before; it no longer invokes. And
the registered functions' Docker client, which moto-api/data.json (the SES record the tests
read) reads while listing every model, answers "absent" instead of failing the listing when no
Docker engine runs.

6. The SES record alone. moto-api/data.json serialises every model instance of every service
(each DynamoDB item, each SQS message, each email), attribute by attribute, twice, holding the
interpreter while it does: with every test's state in one server, one read of the SES record
took seconds and stalled every other request meanwhile (a campaign's leases ran out, the chaos
run slowed fourfold once the emails carried pick slots). `data.json?service=ses` lists only
that service's models, the same way; without the parameter it lists everything as before.

7. UpdateItem's expression work: parsed expressions are kept, the validator's walk and copy
are cheaper, and checks that depend only on the text are not repeated (8.8-10.7 ms of
moto's time per write in a 1,000-user chaos run, now 6.6-6.7; see the code below).

8. Per-request dispatch: what moto works out anew for every request but never changes while
it runs (which backend serves a host, which actions a handler has, a condition's tokens) is
kept (see the code below).

9. SQS queues change under one lock, as each SQS request is atomic on AWS. moto's server
handles requests on threads and its ReceiveMessage walks a queue's messages and in-flight set
while other requests change them: under load two receives moved one message to the DLQ
("list.remove(x): x not in list") or one failed with "Set changed size during iteration",
and a queue's state could stay wrong for good (the chaos run then never drained: two
fresh-clone runs stopped on it). Every request that reads or changes messages now takes one
lock; a long poll looks under the lock, then waits for a message outside it.

10. A schedule group is created once, as on AWS, which answers ConflictException for a name
that exists. moto replaced the group with an empty one, so provisioning a local stack again
(every `mailctl --prefix` command does) deleted every pending release schedule of a waiting
local-time campaign: a `plan` during a local-time run left 279 of 286 users held with nothing
to release them.

11. Lambda's GetAccountSettings is answered, as AWS answers an account that asked for no
raise: 1,000 concurrent executions, less the functions' reserved concurrency unreserved
(moto has no route for it, and RateControl and `mailctl plan` read it to check the send rate
against the account's concurrency).

12. DynamoDB's DescribeLimits answers AWS's default quotas (40,000 write and read units per
table, 80,000 per account) where moto answers 10,000 and 20,000: RateControl and `mailctl
plan` check the sends table's writes against the per-table figure.
"""

import sys
import threading
import time

import moto

PATCHED_FOR = "5.2.5"
if moto.__version__ != PATCHED_FOR:
    sys.exit(
        f"infra/moto_server.py patches moto {PATCHED_FOR}'s internals and moto {moto.__version__} "
        "is installed: check each fix (its docstring says what it replaces) against that version, "
        "then change PATCHED_FOR and the pin in infra/requirements-local.txt together"
    )

from moto.dynamodb.models import DynamoDBBackend  # noqa: E402
from moto.dynamodb.responses import DynamoHandler  # noqa: E402
from moto.sqs import models  # noqa: E402


def _locked(lock):
    """Wraps a method so that it runs holding `lock` (fixes 1 and 9)."""

    def wrap(method):
        def wrapper(*args, **kwargs):
            with lock:
                return method(*args, **kwargs)

        return wrapper

    return wrap


_dynamodb_writes = threading.RLock()
_atomic = _locked(_dynamodb_writes)


# The backend's writes, and the handlers around them: a handler reads the item before the write
# (for ALL_OLD, UPDATED_*) and serialises the live item after it (ALL_NEW), so without the lock
# two ADDs at once could both answer the second one's total (the send-rate test caught two
# takes given the same slots under load).
for _name in ("put_item", "update_item", "delete_item", "transact_write_items"):
    setattr(DynamoDBBackend, _name, _atomic(getattr(DynamoDBBackend, _name)))
    setattr(DynamoHandler, _name, _atomic(getattr(DynamoHandler, _name)))

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


# 3. DeleteMessage and ChangeMessageVisibility found a message by scanning the whole queue and
# building, for every message, the list of every receipt handle it ever had (twice for a
# delete): in the chaos run, with thousands of messages in flight, that was a sixth of moto's
# time. Every handle a message is given is now indexed; the outcome (the same message, the
# same errors, every old handle still valid) is unchanged.
_by_handle = {}
_mark_received = models.Message.mark_received


def _mark_received_indexed(message, *args, **kwargs):
    _mark_received(message, *args, **kwargs)
    _by_handle[message.receipt_handle] = message


def _holder(queue, receipt_handle):
    """The message of this queue that was given this receipt handle, or None."""
    message = _by_handle.get(receipt_handle)
    # Messages compare by identity: this is one pass in C, not a call per message.
    return message if message is not None and message in queue._messages else None


def _delete_message(queue, receipt_handle):
    if receipt_handle in queue.deleted_messages:
        return
    message = _holder(queue, receipt_handle)
    if message is None:
        raise models.ReceiptHandleIsInvalid()
    remaining = list(queue._messages)
    remaining.remove(message)
    queue._messages = remaining
    queue.pending_messages.discard(message)
    queue.deleted_messages.update(message.all_receipt_handles)
    for handle in message.all_receipt_handles:
        _by_handle.pop(handle, None)


def _change_message_visibility(backend, queue_name, receipt_handle, visibility_timeout):
    queue = backend.get_queue(queue_name)
    message = _holder(queue, receipt_handle)
    if message is None:
        raise models.ReceiptHandleIsInvalid()
    # moto's own checks and effects, on the message found.
    given = models.unix_time_millis() + int(visibility_timeout) * 1000
    if given - message.sent_timestamp > 43200 * 1000:
        raise models.InvalidParameterValue(
            f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: Total "
            "VisibilityTimeout for the message is beyond the limit [43200 seconds]"
        )
    message.change_visibility(visibility_timeout)
    if message.visible and message in queue.pending_messages:
        queue.pending_messages.remove(message)


models.Message.mark_received = _mark_received_indexed
models.Queue.delete_message = _delete_message
models.SQSBackend.change_message_visibility = _change_message_visibility


# 9. One lock for every SQS request that reads or changes messages (an RLock: the batch
# calls make the single ones).
_sqs_state = threading.RLock()
_sqs_atomic = _locked(_sqs_state)


_receive = models.SQSBackend.receive_message


def _receive_message(
    self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None
):
    # One look at a time under the lock (moto's own loop, told not to wait); the long poll waits
    # for a visible message outside it, as moto's loop did, until its time is up.
    deadline = time.monotonic() + (wait_seconds_timeout or 0)
    while True:
        with _sqs_state:
            messages = _receive(
                self, queue_name, count, 0, visibility_timeout, message_attribute_names
            )
        left = deadline - time.monotonic()
        if messages or left <= 0:
            return messages
        self.get_queue(queue_name).wait_for_messages(min(left, 1))
        time.sleep(0.01)


models.SQSBackend.receive_message = _receive_message
for _name in (
    "send_message",
    "send_message_batch",
    "delete_message",
    "delete_message_batch",
    "change_message_visibility",
    "change_message_visibility_batch",
    "purge_queue",
    "get_queue_attributes",
):
    setattr(models.SQSBackend, _name, _sqs_atomic(getattr(models.SQSBackend, _name)))



# 10. CreateScheduleGroup of a name that exists is refused (ConflictException, HTTP 409).
from moto.core.exceptions import JsonRESTError  # noqa: E402
from moto.scheduler.models import EventBridgeSchedulerBackend  # noqa: E402


class _ScheduleGroupExists(JsonRESTError):
    code = 409

    def __init__(self, name):
        super().__init__("ConflictException", f"Schedule group {name} already exists.")


_create_schedule_group = EventBridgeSchedulerBackend.create_schedule_group


def _create_schedule_group_once(self, name, tags):
    if name in self.schedule_groups:
        raise _ScheduleGroupExists(name)
    return _create_schedule_group(self, name, tags)


EventBridgeSchedulerBackend.create_schedule_group = _create_schedule_group_once


# 5. Mappings are kept by the Lambda backend; the queue no longer knows them, so it never invokes.
from moto.awslambda.models import LambdaBackend  # noqa: E402

_create_event_source_mapping = LambdaBackend.create_event_source_mapping


def _create_mapping_record(backend, spec):
    mapping = _create_event_source_mapping(backend, spec)
    for queue in models.sqs_backends[backend.account_id][backend.region_name].queues.values():
        queue.lambda_event_source_mappings.pop(mapping.function_arn, None)
    return mapping


LambdaBackend.create_event_source_mapping = _create_mapping_record


# 11. GetAccountSettings: AWS's default account (1,000 concurrent executions).
import json  # noqa: E402

from moto.awslambda import urls as lambda_urls  # noqa: E402
from moto.awslambda.responses import LambdaResponse  # noqa: E402

ACCOUNT_CONCURRENCY = 1000


def _account_settings(self):
    functions = self.backend.list_functions()
    reserved = sum(int(f.reserved_concurrency or 0) for f in functions)
    limit = {
        "TotalCodeSize": 80530636800,
        "CodeSizeUnzipped": 262144000,
        "CodeSizeZipped": 52428800,
        "ConcurrentExecutions": ACCOUNT_CONCURRENCY,
        "UnreservedConcurrentExecutions": ACCOUNT_CONCURRENCY - reserved,
    }
    usage = {"TotalCodeSize": 0, "FunctionCount": len(functions)}
    return 200, {}, json.dumps({"AccountLimit": limit, "AccountUsage": usage})


LambdaResponse.get_account_settings = _account_settings
lambda_urls.url_paths[r"{0}/(?P<api_version>[^/]+)/account-settings/?$"] = LambdaResponse.dispatch


# 12. DescribeLimits: AWS's default quotas.
from moto.core.responses import ActionResult  # noqa: E402
from moto.dynamodb.responses import DynamoHandler  # noqa: E402


def _describe_limits(self):
    return ActionResult(
        {
            "AccountMaxReadCapacityUnits": 80000,
            "AccountMaxWriteCapacityUnits": 80000,
            "TableMaxReadCapacityUnits": 40000,
            "TableMaxWriteCapacityUnits": 40000,
        }
    )


DynamoHandler.describe_limits = _describe_limits

from moto.utilities.docker_utilities import DockerModel  # noqa: E402

_docker_client = DockerModel.docker_client


def _docker_client_or_absent(model):
    try:
        return _docker_client.fget(model)
    except Exception as error:  # no Docker engine: the listing skips the attribute
        raise AttributeError(f"no Docker engine: {error}") from error


DockerModel.docker_client = property(_docker_client_or_absent)


# 6. data.json?service=NAME: only that service's models, listed as moto lists them.
from moto.moto_api._internal.responses import MotoAPIResponse  # noqa: E402

_model_data = MotoAPIResponse.model_data


def _model_data_of_one_service(self, request, full_url, headers):
    from urllib.parse import parse_qs, urlparse

    wanted = parse_qs(urlparse(full_url).query).get("service")
    if not wanted:
        return _model_data(self, request, full_url, headers)
    import json

    from moto.core.model_instances import model_data

    results = {}
    for service in wanted:
        models_of = model_data.get(service, {})
        results[service] = {}
        for name in sorted(models_of):
            results[service][name] = []
            for instance in models_of[name].instances_tracked:
                listed = {}
                for attr in dir(instance):
                    if attr.startswith("_"):
                        continue
                    try:
                        value = getattr(instance, attr)
                        json.dumps(value)
                    except (TypeError, AttributeError, ValueError):
                        continue
                    listed[attr] = value
                results[service][name].append(listed)
    return 200, {"Content-Type": "application/javascript"}, json.dumps(results)


MotoAPIResponse.model_data = _model_data_of_one_service


# 7. UpdateItem's expression work. moto parses every UpdateExpression anew (the handler parses
# it a second time to list its placeholders), and validates it by walking its AST (about 500
# nodes for the ledger's claim) once per check, rebuilding each checker's type map and asking
# an abstract base class whether each node is a Node, for every node: a profile of the chaos
# run showed the sends table's UpdateItems as half of moto's time. A parsed expression is now
# kept by its text (the validator works on a deep copy of it, as before, and nothing else
# changes it), the walk answers those questions once per node class, and the copy is a pickle
# round trip. The same nodes are visited in the same order with the same processors, so the
# outcome is unchanged (below, the one exception: checks of the text alone, once passed).
import copy  # noqa: E402
import functools  # noqa: E402
import pickle  # noqa: E402

from moto.dynamodb.parsing import ast_nodes, validators  # noqa: E402
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # noqa: E402

_parse_update = UpdateExpressionParser.make


@functools.lru_cache(maxsize=512)
def _parsed_update(expression):
    return _parse_update(expression)


UpdateExpressionParser.make = classmethod(lambda cls, expression: _parsed_update(expression))


@functools.lru_cache(maxsize=None)
def _subclass(node_class, of):
    return issubclass(node_class, of)


def _processors(traverser):
    """The traverser's (node class, processor) pairs, built once per traverser."""
    pairs = traverser.__dict__.get("_processor_pairs")
    if pairs is None:
        pairs = traverser._processor_pairs = tuple(traverser._processing_map().items())
    return pairs


def _traverse_node_recursively(self, node, child_id=-1):
    if not _subclass(type(node), ast_nodes.Node):
        return node
    parent_node = node.parent
    if node.children is not None:
        for i, child_node in enumerate(node.children):
            self.pre_processing_of_child(node, i)
            self.traverse_node_recursively(child_node, i)
    for node_class, processor in _processors(self):
        if _subclass(type(node), node_class):
            node = processor(node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
            break
    return node


def _find_clauses(self, clause_types):
    clauses = []
    for child in self.children or []:
        kind = type(child)
        if kind in clause_types:
            clauses.append(child)
        elif _subclass(kind, ast_nodes.Expression) or _subclass(
            kind, ast_nodes.UpdateExpressionFunction
        ):
            clauses.extend(child.find_clauses(clause_types))
    return clauses


ast_nodes.DepthFirstTraverser.traverse_node_recursively = _traverse_node_recursively
ast_nodes.Node.find_clauses = _find_clauses


def _copy_tree(tree):
    """The validator's private copy of an AST: a pickle round trip is the same copy as
    deepcopy (both go through __reduce_ex__) in under half the time."""
    try:
        return pickle.loads(pickle.dumps(tree, pickle.HIGHEST_PROTOCOL))
    except (pickle.PicklingError, TypeError, AttributeError):
        return copy.deepcopy(tree)


validators.deepcopy = _copy_tree

# The first three checks depend only on the expression's text, its attribute names and the
# table's key (too many clauses, overlapping paths, a key attribute updated); they walk the
# tree the most (the first two search every nested clause at every level). Once a text has
# passed all the checks with the same names on a table with the same key, they are skipped.
_STRUCTURAL_CHECKS = (
    validators.ActionCountValidator,
    validators.OverlappingPathsValidator,
    validators.UpdateHashRangeKeyValidator,
)
_update_validator_init = validators.UpdateExpressionValidator.__init__
_update_processors = validators.UpdateExpressionValidator.get_ast_processors
_update_validate = validators.UpdateExpressionValidator.validate


def _structure_key(validator):
    names = tuple(sorted((validator.expression_attribute_names or {}).items()))
    return names, tuple(validator.table.table_key_attrs)


def _validator_init(self, expression, *args, **kwargs):
    self._source = expression
    _update_validator_init(self, expression, *args, **kwargs)


def _processors_unchecked(self):
    processors = _update_processors(self)
    passed = getattr(self._source, "_structure_passed", ())
    if _structure_key(self) in passed:
        return [p for p in processors if not isinstance(p, _STRUCTURAL_CHECKS)]
    return processors


def _validate_noting_structure(self):
    validated = _update_validate(self)
    passed = self._source.__dict__.setdefault("_structure_passed", set())
    passed.add(_structure_key(self))
    return validated


validators.UpdateExpressionValidator.__init__ = _validator_init
validators.UpdateExpressionValidator.get_ast_processors = _processors_unchecked
validators.UpdateExpressionValidator.validate = _validate_noting_structure


# 8. Per-request dispatch. For every request moto lists its own package directory (a stat per
# service, about 200) to ask whether the host names a service, matches the host against every
# service's URL patterns, and lists the handler class's methods with `inspect` to ask whether
# the action is one of them; and a write's ConditionExpression is lexed twice (by the handler
# and by the backend), compiling a regular expression per token. A profile of the chaos run
# (threads holding the interpreter only) put these at a sixth of moto's time. None of it
# changes while the server runs, so each answer is kept: the directory's services, the backend
# by host, the methods by class, the tokens by expression text (rebuilt as fresh nodes each
# time, as the lexer made them; an expression it refuses is refused each time, as before).
from collections import deque  # noqa: E402

from moto import backends  # noqa: E402
from moto.core import responses as core_responses  # noqa: E402
from moto.dynamodb.comparisons import ConditionExpressionParser  # noqa: E402
from moto.moto_server.werkzeug_app import DomainDispatcherApplication  # noqa: E402

_moto_modules = tuple(backends.list_of_moto_modules())
backends.list_of_moto_modules = lambda: _moto_modules

_backend_for_host = DomainDispatcherApplication.get_backend_for_host
_backends_by_host = {}


def _backend_for_host_kept(self, host):
    if host not in _backends_by_host:
        _backends_by_host[host] = _backend_for_host(self, host)
    return _backends_by_host[host]


DomainDispatcherApplication.get_backend_for_host = _backend_for_host_kept
core_responses.method_names_from_class = functools.lru_cache(maxsize=None)(
    core_responses.method_names_from_class
)

_lex_condition = ConditionExpressionParser._lex_condition_expression


@functools.lru_cache(maxsize=512)
def _condition_tokens(expression):
    lexer = ConditionExpressionParser(expression, None, None)
    return tuple((n.nonterminal, n.kind, n.text, n.value) for n in _lex_condition(lexer))


def _lex_condition_kept(self):
    return deque(
        self.Node(nonterminal=nonterminal, kind=kind, text=text, value=value, children=[])
        for nonterminal, kind, text, value in _condition_tokens(self.condition_expression)
    )


ConditionExpressionParser._lex_condition_expression = _lex_condition_kept


def serve(argv):
    """moto's WSGI application behind waitress; takes moto_server's -H/--host and -p/--port."""
    import argparse
    import os

    import waitress
    from moto.moto_server.werkzeug_app import create_backend_app

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args(argv)
    # moto builds some URLs (queue URLs among them) from its own port.
    os.environ.setdefault("MOTO_PORT", str(args.port))
    from moto_iam import checked

    # Each request signed with a function role's key is checked against that role's policy.
    app = checked(DomainDispatcherApplication(create_backend_app))
    print(f"moto on http://{args.host}:{args.port} (waitress, keep-alive)", flush=True)
    # Long polls hold a thread each for up to 20 s: the tests, the chaos run and the benchmark
    # keep at most a few dozen open at once.
    waitress.serve(
        app,
        host=args.host,
        port=args.port,
        threads=128,
        connection_limit=1000,
        channel_timeout=120,
        ident=None,
        _quiet=True,
    )


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
