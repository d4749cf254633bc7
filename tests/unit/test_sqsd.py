"""sqsd's rules, header by header: the POST an app receives for each kind of message, and what its answer means.

The expected headers are written out from sqsd's ``daemon.rb`` (``post_message``), ../shared/EB-SQSD.md.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from worker_tier.core import contract
from worker_tier.app.app_target import AppResponse, SqsdRequest
from worker_tier.core.errors import AppExceptionError, AppStatusError, RetentionExpiredError, RetryLater
from worker_tier.core.envelope import lambda_record
from worker_tier.core.settings import Settings
from worker_tier.app.sqsd import USER_AGENT, check_response, check_retention, request_for, retry_after_seconds, unwrap_sns
from worker_tier.core.task import Task

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:orders-work"
SENT_MS = 1_573_692_400_000  # 2019-11-14T00:46:40Z
FIRST_RECEIVED_MS = 1_573_692_421_500  # 2019-11-14T00:47:01.5Z
SENDER = "AIDAEXAMPLESENDER"
NOW = datetime(2019, 11, 14, 0, 48, tzinfo=timezone.utc).timestamp()


DEFAULTS = Settings()


def task_for(body: str, attributes: dict, *, receive_count: int = 2, settings: Settings = DEFAULTS) -> Task:
    """A Task as the worker builds it, from a record as Lambda shapes one."""
    received = {
        "MessageId": "m-1",
        "ReceiptHandle": "r-1",
        "Body": body,
        "Attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": str(SENT_MS),
            "ApproximateFirstReceiveTimestamp": str(FIRST_RECEIVED_MS),
            "SenderId": SENDER,
        },
        "MessageAttributes": attributes,
    }
    record = lambda_record(received, QUEUE_ARN, "us-east-1")
    return Task.from_record(record, default_path=settings.http_path, content_type=settings.mime_type)


def string(value: str, data_type: str = "String") -> dict:
    return {"DataType": data_type, "StringValue": value}


COMMON = [
    ("Content-Type", "application/json"),
    ("User-Agent", USER_AGENT),
    ("X-Aws-Sqsd-Msgid", "m-1"),
    ("X-Aws-Sqsd-Receive-Count", "2"),
    ("X-Aws-Sqsd-First-Received-At", "2019-11-14T00:47:01Z"),
    ("X-Aws-Sqsd-Sent-At", "2019-11-14T00:46:40Z"),
    ("X-Aws-Sqsd-Queue", "orders-work"),
]


def test_an_ordinary_message_is_posted_to_http_path_with_its_body_and_sqsds_headers():
    # GIVEN an ordinary message with a route attribute and one attribute of its own
    body = json.dumps({"task": "resize", "arguments": [64]})
    task = task_for(body, {contract.PATH_ATTRIBUTE: string("/resize"), "tenant": string("acme")})
    # WHEN sqsd's request is made of it
    request = request_for(task, Settings(http_path="/worker"))
    # THEN it goes to http_path (the route only becomes a header), with the body as it came
    assert (request.method, request.path, request.body) == ("POST", "/worker", body.encode())
    # AND its headers are sqsd's, one by one, in sqsd's order
    assert list(request.headers) == [
        *COMMON,
        ("X-Aws-Sqsd-Path", "/resize"),
        ("X-Aws-Sqsd-Sender-Id", SENDER),
        ("X-Aws-Sqsd-Attr-tenant", "acme"),
    ]


def test_app_route_by_path_posts_an_ordinary_message_to_its_route():
    # GIVEN an ordinary message with a route, and the option sqsd never had
    task = task_for("{}", {contract.PATH_ATTRIBUTE: string("/resize")})
    # WHEN sqsd's request is made of it
    request = request_for(task, Settings(http_path="/worker", app_route_by_path=True))
    # THEN it goes to the route, with its body
    assert (request.path, request.body) == ("/resize", b"{}")


def test_an_ordinary_message_without_a_route_has_no_path_header():
    # GIVEN a message from a producer that sets no route (S3, SNS, an EB producer)
    task = task_for("hello", {})
    # WHEN sqsd's request is made of it
    request = request_for(task, Settings())
    # THEN it goes to http_path, with the common headers and the sender only
    assert (request.path, request.body) == ("/", b"hello")
    assert list(request.headers) == [*COMMON, ("X-Aws-Sqsd-Sender-Id", SENDER)]


def test_a_periodic_message_is_posted_to_its_path_with_an_empty_body_and_its_tick():
    # GIVEN a tick of a periodic task, as EB's leader (and Worker Tier's periodic tasks) enqueue it
    task = task_for(contract.SCHEDULED_JOB_BODY, {
        contract.PATH_ATTRIBUTE: string("/update/hourly"),
        contract.TASK_NAME_ATTRIBUTE: string("hourly-update"),
        contract.SCHEDULED_TIME_ATTRIBUTE: string("2019-11-14 00:47:00 UTC"),
    })
    # WHEN sqsd's request is made of it, whatever http_path is
    request = request_for(task, Settings(http_path="/worker"))
    # THEN it goes to its own path with an empty body
    assert (request.path, request.body) == ("/update/hourly", b"")
    # AND its headers add the tick, ISO 8601 UTC, and the task's name; no beanstalk.sqsd.* attribute header
    assert list(request.headers) == [
        *COMMON,
        ("X-Aws-Sqsd-Path", "/update/hourly"),
        ("X-Aws-Sqsd-Sender-Id", SENDER),
        ("X-Aws-Sqsd-Scheduled-At", "2019-11-14T00:47:00Z"),
        ("X-Aws-Sqsd-Taskname", "hourly-update"),
    ]


def test_attributes_become_headers_by_sqsds_data_type_rule():
    # GIVEN one attribute of each data type, and Worker Tier's own bookkeeping attribute
    attributes = {
        "s": string("text"),
        "n": string("42", "Number"),
        "n_custom": string("4.5", "Number.float"),
        "s_custom": string("é, ünïcode", "String.label"),
        "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
        "b_custom": {"DataType": "Binary.gif", "BinaryValue": b"GIF89a"},
        contract.ATTEMPTS_ATTRIBUTE: string("1"),
    }
    # WHEN sqsd's request is made of the message
    request = request_for(task_for("{}", attributes), Settings())
    # THEN String and Number ones (custom labels too) are headers, by their names as they are;
    # Binary ones are dropped (as sqsd drops them) and so is worker_tier.* (an EB app never saw it)
    attribute_headers = [(name, value) for name, value in request.headers if name.startswith("X-Aws-Sqsd-Attr-")]
    assert attribute_headers == [
        ("X-Aws-Sqsd-Attr-s", "text"),
        ("X-Aws-Sqsd-Attr-n", "42"),
        ("X-Aws-Sqsd-Attr-n_custom", "4.5"),
        ("X-Aws-Sqsd-Attr-s_custom", "é, ünïcode"),
    ]


def test_the_receive_count_header_counts_the_whole_retry_chain():
    # GIVEN a retry re-sent through the delay table after 3 receives, on its 1st receive
    task = task_for("{}", {contract.ATTEMPTS_ATTRIBUTE: string("3")}, receive_count=1)
    # WHEN sqsd's request is made of it
    request = request_for(task, Settings())
    # THEN the app sees the 4th receive, as it would have on EB, where the message never left its queue
    assert request.header("X-Aws-Sqsd-Receive-Count") == "4"


def test_the_mime_type_setting_is_the_content_type():
    # GIVEN a worker configured with EB's MimeType option
    settings = Settings(mime_type="text/plain")
    # WHEN sqsd's request is made
    request = request_for(task_for("hi", {}, settings=settings), settings)
    # THEN it is the Content-Type
    assert request.header("content-type") == "text/plain"


SNS_ENVELOPE = {
    "Type": "Notification",
    "MessageId": "sns-1",
    "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
    "Message": '{"task": "resize", "arguments": [64]}',
    "Timestamp": "2019-11-14T00:46:40.000Z",
    "SignatureVersion": "1",
}


def test_an_sns_envelope_is_unwrapped_to_its_message():
    # GIVEN a body SNS wrapped (a subscription without raw message delivery)
    # WHEN unwrapped  THEN it is the published message
    assert unwrap_sns(json.dumps(SNS_ENVELOPE)) == SNS_ENVELOPE["Message"]


@pytest.mark.parametrize("body", [
    '{"task": "resize"}',  # JSON, not an envelope
    json.dumps({**SNS_ENVELOPE, "Type": "SubscriptionConfirmation"}),  # an envelope, not a notification
    json.dumps({k: v for k, v in SNS_ENVELOPE.items() if k != "TopicArn"}),
    "{not json",
    "plain text",
    "",
])
def test_a_body_that_is_not_an_sns_notification_passes_unchanged(body):
    # GIVEN a body that is not an SNS Notification envelope  WHEN unwrapped  THEN it is as it came, as sqsd leaves it
    assert unwrap_sns(body) == body


def test_an_sns_wrapped_message_is_posted_with_the_unwrapped_body_and_the_same_headers():
    # GIVEN an SNS-wrapped message, its body unwrapped by the worker (via_sns) before the request is made
    settings = Settings(via_sns=True)
    task = task_for(json.dumps(SNS_ENVELOPE), {})
    task.body = unwrap_sns(task.body)
    # WHEN sqsd's request is made of it
    request = request_for(task, settings)
    # THEN the app gets the published message, with sqsd's headers as for any ordinary message
    assert request.body == SNS_ENVELOPE["Message"].encode()
    assert list(request.headers) == [*COMMON, ("X-Aws-Sqsd-Sender-Id", SENDER)]


# -- outcomes --------------------------------------------------------------------------------------------------------

REQUEST = SqsdRequest("/update/hourly", (), b"")


def test_only_200_is_success():
    # GIVEN the app answered 200  WHEN judged  THEN nothing is raised
    check_response(REQUEST, AppResponse(200), NOW)


@pytest.mark.parametrize("status", [201, 202, 204, 302, 400, 404, 429, 500, 503])
def test_any_other_status_is_a_failure_naming_the_status_and_the_rule(status):
    # GIVEN the app answered something else than 200, with no Retry-After
    response = AppResponse(status, {"content-type": "text/plain"}, b"x" * 5000)
    # WHEN judged
    with pytest.raises(AppStatusError) as raised:
        check_response(REQUEST, response, NOW)
    # THEN it is a failure carrying the status and the first KiB of the body, and saying the rule
    assert raised.value.status == status
    assert raised.value.response_body == b"x" * 1024
    assert str(raised.value).startswith(f"the app answered {status} to POST /update/hourly; only 200 deletes a message")


@pytest.mark.parametrize(("status", "retry_after", "seconds"), [
    (429, "30", 30),
    (503, "0", 0),
    (503, "Thu, 14 Nov 2019 00:50:00 GMT", 120),
    (429, "Thu, 14 Nov 2019 00:40:00 GMT", 0),  # a date already past: retry at once
])
def test_429_or_503_with_retry_after_is_retry_later(status, retry_after, seconds):
    # GIVEN the app asked to be retried later
    response = AppResponse(status, {"retry-after": retry_after})
    # WHEN judged
    with pytest.raises(RetryLater) as raised:
        check_response(REQUEST, response, NOW)
    # THEN it retries after the time asked for
    assert raised.value.delay_seconds == seconds
    assert str(raised.value) == f"the app answered {status} to POST /update/hourly with Retry-After {seconds} s"


@pytest.mark.parametrize("retry_after", ["soon", "-5", "1.5", "", "٣"])
def test_an_unreadable_retry_after_is_an_ordinary_failure(retry_after):
    # GIVEN a 503 whose Retry-After is neither delta-seconds nor an HTTP-date
    # WHEN judged  THEN it backs off like any failure
    with pytest.raises(AppStatusError):
        check_response(REQUEST, AppResponse(503, {"retry-after": retry_after}), NOW)
    assert retry_after_seconds(retry_after, NOW) is None


def test_retry_after_on_another_status_is_not_retry_later():
    # GIVEN a 500 with a Retry-After  WHEN judged  THEN it is a failure: only 429 and 503 ask for a time
    with pytest.raises(AppStatusError):
        check_response(REQUEST, AppResponse(500, {"retry-after": "30"}), NOW)


def test_the_status_is_judged_before_an_exception_the_app_raised_or_logged():
    # GIVEN a 503 + Retry-After the app gave after logging an exception
    response = AppResponse(503, {"retry-after": "120"}, b"busy", error="the app raised ConnectionError: db down")
    # WHEN judged  THEN it retries when the app asked, its answer kept as the cause (for the reason's app_status)
    with pytest.raises(RetryLater) as raised:
        check_response(REQUEST, response, NOW)
    assert raised.value.delay_seconds == 120
    assert isinstance(raised.value.__cause__, AppStatusError) and raised.value.__cause__.status == 503


def test_an_error_answer_with_an_exception_fails_with_the_traceback_and_keeps_the_answer():
    # GIVEN a 500 the app gave with an exception  WHEN judged
    with pytest.raises(AppExceptionError, match="the app raised KeyError") as raised:
        check_response(REQUEST, AppResponse(500, {}, b"oops", error="the app raised KeyError: 'x'"), NOW)
    # THEN its cause carries the status and body
    assert isinstance(raised.value.__cause__, AppStatusError)
    assert (raised.value.__cause__.status, raised.value.__cause__.response_body) == (500, b"oops")


def test_a_retry_after_of_more_than_ten_digits_is_unreadable():
    # GIVEN Retry-After values at and past the digit limit  THEN only the shorter one is read
    assert retry_after_seconds("9" * 10, NOW) == 9_999_999_999
    assert retry_after_seconds("9" * 11, NOW) is None
    assert retry_after_seconds("9" * 5000, NOW) is None


# -- retention --------------------------------------------------------------------------------------------------------


def test_a_message_first_received_longer_ago_than_retention_period_is_refused_with_its_age():
    # GIVEN a message first received at 00:47:01.5, and a retention period of 60 s, two minutes later
    task = task_for("{}", {})
    later = datetime(2019, 11, 14, 0, 49, 2, tzinfo=timezone.utc).timestamp()
    # WHEN its retention is checked  THEN it is refused, naming its age, the setting and the rule
    with pytest.raises(RetentionExpiredError) as raised:
        check_retention(task, Settings(retention_period=60), later)
    assert str(raised.value) == (
        "message m-1 was first received 120 s ago, more than retention_period 60 s (EB RetentionPeriod): not "
        "delivered to the app. sqsd deletes such a message silently; Worker Tier dead-letters it with this reason"
    )


def test_a_message_back_from_the_dlq_counts_retention_and_receives_from_its_new_start():
    # GIVEN a message a redrive of everything moved back from the DLQ (it keeps worker_tier.failure), carrying a
    # rescheduled retry's first receive of a day before and its 3 earlier receives; now its 1st receive, 58.5 s ago
    day_before = str(FIRST_RECEIVED_MS - 86_400_000)
    task = task_for("{}", {contract.FAILURE_ATTRIBUTE: string("{}"), contract.FIRST_RECEIVED_ATTRIBUTE: string(day_before),
                           contract.ATTEMPTS_ATTRIBUTE: string("3")}, receive_count=1)
    # WHEN its retention is checked and sqsd's request made  THEN both start from the move, not the first death
    check_retention(task, Settings(retention_period=60), NOW)
    headers = dict(request_for(task, Settings()).headers)
    assert headers["X-Aws-Sqsd-Receive-Count"] == "1"
    assert headers["X-Aws-Sqsd-First-Received-At"] == "2019-11-14T00:47:01Z"


def test_a_message_within_retention_period_is_delivered():
    # GIVEN a message first received 58.5 s before now, and a retention period of 60 s
    # WHEN its retention is checked  THEN nothing is raised
    check_retention(task_for("{}", {}), Settings(retention_period=60), NOW)
