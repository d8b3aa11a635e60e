"""moto's server with one fix for deep SQS queues, started by infra/local-stack.sh.

moto 5.2.5 builds a queue's whole attribute map, including the three approximate message
counts (each a scan of every message with two clock reads per message), on every message
sent and every message received, only to read one setting (ContentBasedDeduplication,
MessageRetentionPeriod). Sending and receiving are therefore linear in the queue's depth, and
a fan-out of tens of thousands of users quadratic: at 5,000 messages one SendMessageBatch
takes over a second.

While those two internal reads run, the counts are not needed, so they are answered as 0 there;
GetQueueAttributes and everything else still count every message. Nothing else changes.
"""

import sys
import threading

from moto.server import main
from moto.sqs import models

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


for _name in (
    "approximate_number_of_messages",
    "approximate_number_of_messages_not_visible",
    "approximate_number_of_messages_delayed",
):
    setattr(models.Queue, _name, _count(getattr(models.Queue, _name).fget))

# send_message reads ContentBasedDeduplication; the retention check runs once per message received.
models.SQSBackend.send_message = _reading_settings(models.SQSBackend.send_message)
models.SQSBackend.is_message_valid_based_on_retention_period = _reading_settings(
    models.SQSBackend.is_message_valid_based_on_retention_period
)

if __name__ == "__main__":
    sys.exit(main())
