"""An outgoing message, checked: what ``Client.send`` and ``send_batch`` take, and every rule it must meet.

Each check raises ``MessageError`` naming the message, the value and the rule, before anything is sent
or stored: SQS's own rules through ``worker_tier.core.sqs_rules``, and Worker Tier's (reserved attribute
names, one attribute kept for the path, delays up to 366 days).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Iterable, Mapping

from worker_tier.core import contract, limits, priority, sqs_rules
from worker_tier.delays import delay
from worker_tier.core.limits import attribute_room
from worker_tier.core.errors import MessageError

# Attribute names Worker Tier and sqsd set themselves (message.py's wire contract); users may not.
RESERVED_ATTRIBUTE_PREFIXES = ("worker_tier.", "beanstalk.sqsd.")
# The Extended Client's size attribute marks a body as an S3 pointer (worker_tier.core.payloads): set by the Client when
# it offloads a body, or passed on by Worker Tier itself (_internal_attributes) with a pointer body; never by users.
SIZE_ATTRIBUTES = (contract.PAYLOAD_SIZE_ATTRIBUTE, contract.LEGACY_PAYLOAD_SIZE_ATTRIBUTE)
MAX_DELAY_SECONDS_ = delay.MAX_DELAY_SECONDS  # due_in_seconds's parameter is named delay
# send_batch's MessageError for items that are not OutgoingMessage names at most this many of them.
MAX_LISTED_PROBLEMS = 10


@dataclass(frozen=True)
class OutgoingMessage:
    """One message for ``Client.send_batch``; the fields mean what ``Client.send``'s arguments mean."""

    path: str
    body: Any
    delay: timedelta | float | None = None
    at: datetime | None = None
    attributes: Mapping[str, Any] | None = None
    dedupe_key: str | None = None
    group_id: str | None = None
    cancellable: bool = False
    priority: str = contract.DEFAULT_PRIORITY
    track: bool | None = None  # None: the Client's default (docs/jobs.md)



def check_settings(delay_shards: Any, maximum_message_size: Any) -> None:
    """MessageError for a delay_shards or maximum_message_size of the wrong type or out of range."""
    if isinstance(delay_shards, bool) or not isinstance(delay_shards, int) or not 1 <= delay_shards <= delay.MAX_SHARDS:
        raise MessageError(f"delay_shards must be a whole number 1..{delay.MAX_SHARDS}, got {shown(delay_shards)}")
    low, high = limits.SQS_MIN_MAXIMUM_MESSAGE_SIZE_BYTES, limits.SQS_MAX_MESSAGE_BYTES
    if maximum_message_size is not None and (
        isinstance(maximum_message_size, bool) or not isinstance(maximum_message_size, int) or not low <= maximum_message_size <= high
    ):
        raise MessageError(f"maximum_message_size must be {low}..{high} bytes (SQS MaximumMessageSize), got {shown(maximum_message_size)}")


def check_job_retention(seconds: Any) -> None:
    """MessageError unless ``seconds`` is a whole number within the job_retention setting's range."""
    from worker_tier.core.settings import MAX_JOB_RETENTION_SECONDS, MIN_JOB_RETENTION_SECONDS

    if isinstance(seconds, bool) or not isinstance(seconds, int) or not MIN_JOB_RETENTION_SECONDS <= seconds <= MAX_JOB_RETENTION_SECONDS:
        raise MessageError(f"job_retention must be a whole number of seconds {MIN_JOB_RETENTION_SECONDS}.."
                           f"{MAX_JOB_RETENTION_SECONDS} (an hour to 366 days), got {shown(seconds)}; the default is a week")


def whole_number(name: str, text: str, maximum: int) -> int:
    """An environment variable's whole number 1..maximum; MessageError naming the variable and the value otherwise."""
    try:
        return int(text)
    except ValueError:
        raise MessageError(f"{name} must be a whole number 1..{maximum}, got {text!r}") from None


def outgoing_messages(messages: Any) -> list[OutgoingMessage]:
    """send_batch's argument as a list of OutgoingMessage; MessageError naming each item that is not one."""
    if isinstance(messages, (str, bytes, Mapping, OutgoingMessage)) or not isinstance(messages, Iterable):
        raise MessageError(f"send_batch takes an iterable of OutgoingMessage, got {type(messages).__name__}")
    listed: list[OutgoingMessage] = list(messages)
    wrong = [f"message {i} is a {type(m).__name__}" for i, m in enumerate(listed) if not isinstance(m, OutgoingMessage)]
    if wrong:
        raise MessageError(f"send_batch takes OutgoingMessage objects: {', '.join(wrong[:MAX_LISTED_PROBLEMS])}")
    return listed


def shown(value: Any, limit: int = 60) -> str:
    """A value's repr for an error message, shortened; never raises (an int past 4,300 digits has no repr)."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} that cannot be printed>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def due_in_seconds(delay: timedelta | float | None, at: datetime | None, now: float) -> float:
    """Seconds from ``now`` until a message is due, from ``delay`` or ``at`` (0 when neither, or ``at`` is past).

    Examples
    --------
    >>> due_in_seconds(timedelta(seconds=1.5), None, 0.0)
    1.5
    """
    if delay is not None and at is not None:
        raise MessageError("give delay or at, not both")
    if at is not None:
        if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
            raise MessageError(f"at must be a timezone-aware datetime (for example datetime.now(timezone.utc)), got {at!r}")
        return max(0.0, at.timestamp() - now)
    if delay is None:
        return 0.0
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
    rule = f"delay must be a non-negative number of seconds or a timedelta, got {shown(delay)}"
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise MessageError(rule)
    try:
        seconds = float(seconds)
    except OverflowError:  # an int past float's range, such as 10**400
        raise MessageError(f"{rule}; the most is {MAX_DELAY_SECONDS_} s (366 days)") from None
    if not math.isfinite(seconds):
        raise MessageError(rule)
    return seconds


def body_text(body: Any, *, characters: bool = True) -> str:
    """The body as SQS will carry it; MessageError for a body SQS refuses.

    ``characters=False`` leaves SQS's character rule to ``check_characters``, once it is known whether SQS carries
    the body (S3 carries an offloaded one, whatever its characters); the body must still be non-empty UTF-8 text.
    """
    if not isinstance(body, str):
        try:
            body = json.dumps(body, separators=(",", ":"), allow_nan=False)  # NaN and Infinity are not JSON
        except (TypeError, ValueError, RecursionError) as error:  # RecursionError: nested deeper than json can encode
            raise MessageError(f"body must be a string or JSON-serializable, got {type(body).__name__}: {error}") from None
    text: str = body  # given as a str, or json.dumps's
    if not characters and text:
        try:
            text.encode("utf-8")
            return text
        except UnicodeEncodeError:  # a lone surrogate: the rule's own message names it and its offset
            pass
    problem = sqs_rules.body_problem(text)
    if problem:
        raise MessageError(problem)
    return text


def check_characters(envelope: Any) -> None:
    """SQS's character rule on a body SQS will carry (``body_text(characters=False)`` left it); an offloaded body's
    pointer is not checked: its body travels through S3. MessageError naming the character and its offset."""
    from worker_tier.core import payloads

    if not payloads.is_offloaded(envelope.attributes):
        problem = sqs_rules.body_problem(envelope.body)
        if problem:
            raise MessageError(problem)


def check_ids(outgoing: OutgoingMessage) -> None:
    """dedupe_key and group_id: SQS's MessageDeduplicationId / MessageGroupId rule, on every queue type."""
    problem = (outgoing.dedupe_key is not None and sqs_rules.group_id_problem(outgoing.dedupe_key, "dedupe_key")) or (
        outgoing.group_id is not None and sqs_rules.group_id_problem(outgoing.group_id, "group_id")
    )
    if problem:
        raise MessageError(problem)


def message_attributes(outgoing: OutgoingMessage, internal: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The path, the user's attributes and any internal ones, in the SQS API's shape, checked as SQS checks them."""
    user = outgoing.attributes or {}
    if not isinstance(user, Mapping):
        raise MessageError(f"attributes must be a mapping of name to value, got {type(user).__name__}")
    level = priority.check_level(outgoing.priority)
    tracked = contract.JOB_ATTRIBUTE in internal
    reserved = 1 + len(priority.attribute(level)) + tracked
    if attribute_room(len(user), reserved=reserved) < 0:
        also = f" and one for the priority {level!r} ({contract.PRIORITY_ATTRIBUTE})" if priority.attribute(level) else ""
        also += f" and one for the job id ({contract.JOB_ATTRIBUTE}: track=True)" if tracked else ""
        raise MessageError(
            f"{len(user)} attributes given; SQS allows {limits.SQS_MAX_MESSAGE_ATTRIBUTES} per message "
            f"and Worker Tier uses one for the path{also}, so at most {attribute_room(0, reserved=reserved)}"
        )
    attributes = {contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": outgoing.path}, **priority.attribute(level)}
    attributes.update({user_attribute_name(name): attribute_value(name, value) for name, value in user.items()})
    attributes.update({name: {"DataType": "Number" if name in SIZE_ATTRIBUTES else "String", "StringValue": value}
                       for name, value in internal.items()})
    problem = sqs_rules.attributes_problem(attributes)
    if problem:
        raise MessageError(problem)
    return attributes


def user_attribute_name(name: Any) -> Any:
    """Refuse the names Worker Tier and sqsd set themselves; SQS's own rules are checked with the values."""
    if name == contract.PATH_ATTRIBUTE:
        raise MessageError(f"attribute {name!r} is set from the path argument; do not pass it")
    if isinstance(name, str) and name.startswith(RESERVED_ATTRIBUTE_PREFIXES):
        raise MessageError(
            f"attribute name {name!r} is reserved: names starting with "
            f"{' or '.join(repr(p) for p in RESERVED_ATTRIBUTE_PREFIXES)} are set by Worker Tier and sqsd; rename it"
        )
    if name in SIZE_ATTRIBUTES:
        raise MessageError(
            f"attribute name {name!r} is reserved: it marks the body as an S3 pointer (AWS's SQS Extended Client format), "
            "and the Client sets it when it offloads a large body (payload_bucket); rename it"
        )
    return name


def attribute_value(name: Any, value: Any) -> dict[str, Any]:
    """One attribute value in the SQS API's shape: str → String, int/float/Decimal → Number, bytes → Binary."""
    if isinstance(value, bool):
        raise MessageError(f"attribute {name!r} is a bool; send 'true'/'false' as a string or 1/0 as a number")
    if isinstance(value, (int, float, Decimal)):
        if (isinstance(value, float) and not math.isfinite(value)) or (isinstance(value, Decimal) and not value.is_finite()):
            raise MessageError(f"attribute {name!r} must be a finite number, got {value!r}")
        return {"DataType": "Number", "StringValue": sqs_rules.format_number(value)}
    if isinstance(value, (bytes, bytearray)):
        return {"DataType": "Binary", "BinaryValue": bytes(value)}
    if isinstance(value, str):
        return {"DataType": "String", "StringValue": value}
    raise MessageError(f"attribute {name!r} must be str, int, float, Decimal or bytes, got {type(value).__name__}")


def internal_by_index(internal: Mapping[int, Mapping[str, str]], count: int) -> dict[int, Mapping[str, str]]:
    """Check ``_internal_attributes``: indexes of this batch, reserved names (``worker_tier.*``, and
    ``beanstalk.sqsd.*`` for a periodic task's copy, and the size attribute of a pointer body, sent as a Number),
    string values; never the path or ``due_at``."""
    for index, attributes in internal.items():
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise MessageError(f"_internal_attributes: index {index!r} is not a message of this batch (0..{count - 1})")
        for name, value in attributes.items():
            if (
                not isinstance(name, str)
                or not (name.startswith(RESERVED_ATTRIBUTE_PREFIXES) or name in SIZE_ATTRIBUTES)
                or name in (contract.DUE_AT_ATTRIBUTE, contract.PATH_ATTRIBUTE)
            ):
                raise MessageError(
                    f"_internal_attributes: name {name!r} must start with "
                    f"{' or '.join(repr(p) for p in RESERVED_ATTRIBUTE_PREFIXES)} (or be {' or '.join(map(repr, SIZE_ATTRIBUTES))}) "
                    f"and not be {contract.DUE_AT_ATTRIBUTE!r} (set by the delay dispatcher) or {contract.PATH_ATTRIBUTE!r} "
                    "(set from the path)"
                )
            if not isinstance(value, str):
                raise MessageError(f"_internal_attributes: {name!r} must be a string, got {type(value).__name__}")
    return dict(internal)
