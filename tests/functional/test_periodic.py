"""The cron function against moto: one message per tick, in EB's shape, whatever the duplicates."""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timezone
from typing import Any, Callable

import pytest
from botocore.exceptions import ClientError

from worker_tier.core.errors import CronConfigError
from worker_tier.periodic.cron_config import parse
from tests.support.aws_world import AwsWorld
from tests.support.strict_sqs import StrictSQS
from worker_tier.core import observability
from worker_tier.worker.idempotency import STATE_TABLE_PARTITION_KEY
from worker_tier_local.cron import CronEmulator
from worker_tier.periodic.ticks import (
    METRIC_TICK_MARK_FAILED,
    TICK_LEASE_SECONDS,
    TICK_PENDING_POLL_SECONDS,
    TICK_PENDING_POLLS,
    Tick,
    TickEnqueuer,
    TickNotEnqueuedError,
    TickPendingError,
    tick_from_event,
)
from worker_tier.worker.registry import Registry
from worker_tier.core.retry import TICK_MARK
from worker_tier.core.settings import Settings
from worker_tier.core.task import Task
from worker_tier.worker.batch import Worker

TICK = Tick("backup-job", "/backup", datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc))


def enqueuer(aws: AwsWorld, now: list[float] | None = None) -> TickEnqueuer:
    clock = (lambda: now[0]) if now else (lambda: 1_800_000_000.0)
    return TickEnqueuer(aws.queue_url, aws.state_table, sqs=StrictSQS(aws.sqs), dynamodb=aws.dynamodb, clock=clock)


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


class Crash(BaseException):
    """The process dies (a Lambda timeout): no handler code runs after it."""


class FlakySQS:
    """Wraps the moto client; the first ``failures`` SendMessage calls fail (or crash the process)."""

    def __init__(self, inner: Any, failures: int = 1, error: BaseException | None = None) -> None:
        self._inner = inner
        self._failures = failures
        self._error = error or ClientError({"Error": {"Code": "InternalError", "Message": "try again"}}, "SendMessage")
        self.on_send: Callable[[], None] = lambda: None

    def send_message(self, **params: Any) -> Any:
        self.on_send()
        if self._failures > 0:
            self._failures -= 1
            raise self._error
        return self._inner.send_message(**params)


def flaky_enqueuer(aws: AwsWorld, sqs: FlakySQS, now: list[float], sleeps: list[float] | None = None) -> TickEnqueuer:
    def sleep(seconds: float) -> None:
        (sleeps if sleeps is not None else []).append(seconds)
        now[0] += seconds

    return TickEnqueuer(aws.queue_url, aws.state_table, sqs=sqs, dynamodb=aws.dynamodb, clock=lambda: now[0], sleep=sleep)


def test_failed_send_gives_the_claim_back_so_an_early_retry_sends(aws):
    # GIVEN a SendMessage that fails once after the tick is claimed
    now = [1_800_000_000.0]
    first = flaky_enqueuer(aws, FlakySQS(StrictSQS(aws.sqs)), now)
    # WHEN the invocation runs  THEN it raises, so Lambda retries it, and says why
    with pytest.raises(TickNotEnqueuedError) as error:
        first.enqueue(TICK)
    assert str(error.value) == (
        "tick 'cron#backup-job#2026-11-22 12:00:00 UTC' was not enqueued: SendMessage failed with InternalError: "
        "An error occurred (InternalError) when calling the SendMessage operation: try again; "
        "its claim is given back so a retry sends it"
    )
    # WHEN Lambda's retry comes well within the lease  THEN it sends the tick, once
    assert first.enqueue(TICK) is True
    assert [r["messageAttributes"]["beanstalk.sqsd.task_name"]["stringValue"] for r in received(aws)] == ["backup-job"]


class FlakyDynamoDB:
    """Wraps the moto client; the first ``failures`` UpdateItem calls are throttled."""

    def __init__(self, inner: Any, failures: int) -> None:
        self._inner = inner
        self._failures = failures

    def update_item(self, **params: Any) -> Any:
        if self._failures > 0:
            self._failures -= 1
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "throttled"}}, "UpdateItem")
        return self._inner.update_item(**params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def published():
    """The metrics this test published, summed by name."""
    observability.metrics.clear_metrics()
    yield lambda: {name: sum(metric["Value"]) for name, metric in observability.metrics.metric_set.items()}
    observability.metrics.clear_metrics()


def marking_enqueuer(aws: AwsWorld, sqs: Any, dynamodb: Any, now: list[float], sleeps: list[float]) -> TickEnqueuer:
    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    return TickEnqueuer(aws.queue_url, aws.state_table, sqs=sqs, dynamodb=dynamodb, clock=lambda: now[0], sleep=sleep)


def claim(aws: AwsWorld, tick: Tick) -> dict | None:
    return aws.dynamodb.get_item(TableName=aws.state_table, Key={STATE_TABLE_PARTITION_KEY: {"S": tick.key}}).get("Item")


def test_a_throttled_mark_after_the_send_is_retried_and_the_tick_is_sent_once(aws, published):
    # GIVEN a state table that throttles the first UpdateItem, the one marking the claim sent
    now, sleeps = [1_800_000_000.0], []
    first = marking_enqueuer(aws, StrictSQS(aws.sqs), FlakyDynamoDB(aws.dynamodb, failures=1), now, sleeps)
    # WHEN the tick is enqueued  THEN it reports the tick sent (it was: raising would make Lambda send it again)
    assert first.enqueue(TICK) is True
    # AND the mark was retried after a pause, and holds
    assert sleeps == [TICK_MARK.pause(0)]
    assert claim(aws, TICK)["status"] == {"S": "sent"}
    # WHEN a duplicate comes after the lease  THEN it finds the tick sent: one message, nothing counted as failed
    now[0] += TICK_LEASE_SECONDS + 1
    assert enqueuer(aws, now).enqueue(TICK) is False
    assert len(received(aws)) == 1
    assert METRIC_TICK_MARK_FAILED not in published()


def test_a_mark_that_keeps_failing_is_counted_and_logged_never_raised(aws, published, caplog):
    # GIVEN a state table that throttles every UpdateItem
    caplog.set_level(logging.ERROR, logger=observability.logger.name)
    now, sleeps = [1_800_000_000.0], []
    sends = marking_enqueuer(aws, StrictSQS(aws.sqs), FlakyDynamoDB(aws.dynamodb, failures=99), now, sleeps)
    # WHEN the tick is enqueued  THEN it is reported sent after every attempt, not raised for a retry that sends again
    assert sends.enqueue(TICK) is True
    assert sleeps == [TICK_MARK.pause(n) for n in range(TICK_MARK.attempts - 1)]
    assert len(received(aws)) == 1
    # AND the failure is counted and logged with its cause
    assert published()[METRIC_TICK_MARK_FAILED] == 1
    [log] = [record for record in caplog.records if "was sent but" in record.getMessage()]
    assert log.levelno == logging.ERROR
    assert log.getMessage() == (
        "tick 'cron#backup-job#2026-11-22 12:00:00 UTC' was sent but its claim was not marked sent: UpdateItem failed "
        f"{TICK_MARK.attempts} times, last with ProvisionedThroughputExceededException: An error occurred "
        "(ProvisionedThroughputExceededException) when calling the UpdateItem operation: throttled; a retry or duplicate "
        "invocation may send it again (a FIFO queue deduplicates it)"
    )


def test_a_mark_never_recreates_a_claim_that_is_gone(aws, published):
    # GIVEN a holder whose claim disappears while it sends (its lease ran out; another invocation took it and gave it back)
    now = [1_800_000_000.0]
    sqs = FlakySQS(StrictSQS(aws.sqs), failures=0)
    sqs.on_send = lambda: aws.dynamodb.delete_item(TableName=aws.state_table, Key={STATE_TABLE_PARTITION_KEY: {"S": TICK.key}})
    # WHEN it sends and marks  THEN it reports the tick sent
    assert flaky_enqueuer(aws, sqs, now).enqueue(TICK) is True
    # AND no record without a holder or TTL was upserted, and the lost mark is counted
    assert claim(aws, TICK) is None
    assert published()[METRIC_TICK_MARK_FAILED] == 1


def test_duplicate_finding_a_claim_the_holder_never_sends_raises_for_a_retry(aws):
    # GIVEN an invocation that claimed the tick and died before sending (a timeout: no cleanup runs)
    now = [1_800_000_000.0]
    with pytest.raises(Crash):
        flaky_enqueuer(aws, FlakySQS(aws.sqs, error=Crash()), now).enqueue(TICK)
    # WHEN a duplicate invocation runs within the lease
    sleeps: list[float] = []
    with pytest.raises(TickPendingError) as error:
        flaky_enqueuer(aws, FlakySQS(aws.sqs, failures=0), now, sleeps).enqueue(TICK)
    # THEN it waited for the holder, then failed so that Lambda retries it, rather than reporting it enqueued
    assert sum(sleeps) == TICK_PENDING_POLLS * TICK_PENDING_POLL_SECONDS - TICK_PENDING_POLL_SECONDS
    assert str(error.value) == (
        "tick 'cron#backup-job#2026-11-22 12:00:00 UTC' is claimed by another invocation that has not sent it "
        f"after {TICK_PENDING_POLLS * TICK_PENDING_POLL_SECONDS} s; a retry finds it sent, or takes over once the "
        f"{TICK_LEASE_SECONDS} s lease has run out"
    )
    assert received(aws) == []
    # WHEN Lambda retries after the lease  THEN it takes over and sends, once
    now[0] += TICK_LEASE_SECONDS
    assert enqueuer(aws, now).enqueue(TICK) is True
    assert len(received(aws)) == 1


def test_duplicate_waits_for_the_holder_and_reports_the_tick_enqueued(aws):
    # GIVEN a holder that has claimed the tick and is about to send it
    now = [1_800_000_000.0]
    about_to_send, may_send = threading.Event(), threading.Event()
    sqs = FlakySQS(aws.sqs, failures=0)
    sqs.on_send = lambda: (about_to_send.set(), may_send.wait(5))
    holder = threading.Thread(target=lambda: flaky_enqueuer(aws, sqs, now).enqueue(TICK))
    holder.start()
    assert about_to_send.wait(5)
    # WHEN a duplicate invocation runs meanwhile, and the holder sends while it waits
    duplicate = TickEnqueuer(
        aws.queue_url, aws.state_table, sqs=aws.sqs, dynamodb=aws.dynamodb,
        clock=lambda: now[0], sleep=lambda seconds: (may_send.set(), holder.join(5)),
    )
    # THEN the duplicate reports the tick already enqueued, and there is one message
    assert duplicate.enqueue(TICK) is False
    assert len(received(aws)) == 1


def test_a_tick_sent_after_a_crash_still_becomes_one_message(aws):
    # GIVEN an invocation that claimed the tick and died before sending
    now = [1_800_000_000.0]
    with pytest.raises(Crash):
        flaky_enqueuer(aws, FlakySQS(aws.sqs, error=Crash()), now).enqueue(TICK)
    # WHEN a retry comes after the lease  THEN it takes over and sends; later duplicates send nothing
    now[0] += TICK_LEASE_SECONDS + 1
    assert enqueuer(aws, now).enqueue(TICK) is True
    assert enqueuer(aws, now).enqueue(TICK) is False
    assert len(received(aws)) == 1


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
    assert Tick("nightly", "/backup", TICK.scheduled_at).deduplication_id() != TICK.deduplication_id()


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


@pytest.mark.parametrize(
    "event, message",
    [
        (
            {"name": "", "url": "/a", "scheduled_time": "2026-11-22T12:00:00Z"},
            "cron event would be refused by SQS: attribute 'beanstalk.sqsd.task_name' of type String needs a non-empty "
            "StringValue (and no BinaryValue), got {'DataType': 'String', 'StringValue': ''}",
        ),
        (
            {"name": "a", "url": "/a\x00", "scheduled_time": "2026-11-22T12:00:00Z"},
            "cron event would be refused by SQS: attribute 'beanstalk.sqsd.path' value has character '\\x00' (U+0000) "
            "at offset 2, which SQS does not allow (allowed: tab, newline, carriage return, U+0020-U+D7FF, "
            "U+E000-U+FFFD, U+10000-U+10FFFF)",
        ),
        (
            {"name": "a", "url": "/a", "scheduled_time": "0001-01-01T00:30:00+01:00"},
            "cron event scheduled_time '0001-01-01T00:30:00+01:00' is outside years 1-9999 once converted to UTC; "
            "a tick time must fall within them",
        ),
        (
            {"name": "a", "url": "/a", "scheduled_time": "9999-12-31T23:00:00-05:00"},
            "cron event scheduled_time '9999-12-31T23:00:00-05:00' is outside years 1-9999 once converted to UTC; "
            "a tick time must fall within them",
        ),
    ],
)
def test_an_event_sqs_would_refuse_or_out_of_range_is_refused_clearly(event, message):
    # GIVEN an event synth would never produce: an empty name, a NUL in the url, a time past year 9999 in UTC
    # WHEN read  THEN a ValueError with the rule synth applies, not a tick SQS refuses or a bare OverflowError
    with pytest.raises(ValueError) as error:
        tick_from_event(event)
    assert str(error.value) == message


@pytest.mark.parametrize("event", [None, ["backup-job"], "backup-job", 42])
def test_an_event_that_is_not_an_object_is_refused_with_what_it_was(event):
    # GIVEN a cron event that is not a JSON object  WHEN read  THEN a ValueError naming its type, not AttributeError
    with pytest.raises(ValueError) as error:
        tick_from_event(event)
    assert str(error.value) == (
        "cron event must be a JSON object with string fields name, url and scheduled_time, "
        f"got {type(event).__name__}: {event!r}"
    )


CANDIDATES = [
    ("backup-job", "/backup", "elasticbeanstalk scheduled job"),
    ("nightly report", "/report", "elasticbeanstalk scheduled job"),
    ("caf\u00e9", "/cafe", "elasticbeanstalk scheduled job"),
    ("n" * 129, "/long", "elasticbeanstalk scheduled job"),
    ("n" * 128, "/long", "elasticbeanstalk scheduled job"),
    ("nul-body", "/a", "x\x00y"),
    ("ctl-url", "/a\x01", "elasticbeanstalk scheduled job"),
    ("emoji-body", "/a", "done \U0001F389"),
]


def test_every_entry_that_passes_synth_is_accepted_by_strict_sqs_on_fifo(aws_fifo):
    # GIVEN candidate entries, some of which SQS would refuse on a FIFO queue
    accepted = []
    for name, url, body in CANDIDATES:
        quoted = {key: json.dumps(value, ensure_ascii=False) for key, value in (("name", name), ("url", url), ("body", body))}
        text = "version: 1\ncron:\n - schedule: '@daily'\n" + "".join(f"   {key}: {value}\n" for key, value in quoted.items())
        try:
            [entry] = parse(text, fifo=True)
        except CronConfigError:
            continue
        # WHEN an entry passes synth  THEN its tick is sent, through the strict stand-in, without refusal
        tick = Tick(entry.name, entry.url, TICK.scheduled_at, entry.body)
        assert enqueuer(aws_fifo).enqueue(tick) is True
        accepted.append(name)
    # AND exactly the sendable ones passed
    assert accepted == ["backup-job", "n" * 128, "emoji-body"]


DAILY = parse('version: 1\ncron:\n - name: "daily"\n   url: "/daily"\n   schedule: "1 8 * * *"\n')  # 08:01 UTC
BEFORE_TICK = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


def emulator_with_failing_sends(aws: AwsWorld, failures: int, now: list[float]) -> CronEmulator:
    sends = TickEnqueuer(aws.queue_url, aws.state_table, sqs=FlakySQS(aws.sqs, failures), dynamodb=aws.dynamodb, clock=lambda: now[0])
    return CronEmulator(DAILY, lambda event, context: sends.enqueue(tick_from_event(event)), lambda: None, clock=lambda: now[0])


def test_local_emulator_retries_a_failed_tick_as_lambda_does(aws):
    # GIVEN a daily entry whose first two sends fail
    now = [BEFORE_TICK]
    emulator = emulator_with_failing_sends(aws, failures=2, now=now)
    # WHEN the tick comes  THEN the failed invocation does not stop the emulator, and is retried after 1 and 2 minutes
    now[0] += 60
    assert emulator.fire_due() == []
    assert emulator.next_due() == datetime.fromtimestamp(now[0] + 60, tz=timezone.utc)
    now[0] += 60
    assert emulator.fire_due() == []
    now[0] += 119
    assert emulator.fire_due() == []
    now[0] += 1
    assert emulator.fire_due() == [True]
    # THEN the tick was enqueued once, and nothing was dead-lettered
    assert len(received(aws)) == 1
    assert emulator.dead_letters == []


def test_local_emulator_dead_letters_a_tick_that_fails_every_attempt(aws):
    # GIVEN a daily entry whose sends keep failing
    now = [BEFORE_TICK]
    emulator = emulator_with_failing_sends(aws, failures=99, now=now)
    # WHEN the tick and both retries have failed
    for step in (60, 60, 120, 600):
        now[0] += step
        assert emulator.fire_due() == []
    # THEN it is recorded once, as Lambda's on-failure destination would record it, and no longer retried
    [record] = emulator.dead_letters
    assert record["requestContext"] == {"condition": "RetriesExhausted", "approximateInvokeCount": 3}
    assert record["requestPayload"]["scheduled_time"] == "2027-01-15T08:01:00Z"
    assert record["responsePayload"]["errorType"] == "TickNotEnqueuedError"
    assert record["responsePayload"]["errorMessage"].startswith("tick 'cron#daily#2027-01-15 08:01:00 UTC' was not enqueued")
    assert received(aws) == []
