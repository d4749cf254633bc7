"""Elastic Beanstalk sqsd's rules for an app: the POST it makes of a message, and what the answer means.

Both app targets (in-process, ``worker_tier.app.app_adapter``; over HTTP, ``worker_tier.app.forwarding``)
get their request from ``request_for`` and have their answer judged by ``check_response``, so a
message fares the same either way. The rules are sqsd's own (its ``daemon.rb``, ``post_message``;
``docs/design.md``, "Running an EB worker app"):

- an ordinary message is POSTed to ``http_path`` with its body; its ``beanstalk.sqsd.path`` only
  becomes the ``X-Aws-Sqsd-Path`` header (``app_route_by_path`` POSTs it to that path instead);
- a periodic message (it has ``beanstalk.sqsd.scheduled_time``) is POSTed to its
  ``beanstalk.sqsd.path`` with an empty body, plus ``X-Aws-Sqsd-Scheduled-At`` and ``-Taskname``;
- a message first received more than ``retention_period`` ago is not posted (``check_retention``);
- header values are Unicode text and go out as UTF-8 bytes (the HTTP target writes those bytes; the
  in-process one hands a WSGI app their latin-1 reading, as PEP 3333 asks of a server). A value with a
  control character (CR, LF, NUL...; tab is allowed), or a path that is not a plain ASCII request
  target, cannot be posted: ``UnsendableRequestError`` dead-letters the message at once, naming the
  attribute. A CR/LF can thus never put a header of its own on the wire;
- 200 is success, and only 200; 429 or 503 with a ``Retry-After`` retries after it (``RetryLater``);
  any other answer is a failure (``AppStatusError``) that backs off, then dead-letters with its reason.
"""

from __future__ import annotations

import functools
import json
import re
import time
from datetime import timezone
from typing import Any

from worker_tier.core import contract, message
from worker_tier.app.app_target import AppResponse, SqsdRequest
from worker_tier.core.errors import AppExceptionError, AppStatusError, RetentionExpiredError, RetryLater, UnsendableRequestError
from worker_tier.core.settings import Settings
from worker_tier.core.task import Task

# sqsd sends "aws-sqsd/<its version>". Apps test for "aws-sqsd" in it (some answer 400 otherwise), none for a
# version; 2.4 is the version captured most in public EB apps. Our own product token follows, as RFC 9110
# allows, so the app's logs can tell Worker Tier from EB.
USER_AGENT = "aws-sqsd/2.4 worker-tier"
# The statuses a Retry-After turns into a retry at the time the app asked for (RFC 9110, section 10.2.3).
RETRY_AFTER_STATUSES = frozenset({429, 503})
# How much of a failed answer's body the dead-letter reason keeps: as much as of an error message.
MAX_RESPONSE_BODY_BYTES = message.MAX_ERROR_MESSAGE_BYTES
# sqsd's timestamp headers: ISO 8601 UTC, to the second (Ruby's Time#iso8601).
HEADER_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# The SNS envelope a subscription without raw message delivery wraps a message in:
# https://docs.aws.amazon.com/sns/latest/dg/sns-message-and-json-formats.html#http-notification-json
SNS_NOTIFICATION_TYPE = "Notification"
# The longest delta-seconds Retry-After read (over 300 years); a longer one is unreadable (and int() of thousands of
# digits would raise ValueError).
MAX_RETRY_AFTER_DIGITS = 10
# What no header value may hold (RFC 9110, section 5.5): C0 controls but tab, and DEL.
HEADER_VALUE_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# What a request target's path may hold: visible ASCII only (RFC 9112, section 3.2); anything else percent-encoded.
REQUEST_PATH = re.compile(r"/[\x21-\x7e]*")
# The message attribute each header comes from, for the reason of a request that cannot be sent.
_HEADER_SOURCES = {
    "X-Aws-Sqsd-Path": contract.PATH_ATTRIBUTE,
    "X-Aws-Sqsd-Scheduled-At": contract.SCHEDULED_TIME_ATTRIBUTE,
    "X-Aws-Sqsd-Taskname": contract.TASK_NAME_ATTRIBUTE,
}


def request_for(task: Task, settings: Settings) -> SqsdRequest:
    """The POST sqsd would make of ``task``'s message.

    ``task.body`` is the body as the app sees it (unwrapped from SNS already, with ``via_sns``).

    Examples
    --------
    >>> from worker_tier.core.settings import Settings
    >>> request = request_for(Task("m1", "/", '{"task": "x"}'), Settings(http_path="/work"))
    >>> request.path, request.body, request.header("User-Agent").startswith("aws-sqsd/")
    ('/work', b'{"task": "x"}', True)
    """
    attributes = task.record.get("messageAttributes")
    attributes = attributes if isinstance(attributes, dict) else {}
    routed = _string_value(attributes.get(contract.PATH_ATTRIBUTE))
    scheduled = _string_value(attributes.get(contract.SCHEDULED_TIME_ATTRIBUTE))
    headers = _common_headers(task, settings, routed)
    headers.extend(_attribute_headers(attributes))
    if scheduled is not None:
        headers.append(("X-Aws-Sqsd-Scheduled-At", _scheduled_at(scheduled)))
        headers.append(("X-Aws-Sqsd-Taskname", _string_value(attributes.get(contract.TASK_NAME_ATTRIBUTE)) or ""))
        request = SqsdRequest(routed or settings.http_path, tuple(headers), b"")
    else:
        path = routed if routed and settings.app_route_by_path else settings.http_path
        request = SqsdRequest(path, tuple(headers), task.body.encode("utf-8"))
    _check_sendable(request, task)
    return request


def _check_sendable(request: SqsdRequest, task: Task) -> None:
    """UnsendableRequestError naming the attribute whose value cannot be the request's path or a header value."""
    if not REQUEST_PATH.fullmatch(request.path):
        raise UnsendableRequestError(
            f"message {task.message_id}: path {request.path!r} (from {contract.PATH_ATTRIBUTE}) is not a request "
            "target: it must start with '/' and hold only visible ASCII (percent-encode spaces and other characters)"
        )
    for name, value in request.headers:
        bad = HEADER_VALUE_FORBIDDEN.search(value)
        if bad is not None:
            source = _HEADER_SOURCES.get(name) or name.removeprefix("X-Aws-Sqsd-Attr-")
            raise UnsendableRequestError(
                f"message {task.message_id}: attribute {source!r} holds the control character {bad.group()!r}, "
                f"which no HTTP header value ({name}) may hold: it cannot be posted to the app (sqsd's headers "
                "carry attributes as they are); remove control characters other than tab from attribute values"
            )


def _common_headers(task: Task, settings: Settings, routed: str | None) -> list[tuple[str, str]]:
    """The headers of every POST, in sqsd's order; ``-Path`` and ``-Sender-Id`` only when the message has them."""
    system = task.record.get("attributes")
    system = system if isinstance(system, dict) else {}
    headers = [
        ("Content-Type", settings.mime_type),
        ("User-Agent", USER_AGENT),
        ("X-Aws-Sqsd-Msgid", task.message_id),
        ("X-Aws-Sqsd-Receive-Count", str(task.receive_count)),
        # The first receive of the message as its producer sent it: a retry rescheduled through the delay table is a
        # new SQS message, and carries the original's (``message.first_received_ms``).
        ("X-Aws-Sqsd-First-Received-At", _header_time(str(message.first_received_ms(task.record) or ""))),
        ("X-Aws-Sqsd-Sent-At", _header_time(system.get("SentTimestamp"))),
        ("X-Aws-Sqsd-Queue", task.queue),
    ]
    if routed is not None:
        headers.append(("X-Aws-Sqsd-Path", routed))
    sender = system.get("SenderId")
    if sender is not None:
        headers.append(("X-Aws-Sqsd-Sender-Id", str(sender)))
    return headers


_POINTER_ATTRIBUTES = frozenset({contract.PAYLOAD_SIZE_ATTRIBUTE, contract.LEGACY_PAYLOAD_SIZE_ATTRIBUTE})


def _attribute_headers(attributes: dict[str, Any]) -> list[tuple[str, str]]:
    """``X-Aws-Sqsd-Attr-<name>`` for each String or Number attribute (custom labels too), as sqsd sends them.

    Left out: Binary ones (sqsd drops them), ``beanstalk.sqsd.*`` (sqsd's own, in headers of their own),
    ``worker_tier.*``: Worker Tier's bookkeeping (delays, retry chains, forwards), never set by a
    producer (the Client refuses that prefix) and never seen by an app on EB; and the Extended Client's
    ``ExtendedPayloadSize`` (``SQSLargePayloadSize``): the app gets the body it describes, read from S3, not the pointer.
    """
    headers = []
    for name, attribute in attributes.items():
        if name.startswith((contract.SQSD_ATTRIBUTE_PREFIX, contract.WORKER_TIER_ATTRIBUTE_PREFIX)) or name in _POINTER_ATTRIBUTES:
            continue
        if not isinstance(attribute, dict) or not str(attribute.get("dataType", "")).startswith(("String", "Number")):
            continue
        value = attribute.get("stringValue")
        if isinstance(value, str):
            headers.append((f"X-Aws-Sqsd-Attr-{name}", value))
    return headers


def _string_value(attribute: Any) -> str | None:
    """A Lambda-event attribute's non-empty string value, else None."""
    value = attribute.get("stringValue") if isinstance(attribute, dict) else None
    return value if isinstance(value, str) and value else None


def _header_time(epoch_ms: Any) -> str:
    """An SQS epoch-milliseconds attribute in sqsd's spelling, its fraction cut as Ruby's ``iso8601`` cuts it;
    empty when SQS gave no such time (a hand-built record)."""
    if not isinstance(epoch_ms, str) or not epoch_ms.isascii() or not epoch_ms.isdigit():
        return ""
    return _header_second(int(epoch_ms) // 1000)


@functools.lru_cache(maxsize=1024)
def _header_second(epoch_seconds: int) -> str:
    """One second in sqsd's spelling (cached: a batch's messages share their seconds)."""
    return time.strftime(HEADER_TIME_FORMAT, time.gmtime(epoch_seconds))


def _scheduled_at(text: str) -> str:
    """``beanstalk.sqsd.scheduled_time`` re-spelled as ISO 8601 UTC, as sqsd does; as it came when unreadable."""
    moment = message.parse_scheduled_time(text)
    return moment.strftime(HEADER_TIME_FORMAT) if moment is not None else text


def unwrap_sns(body: str) -> str:
    """The ``Message`` of an SNS Notification envelope; any other body as it came (as sqsd's ``via_sns``).

    Examples
    --------
    >>> unwrap_sns('{"Type": "Notification", "TopicArn": "arn:aws:sns:us-east-1:1:t", "Message": "hi"}')
    'hi'
    >>> unwrap_sns('{"task": "x"}')
    '{"task": "x"}'
    """
    if not body.startswith("{"):
        return body
    try:
        envelope = json.loads(body)
    except ValueError:
        return body
    if (
        isinstance(envelope, dict)
        and envelope.get("Type") == SNS_NOTIFICATION_TYPE
        and isinstance(envelope.get("TopicArn"), str)
        and isinstance(envelope.get("Message"), str)
    ):
        return str(envelope["Message"])
    return body


def check_retention(task: Task, settings: Settings, now: float) -> None:
    """Raise RetentionExpiredError (it dead-letters) for a message first received more than ``retention_period``
    before ``now`` (epoch seconds).

    The first receive is the original message's: a retry re-sent through the delay table carries it
    (``worker_tier.first_received_at``, ``message.first_received_ms``). sqsd deletes such a message without posting
    it and without a word; Worker Tier dead-letters it with a reason naming its age and the rule, as nothing
    may vanish silently.
    """
    first = message.first_received_ms(task.record)
    if first is None:
        return  # a hand-built record: nothing to count from
    age_seconds = int(now - first / 1000)
    if age_seconds > settings.retention_period:
        raise RetentionExpiredError(
            f"message {task.message_id} was first received {age_seconds} s ago, more than retention_period "
            f"{settings.retention_period} s (EB RetentionPeriod): not delivered to the app. sqsd deletes such a "
            "message silently; Worker Tier dead-letters it with this reason"
        )


def check_response(request: SqsdRequest, response: AppResponse, now: float) -> None:
    """Apply sqsd's outcome rules to the app's answer: return on 200, else raise what the worker decides on.

    The status is judged first, whatever the app raised or logged meanwhile (``response.error``): 429 or
    503 with a readable ``Retry-After`` (delta-seconds, or an HTTP-date read against ``now``, epoch
    seconds) raises RetryLater; any other answer AppExceptionError when the app raised (its traceback),
    else AppStatusError (429 and 503 without a ``Retry-After`` included). Each carries the status and the
    first KiB of the body to the dead-letter reason (``app_status``, ``app_response``): RetryLater and
    AppExceptionError as their ``__cause__``, an AppStatusError.

    Examples
    --------
    >>> check_response(SqsdRequest("/", (), b""), AppResponse(200), 1_800_000_000.0)
    """
    status = response.status
    if status == 200:
        return
    answer = AppStatusError(request, status, response.body[:MAX_RESPONSE_BODY_BYTES])
    if status in RETRY_AFTER_STATUSES:
        delay = retry_after_seconds(response.headers.get("retry-after"), now)
        if delay is not None:
            raise RetryLater(
                delay, f"the app answered {status} to {request.method} {request.path} with Retry-After {delay} s"
            ) from answer
    if response.error:
        raise AppExceptionError(response.error) from answer
    raise answer


def retry_after_seconds(value: str | None, now: float) -> int | None:
    """A ``Retry-After`` value in whole seconds from ``now`` (epoch seconds; 0 for a past date); None when absent or
    unreadable (more than ``MAX_RETRY_AFTER_DIGITS`` digits included).

    Examples
    --------
    >>> from datetime import datetime
    >>> now = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc).timestamp()
    >>> retry_after_seconds("120", now), retry_after_seconds("Sun, 22 Nov 2026 12:01:00 GMT", now)
    (120, 60)
    """
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return int(text) if len(text) <= MAX_RETRY_AFTER_DIGITS else None
    from email.utils import parsedate_to_datetime  # kept off the worker's cold start: few answers carry a date

    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:  # RFC 9110 dates are GMT; "-0000" parses naive
        moment = moment.replace(tzinfo=timezone.utc)
    return max(0, round(moment.timestamp() - now))
