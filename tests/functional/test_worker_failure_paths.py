"""The worker's failure paths against moto and the strict SQS stand-in: nothing lost, run early or given up silently.

Odd exceptions (a raising __repr__, a lone surrogate, BaseException, GeneratorExit), lost leases, unreadable records,
late invokes, oversized bodies and refused dead-letter sends each fail only their own message, with a reason.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

import pytest
from botocore.exceptions import ClientError

from tests.support.aws_world import AwsWorld
from tests.support.strict_sqs import StrictSQS
from tests.support.worker_world import (
    Clock,
    EB_QUEUE_BYTES,
    START,
    dead_letter_sends,
    entries,
    failure_ids,
    one_task,
    raise_,
    reason_of,
    send,
    strict,
    worker_for,
)
from worker_tier import NonRetryableError, RetryLater, Task
from worker_tier.core import observability
from worker_tier.worker.dead_letter import REASON_RECORD_NOTE, send_to_dead_letter_queue
from worker_tier.delays.delay import DelayedMessage
from worker_tier.core.errors import MalformedEventError
from worker_tier.worker.heartbeat import Heartbeat
from worker_tier.core.limits import SQS_MAX_MESSAGE_BYTES, SQS_MAX_VISIBILITY_TIMEOUT_SECONDS
from worker_tier.core.contract import ATTEMPTS_ATTRIBUTE, DUE_AT_ATTRIBUTE, FAILURE_ATTRIBUTE
from worker_tier.core.message import MAX_LOGGED_ERROR_CHARS
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.worker.fates import OUTCOME_DEAD_LETTERED, OUTCOME_HELD_BACK, OUTCOME_RESCHEDULED, OUTCOME_RETRYING, VISIBILITY_SAFETY_MARGIN_SECONDS


# -- a retry longer than SQS allows still holds; a refused change is counted ------------------------------


@pytest.mark.parametrize(
    "error, settings",
    [(RetryLater(43_000), {}), (RuntimeError("down"), {"max_backoff": SQS_MAX_VISIBILITY_TIMEOUT_SECONDS})],
    ids=["retry-later", "backoff"],
)
def test_retry_near_twelve_hours_without_delay_table_is_shortened_to_what_sqs_allows(aws, published, error, settings):
    # GIVEN a message on its 20th receive whose task runs 10 minutes, then wants a retry near 12 hours
    clock = Clock()
    sqs = strict(aws, clock)
    send(aws, "/later")
    event = aws.receive_event()
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = "20"

    def ten_minutes_then_fail(task: Task) -> None:
        clock.now += 600
        raise error

    worker = worker_for(aws, one_task("/later", ten_minutes_then_fail), clock, settings_values={"max_retries": 100, **settings})
    # WHEN handled (no delay table)
    response = worker.handle(event, None)
    # THEN SQS accepts the change: 12 h from the earliest the receive can have been (the invoke may have been
    # throttled for up to the visibility timeout), less the time since and the margin; it is counted
    assert len(response["batchItemFailures"]) == 1
    earliest_receive = Settings().visibility_timeout + Settings().max_batching_window
    longest = SQS_MAX_VISIBILITY_TIMEOUT_SECONDS - earliest_receive - 600 - VISIBILITY_SAFETY_MARGIN_SECONDS
    assert [e["VisibilityTimeout"] for e in entries(aws)] == [longest]
    assert sqs.refused == []
    assert published()[observability.METRIC_RETRY_DELAY_SHORTENED] == 1


def test_retry_longer_than_sqs_allows_is_rescheduled_through_the_delay_table(aws, published, outcomes):
    # GIVEN a delay table, and a task that asks to be retried in two days
    aws.create_delay_table()
    clock = Clock()
    strict(aws, clock)
    send(aws, "/later", '{"n": 1}', tenant={"DataType": "String", "StringValue": "acme"})
    event = aws.receive_event()
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = "2"
    worker = worker_for(aws, one_task("/later", raise_(RetryLater(2 * 86400))), clock, delay_table="delay")
    # WHEN handled
    response = worker.handle(event, None)
    # THEN the original is reported done and a copy waits in the delay table, due in two days, with its receives so far
    assert response["batchItemFailures"] == []
    [item] = aws.dynamodb.scan(TableName="delay")["Items"]
    copy = DelayedMessage.from_item(item)
    assert copy.body == '{"n": 1}'
    assert copy.due_ms == (START + 2 * 86400) * 1000
    assert copy.attributes["beanstalk.sqsd.path"]["StringValue"] == "/later"
    assert copy.attributes["tenant"]["StringValue"] == "acme"
    assert copy.attributes[ATTEMPTS_ATTRIBUTE]["StringValue"] == "2"
    assert published()[observability.METRIC_RESCHEDULED] == 1
    assert [o.status for o in outcomes] == [OUTCOME_RESCHEDULED]


def test_a_copy_counts_the_receives_of_the_message_it_replaced(aws):
    # GIVEN a rescheduled copy on its first receive, whose original used two receives; max_retries 3
    send(aws, "/boom", "x", **{ATTEMPTS_ATTRIBUTE: {"DataType": "String", "StringValue": "2"}})
    event = aws.receive_event()
    # WHEN its task fails
    response = worker_for(aws, one_task("/boom", raise_(RuntimeError("boom"))), settings_values={"max_retries": 3}).handle(event, None)
    # THEN max_retries bounds the chain: it is the third attempt, so it is dead-lettered
    assert response["batchItemFailures"] == []
    assert reason_of(aws.dead_letters()[0])["attempts"] == 3


def test_a_message_moved_back_from_the_dlq_with_its_reason_starts_its_attempts_afresh(aws):
    # GIVEN a message a redrive of everything (StartMessageMoveTask, which keeps attributes) moved back from the
    # DLQ: it still carries its reason, and the attempts of a copy that had used two receives; max_retries 3
    reason = json.dumps({"error_type": "RuntimeError", "attempts": 3})
    send(aws, "/boom", "x", **{ATTEMPTS_ATTRIBUTE: {"DataType": "String", "StringValue": "2"},
                               FAILURE_ATTRIBUTE: {"DataType": "String", "StringValue": reason}})
    event = aws.receive_event()
    # WHEN its task fails, on its first receive since the move
    response = worker_for(aws, one_task("/boom", raise_(RuntimeError("boom"))), settings_values={"max_retries": 3}).handle(event, None)
    # THEN it is retried, as any message on its first attempt: the redrive was a fresh start
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == [event["Records"][0]["messageId"]]
    assert aws.dead_letters() == []


def test_a_reason_record_moved_into_the_work_queue_is_dropped_unrun_and_logged(aws, caplog):
    # GIVEN the reason record of a message too large for its reason (the worker's own), moved into the work queue
    # by a redrive of everything; it has no path, so it would go to the default path's task
    caplog.set_level(logging.WARNING, logger=observability.logger.name)
    sent: list[dict] = []

    class Capture:
        def send_message(self, **request):
            sent.append(request)
            return {"MessageId": "m"}

    record = {"messageId": "src-1", "body": "b" * 500, "attributes": {},
              "messageAttributes": {"beanstalk.sqsd.path": {"dataType": "String", "stringValue": "/big"}}}
    send_to_dead_letter_queue(Capture(), aws.dead_letter_queue_url, record, NonRetryableError("too big"), attempts=1,
                              path="/big", now=datetime(2026, 11, 22, tzinfo=timezone.utc), max_message_bytes=600)
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=sent[0]["MessageBody"],
                         MessageAttributes=sent[0]["MessageAttributes"])
    ran: list[str] = []
    event = aws.receive_event()
    # WHEN the worker receives it
    response = worker_for(aws, one_task("/", lambda task: ran.append(task.body))).handle(event, None)
    # THEN it is reported done (so deleted), never run, never dead-lettered again, and the log says so
    assert response["batchItemFailures"] == [] and ran == [] and aws.dead_letters() == []
    [logged] = [r for r in caplog.records if "reason record arrived as work" in r.getMessage()]
    assert logged.getMessage() == "a DLQ reason record arrived as work (a redrive moved it from the DLQ); dropped, not run"


def test_refused_visibility_change_is_counted(aws, published):
    # GIVEN a failing message whose receipt handle SQS no longer accepts (it was deleted meanwhile)
    send(aws, "/boom")
    event = aws.receive_event()
    event["Records"][0]["receiptHandle"] = "not-a-receipt-handle"
    # WHEN its retry's visibility change is refused
    worker_for(aws, one_task("/boom", raise_(RuntimeError("boom")))).handle(event, None)
    # THEN the refusal is counted, not just logged
    assert published()[observability.METRIC_VISIBILITY_REFUSED] == 1


# -- never early under the documented clock skew ----------------------------------------------------------


def test_message_not_due_by_the_worker_clock_is_held_back_not_run(aws, published, outcomes):
    # GIVEN a delayed message dispatched by a scheduler whose clock ran 30 s ahead
    clock = Clock()
    ran = []
    due = datetime.fromtimestamp(START + 29.2, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    send(aws, "/due", **{DUE_AT_ATTRIBUTE: {"DataType": "String", "StringValue": due}})
    event = aws.receive_event()
    event["Records"][0]["attributes"]["SentTimestamp"] = str(int(START * 1000))  # SQS's clock agrees with the worker's
    # WHEN the worker receives it 29.2 s early
    response = worker_for(aws, one_task("/due", ran.append), clock).handle(event, None)
    # THEN the task does not run; the message comes back when due; it is not a failure or a retry
    assert ran == []
    assert failure_ids(response) == {event["Records"][0]["messageId"]}
    assert [e["VisibilityTimeout"] for e in entries(aws)] == [30]
    metrics = published()
    assert metrics[observability.METRIC_HELD_BACK] == 1
    assert observability.METRIC_FAILED not in metrics and observability.METRIC_RETRIED not in metrics
    assert [(o.status, o.visibility_seconds) for o in outcomes] == [(OUTCOME_HELD_BACK, 30)]


def test_message_due_now_runs(aws):
    # GIVEN a delayed message due one second ago by the worker's clock
    clock = Clock()
    ran = []
    due = datetime.fromtimestamp(START - 1, tz=timezone.utc).isoformat()
    send(aws, "/due", **{DUE_AT_ATTRIBUTE: {"DataType": "String", "StringValue": due}})
    # WHEN handled
    response = worker_for(aws, one_task("/due", lambda t: ran.append(t.due_at)), clock).handle(aws.receive_event(), None)
    # THEN it runs at once
    assert response["batchItemFailures"] == [] and ran == [datetime.fromtimestamp(START - 1, tz=timezone.utc)]


def test_unreadable_due_at_is_treated_as_absent_inside_the_task(aws):
    # GIVEN a message whose worker_tier.due_at is not a time
    seen = []
    send(aws, "/due", **{DUE_AT_ATTRIBUTE: {"DataType": "String", "StringValue": "next tuesday"}})
    # WHEN its task reads due_at
    response = worker_for(aws, one_task("/due", lambda t: seen.append(t.due_at))).handle(aws.receive_event(), None)
    # THEN it reads None and the task succeeds
    assert response["batchItemFailures"] == [] and seen == [None]


# -- every give-up reaches the DLQ with its reason --------------------------------------------------------


def test_retry_later_forever_is_dead_lettered_with_its_reason_at_max_retries(aws):
    # GIVEN a task that always asks for a retry, on the max_retries-th receive
    send(aws, "/later", "x")
    event = aws.receive_event()
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = "3"
    tasks = one_task("/later", raise_(RetryLater(60, "the printer is still offline")))
    # WHEN handled with max_retries 3
    response = worker_for(aws, tasks, settings_values={"max_retries": 3}).handle(event, None)
    # THEN the worker dead-letters it with the reason, rather than leaving it to the redrive policy
    assert response["batchItemFailures"] == []
    reason = reason_of(aws.dead_letters()[0])
    assert (reason["error_type"], reason["error_message"], reason["attempts"]) == ("RetryLater", "the printer is still offline", 3)


def test_body_near_one_mebibyte_sends_its_reason_first_as_a_record_of_its_own(aws):
    # GIVEN a message whose body is 1 MiB - 50 bytes: no reason attribute can fit beside it
    clock = Clock()
    strict(aws, clock)
    body = "b" * (SQS_MAX_MESSAGE_BYTES - 50)
    send(aws, "/refuse", body)
    event = aws.receive_event()
    message_id = event["Records"][0]["messageId"]
    # WHEN its task refuses it
    response = worker_for(aws, one_task("/refuse", raise_(NonRetryableError("too big to print"))), clock).handle(event, None)
    # THEN it is dead-lettered at once: first a reason record naming it, then the body whole
    assert response["batchItemFailures"] == []
    first, second = dead_letter_sends(aws)
    record = json.loads(first["MessageBody"])
    assert record["source_message_id"] == message_id
    assert (record["reason"]["error_type"], record["reason"]["error_message"]) == ("NonRetryableError", "too big to print")
    assert record["note"] == REASON_RECORD_NOTE
    assert second["MessageBody"] == body
    assert FAILURE_ATTRIBUTE not in second["MessageAttributes"]
    assert aws.sqs.refused == []


def test_body_a_few_hundred_bytes_under_the_limit_keeps_a_shortened_reason(aws):
    # GIVEN a body 400 bytes under 1 MiB, an attribute of its own, and a 1,000-character error
    clock = Clock()
    strict(aws, clock)
    body = "b" * (SQS_MAX_MESSAGE_BYTES - 400)
    send(aws, "/refuse", body, tenant={"DataType": "String", "StringValue": "acme"})
    # WHEN its task refuses it
    response = worker_for(aws, one_task("/refuse", raise_(NonRetryableError("e" * 1000))), clock).handle(aws.receive_event(), None)
    # THEN one DLQ message: the body whole, the reason with a shortened message naming the shed attribute
    assert response["batchItemFailures"] == []
    [sent] = dead_letter_sends(aws)
    assert sent["MessageBody"] == body
    reason = json.loads(sent["MessageAttributes"][FAILURE_ATTRIBUTE]["StringValue"])
    assert reason["dropped_attributes"] == ["tenant"]
    assert reason["error_message"].endswith("...") and 0 < len(reason["error_message"]) < 1000
    assert aws.sqs.refused == []


def eb_sized(aws: AwsWorld) -> None:
    """Size the world's queues as an imported EB environment's: both MaximumMessageSize 256 KiB."""
    for queue_url in (aws.queue_url, aws.dead_letter_queue_url):
        aws.sqs.set_queue_attributes(QueueUrl=queue_url, Attributes={"MaximumMessageSize": str(EB_QUEUE_BYTES)})


class _DeniedQueueAttributes:
    """An SQS client whose GetQueueAttributes is refused as IAM refuses it (botocore's ClientError, AccessDenied);
    the other calls go to ``inner``."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def get_queue_attributes(self, **params):
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not authorized"}}, "GetQueueAttributes")


def test_a_dead_letter_copy_is_sized_for_a_256_kib_dlq_and_its_size_read_once(aws):
    # GIVEN an imported EB queue and DLQ of 256 KiB, and two messages a few bytes under it whose tasks refuse them
    clock = Clock()
    eb_sized(aws)
    strict(aws, clock).maximum_message_size = EB_QUEUE_BYTES
    body = "b" * (EB_QUEUE_BYTES - 50)
    worker = worker_for(aws, one_task("/refuse", raise_(NonRetryableError("too big to print"))), clock)
    for _ in range(2):
        send(aws, "/refuse", body)
        event = aws.receive_event()
        # WHEN the worker dead-letters each, in invocations of its own
        response = worker.handle(event, None)
        assert response["batchItemFailures"] == []
    # THEN each went to the DLQ at once: its reason first as a record of its own, then the body whole
    sends = dead_letter_sends(aws)
    assert [json.loads(s["MessageBody"])["note"] for s in sends[0::2]] == [REASON_RECORD_NOTE] * 2
    assert [s["MessageBody"] for s in sends[1::2]] == [body] * 2
    assert aws.sqs.refused == []
    # AND the DLQ's size was read once for both
    assert [p["QueueUrl"] for p in aws.params("GetQueueAttributes")].count(aws.dead_letter_queue_url) == 1


def test_a_dead_letter_copy_is_sized_for_256_kib_when_the_dlqs_size_cannot_be_read(aws):
    # GIVEN a 1 MiB DLQ whose size the worker may not read, and a 300 KiB message its task refuses
    clock = Clock()
    strict(aws, clock)
    body = "b" * (300 * 1024)
    send(aws, "/refuse", body)
    event = aws.receive_event()
    aws.sqs = _DeniedQueueAttributes(aws.sqs)
    # WHEN the worker dead-letters it
    response = worker_for(aws, one_task("/refuse", raise_(NonRetryableError("no"))), clock).handle(event, None)
    # THEN the copy was sized for 256 KiB: the reason went first as a record of its own, then the body whole
    assert response["batchItemFailures"] == []
    first, second = dead_letter_sends(aws)
    assert json.loads(first["MessageBody"])["reason"]["error_message"] == "no"
    assert (second["MessageBody"], FAILURE_ATTRIBUTE in second["MessageAttributes"]) == (body, False)


def dlq_of_256_kib_behind_a_1_mib_queue(aws: AwsWorld, clock: Clock) -> StrictSQS:
    """A 1 MiB work queue whose DLQ takes 256 KiB; the strict stand-in enforces 256 KiB on the worker's sends."""
    aws.sqs.set_queue_attributes(QueueUrl=aws.queue_url, Attributes={"MaximumMessageSize": str(SQS_MAX_MESSAGE_BYTES)})
    aws.sqs.set_queue_attributes(QueueUrl=aws.dead_letter_queue_url, Attributes={"MaximumMessageSize": str(EB_QUEUE_BYTES)})
    return StrictSQS(aws.sqs, clock=clock, maximum_message_size=EB_QUEUE_BYTES)


def test_a_body_that_fits_the_dlq_only_without_its_other_attributes_is_dead_lettered_with_routing_ones(aws):
    # GIVEN a 262,000-byte body (it fits a 256 KiB DLQ alone) with a 2,000-character attribute of its own
    clock = Clock()
    dlq_sized = dlq_of_256_kib_behind_a_1_mib_queue(aws, clock)
    body = "v" * 262_000
    send(aws, "/video", body, tenant={"DataType": "String", "StringValue": "t" * 2000})
    event = aws.receive_event()
    aws.sqs = dlq_sized
    # WHEN its task refuses it
    response = worker_for(aws, one_task("/video", raise_(NonRetryableError("unsupported codec"))), clock).handle(event, None)
    # THEN it is dead-lettered at once: its reason record (naming the shed attribute), then the body with its path only
    assert response["batchItemFailures"] == []
    first, second = dead_letter_sends(aws)
    record = json.loads(first["MessageBody"])
    assert (record["reason"]["error_message"], record["reason"]["dropped_attributes"]) == ("unsupported codec", ["tenant"])
    assert second["MessageBody"] == body
    assert set(second["MessageAttributes"]) == {"beanstalk.sqsd.path"}
    assert aws.sqs.refused == []


def test_a_body_over_the_dlqs_size_stays_for_the_redrive_and_its_reason_record_is_written_once(aws, caplog):
    # GIVEN a 300 KB body in a 1 MiB work queue whose DLQ takes 256 KiB, and a task that refuses it
    clock = Clock()
    dlq_sized = dlq_of_256_kib_behind_a_1_mib_queue(aws, clock)
    body = "v" * 300_000
    send(aws, "/video", body)
    event = aws.receive_event()
    aws.sqs = dlq_sized
    settings = Settings()
    worker = worker_for(aws, one_task("/video", raise_(NonRetryableError("unsupported codec"))), clock, settings=settings)
    caplog.set_level(logging.ERROR, logger=observability.logger.name)
    # WHEN it is received once, and then on the last receive before SQS's redrive policy moves it
    first = worker.handle(event, None)
    sends_after_first = len(dead_letter_sends(aws))
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = str(settings.redrive_max_receive_count)
    last = worker.handle(event, None)
    # THEN each receive keeps it for retry (nothing sent to the DLQ, which would refuse it) with a one-line reason
    message_id = event["Records"][0]["messageId"]
    assert failure_ids(first) == failure_ids(last) == {message_id}
    assert sends_after_first == 0
    assert any(
        f"message {message_id} is 300" in str(getattr(r, "error", "")) and "over the dead-letter queue's MaximumMessageSize of "
        f"{EB_QUEUE_BYTES}" in str(getattr(r, "error", "")) for r in caplog.records
    ), [getattr(r, "error", r.getMessage()) for r in caplog.records]
    # AND the last receive wrote its reason record, once, for the message the redrive will move
    [sent] = dead_letter_sends(aws)
    record = json.loads(sent["MessageBody"])
    assert (record["source_message_id"], record["reason"]["error_message"]) == (message_id, "unsupported codec")
    assert aws.sqs.refused == []


def test_a_copy_too_large_for_its_reason_is_moved_back_as_work_without_its_failure_history(aws):
    # GIVEN a 1 MiB - 50 byte body already retried through the delay table (two earlier attempts carried)
    clock = Clock()
    strict(aws, clock)
    body = "b" * (SQS_MAX_MESSAGE_BYTES - 50 - 40)
    send(aws, "/refuse", body, **{ATTEMPTS_ATTRIBUTE: {"DataType": "String", "StringValue": "2"}})
    event = aws.receive_event()
    assert worker_for(aws, one_task("/refuse", raise_(NonRetryableError("no"))), clock).handle(event, None) == {
        "batchItemFailures": []}
    # WHEN its DLQ copy (no room for its reason: a record of its own holds it) is moved back unfiltered, as
    # StartMessageMoveTask moves it, and received again
    _record, copy = dead_letter_sends(aws)
    assert ATTEMPTS_ATTRIBUTE not in copy["MessageAttributes"]
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=copy["MessageBody"], MessageAttributes=copy["MessageAttributes"])
    seen: list[int] = []
    worker_for(aws, one_task("/refuse", lambda task: seen.append(task.receive_count)), clock).handle(aws.receive_event(), None)
    # THEN it starts fresh: its first receive is its first attempt
    assert seen == [1]


# -- FIFO forwarding to the container worker --------------------------------------------------------------


def test_fifo_forward_to_the_long_task_queue_keeps_group_and_deduplicates_on_the_message(aws_fifo):
    # GIVEN a FIFO work queue, a FIFO long-task queue and a container task
    long_queue = aws_fifo.sqs.create_queue(QueueName="long.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    tasks = Registry()
    tasks.task("/render", container=True)(lambda t: None)
    aws_fifo.sqs.send_message(
        QueueUrl=aws_fifo.queue_url, MessageBody="frame 1", MessageGroupId="film-7", MessageDeduplicationId="d1",
        MessageAttributes={"beanstalk.sqsd.path": {"DataType": "String", "StringValue": "/render"}},
    )
    event = aws_fifo.receive_event()
    worker = worker_for(aws_fifo, tasks, container_queue_url=long_queue, settings_values={"fifo": True})
    # WHEN the Lambda worker forwards it
    response = worker.handle(event, None)
    # THEN it is forwarded (done here), in its group, deduplicated on its source message id
    assert response["batchItemFailures"] == []
    [forwarded] = aws_fifo.sqs.receive_message(QueueUrl=long_queue, MessageSystemAttributeNames=["All"])["Messages"]
    assert forwarded["Body"] == "frame 1"
    assert forwarded["Attributes"]["MessageGroupId"] == "film-7"
    assert forwarded["Attributes"]["MessageDeduplicationId"] == event["Records"][0]["messageId"]


# -- nothing raised while dead-lettering escapes ---------------------------------------------------------


def test_attributes_sqs_would_refuse_are_left_out_of_the_dead_letter_and_named(aws):
    # GIVEN a message whose event carries a Binary value that is not base64 and an unknown data type
    send(aws, "/refuse", "x", tenant={"DataType": "String", "StringValue": "acme"})
    event = aws.receive_event()
    event["Records"][0]["messageAttributes"].update(
        {
            "bad_binary": {"dataType": "Binary", "binaryValue": "***not base64***"},
            "odd_type": {"dataType": "Blob", "stringValue": "x"},
            "string_with_binary": {"dataType": "String", "stringValue": "kept", "binaryValue": "AAAA"},
        }
    )
    # WHEN its task refuses it
    response = worker_for(aws, one_task("/refuse", raise_(NonRetryableError("no")))).handle(event, None)
    # THEN it is dead-lettered with what SQS accepts, the rest named in the reason
    assert response["batchItemFailures"] == []
    [dead] = aws.dead_letters()
    assert dead["MessageAttributes"]["string_with_binary"]["StringValue"] == "kept"
    assert dead["MessageAttributes"]["tenant"]["StringValue"] == "acme"
    assert reason_of(dead)["dropped_attributes"] == ["bad_binary", "odd_type"]


def test_an_exception_while_dead_lettering_backs_the_message_off(aws, published):
    # GIVEN a refused message whose record cannot be copied (a hand-built event with a body that is not a string)
    send(aws, "/refuse", "x")
    event = aws.receive_event()
    event["Records"][0]["body"] = 12345
    # WHEN it is dead-lettered
    response = worker_for(aws, one_task("/refuse", raise_(NonRetryableError("no")))).handle(event, None)
    # THEN nothing escapes: the message is kept with a backoff (not released at 0), and the failure is counted
    assert failure_ids(response) == {event["Records"][0]["messageId"]}
    assert [e["VisibilityTimeout"] for e in entries(aws)] == [2]
    assert published()[observability.METRIC_DEAD_LETTER_FAILED] == 1


def test_an_error_whose_text_cannot_be_had_is_still_dead_lettered(aws):
    # GIVEN a task error whose __str__ raises
    class Unprintable(NonRetryableError):
        def __str__(self) -> str:
            raise RuntimeError("cannot print this error")

    send(aws, "/refuse", "x")
    # WHEN it is dead-lettered
    response = worker_for(aws, one_task("/refuse", raise_(Unprintable()))).handle(aws.receive_event(), None)
    # THEN the reason says so instead of the handler raising
    assert response["batchItemFailures"] == []
    assert reason_of(aws.dead_letters()[0])["error_message"] == "<str() of Unprintable raised RuntimeError: cannot print this error>"


# -- a BaseException from a task fails only its message --------------------------------------------------


@pytest.mark.parametrize("error", [SystemExit(3), KeyboardInterrupt()], ids=["SystemExit", "KeyboardInterrupt"])
def test_base_exception_from_a_task_fails_only_its_message(aws, error):
    # GIVEN a batch in which the middle task raises a BaseException
    tasks = Registry()
    ran = []
    tasks.task("/ok")(lambda t: ran.append(t.body))
    tasks.task("/exit")(raise_(error))
    for path, body in [("/ok", "1"), ("/exit", "2"), ("/ok", "3")]:
        send(aws, path, body)
    event = aws.receive_event()
    # WHEN handled
    response = worker_for(aws, tasks).handle(event, None)
    # THEN only that message is reported failed, with a backoff; its neighbours succeeded
    exit_id = next(r["messageId"] for r in event["Records"] if r["body"] == "2")
    assert failure_ids(response) == {exit_id}
    assert sorted(ran) == ["1", "3"]
    assert [e["VisibilityTimeout"] for e in entries(aws)] == [2]


def test_base_exception_at_max_retries_is_dead_lettered_with_its_type(aws):
    # GIVEN a task that exits, on its last receive
    send(aws, "/exit", "x")
    # WHEN handled with max_retries 1
    response = worker_for(aws, one_task("/exit", raise_(SystemExit("bye"))), settings_values={"max_retries": 1}).handle(aws.receive_event(), None)
    # THEN the DLQ has it with the reason
    assert response["batchItemFailures"] == []
    reason = reason_of(aws.dead_letters()[0])
    assert (reason["error_type"], reason["error_message"]) == ("SystemExit", "bye")


# -- a malformed record fails only itself; a non-batch gets a clear error --------------------------------


@pytest.mark.parametrize(
    "event, shown",
    [(None, "NoneType None"), ([], "list []"), ({"Records": "x"}, "dict {'Records': 'x'}"), ({}, "dict {}")],
)
def test_an_event_that_is_not_a_batch_gets_a_clear_error(aws, event, shown):
    # GIVEN something that is not an SQS event  WHEN handled  THEN the error says what the worker takes
    with pytest.raises(MalformedEventError) as error:
        worker_for(aws, Registry()).handle(event, None)
    assert str(error.value) == f"the worker takes a Lambda SQS event: a mapping with a 'Records' list; got {shown}"


def test_a_record_without_message_id_fails_only_itself_and_backs_off(aws, published):
    # GIVEN a good record and one that lost its messageId
    ran = []
    send(aws, "/ok", "good")
    send(aws, "/ok", "nameless")
    event = aws.receive_event()
    nameless = next(r for r in event["Records"] if r["body"] == "nameless")
    del nameless["messageId"]
    # WHEN handled
    response = worker_for(aws, one_task("/ok", lambda t: ran.append(t.body))).handle(event, None)
    # THEN the good one ran; the nameless one is backed off through its receipt handle, and counted
    assert response["batchItemFailures"] == [] and ran == ["good"]
    assert [(e["ReceiptHandle"], e["VisibilityTimeout"]) for e in entries(aws)] == [(nameless["receiptHandle"], 2)]
    assert published()[observability.METRIC_MALFORMED_RECORDS] == 1


def test_a_record_with_unreadable_system_attributes_still_runs(aws):
    # GIVEN a record whose SentTimestamp and ApproximateReceiveCount are not numbers
    seen = []
    send(aws, "/ok", "x")
    event = aws.receive_event()
    event["Records"][0]["attributes"].update({"SentTimestamp": "yesterday", "ApproximateReceiveCount": "many"})
    # WHEN handled
    response = worker_for(aws, one_task("/ok", lambda t: seen.append((t.sent_at, t.receive_count)))).handle(event, None)
    # THEN the task runs, seeing no sent time and its first receive
    assert response["batchItemFailures"] == [] and seen == [(None, 1)]


def test_the_receive_a_message_was_held_back_on_does_not_count_against_its_retries(aws):
    # GIVEN a delayed message first received 29 s before it was due (held back then), now on its second receive
    clock = Clock(START + 1)
    due = datetime.fromtimestamp(START, tz=timezone.utc).isoformat()
    send(aws, "/boom", **{DUE_AT_ATTRIBUTE: {"DataType": "String", "StringValue": due}})
    event = aws.receive_event()
    event["Records"][0]["attributes"].update(
        {"ApproximateReceiveCount": "2", "ApproximateFirstReceiveTimestamp": str(int((START - 29) * 1000))}
    )
    # WHEN its task fails with max_retries 2
    response = worker_for(aws, one_task("/boom", raise_(RuntimeError("boom"))), clock, settings_values={"max_retries": 2}).handle(event, None)
    # THEN this was its first attempt: it is retried, not dead-lettered. SQS's count has reached max_retries, so the
    # retry is a fresh copy carrying its 1 attempt (the redrive policy keeps its whole margin for crashes)
    assert failure_ids(response) == set() and aws.dead_letters() == []
    [copy] = [entry for params in aws.params("SendMessageBatch") if params["QueueUrl"] == aws.queue_url
              for entry in params["Entries"]]
    assert copy["MessageAttributes"][ATTEMPTS_ATTRIBUTE]["StringValue"] == "1"


def test_a_due_time_further_ahead_than_any_sender_meant_is_held_only_to_what_sqs_allows(aws, outcomes):
    # GIVEN a message sent at=now+1s by a producer whose clock ran 7 days ahead (due_at is 7 days out),
    # sent (by SQS's clock, which agrees with the worker's) just now
    clock = Clock()
    ran = []
    due = datetime.fromtimestamp(START + 7 * 86400 + 1, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    send(aws, "/due", **{DUE_AT_ATTRIBUTE: {"DataType": "String", "StringValue": due}})
    event = aws.receive_event()
    event["Records"][0]["attributes"]["SentTimestamp"] = str(int(START * 1000))
    # WHEN the worker receives it
    worker_for(aws, one_task("/due", ran.append), clock).handle(event, None)
    # THEN it is held only to send time + 900 s + the skew tolerance, not for days of receives the redrive would end
    assert ran == []
    assert [(o.status, o.visibility_seconds) for o in outcomes] == [(OUTCOME_HELD_BACK, 960)]


class ReprRaises(NonRetryableError):
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


class BaseReprRaises(BaseException):
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


class ReprReraisesStrRaises(Exception):
    def __repr__(self) -> str:
        raise self

    def __str__(self) -> str:
        raise ValueError("no str either")


def receive_at(aws: AwsWorld, receive_count: int) -> dict:
    event = aws.receive_event(max_messages=1)
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = str(receive_count)
    return event


# -- an exception whose __repr__ raises ---------------------------------------------------------------------


@pytest.mark.parametrize("error", [ReprRaises("poison"), BaseReprRaises("exit")], ids=["NonRetryableError", "BaseException"])
def test_an_error_whose_repr_raises_is_dead_lettered_once_and_reported_done(aws, error, outcomes):
    # GIVEN a task raising an error whose __repr__ raises, on its last receive
    send(aws, "/p", "x")
    worker = worker_for(aws, one_task("/p", raise_(error)), settings_values={"max_retries": 3})
    # WHEN handled
    response = worker.handle(receive_at(aws, 3), None)
    # THEN it is in the DLQ once, with its reason, and reported done (not released at 0 to be dead-lettered again)
    assert response["batchItemFailures"] == []
    assert entries(aws) == []
    [dead] = aws.dead_letters()
    assert reason_of(dead)["error_type"] == type(error).__name__
    assert [o.status for o in outcomes] == [OUTCOME_DEAD_LETTERED]


def test_an_error_whose_repr_reraises_and_str_raises_fails_only_its_message(aws):
    # GIVEN a batch whose middle task raises an error that cannot be printed at all
    tasks = Registry()
    ran: list[str] = []
    tasks.task("/ok")(lambda t: ran.append(t.body))
    tasks.task("/evil")(raise_(ReprReraisesStrRaises()))
    for path, body in [("/ok", "a"), ("/evil", "e"), ("/ok", "c")]:
        send(aws, path, body)
    event = aws.receive_event()
    # WHEN handled
    response = worker_for(aws, tasks).handle(event, None)
    # THEN the batch does not raise: only that message is reported failed, with a backoff (not visibility 0)
    evil = next(r["messageId"] for r in event["Records"] if r["body"] == "e")
    assert failure_ids(response) == {evil}
    assert sorted(ran) == ["a", "c"]
    assert [e["VisibilityTimeout"] for e in entries(aws)] == [2]


def test_a_listener_that_raises_after_the_dead_letter_never_gets_the_message_reported_failed(aws):
    # GIVEN an outcome listener that raises, and a refused message
    from worker_tier.worker.fates import add_outcome_listener, remove_outcome_listener

    def broken(outcome) -> None:
        raise RuntimeError(f"listener broke on {outcome.status}")

    send(aws, "/refuse", "x")
    add_outcome_listener(broken)
    try:
        # WHEN it is dead-lettered
        response = worker_for(aws, one_task("/refuse", raise_(NonRetryableError("no")))).handle(aws.receive_event(), None)
    finally:
        remove_outcome_listener(broken)
    # THEN it is reported done (its DLQ copy exists), never failed and sent again
    assert response["batchItemFailures"] == []
    assert len(aws.dead_letters()) == 1


def test_a_listener_that_raises_on_a_retry_backs_the_message_off_not_to_zero(aws):
    # GIVEN an outcome listener that raises, and a failing task
    from worker_tier.worker.fates import add_outcome_listener, remove_outcome_listener

    def broken(outcome) -> None:
        raise RuntimeError("listener broke")

    send(aws, "/boom", "x")
    event = aws.receive_event()
    add_outcome_listener(broken)
    try:
        # WHEN it fails
        response = worker_for(aws, one_task("/boom", raise_(RuntimeError("boom")))).handle(event, None)
    finally:
        remove_outcome_listener(broken)
    # THEN it keeps the backoff it was given before the listener raised
    assert failure_ids(response) == {event["Records"][0]["messageId"]}
    assert [e["VisibilityTimeout"] for e in entries(aws)] == [2]


# -- a lone surrogate in an error message ---------------------------------------------------------------------


def test_an_error_message_with_a_lone_surrogate_is_dead_lettered_with_it_escaped(aws):
    # GIVEN a task refusing a file whose name was decoded with surrogateescape
    name = b"caf\xe9.jpg".decode("utf-8", "surrogateescape")
    send(aws, "/p", "x")
    # WHEN handled
    response = worker_for(aws, one_task("/p", raise_(NonRetryableError(f"cannot open {name}")))).handle(aws.receive_event(), None)
    # THEN it is in the DLQ, the surrogate spelled as an escape
    assert response["batchItemFailures"] == []
    assert reason_of(aws.dead_letters()[0])["error_message"] == "cannot open caf\\udce9.jpg"


# -- a BaseException in an idempotent task frees its key ------------------------------------------------------


@pytest.mark.parametrize("error", [SystemExit(3), KeyboardInterrupt(), GeneratorExit()], ids=lambda e: type(e).__name__)
def test_a_base_exception_in_an_idempotent_task_frees_its_key_for_the_retry(aws, error, outcomes):
    # GIVEN an idempotent task that raises a BaseException on its first run
    runs: list[int] = []
    tasks = Registry()

    @tasks.task("/charge", idempotent=True)
    def charge(task: Task) -> None:
        runs.append(task.receive_count)
        if len(runs) == 1:
            raise error

    send(aws, "/charge", "x")
    worker = worker_for(aws, tasks, settings_values={"max_retries": 3})
    from worker_tier_local.context import LocalContext

    context = LocalContext("fn", 300, 128, "us-east-1", "123456789012")
    # WHEN it is handled, then received again
    first = receive_at(aws, 1)
    worker.handle(first, context)
    aws.sqs.change_message_visibility(QueueUrl=aws.queue_url, ReceiptHandle=first["Records"][0]["receiptHandle"], VisibilityTimeout=0)
    second = worker.handle(receive_at(aws, 2), context)
    # THEN the retry runs (its key was not left INPROGRESS), and the first failure is named by its own type
    assert runs == [1, 2]
    assert second["batchItemFailures"] == []
    assert outcomes[0].status == OUTCOME_RETRYING and outcomes[0].detail.startswith(type(error).__name__)


# -- a message whose lease is already lost is not started -----------------------------------------------------


class RefuseOne:
    """An SQS client whose visibility changes for one receipt handle are refused as no longer ours."""

    def __init__(self, inner, handle: str) -> None:
        self.inner, self.handle = inner, handle

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def change_message_visibility_batch(self, QueueUrl, Entries):
        failed = [{"Id": e["Id"], "Code": "ReceiptHandleIsInvalid", "Message": "invalid", "SenderFault": True}
                  for e in Entries if e["ReceiptHandle"] == self.handle]
        good = [e for e in Entries if e["ReceiptHandle"] != self.handle]
        done = self.inner.change_message_visibility_batch(QueueUrl=QueueUrl, Entries=good) if good else {}
        return {"Successful": done.get("Successful", []), "Failed": failed}


def test_a_message_whose_lease_was_lost_before_its_task_started_is_not_run(aws, published):
    # GIVEN two messages held by a heartbeat; SQS says the second is no longer ours during the first task
    for body in ("one", "two"):
        send(aws, "/p", body)
    event = aws.receive_event()
    event["Records"].sort(key=lambda r: r["body"])
    _, two = event["Records"]
    sqs = aws.sqs = RefuseOne(aws.sqs, two["receiptHandle"])
    heartbeat = Heartbeat(sqs, aws.queue_url, interval_seconds=1)
    for record in event["Records"]:
        heartbeat.hold(record["messageId"], record["receiptHandle"])
    ran: list[str] = []

    def task(t: Task) -> None:
        ran.append(t.body)
        heartbeat.beat()  # a beat while the first task runs: the second's lease is lost

    worker = worker_for(aws, one_task("/p", task))
    # WHEN the batch is handled
    response = worker.handle(event, None, heartbeat=heartbeat)
    # THEN the second is not run, reported failed, its visibility left to its new holder, and counted
    assert ran == ["one"]
    assert failure_ids(response) == {two["messageId"]}
    assert [e for e in entries(aws) if e["ReceiptHandle"] == two["receiptHandle"]] == []
    assert published()[observability.METRIC_LEASE_LOST_BEFORE_START] == 1


# -- a throttled invoke starts long after the receive -------------------------------------------------------


def test_a_retry_near_twelve_hours_after_a_throttled_invoke_is_accepted_by_sqs(aws, published):
    # GIVEN a message received at START whose invoke was throttled for 200 s (less than the 300 s visibility timeout)
    clock = Clock()
    sqs = strict(aws, clock)
    send(aws, "/p")
    event = aws.receive_event(visibility=300)
    clock.now += 200
    # WHEN its task asks for a retry just under 12 hours
    response = worker_for(aws, one_task("/p", raise_(RetryLater(43_100))), clock).handle(event, None)
    # THEN SQS accepts the change: 12 h less the visibility timeout, the batching window and the margin
    assert len(response["batchItemFailures"]) == 1
    settings = Settings()
    longest = SQS_MAX_VISIBILITY_TIMEOUT_SECONDS - settings.visibility_timeout - settings.max_batching_window - VISIBILITY_SAFETY_MARGIN_SECONDS
    assert [e["VisibilityTimeout"] for e in entries(aws)] == [longest]
    assert sqs.refused == []
    assert published()[observability.METRIC_RETRY_DELAY_SHORTENED] == 1


# -- GeneratorExit is a task failure like any other ---------------------------------------------------------


def test_generator_exit_from_a_task_fails_only_its_message(aws):
    # GIVEN a batch whose middle task raises GeneratorExit
    tasks = Registry()
    ran: list[str] = []
    tasks.task("/ok")(lambda t: ran.append(t.body))
    tasks.task("/gen")(raise_(GeneratorExit()))
    for path, body in [("/ok", "1"), ("/gen", "2"), ("/ok", "3")]:
        send(aws, path, body)
    event = aws.receive_event()
    # WHEN handled
    response = worker_for(aws, tasks).handle(event, None)
    # THEN the batch returns: only that message failed, with a backoff
    gen = next(r["messageId"] for r in event["Records"] if r["body"] == "2")
    assert failure_ids(response) == {gen}
    assert sorted(ran) == ["1", "3"]
    assert [e["VisibilityTimeout"] for e in entries(aws)] == [2]


# -- records Powertools or the heartbeat cannot read -------------------------------------------------------


@pytest.mark.parametrize(
    "fifo, settings, break_record, backed_off",
    [
        (False, {"heartbeat": True}, lambda r: r.pop("receiptHandle"), []),
        (False, {}, lambda r: r.update(messageAttributes=5), [2]),
    ],
    ids=["no-receipt-handle-with-heartbeat", "messageAttributes-not-an-object"],
)
def test_a_record_that_cannot_be_read_fails_only_itself(fifo, settings, break_record, backed_off, published):
    from moto import mock_aws

    from tests.support.aws_world import make_world

    with mock_aws():
        # GIVEN three messages, the middle one's record broken
        aws = make_world(fifo=fifo)
        for i in range(3):
            group = {"MessageGroupId": f"g{i}", "MessageDeduplicationId": f"d{i}"} if fifo else {}
            attributes = {"beanstalk.sqsd.path": {"DataType": "String", "StringValue": "/ok"}}
            aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=f"m{i}", MessageAttributes=attributes, **group)
        event = aws.receive_event()
        broken = next(r for r in event["Records"] if r["body"] == "m1")
        break_record(broken)
        ran: list[str] = []
        # WHEN handled
        response = worker_for(aws, one_task("/ok", lambda t: ran.append(t.body)), settings=Settings(**settings)).handle(event, None)
        # THEN the batch returns; only the broken one is reported failed (backed off when it has a receipt handle)
        assert failure_ids(response) == {broken["messageId"]}
        assert sorted(ran) == ["m0", "m2"]
        assert [e["VisibilityTimeout"] for e in entries(aws) if e["VisibilityTimeout"] != 0] == backed_off
        assert published()[observability.METRIC_MALFORMED_RECORDS] == 1


# -- odd exceptions -----------------------------------------------------------------------------------------


def test_a_retry_later_subclass_that_never_set_its_delay_retries_with_the_backoff(aws, outcomes):
    # GIVEN a RetryLater subclass that skips RetryLater.__init__
    class LaterPlease(RetryLater):
        def __init__(self, text: str) -> None:
            Exception.__init__(self, text)

    send(aws, "/p", "x")
    event = aws.receive_event()
    # WHEN its task raises it
    response = worker_for(aws, one_task("/p", raise_(LaterPlease("later please")))).handle(event, None)
    # THEN it retries with the backoff, named as what it is (not released at 0 as a stopped FIFO group)
    assert failure_ids(response) == {event["Records"][0]["messageId"]}
    assert [e["VisibilityTimeout"] for e in entries(aws)] == [2]
    assert [(o.status, o.detail) for o in outcomes] == [(OUTCOME_RETRYING, "LaterPlease: later please")]


def test_a_parser_error_whose_text_cannot_be_had_is_still_a_malformed_body(aws):
    # GIVEN a parser raising an error whose __str__ raises
    class Unprintable(ValueError):
        def __str__(self) -> str:
            raise RuntimeError("no str")

    def bad_parser(body: str) -> None:
        raise Unprintable()

    tasks = Registry()
    tasks.task("/p", parser=bad_parser)(lambda t: None)
    send(aws, "/p", "x")
    # WHEN handled
    response = worker_for(aws, tasks).handle(aws.receive_event(), None)
    # THEN it is dead-lettered as a malformed body, the parser's error named
    assert response["batchItemFailures"] == []
    reason = reason_of(aws.dead_letters()[0])
    assert reason["error_type"] == "MalformedBodyError"
    assert reason["error_message"].endswith("Unprintable: <str() of Unprintable raised RuntimeError: no str>")


def test_a_huge_error_message_is_cut_in_logs_and_outcomes(aws, outcomes, caplog):
    # GIVEN a task failing with a 2 MB message, and the worker's warnings recorded
    caplog.set_level(logging.WARNING, logger=observability.logger.name)
    send(aws, "/p", "x")
    # WHEN it is retried
    worker_for(aws, one_task("/p", raise_(RuntimeError("é" * 2_000_000)))).handle(aws.receive_event(), None)
    # THEN the log line and the outcome carry a few KiB of it at most
    [retry_log] = [record for record in caplog.records if record.getMessage() == "task failed; retrying"]
    assert len(retry_log.error) == MAX_LOGGED_ERROR_CHARS and retry_log.error.endswith("...")
    assert len(outcomes[0].detail) <= len("RuntimeError: ") + MAX_LOGGED_ERROR_CHARS


# -- a reason record sent again after the original's send failed (documented: at-least-once) -----------------


class FailDeadLetterSend:
    """An SQS client whose n-th SendMessage to the DLQ is throttled."""

    def __init__(self, inner, dead_letter_queue_url: str, failing_send: int) -> None:
        self.inner, self.url, self.failing_send, self.sends = inner, dead_letter_queue_url, failing_send, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def send_message(self, **params):
        if params["QueueUrl"] == self.url:
            self.sends += 1
            if self.sends == self.failing_send:
                from botocore.exceptions import ClientError

                raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "SendMessage")
        return self.inner.send_message(**params)


def test_a_reason_record_is_sent_again_when_the_originals_send_failed_and_names_its_message(aws):
    # GIVEN a 1 MiB message (its reason goes as a record of its own) whose original's first DLQ send is throttled
    from worker_tier.core.limits import SQS_MAX_MESSAGE_BYTES

    send(aws, "/refuse", "b" * (SQS_MAX_MESSAGE_BYTES - 50))
    aws.sqs = FailDeadLetterSend(aws.sqs, aws.dead_letter_queue_url, failing_send=2)
    worker = worker_for(aws, one_task("/refuse", raise_(NonRetryableError("no"))))
    # WHEN it is handled, backs off, and is handled again
    first = aws.receive_event(max_messages=1)
    first_response = worker.handle(first, None)
    aws.sqs.change_message_visibility(QueueUrl=aws.queue_url, ReceiptHandle=first["Records"][0]["receiptHandle"], VisibilityTimeout=0)
    second_response = worker.handle(aws.receive_event(max_messages=1), None)
    # THEN the DLQ holds the original once and a reason record per attempt, each naming the original (at-least-once)
    message_id = first["Records"][0]["messageId"]
    assert (failure_ids(first_response), second_response["batchItemFailures"]) == ({message_id}, [])
    bodies = [dead["Body"] for dead in aws.dead_letters()]
    records = [json.loads(body) for body in bodies if len(body) < 10_000]
    assert [r["source_message_id"] for r in records] == [message_id, message_id]
    assert sum(1 for body in bodies if len(body) >= 10_000) == 1


@pytest.mark.parametrize(
    "break_record, stopped_bodies",
    [(lambda r: r.update(messageAttributes=5), ["m2"]), (lambda r: r.update(attributes=None), ["m2", "m3"])],
    ids=["group-known", "group-unknown"],
)
def test_a_fifo_record_that_cannot_be_read_stops_the_later_messages_of_its_group(aws_fifo, break_record, stopped_bodies):
    # GIVEN a FIFO batch: group g holds m0, m1, m2 in order and group h holds m3; m1's record is broken
    for body, group in [("m0", "g"), ("m1", "g"), ("m2", "g"), ("m3", "h")]:
        aws_fifo.sqs.send_message(
            QueueUrl=aws_fifo.queue_url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=body,
            MessageAttributes={"beanstalk.sqsd.path": {"DataType": "String", "StringValue": "/ok"}},
        )
    event = aws_fifo.receive_event()
    by_body = {r["body"]: r for r in event["Records"]}
    break_record(by_body["m1"])
    ran: list[str] = []
    # WHEN handled
    response = worker_for(aws_fifo, one_task("/ok", lambda t: ran.append(t.body)), settings=Settings(fifo=True)).handle(event, None)
    # THEN m1 is backed off; the later messages of its group (of every group, when m1's group is unknown) are not run
    # but released at once, in order; the rest ran
    assert failure_ids(response) == {by_body[b]["messageId"] for b in ["m1", *stopped_bodies]}
    assert ran == [b for b in ["m0", "m3"] if b not in stopped_bodies]
    released = {e["ReceiptHandle"] for e in entries(aws_fifo) if e["VisibilityTimeout"] == 0}
    assert released == {by_body[b]["receiptHandle"] for b in stopped_bodies}
