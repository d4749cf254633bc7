"""The in-process app adapter (sqsd.py, app_adapter.py and the worker's app hook) at its edges: apps that break the
ASGI or WSGI protocol, hang, exit or never answer; outcome rules; Retry-After values; headers; via_sns and retention;
FIFO group stops; loading an app.

The hang tests leave daemon threads behind (bounded by HANG_BUDGET_SECONDS each). After the swallowed
KeyboardInterrupt case, Python 3.11 may print "SystemError: AST constructor recursion depth mismatch" at the
end of the run (after the summary); the results above it stand. Use --tb=native.

Each test states the behaviour it requires. Nothing under src/ is patched.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sys
import threading
from typing import Any

import pytest

from tests.support.aws_world import AwsWorld
from worker_tier.core import contract
from worker_tier.app.app_adapter import InProcessTarget, load_app, wsgi_environ
from worker_tier.app.app_target import AppResponse, SqsdRequest
from worker_tier.core.errors import AppExceptionError, AppLoadError, AppStatusError, RetryLater, UnsendableRequestError
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.app.sqsd import check_response, request_for
from worker_tier.core.task import Task
from worker_tier.worker.batch import Worker

HANG_BUDGET_SECONDS = 3.0


# ---------------------------------------------------------------- helpers


def worker(aws: AwsWorld, app: Any, **settings: Any) -> Worker:
    return Worker(
        Settings(**settings), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
        registry=Registry(), sqs=aws.sqs, random=lambda: 0.5, app_target=InProcessTarget(app),
    )


def send(aws: AwsWorld, body: str, group: str | None = None, **attributes: str) -> None:
    extra: dict[str, Any] = {}
    if group is not None:
        extra = {"MessageGroupId": group, "MessageDeduplicationId": body}
    aws.sqs.send_message(
        QueueUrl=aws.queue_url, MessageBody=body,
        MessageAttributes={n: {"DataType": "String", "StringValue": v} for n, v in attributes.items()}, **extra,
    )


def failed(response: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


def visibility_set(aws: AwsWorld) -> list[int]:
    return [e["VisibilityTimeout"] for p in aws.params("ChangeMessageVisibilityBatch") for e in p["Entries"]]


def reason_of(dead: dict[str, Any]) -> dict[str, Any]:
    return json.loads(dead["MessageAttributes"][contract.FAILURE_ATTRIBUTE]["StringValue"])  # type: ignore[no-any-return]


def deliver_within(target: InProcessTarget, request: SqsdRequest, seconds: float = HANG_BUDGET_SECONDS) -> tuple[bool, Any]:
    """Deliver on a daemon thread; (finished, answer or exception). A hang is reported, not suffered."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(target.deliver(request))
        except BaseException as error:  # what the worker would see
            result.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return (not thread.is_alive(), result[0] if result else None)


REQUEST = SqsdRequest("/", (("Content-Type", "application/json"), ("User-Agent", "aws-sqsd/2.4")), b"{}")


def ok_wsgi(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


# ------------------------------------------------- ASGI: fatal exceptions, hangs, no answer


def test_asgi_app_raising_systemexit_fails_its_message_and_does_not_wedge_later_ones():
    # GIVEN an ASGI app whose handler calls sys.exit() for one message (a BaseException)
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == "/exit":
            raise SystemExit(3)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    target = InProcessTarget(app)
    # WHEN it is delivered  THEN the delivery ends (a failure), in bounded time
    finished, _ = deliver_within(target, SqsdRequest("/exit", REQUEST.headers, b"{}"))
    assert finished, "delivery of a message whose ASGI app raised SystemExit never returned"
    # AND a later, good message is still delivered
    finished, second = deliver_within(target, REQUEST)
    assert finished, "after one SystemExit, every later message to the ASGI app hangs (a2wsgi's loop thread died)"
    assert isinstance(second, AppResponse) and second.status == 200


def test_asgi_app_that_returns_without_answering_fails_instead_of_hanging():
    # GIVEN an ASGI app that returns without sending http.response.start (a buggy middleware, an early return)
    async def app(scope, receive, send):
        return None

    # WHEN a message is delivered  THEN it fails (sqsd would see the connection closed), it does not hang
    finished, outcome = deliver_within(InProcessTarget(app), REQUEST)
    assert finished, "an ASGI app that never answers hangs the delivery forever (no timeout)"
    assert not isinstance(outcome, AppResponse) or outcome.status != 200


def test_asgi_app_that_hangs_is_bounded_by_a_timeout():
    # GIVEN an ASGI app stuck awaiting something that never comes (sqsd has InactivityTimeout for this)
    async def app(scope, receive, send):
        if scope["type"] == "http":
            await asyncio.Event().wait()

    # WHEN delivered  THEN the delivery ends in bounded time (there is no timeout setting for the in-process target)
    # (the bound is the request's timeout_seconds, which the worker sets from inactivity_timeout)
    finished, outcome = deliver_within(InProcessTarget(app), SqsdRequest("/", REQUEST.headers, b"{}", timeout_seconds=1))
    assert isinstance(outcome, AppExceptionError) and "did not finish within 1 s" in str(outcome)
    assert finished, "no inactivity timeout applies to an in-process ASGI app: the worker's thread is held forever"


# ------------------------------------------------- outcome rules vs. the logged-exception capture


def throttling_after_logged_error(environ, start_response):
    """An app that handles its DB error (logging it, as apps do) and asks sqsd to come back in 120 s."""
    try:
        raise ConnectionError("database is restarting")
    except ConnectionError:
        logging.getLogger("myapp").exception("db down; asking for a retry later")
    start_response("503 Service Unavailable", [("Retry-After", "120"), ("Content-Type", "text/plain")])
    return [b"busy, come back later"]


def test_503_with_retry_after_is_retry_later_even_when_the_app_logged_an_exception(aws):
    # GIVEN an app answering 503 + Retry-After: 120 after logging a handled exception
    send(aws, "{}")
    # WHEN the worker handles it
    response = worker(aws, throttling_after_logged_error).handle(aws.receive_event(), None)
    # THEN it comes back in 120 s, as the app asked (the rule: 429/503 + Retry-After = RetryLater)
    assert len(failed(response)) == 1
    assert visibility_set(aws) == [120], "a logged exception turned 503+Retry-After into AppExceptionError and backoff"


def test_a_non_200_after_a_logged_exception_keeps_status_and_body_in_the_reason(aws):
    # GIVEN the same app, on the message's last receive
    send(aws, "{}")
    worker(aws, throttling_after_logged_error, max_retries=1).handle(aws.receive_event(), None)
    # THEN the reason holds app_status and app_response (the rule: status + first KiB of the body)
    [dead] = aws.dead_letters()
    reason = reason_of(dead)
    assert reason.get("app_status") == 503 and reason.get("app_response") == "busy, come back later", reason


# ------------------------------------------------- Retry-After edge values


def test_a_retry_after_with_thousands_of_digits_is_judged_not_crashed():
    # GIVEN a 503 whose Retry-After is 5000 digits (Python refuses int() of > 4300 digits)
    response = AppResponse(503, {"retry-after": "9" * 5000}, b"busy")
    # WHEN judged  THEN RetryLater (capped later) or AppStatusError with the status, never a bare ValueError
    with pytest.raises((RetryLater, AppStatusError)):
        check_response(REQUEST, response, 1_800_000_000.0)


@pytest.mark.parametrize("value", ["-5", "garbage", "1e3", "12.5", "", "120, 60"])
def test_an_unreadable_retry_after_is_an_app_status_error(value):
    with pytest.raises(AppStatusError) as caught:
        check_response(REQUEST, AppResponse(429, {"retry-after": value}, b"x"), 1_800_000_000.0)
    assert caught.value.status == 429


def test_a_retry_after_date_in_the_past_retries_now():
    with pytest.raises(RetryLater) as caught:
        check_response(REQUEST, AppResponse(503, {"retry-after": "Sun, 06 Nov 1994 08:49:37 GMT"}, b""), 1_800_000_000.0)
    assert caught.value.delay_seconds == 0


def test_a_huge_retry_after_is_capped_to_what_sqs_allows(aws):
    def app(environ, start_response):
        start_response("429 Too Many Requests", [("Retry-After", "99999999999")])
        return [b""]

    send(aws, "{}")
    response = worker(aws, app).handle(aws.receive_event(), None)
    assert len(failed(response)) == 1
    [seconds] = visibility_set(aws)
    assert 0 < seconds <= 43200


# ------------------------------------------------- WSGI protocol abuse


def _never_starts(environ, start_response):
    return [b"no status"]


def _returns_none(environ, start_response):
    start_response("200 OK", [])
    return None


def _raises_midway(environ, start_response):
    start_response("200 OK", [])
    yield b"partial"
    raise RuntimeError("stream broke")


def _starts_twice(environ, start_response):
    start_response("500 Internal Server Error", [])
    start_response("200 OK", [])
    return [b"?"]


def _status_2000(environ, start_response):
    start_response("2000 Weird", [])
    return [b"?"]


@pytest.mark.parametrize("app", [_never_starts, _returns_none, _raises_midway, _starts_twice, _status_2000])
def test_a_wsgi_protocol_violation_is_a_failure_not_a_success(aws, app):
    send(aws, "{}")
    response = worker(aws, app).handle(aws.receive_event(), None)
    assert len(failed(response)) == 1, f"{app.__name__}: a protocol violation deleted the message"


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def _raises_unprintable(environ, start_response):
    raise _Unprintable()


def _raises_systemexit(environ, start_response):
    raise SystemExit(1)


def _raises_keyboardinterrupt(environ, start_response):
    raise KeyboardInterrupt


@pytest.mark.parametrize("bad", [_raises_unprintable, _raises_systemexit, _raises_keyboardinterrupt])
def test_one_bad_message_does_not_hold_back_the_rest_of_the_batch(aws, bad):
    seen: list[str] = []

    def app(environ, start_response):
        body = environ["wsgi.input"].read().decode()
        seen.append(body)
        if body == "bad":
            return bad(environ, start_response)
        return ok_wsgi(environ, start_response)

    for body in ("a", "bad", "b"):
        send(aws, body)
    response = worker(aws, app, max_retries=1).handle(aws.receive_event(), None)
    assert sorted(seen) == ["a", "b", "bad"]
    assert failed(response) == []
    [dead] = aws.dead_letters()
    reason = reason_of(dead)
    # an app exception = failure with its traceback in the reason (BaseException included)
    assert "traceback" in reason["error_message"], reason


def test_a_huge_binary_error_body_gives_a_kib_reason_that_sqs_accepts(aws):
    def app(environ, start_response):
        start_response("500 Internal Server Error", [])
        return [b"\xff\xfe\x00" * (10 * 1024 * 1024 // 3)]

    send(aws, "{}")
    worker(aws, app, max_retries=1).handle(aws.receive_event(), None)
    [dead] = aws.dead_letters()
    raw = dead["MessageAttributes"][contract.FAILURE_ATTRIBUTE]["StringValue"]
    reason = json.loads(raw)
    assert reason["app_status"] == 500 and len(reason["app_response"].encode()) <= 3 * 1024
    assert len(raw.encode()) < 256 * 1024


# ------------------------------------------------- headers


def _event_record(attributes: dict[str, str], body: str = "{}", system: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "messageId": "m1", "receiptHandle": "rh", "body": body,
        "attributes": system if system is not None else {
            "ApproximateReceiveCount": "1", "SentTimestamp": "1800000000000",
            "ApproximateFirstReceiveTimestamp": "1800000000000", "SenderId": "AIDA",
        },
        "messageAttributes": {n: {"stringValue": v, "dataType": "String"} for n, v in attributes.items()},
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:work",
    }


def _environ_for(attributes: dict[str, str]) -> dict[str, Any]:
    record = _event_record(attributes)
    task = Task("m1", "/", "{}", "application/json", record, None, None, None)
    return wsgi_environ(request_for(task, Settings()))


def test_attributes_differing_only_in_case_or_dash_vs_underscore_both_reach_the_app():
    # SQS attribute names are case-sensitive, and allow both '-' and '_': four distinct attributes here
    environ = _environ_for({"Tenant": "A", "tenant": "B", "trace-id": "C", "trace_id": "D"})
    # (a WSGI environ has one key for all four names; their values are joined, as HTTP joins repeats)
    values = sorted(v for k, v in environ.items() if k.startswith("HTTP_X_AWS_SQSD_ATTR_"))
    assert values == ["A, B", "C, D"], f"attributes silently overwrote each other: {values}"


def test_an_attribute_value_with_cr_lf_is_not_given_to_the_app_as_a_header_value():
    # sqsd (Ruby Net::HTTP) refuses a header value with CR/LF; no HTTP server hands one to an app
    # (the request is refused before any target sees it, naming the attribute)
    with pytest.raises(UnsendableRequestError, match="note"):
        _environ_for({"note": "line1\r\nX-Injected: yes"})


def test_non_ascii_attribute_values_arrive_as_pep3333_latin1_strings():
    environ = _environ_for({"city": "Zürich"})
    assert environ["HTTP_X_AWS_SQSD_ATTR_CITY"].encode("latin-1").decode("utf-8") == "Zürich"


def test_a_periodic_message_gets_an_empty_body_at_its_path():
    record = _event_record({
        contract.PATH_ATTRIBUTE: "/update/hourly", contract.TASK_NAME_ATTRIBUTE: "t",
        contract.SCHEDULED_TIME_ATTRIBUTE: "2026-11-22 23:00:00 UTC",
    }, body="not empty")
    request = request_for(Task("m1", "/update/hourly", "not empty", "application/json", record, None, None, None), Settings())
    assert (request.path, request.body) == ("/update/hourly", b"")
    assert request.header("X-Aws-Sqsd-Scheduled-At") == "2026-11-22T23:00:00Z"


# ------------------------------------------------- via_sns and retention


@pytest.mark.parametrize("envelope", [
    {"Type": "Notification", "TopicArn": "arn:aws:sns:us-east-1:1:t", "Message": {"a": 1}},
    {"Type": "Notification", "Message": "x"},
    {"Type": "SubscriptionConfirmation", "TopicArn": "arn:aws:sns:us-east-1:1:t", "Message": "x"},
])
def test_via_sns_passes_a_malformed_envelope_through_unchanged(aws, envelope):
    seen: list[bytes] = []

    def app(environ, start_response):
        seen.append(environ["wsgi.input"].read())
        return ok_wsgi(environ, start_response)

    send(aws, json.dumps(envelope))
    assert failed(worker(aws, app, via_sns=True).handle(aws.receive_event(), None)) == []
    assert json.loads(seen[0]) == envelope


def test_retention_with_a_worker_clock_behind_the_first_receive_still_delivers(aws):
    seen: list[int] = []

    def app(environ, start_response):
        seen.append(1)
        return ok_wsgi(environ, start_response)

    w = worker(aws, app, retention_period=60)
    w._clock = lambda: 1_000.0  # the worker's clock far behind SQS's (skew): age is negative
    response = w.handle({"Records": [_event_record({})]}, None)
    assert seen == [1] and failed(response) == []


def test_retention_dead_letters_an_old_message_with_its_reason(aws):
    send(aws, "{}")
    event = aws.receive_event()
    event["Records"][0]["attributes"]["ApproximateFirstReceiveTimestamp"] = "1000"
    worker(aws, ok_wsgi, retention_period=60).handle(event, None)
    [dead] = aws.dead_letters()
    assert reason_of(dead)["error_type"] == "RetentionExpiredError"


# ------------------------------------------------- FIFO


def test_the_fifo_group_stop_holds_with_app_messages(aws_fifo):
    aws = aws_fifo
    seen: list[str] = []

    def app(environ, start_response):
        body = environ["wsgi.input"].read().decode()
        seen.append(body)
        start_response("500 Internal Server Error" if body == "g1-first" else "200 OK", [])
        return [b""]

    for body, group in (("g1-first", "g1"), ("g1-second", "g1"), ("g2-only", "g2")):
        send(aws, body, group=group)
    w = worker(aws, app, fifo=True)
    response = w.handle(aws.receive_event(), None)
    assert "g1-second" not in seen and "g2-only" in seen
    assert len(failed(response)) == 2


# ------------------------------------------------- loading


def test_an_app_module_that_calls_sys_exit_on_import_fails_the_load_with_an_app_load_error(tmp_path, monkeypatch):
    # GIVEN an app module that exits on import (a settings check, argparse at module level)
    (tmp_path / "exiting_on_import_app.py").write_text("import sys\nsys.exit('missing DJANGO_SETTINGS_MODULE')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("exiting_on_import_app", None)
    # WHEN loaded  THEN AppLoadError naming WORKER_TIER_APP, as the docs promise, not a bare SystemExit
    try:
        with pytest.raises(AppLoadError):
            load_app("exiting_on_import_app:app")
    except SystemExit as escaped:
        pytest.fail(f"SystemExit escaped load_app (worker start dies without naming the setting): {escaped}")


def test_a_non_callable_app_is_refused_naming_the_value():
    with pytest.raises(AppLoadError, match="WORKER_TIER_APP"):
        load_app("worker_tier.app.sqsd:USER_AGENT")


def test_a_partial_of_an_asgi_app_is_served_as_asgi():
    async def app(scope, receive, send, greeting=b"hi"):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": greeting})

    target = InProcessTarget(functools.partial(app, greeting=b"hello"))
    assert target.deliver(REQUEST).body == b"hello"


# ------------------------------------------------- retention across a rescheduled retry


def test_retention_still_applies_after_a_long_retry_after_is_rescheduled(aws):
    from worker_tier.delays.delay import DelayedMessage

    aws.dynamodb.create_table(
        TableName="delay",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    calls: list[int] = []

    def app(environ, start_response):  # busy: come back in two days
        calls.append(1)
        start_response("503 Service Unavailable", [("Retry-After", str(2 * 86400))])
        return [b""]

    now = [1_800_000_000.0]
    settings = Settings(retention_period=3600)
    w = Worker(settings, queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url, registry=Registry(),
               sqs=aws.sqs, random=lambda: 0.5, app_target=InProcessTarget(app), clock=lambda: now[0], delay_table="delay")
    first_received_ms = int(now[0] * 1000)
    record = _event_record({"tenant": "acme"}, system={
        "ApproximateReceiveCount": "1", "SentTimestamp": str(first_received_ms),
        "ApproximateFirstReceiveTimestamp": str(first_received_ms),
    })
    record["receiptHandle"] = "rh-1"
    w.handle({"Records": [record]}, None)  # rescheduled through the delay table, due in two days
    [item] = aws.dynamodb.scan(TableName="delay")["Items"]
    copy = DelayedMessage.from_item(item)
    # WHEN the copy arrives two days later (a new SQS message: its own first receive)
    now[0] += 2 * 86400 + 5
    later_ms = str(int(now[0] * 1000))
    arrived = _event_record({}, body=copy.body, system={
        "ApproximateReceiveCount": "1", "SentTimestamp": later_ms, "ApproximateFirstReceiveTimestamp": later_ms,
    })
    arrived["messageId"] = "m2"
    arrived["messageAttributes"] = {
        n: {"dataType": a["DataType"], "stringValue": a["StringValue"]} for n, a in copy.attributes.items() if "StringValue" in a
    }
    w.handle({"Records": [arrived]}, None)
    # THEN it is past retention_period (first received two days ago, rule 3600 s): dead-lettered, not delivered
    assert calls == [1], "a message first received 2 days ago reached the app despite retention_period=3600"


# ------------------------------------------------- one hung ASGI message and the batch


def test_one_hung_asgi_message_does_not_hold_back_the_batch_or_lose_its_decisions(aws):
    # GIVEN an ASGI app that hangs on one message of three (a stuck await), on Lambda
    seen: list[bytes] = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body = (await receive()).get("body", b"")
        seen.append(body)
        if body == b"stuck":
            await asyncio.Event().wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    for body in ("first", "stuck", "third"):
        send(aws, body)
    w = worker(aws, app)
    event = aws.receive_event()
    result: list[Any] = []
    # (on Lambda, a context; 1.5 s left past the timeout margin bounds the stuck delivery)
    context = _Context(w.settings.timeout_margin * 1000 + 1500)
    thread = threading.Thread(target=lambda: result.append(w.handle(event, context)), daemon=True)
    thread.start()
    thread.join(HANG_BUDGET_SECONDS)
    # THEN the batch ends (the stuck one failed by a timeout) and "third" is delivered; otherwise Lambda's
    # timeout re-delivers the whole batch, "first" included: a duplicate delivery of a message the app completed
    assert not thread.is_alive(), f"the batch never returned; the app saw {seen} (b'first' will be delivered again)"
    assert seen == [b"first", b"stuck", b"third"] and failed(result[0]) == [event["Records"][1]["messageId"]]


class _Context:
    """A Lambda context whose remaining time stays at ``remaining_ms``."""

    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def test_an_asgi_app_behind_a_sync_wrapper_is_served_as_asgi():
    # GIVEN an ASGI middleware object whose __call__ is a plain def returning the coroutine (a common wrapper shape)
    async def inner(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"wrapped"})

    class Wrapper:
        def __call__(self, scope, receive, send):
            return inner(scope, receive, send)

    # THEN it is told apart at load, or at least it answers, not a TypeError per message
    target = InProcessTarget(Wrapper())
    assert target.deliver(REQUEST).body == b"wrapped"


def test_a_429_on_the_last_receive_dead_letters_with_its_status_and_body(aws):
    def app(environ, start_response):
        start_response("429 Too Many Requests", [("Retry-After", "30")])
        return [b"quota for tenant acme exhausted"]

    send(aws, "{}")
    worker(aws, app, max_retries=1).handle(aws.receive_event(), None)
    [dead] = aws.dead_letters()
    reason = reason_of(dead)
    assert (reason.get("app_status"), reason.get("app_response")) == (429, "quota for tenant acme exhausted"), reason


def test_a_fastapi_catch_all_handler_answering_503_retry_after_is_retry_later(aws):
    # GIVEN a FastAPI app whose catch-all exception handler answers 503 + Retry-After: 60 (Starlette then
    # re-raises the exception after sending that answer, for servers to log)
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    api = FastAPI()

    @api.exception_handler(Exception)
    async def busy(request, error):
        return JSONResponse({"detail": "busy"}, status_code=503, headers={"Retry-After": "60"})

    @api.post("/")
    async def work():
        raise ConnectionError("database is restarting")

    send(aws, "{}")
    response = worker(aws, api).handle(aws.receive_event(), None)
    # THEN it comes back in 60 s, as the app answered
    assert len(failed(response)) == 1
    assert visibility_set(aws) == [60], "the app's 503+Retry-After became AppExceptionError with backoff"


def test_an_asgi_app_whose_handler_is_cancelled_fails_instead_of_hanging():
    # GIVEN an ASGI app whose request ends in CancelledError (a BaseException; e.g. a cancelled inner task)
    async def app(scope, receive, send):
        if scope["type"] == "http":
            raise asyncio.CancelledError()

    finished, outcome = deliver_within(InProcessTarget(app), REQUEST)
    assert finished, "a cancelled ASGI request hangs the delivery forever"
    assert not isinstance(outcome, AppResponse) or outcome.status != 200
