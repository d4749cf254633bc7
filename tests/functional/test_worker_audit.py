"""The worker core against the hostile audit of issue #8: odd exceptions, lost leases, unreadable records, late invokes."""

from __future__ import annotations

import json
import logging

import pytest

from tests.functional.conftest import AwsWorld
from tests.functional.test_worker_failure_paths import (  # noqa: F401 - fixtures, used as parameters by name
    Clock,
    entries,
    failure_ids,
    one_task,
    published,
    raise_,
    reason_of,
    send,
    strict,
    worker_for,
)
from worker_tier import NonRetryableError, RetryLater, Task, observability
from worker_tier.heartbeat import Heartbeat
from worker_tier.limits import SQS_MAX_VISIBILITY_TIMEOUT_SECONDS
from worker_tier.message import MAX_LOGGED_ERROR_CHARS
from worker_tier.registry import Registry
from worker_tier.settings import Settings
from worker_tier.worker import OUTCOME_DEAD_LETTERED, OUTCOME_RETRYING, VISIBILITY_SAFETY_MARGIN_SECONDS


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


# -- item 1: an exception whose __repr__ raises ---------------------------------------------------------------------


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
    from worker_tier.worker import add_outcome_listener, remove_outcome_listener

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
    from worker_tier.worker import add_outcome_listener, remove_outcome_listener

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


# -- item 2: a lone surrogate in an error message ---------------------------------------------------------------------


def test_an_error_message_with_a_lone_surrogate_is_dead_lettered_with_it_escaped(aws):
    # GIVEN a task refusing a file whose name was decoded with surrogateescape
    name = b"caf\xe9.jpg".decode("utf-8", "surrogateescape")
    send(aws, "/p", "x")
    # WHEN handled
    response = worker_for(aws, one_task("/p", raise_(NonRetryableError(f"cannot open {name}")))).handle(aws.receive_event(), None)
    # THEN it is in the DLQ, the surrogate spelled as an escape
    assert response["batchItemFailures"] == []
    assert reason_of(aws.dead_letters()[0])["error_message"] == "cannot open caf\\udce9.jpg"


# -- item 4: a BaseException in an idempotent task frees its key ------------------------------------------------------


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


# -- item 6: a message whose lease is already lost is not started -----------------------------------------------------


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


# -- item 8: a throttled invoke starts long after the receive -------------------------------------------------------


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


# -- item 9: GeneratorExit is a task failure like any other ---------------------------------------------------------


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


# -- item 10: records Powertools or the heartbeat cannot read -------------------------------------------------------


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

    from tests.functional.conftest import make_world

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


# -- minor: odd exceptions -----------------------------------------------------------------------------------------


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


# -- minor: a reason record sent again after the original's send failed (documented: at-least-once) -----------------


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
    from worker_tier.limits import SQS_MAX_MESSAGE_BYTES

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
