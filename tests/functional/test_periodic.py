"""The cron function against moto: one message per tick, in EB's shape, whatever the duplicates."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.functional.conftest import AwsWorld
from worker_tier.periodic import TICK_LEASE_SECONDS, Tick, TickEnqueuer, tick_from_event
from worker_tier.registry import Registry
from worker_tier.settings import Settings
from worker_tier.task import Task
from worker_tier.worker import Worker

TICK = Tick("backup-job", "/backup", datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc))


def enqueuer(aws: AwsWorld, now: list[float] | None = None) -> TickEnqueuer:
    clock = (lambda: now[0]) if now else (lambda: 1_800_000_000.0)
    return TickEnqueuer(aws.queue_url, aws.state_table, sqs=aws.sqs, dynamodb=aws.dynamodb, clock=clock)


def received(aws: AwsWorld) -> list[dict]:
    return aws.receive_event()["Records"]


def test_tick_message_is_exactly_ebs(aws):
    # WHEN a tick is enqueued
    assert enqueuer(aws).enqueue(TICK) is True
    # THEN body and attributes are what EB's leader enqueues
    [record] = received(aws)
    assert record["body"] == "elasticbeanstalk scheduled job"
    attributes = {k: (v["dataType"], v["stringValue"]) for k, v in record["messageAttributes"].items()}
    assert attributes == {
        "beanstalk.sqsd.path": ("String", "/backup"),
        "beanstalk.sqsd.task_name": ("String", "backup-job"),
        "beanstalk.sqsd.scheduled_time": ("String", "2026-11-22 12:00:00 UTC"),
    }


def test_duplicate_invocations_enqueue_once(aws):
    # GIVEN two schedules (or a retried delivery) firing the same tick three times
    worker = enqueuer(aws)
    # WHEN each invocation runs
    results = [worker.enqueue(TICK) for _ in range(3)]
    # THEN one message
    assert results == [True, False, False]
    assert len(received(aws)) == 1
    # AND the next tick is its own
    assert worker.enqueue(Tick("backup-job", "/backup", datetime(2026, 11, 23, 0, 0, tzinfo=timezone.utc)))


def test_crash_between_claim_and_send_is_recovered_after_the_lease(aws):
    # GIVEN an invocation that claimed the tick and died before sending
    now = [1_800_000_000.0]
    first = enqueuer(aws, now)
    first._claim(TICK)
    # WHEN a retry comes within the lease  THEN it leaves the tick to the holder
    assert enqueuer(aws, now).enqueue(TICK) is False
    # WHEN a retry comes after the lease  THEN it takes over and sends
    now[0] += TICK_LEASE_SECONDS + 1
    assert enqueuer(aws, now).enqueue(TICK) is True
    assert len(received(aws)) == 1


def test_send_failure_leaves_the_tick_claimable(aws):
    # GIVEN a queue URL that does not exist: the send fails after the claim
    now = [1_800_000_000.0]
    broken = TickEnqueuer(aws.queue_url + "-gone", aws.state_table, sqs=aws.sqs, dynamodb=aws.dynamodb, clock=lambda: now[0])
    with pytest.raises(Exception, match="QueueDoesNotExist|does not exist"):
        broken.enqueue(TICK)
    # WHEN retried after the lease  THEN the tick is still delivered: a failure is never a silent loss
    now[0] += TICK_LEASE_SECONDS + 1
    assert enqueuer(aws, now).enqueue(TICK) is True


def test_fifo_group_is_the_task_and_dedupe_id_is_stable(aws_fifo):
    # WHEN a tick goes to a FIFO queue
    enqueuer(aws_fifo).enqueue(TICK)
    [record] = aws_fifo.sqs.receive_message(
        QueueUrl=aws_fifo.queue_url, MessageSystemAttributeNames=["All"]
    )["Messages"]
    # THEN the group is the task name and the deduplication id derives from (name, time)
    assert record["Attributes"]["MessageGroupId"] == "backup-job"
    assert record["Attributes"]["MessageDeduplicationId"] == TICK.deduplication_id()
    assert Tick("backup-job", "/other", TICK.scheduled_at).deduplication_id() == TICK.deduplication_id()
    assert Tick("audit", "/backup", TICK.scheduled_at).deduplication_id() != TICK.deduplication_id()


def test_worker_runs_the_url_task_with_name_and_time(aws):
    # GIVEN a tick in the queue and a task at its url
    enqueuer(aws).enqueue(TICK)
    tasks = Registry()
    seen: list[Task] = []
    tasks.task("/backup")(seen.append)
    worker = Worker(Settings(), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url, registry=tasks, sqs=aws.sqs)
    # WHEN the worker handles it
    assert worker.handle(aws.receive_event(), None) == {"batchItemFailures": []}
    # THEN the task knows which periodic task and which tick it is
    [task] = seen
    assert (task.task_name, task.scheduled_at) == ("backup-job", TICK.scheduled_at)


def test_handler_event_from_scheduler_input():
    tick = tick_from_event({"name": "a", "url": "/a", "body": "x", "scheduled_time": "2026-11-22T12:00:00Z"})
    assert tick == Tick("a", "/a", datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc), "x")
    with pytest.raises(ValueError, match=r"cron event needs string fields name, url and scheduled_time; missing \['url'\]"):
        tick_from_event({"name": "a", "scheduled_time": "2026-11-22T12:00:00Z"})
    with pytest.raises(ValueError, match=r"cron event scheduled_time must be ISO-8601, got 'noon'"):
        tick_from_event({"name": "a", "url": "/a", "scheduled_time": "noon"})
