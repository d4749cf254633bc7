"""Messages on the wire: Elastic Beanstalk sqsd's attributes and Worker Tier's dead-letter reason.

The attribute names live in ``worker_tier.core.contract``; the logic that reads and writes them, here.

Attributes travel in two shapes. The Lambda SQS event spells them
``{"stringValue": ..., "dataType": ...}``; the SQS API (boto3) spells them
``{"StringValue": ..., "DataType": ...}``. The functions here read a Lambda record for its task
(path, String attributes, times); a message sent or sent again is a ``worker_tier.core.envelope.Envelope``,
which converts between the two shapes, builds the record Lambda would (``lambda_record``) and counts
SQS's quotas.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping

from worker_tier.core.contract import (
    DUE_AT_ATTRIBUTE,
    FAILURE_ATTRIBUTE,
    FIRST_RECEIVED_ATTRIBUTE,
    JOB_ATTRIBUTE,
    LEGACY_PAYLOAD_SIZE_ATTRIBUTE,
    PATH_ATTRIBUTE,
    PAYLOAD_SIZE_ATTRIBUTE,
    PRIORITY_ATTRIBUTE,
    SCHEDULED_TIME_FORMAT,
    SQSD_ATTRIBUTE_PREFIX,
    WORKER_TIER_ATTRIBUTE_PREFIX,
)
from worker_tier.core.envelope import sqs_attributes
from worker_tier.core.errors import AppStatusError, MalformedEventError

MAX_ERROR_MESSAGE_BYTES = 1024
# The digits of an epoch-milliseconds time (13 until the year 2286; more is no time SQS gives).
MAX_EPOCH_MS_DIGITS = 16
# Longest error text a log line or an outcome carries (an error's message can be megabytes).
MAX_LOGGED_ERROR_CHARS = 4096


def event_attribute_value(attribute: Mapping[str, Any]) -> str | None:
    """The String or Number value of a Lambda-event attribute; None for Binary, as sqsd drops it."""
    if str(attribute.get("dataType", "")).split(".")[0] in ("String", "Number"):
        return attribute.get("stringValue")
    return None


def record_path(record: Mapping[str, Any], default_path: str) -> str:
    """A Lambda SQS record's route: its ``beanstalk.sqsd.path`` attribute, else the default (sqsd's HttpPath)."""
    attributes = record.get("messageAttributes")
    routing = attributes.get(PATH_ATTRIBUTE) if isinstance(attributes, dict) else None  # events are JSON: dicts
    path = routing.get("stringValue") if isinstance(routing, dict) else None
    return path if path and isinstance(path, str) else default_path


def split_records(event: Any) -> tuple[list[Any], list[tuple[int, Any]]]:
    """A Lambda SQS event's records the worker can name (a non-empty messageId), and (index, record) for the others.

    Raises MalformedEventError for anything that is not an SQS event.

    Examples
    --------
    >>> split_records({"Records": [{"messageId": "m1"}, {"body": "x"}]})
    ([{'messageId': 'm1'}], [(1, {'body': 'x'})])
    """
    records = event.get("Records") if isinstance(event, Mapping) else None
    if not isinstance(records, list):
        shown = repr(event) if len(repr(event)) <= 80 else repr(event)[:77] + "..."
        raise MalformedEventError(
            f"the worker takes a Lambda SQS event: a mapping with a 'Records' list; got {type(event).__name__} {shown}"
        )
    named = [r for r in records if type(r) is dict and type(r.get("messageId")) is str and r["messageId"]]
    if len(named) == len(records):
        return named, []
    kept = {id(r) for r in named}
    return named, [(i, r) for i, r in enumerate(records) if id(r) not in kept]


def sent_timestamp_ms(record: Mapping[str, Any]) -> int | None:
    """A record's SentTimestamp, or None when absent or not a number."""
    system = record.get("attributes")
    value = system.get("SentTimestamp") if isinstance(system, dict) else None
    if not value:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def task_attributes(event_attributes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """String and Number attributes of a Lambda SQS record, by name."""
    if not isinstance(event_attributes, Mapping):
        return {}
    values = {name: event_attribute_value(attr) for name, attr in event_attributes.items() if isinstance(attr, Mapping)}
    return {name: value for name, value in values.items() if value is not None}


def copy_attributes(record: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A record's attributes for ``Client.send`` of a copy: (user attributes, internal attributes).

    User attributes come back as the Python values the Client takes: str, bytes,
    and a Number as a Decimal of its exact text, so the copy carries the same
    digits; custom type labels (``Number.int``) are not kept. The path is
    left out (the Client sets it from the path) and so are ``worker_tier.*``
    attributes (the caller sets its own), but for the priority and the job id, kept as internal attributes; ``beanstalk.sqsd.*`` ones, which the
    Client refuses from users, come back as internal attributes, as strings, and so does an offloaded message's
    ``ExtendedPayloadSize`` (or the legacy ``SQSLargePayloadSize``): the copy carries the same pointer as its body.
    """
    converted, _ = sqs_attributes(record.get("messageAttributes") or {})
    user: dict[str, Any] = {}
    internal: dict[str, Any] = {}
    for name, value in converted.items():
        if name == JOB_ATTRIBUTE:  # a tracked message's copy updates the same job (worker_tier.core.jobs)
            if isinstance(value.get("StringValue"), str):
                internal[name] = value["StringValue"]
            continue
        if name == PRIORITY_ATTRIBUTE:  # the copy goes back to its level's queue (worker_tier.core.priority)
            if isinstance(value.get("StringValue"), str):  # a Binary one is no level (priority.level_of reads it as normal)
                internal[name] = value["StringValue"]
            continue
        if name == PATH_ATTRIBUTE or name.startswith(WORKER_TIER_ATTRIBUTE_PREFIX):
            continue
        if name.startswith(SQSD_ATTRIBUTE_PREFIX) or name in _PAYLOAD_SIZE_ATTRIBUTES:
            internal[name] = value.get("StringValue")
        else:
            user[name] = _python_value(value)
    return user, internal


_PAYLOAD_SIZE_ATTRIBUTES = (PAYLOAD_SIZE_ATTRIBUTE, LEGACY_PAYLOAD_SIZE_ATTRIBUTE)


def approximate_receive_count(record: Mapping[str, Any]) -> int:
    """SQS's ApproximateReceiveCount of a record, as SQS counts it (1 when the record has none readable).

    Examples
    --------
    >>> approximate_receive_count({"attributes": {"ApproximateReceiveCount": "4"}}), approximate_receive_count({})
    (4, 1)
    """
    system = record.get("attributes")
    value = system.get("ApproximateReceiveCount") if isinstance(system, dict) else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 9:
        return max(1, int(value))
    return 1


def first_received_ms(record: Mapping[str, Any]) -> int | None:
    """When a record's message was first received (epoch ms): the original's, carried on a retry re-sent through
    the delay table (``worker_tier.first_received_at``), else SQS's ``ApproximateFirstReceiveTimestamp``; None
    when the record has neither (a hand-built one). A message carrying ``worker_tier.failure`` came back from the
    DLQ by a move that keeps attributes (StartMessageMoveTask): its carried first receive is ignored."""
    attributes = record.get("messageAttributes")
    carried = None  # back from the DLQ (worker_tier.failure): a fresh start
    if isinstance(attributes, dict) and FAILURE_ATTRIBUTE not in attributes:
        carried = attributes.get(FIRST_RECEIVED_ATTRIBUTE)
    first = carried.get("stringValue") if isinstance(carried, dict) else None
    if not first:
        system = record.get("attributes")
        first = system.get("ApproximateFirstReceiveTimestamp") if isinstance(system, dict) else None
    if not isinstance(first, str) or not first.isascii() or not first.isdigit() or len(first) > MAX_EPOCH_MS_DIGITS:
        return None
    return int(first)


def _python_value(value: Mapping[str, Any]) -> Any:
    """An SQS-API attribute value as the Python value the Client turns back into it."""
    base = value["DataType"].partition(".")[0]
    if base == "Binary":
        return value["BinaryValue"]
    text = value["StringValue"]
    if base != "Number":
        return text
    from decimal import Decimal  # only a copy needs it: kept off the worker's cold start

    return Decimal(text)  # Decimal keeps every digit; float() would round past 17


def format_scheduled_time(moment: datetime) -> str:
    """EB's ``beanstalk.sqsd.scheduled_time`` text for an aware datetime."""
    return moment.astimezone(timezone.utc).strftime(SCHEDULED_TIME_FORMAT)


def parse_scheduled_time(text: str | None) -> datetime | None:
    """Parse EB's scheduled-time text; None when absent or not in EB's format."""
    if not text:
        return None
    try:
        return datetime.strptime(text, SCHEDULED_TIME_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def format_due_at(due_ms: int) -> str:
    """``worker_tier.due_at`` text for a due time in epoch milliseconds (millisecond precision, UTC).

    Examples
    --------
    >>> format_due_at(1_800_000_000_250)
    '2027-01-15T08:00:00.250Z'
    """
    moment = datetime.fromtimestamp(due_ms // 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{due_ms % 1000:03d}Z"


def parse_due_at(text: Any, message_id: Any = None) -> datetime | None:
    """A ``worker_tier.due_at`` value as an aware UTC datetime; None (logged) when absent or unreadable.

    Examples
    --------
    >>> parse_due_at("2026-11-22T12:00:00.000Z").isoformat()
    '2026-11-22T12:00:00+00:00'
    """
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (AttributeError, TypeError, ValueError):
        from worker_tier.core.observability import logger

        logger.warning(f"unreadable {DUE_AT_ATTRIBUTE}; treated as absent", extra={"message_id": message_id, "value": repr(text)[:80]})
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def error_text(error: BaseException, max_chars: int | None = None) -> str:
    """``str(error)``, or a note saying it could not be had (an exception's ``__str__`` can raise or return a non-str).

    ``max_chars`` cuts long text (marked ``...``), as logs and outcomes want.
    """
    try:
        text = str(error)
    except Exception as failure:
        text = f"<str() of {type(error).__name__} raised {type(failure).__name__}: {_plain_str(failure)}>"
    return text if max_chars is None or len(text) <= max_chars else text[: max_chars - 3] + "..."


def safe_repr(error: object, max_chars: int = MAX_LOGGED_ERROR_CHARS) -> str:
    """``repr(error)`` for logs, cut to ``max_chars``; a note instead when ``__repr__`` raises or returns a non-str.

    Examples
    --------
    >>> safe_repr(ValueError("x" * 10), max_chars=16)
    "ValueError('x..."
    """
    try:
        text = repr(error)
    except Exception as failure:
        text = f"<repr() of {type(error).__name__} raised {type(failure).__name__}: {_plain_str(failure)}>"
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def _plain_str(error: BaseException) -> str:
    """``str(error)``, or '?' when even that raises."""
    try:
        return str(error)[:MAX_LOGGED_ERROR_CHARS]
    except Exception:
        return "?"


def failure_reason(error: BaseException, *, attempts: int, path: str, failed_at: datetime) -> dict[str, Any]:
    """The ``worker_tier.failure`` fields for an error (docs/design.md, "Message contract").

    An app's answer other than 200 (an AppStatusError, or the ``__cause__`` of the RetryLater or
    AppExceptionError it became) adds ``app_status`` and ``app_response``, the first KiB of its body
    (UTF-8, undecodable bytes replaced).
    """
    reason = {
        "error_type": type(error).__name__,
        "error_message": truncate_utf8(error_text(error), MAX_ERROR_MESSAGE_BYTES),
        "attempts": attempts,
        "failed_at": failed_at.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "path": path,
    }
    answer = error if isinstance(error, AppStatusError) else error.__cause__
    if isinstance(answer, AppStatusError):
        reason["app_status"] = answer.status
        reason["app_response"] = answer.response_body[:MAX_ERROR_MESSAGE_BYTES].decode("utf-8", errors="replace")
    return reason


def truncate_utf8(text: str, max_bytes: int) -> str:
    """Cut text to at most max_bytes of UTF-8 without splitting a character, marking the cut with '...'.

    Examples
    --------
    >>> truncate_utf8("abcdef", 5), truncate_utf8("abc", 5), truncate_utf8("abcdef", 2)
    ('ab...', 'abc', '')
    """
    # A lone surrogate (text decoded with surrogateescape) cannot be UTF-8: it is spelled \udce9 instead.
    encoded = text.encode("utf-8", errors="backslashreplace")
    if len(encoded) <= max_bytes:
        return encoded.decode("utf-8")
    if max_bytes < 3:
        return ""
    return encoded[: max_bytes - 3].decode("utf-8", errors="ignore") + "..."
