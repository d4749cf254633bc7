"""Repro: an offloaded message outlives the payload bucket's lifecycle rule; its body is then gone.

Promise 4: "the bucket's lifecycle rule covers the longest life ... An object of a message still alive is never
removed by the rule before its message could be." The rule is ``expiration_days`` from the object's upload: 389 days
for a standard stack (366-day delay + 2 x 4-day retention + 14 days DLQ + 1). But the worker re-sends a long
``RetryLater`` through the delay table keeping the *same* object (never re-uploaded), so each reschedule adds up
to 366 days to the message's life, not the object's. A message delayed 366 days whose task asks
``RetryLater(timedelta(days=30))`` is due on day 396: the rule deleted its object on day 389, and the task that was
promised its body is dead-lettered "missing from S3" instead. (The same holds without any delay: two
``RetryLater(days=200)`` in a row, or a dead-lettered message redriven, failing, and dead-lettered again: each DLQ
copy is a fresh SendMessage with a fresh 14 days, and each redrive a fresh retention.)
"""

from __future__ import annotations

from datetime import timedelta

from tests.functional.test_offloaded_bodies import make_worker, offload, world  # noqa: F401
from worker_tier import RetryLater, Task
from worker_tier.core import payloads
from worker_tier.delays import delay as delays
from worker_tier.delays.delay import DelayedMessage
from worker_tier.worker.registry import Registry

DAY = 86400
RETENTION = 4 * DAY  # the queue's default retention_period
STANDARD_STACK_DAYS = payloads.expiration_days(RETENTION, 14 * DAY, delays.MAX_DELAY_SECONDS)


def test_a_long_retry_of_a_message_delayed_366_days_is_due_after_its_object_expired(world):
    aws, s3 = world
    assert STANDARD_STACK_DAYS == 389
    aws.dynamodb.create_table(
        TableName="delay",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    tasks = Registry()

    @tasks.task("/renew")
    def renew(task: Task) -> None:
        raise RetryLater(timedelta(days=30))

    uploaded_at = 1_800_000_000.0
    offload(aws, s3, "the real body", path="/renew")  # the object's life starts here
    dispatched_at = uploaded_at + delays.MAX_DELAY_SECONDS  # the delay dispatcher sends it 366 days later
    response = make_worker(aws, tasks, s3, delay_table="delay", clock=lambda: dispatched_at).handle(aws.receive_event(), None)
    assert response["batchItemFailures"] == []
    [item] = aws.dynamodb.scan(TableName="delay")["Items"]
    copy = DelayedMessage.from_item(item)
    assert payloads.is_offloaded(copy.attributes)  # the copy points at the same object
    object_expires_at = uploaded_at + STANDARD_STACK_DAYS * DAY
    assert copy.due_ms / 1000 <= object_expires_at, (
        f"the retry is due {(copy.due_ms / 1000 - uploaded_at) / DAY:.0f} days after the upload; the lifecycle rule "
        f"deleted its object on day {STANDARD_STACK_DAYS}")


def test_a_message_redriven_once_and_dead_lettered_again_outlives_a_fifo_stacks_rule():
    # The timeline of one offloaded message on a FIFO stack (or a WorkerQueue alone: no delay table), with the
    # defaults: 4 days of queue retention, 14 days of DLQ retention, every step as the product does it.
    rule_days = payloads.expiration_days(RETENTION, 14 * DAY, 0)
    assert rule_days == 23
    uploaded = 0
    dead_lettered = uploaded + RETENTION  # fails until its last day in the queue; the worker's DLQ copy is a new message
    redriven = dead_lettered + 13 * DAY  # the operator redrives it (worker-tier redrive: SendMessage, a new message)
    dead_lettered_again = redriven + RETENTION  # the fix was incomplete: it fails again, a new DLQ copy
    dlq_keeps_it_until = dead_lettered_again + 14 * DAY
    assert dlq_keeps_it_until <= uploaded + rule_days * DAY, (
        f"the DLQ keeps the message until day {dlq_keeps_it_until // DAY}; the lifecycle rule deleted its body on day "
        f"{rule_days}: 'a dead-lettered message keeps its object as long as the DLQ keeps the message' does not hold")
