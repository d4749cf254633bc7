"""The producer: ``Client.send`` and ``Client.send_batch``."""

from __future__ import annotations

import functools
import json
import math
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Mapping

from worker_tier import delay, limits, message
from worker_tier.aws import LazyClient, error_code
from worker_tier.delay import DelayedMessage
from worker_tier.errors import MessageError, SendError

# Attempts per entry for SendMessageBatch entries that fail on SQS's side (throttling, internal errors).
MAX_ENTRY_ATTEMPTS = 5
ENTRY_RETRY_BASE_SECONDS = 0.05
ENTRY_RETRY_CAP_SECONDS = 2.0

# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html (MessageBody)
_INVALID_BODY_CHARACTER = "[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html
_ATTRIBUTE_NAME = re.compile(r"^[A-Za-z0-9_\-.]+$")
_RESERVED_ATTRIBUTE_PREFIXES = ("aws.", "amazon.")


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


@dataclass(frozen=True)
class SendResult:
    """What became of one message of ``send_batch``: its SQS message id, or why SQS refused it."""

    index: int
    message_id: str | None = None
    error: str | None = None
    code: str | None = None

    @property
    def ok(self) -> bool:
        """True when SQS accepted the message."""
        return self.message_id is not None


class Client:
    """Sends work to a Worker Tier queue.

    Examples
    --------
    >>> client = Client("https://sqs.us-east-1.amazonaws.com/123456789012/work")  # doctest: +SKIP
    >>> client.send("/resize", '{"key": "cat.jpg"}', delay=timedelta(seconds=30))  # doctest: +SKIP
    '5fea7756-0ea4-451a-a703-a558b933e274'
    """

    def __init__(
        self,
        queue_url: str | None = None,
        delay_table: str | None = None,
        *,
        sqs: Any = None,
        dynamodb: Any = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        delay_shards: int = delay.DEFAULT_SHARDS,
        long_delay_threshold: int = delay.LONG_DELAY_THRESHOLD_SECONDS,
    ) -> None:
        if not queue_url:
            raise MessageError("Client needs a queue_url (or use Client.from_env() with WORKER_TIER_QUEUE_URL set)")
        if not 1 <= delay_shards <= delay.MAX_SHARDS:
            raise MessageError(f"delay_shards must be 1..{delay.MAX_SHARDS}, got {delay_shards}")
        self.queue_url = queue_url
        self.delay_table = delay_table
        self.fifo = queue_url.endswith(".fifo")
        self._sqs = LazyClient("sqs", sqs)
        self._dynamodb = LazyClient("dynamodb", dynamodb)
        self._clock = clock or time.time
        self._sleep = sleep
        self._delay_shards = delay_shards
        # Delays above this go to the delay table; only the local environment lowers it (with the horizon).
        self._long_delay_threshold = long_delay_threshold

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **kwargs: Any) -> Client:
        """A Client for ``WORKER_TIER_QUEUE_URL`` and, when set, ``WORKER_TIER_DELAY_TABLE``."""
        shards = int(environ.get("WORKER_TIER_DELAY_SHARDS", delay.DEFAULT_SHARDS))
        kwargs.setdefault("delay_shards", shards)
        return cls(environ.get("WORKER_TIER_QUEUE_URL"), environ.get("WORKER_TIER_DELAY_TABLE"), **kwargs)

    def send(
        self,
        path: str,
        body: Any,
        *,
        delay: timedelta | float | None = None,
        at: datetime | None = None,
        attributes: Mapping[str, Any] | None = None,
        dedupe_key: str | None = None,
        group_id: str | None = None,
    ) -> str:
        """Send one message to the task at ``path``; return its SQS message id.

        ``body`` is sent exactly as given when it is a string; anything else is
        JSON-encoded. ``delay`` (seconds or a timedelta) or ``at`` (an aware
        datetime; one in the past means now) defers delivery: up to SQS's 15
        minutes through DelaySeconds, beyond that (up to a year) through the
        delay table. Raises MessageError for input SQS would refuse and SendError
        when SQS (or the delay table) refuses it anyway.
        """
        outgoing = OutgoingMessage(path, body, delay, at, attributes, dedupe_key, group_id)
        result = self.send_batch([outgoing])[0]
        if not result.ok:
            raise SendError(f"SQS refused the message for {path}: {result.error}", result.code or "")
        return result.message_id  # type: ignore[return-value]

    def send_batch(self, messages: Iterable[OutgoingMessage]) -> list[SendResult]:
        """Send many messages in SendMessageBatch calls; return one SendResult per message, in order.

        Every message is checked before any is sent. Entries SQS fails on its side
        are retried with backoff; entries that still fail, or that SQS refuses as
        the sender's fault, come back with ``ok`` False and the reason.
        """
        now = self._clock()
        entries = [self._entry(index, outgoing, now) for index, outgoing in enumerate(messages)]
        direct = [e for e in entries if isinstance(e, dict)]
        delayed = [e for e in entries if isinstance(e, tuple)]
        results: dict[int, SendResult] = {}
        for chunk in _chunks(direct):
            results.update(self._send_chunk(chunk))
        results.update(self._store_delayed(delayed))
        return [results[index] for index in range(len(entries))]

    def _entry(self, index: int, outgoing: OutgoingMessage, now: float) -> dict[str, Any] | tuple[int, DelayedMessage]:
        """A SendMessageBatch entry, or (index, DelayedMessage) for the delay table; MessageError names the message and the rule."""
        try:
            return self._build_entry(index, outgoing, now)
        except MessageError as error:
            raise MessageError(f"message {index} for {outgoing.path!r}: {error}") from None

    def _build_entry(self, index: int, outgoing: OutgoingMessage, now: float) -> dict[str, Any] | tuple[int, DelayedMessage]:
        if not isinstance(outgoing.path, str) or not outgoing.path.startswith("/"):
            raise MessageError(f"path must be a string starting with '/', got {outgoing.path!r}")
        body = _body_text(outgoing.body)
        attributes = {message.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": outgoing.path}}
        attributes.update(_sqs_attributes(outgoing.attributes or {}))
        size = message.message_bytes(body, attributes)
        if size > limits.SQS_MAX_MESSAGE_BYTES:
            raise MessageError(f"message is {size} bytes with its attributes; SQS allows at most {limits.SQS_MAX_MESSAGE_BYTES}")
        seconds = due_in_seconds(outgoing.delay, outgoing.at, now)
        if math.ceil(seconds) > self._long_delay_threshold:
            return index, self._delayed(outgoing, body, attributes, now, seconds)
        entry: dict[str, Any] = {"Id": str(index), "MessageBody": body, "MessageAttributes": attributes}
        entry.update(self._queue_options(outgoing, math.ceil(seconds)))
        entry["_size"] = size
        return entry

    def _delayed(
        self, outgoing: OutgoingMessage, body: str, attributes: dict[str, Any], now: float, seconds: float
    ) -> DelayedMessage:
        """A message for the delay table, checked against what the table and the dispatch can carry."""
        wait = math.ceil(seconds)
        if self.fifo:
            raise MessageError(
                f"a delay of {wait} s needs the delay table, which does not serve FIFO queues yet "
                "(SQS has no per-message delay on FIFO); send it without a delay or to a standard queue"
            )
        if not self.delay_table:
            raise MessageError(
                f"a delay of {wait} s is over SQS's {limits.SQS_MAX_DELAY_SECONDS} s maximum and needs the delay table; "
                "pass delay_table (or set WORKER_TIER_DELAY_TABLE)"
            )
        if wait > delay.MAX_DELAY_SECONDS:
            raise MessageError(f"a delay of {wait} s is beyond the {delay.MAX_DELAY_SECONDS} s (366 days) maximum")
        if outgoing.group_id is not None:
            raise MessageError("group_id applies to FIFO queues (a queue URL ending in .fifo)")
        if len(attributes) > limits.SQS_MAX_MESSAGE_ATTRIBUTES - 1:
            raise MessageError(
                f"a delayed message may carry at most {limits.SQS_MAX_MESSAGE_ATTRIBUTES - 2} attributes of its own "
                f"(the path and {message.DUE_AT_ATTRIBUTE} take two of SQS's {limits.SQS_MAX_MESSAGE_ATTRIBUTES}), got {len(attributes) - 1}"
            )
        message_id = delay.new_message_id(outgoing.dedupe_key)
        delayed = DelayedMessage(
            message_id, math.ceil((now + seconds) * 1000), body, attributes, delay.shard_of(message_id, self._delay_shards), outgoing.dedupe_key
        )
        item_bytes = len(json.dumps(delayed.to_item()).encode("utf-8"))
        if item_bytes > limits.DYNAMODB_MAX_ITEM_BYTES:
            raise MessageError(
                f"a delayed message is stored as a DynamoDB item of at most {limits.DYNAMODB_MAX_ITEM_BYTES} bytes; "
                f"this one needs {item_bytes}"
            )
        return delayed

    def _store_delayed(self, delayed: list[tuple[int, DelayedMessage]]) -> dict[int, SendResult]:
        """Write delayed messages, 25 per BatchWriteItem; a failed write is reported, not dropped."""
        results: dict[int, SendResult] = {}
        if not delayed:
            return results
        store = delay.DelayStore(self.delay_table or "", self._dynamodb.get(), self._delay_shards, self._sleep)
        for start in range(0, len(delayed), limits.DYNAMODB_MAX_BATCH_WRITE_ITEMS):
            chunk = delayed[start : start + limits.DYNAMODB_MAX_BATCH_WRITE_ITEMS]
            try:
                store.put_many([m for _, m in chunk])
            except delay.DelayStoreError as error:  # some items written, some not: report each truly
                results.update(
                    {
                        i: SendResult(i, error=str(error), code="UnprocessedItems")
                        if m.message_id in error.unstored_ids
                        else SendResult(i, message_id=m.message_id)
                        for i, m in chunk
                    }
                )
            except Exception as error:
                code = error_code(error)
                results.update({i: SendResult(i, error=str(error), code=code) for i, _ in chunk})
            else:
                results.update({i: SendResult(i, message_id=m.message_id) for i, m in chunk})
        return results

    def _queue_options(self, outgoing: OutgoingMessage, delay: int) -> dict[str, Any]:
        """DelaySeconds, or FIFO's group and deduplication ids."""
        if not self.fifo:
            if outgoing.group_id is not None or outgoing.dedupe_key is not None:
                raise MessageError("group_id and dedupe_key apply to FIFO queues (a queue URL ending in .fifo)")
            return {"DelaySeconds": delay} if delay else {}
        if delay:
            raise MessageError(
                f"a FIFO queue has no per-message delay (SQS rejects DelaySeconds on FIFO messages), got a delay of {delay} s"
            )
        if not outgoing.group_id:
            raise MessageError("group_id is required for a FIFO queue")
        options = {"MessageGroupId": outgoing.group_id}
        if outgoing.dedupe_key is not None:
            options["MessageDeduplicationId"] = outgoing.dedupe_key
        return options

    def _send_chunk(self, chunk: list[dict[str, Any]]) -> dict[int, SendResult]:
        """One batch, retrying entries that failed on SQS's side."""
        results: dict[int, SendResult] = {}
        pending = [{k: v for k, v in entry.items() if k != "_size"} for entry in chunk]
        for attempt in range(1, MAX_ENTRY_ATTEMPTS + 1):
            try:
                response = self._sqs.get().send_message_batch(QueueUrl=self.queue_url, Entries=pending)
            except Exception as error:  # botocore already retried call-level throttling
                code = error_code(error)
                return {**results, **{int(e["Id"]): SendResult(int(e["Id"]), error=str(error), code=code) for e in pending}}
            for ok in response.get("Successful") or []:
                results[int(ok["Id"])] = SendResult(int(ok["Id"]), message_id=ok["MessageId"])
            retry_ids = set()
            for failed in response.get("Failed") or []:
                index = int(failed["Id"])
                results[index] = SendResult(index, error=failed.get("Message") or failed["Code"], code=failed["Code"])
                if not failed.get("SenderFault"):
                    retry_ids.add(failed["Id"])
            pending = [e for e in pending if e["Id"] in retry_ids]
            if not pending:
                break
            if attempt < MAX_ENTRY_ATTEMPTS:
                self._sleep(min(ENTRY_RETRY_CAP_SECONDS, ENTRY_RETRY_BASE_SECONDS * 2**attempt))
        return results


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
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        raise MessageError(f"delay must be a non-negative number of seconds or a timedelta, got {delay!r}")
    return float(seconds)


def _body_text(body: Any) -> str:
    """The body as SQS will carry it; MessageError for an empty body or a character SQS refuses."""
    if not isinstance(body, str):
        try:
            body = json.dumps(body, separators=(",", ":"))
        except (TypeError, ValueError) as error:
            raise MessageError(f"body must be a string or JSON-serializable, got {type(body).__name__}: {error}") from None
    if not body:
        raise MessageError("body must not be empty (SQS requires at least one character)")
    bad = _invalid_body_character().search(body)
    if bad:
        raise MessageError(f"body has character {bad.group()!r} at offset {bad.start()}, which SQS does not allow")
    return body


@functools.lru_cache(maxsize=1)
def _invalid_body_character() -> re.Pattern[str]:
    """The compiled body-character rule; compiled on first send, as it costs ~10 ms at import."""
    return re.compile(_INVALID_BODY_CHARACTER)


def _sqs_attributes(attributes: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """User attributes in the SQS API's shape: str → String, int/float → Number, bytes → Binary."""
    if len(attributes) + 1 > limits.SQS_MAX_MESSAGE_ATTRIBUTES:
        raise MessageError(
            f"{len(attributes)} attributes given; SQS allows {limits.SQS_MAX_MESSAGE_ATTRIBUTES} per message "
            f"and Worker Tier uses one for the path, so at most {limits.SQS_MAX_MESSAGE_ATTRIBUTES - 1}"
        )
    return {_attribute_name(name): _attribute_value(name, value) for name, value in attributes.items()}


def _attribute_name(name: Any) -> str:
    """Check one attribute name against SQS's naming rules."""
    if name == message.PATH_ATTRIBUTE:
        raise MessageError(f"attribute {name!r} is set from the path argument; do not pass it")
    if (
        not isinstance(name, str)
        or not _ATTRIBUTE_NAME.match(name)
        or len(name) > limits.SQS_MAX_ATTRIBUTE_NAME_CHARS
        or name.lower().startswith(_RESERVED_ATTRIBUTE_PREFIXES)
        or name.startswith(".")
        or name.endswith(".")
        or ".." in name
    ):
        raise MessageError(
            f"attribute name {name!r} is not allowed: SQS takes up to {limits.SQS_MAX_ATTRIBUTE_NAME_CHARS} of "
            "A-Z a-z 0-9 _ - ., no leading, trailing or double period, and no 'AWS.' or 'Amazon.' prefix"
        )
    return name


def _attribute_value(name: str, value: Any) -> dict[str, Any]:
    """One attribute value in the SQS API's shape."""
    if isinstance(value, bool):
        raise MessageError(f"attribute {name!r} is a bool; send 'true'/'false' as a string or 1/0 as a number")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise MessageError(f"attribute {name!r} must be a finite number, got {value!r}")
        return {"DataType": "Number", "StringValue": repr(value) if isinstance(value, float) else str(value)}
    if isinstance(value, (bytes, bytearray)):
        if not value:
            raise MessageError(f"attribute {name!r} must not be empty")
        return {"DataType": "Binary", "BinaryValue": bytes(value)}
    if isinstance(value, str):
        if not value:
            raise MessageError(f"attribute {name!r} must not be an empty string (SQS refuses empty values)")
        return {"DataType": "String", "StringValue": value}
    raise MessageError(f"attribute {name!r} must be str, int, float or bytes, got {type(value).__name__}")


def _chunks(entries: list[dict[str, Any]]) -> Iterable[list[dict[str, Any]]]:
    """Split entries into SendMessageBatch calls: at most 10 entries and 1 MiB each."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for entry in entries:
        full = len(chunk) == limits.SQS_MAX_BATCH_ENTRIES or size + entry["_size"] > limits.SQS_MAX_MESSAGE_BYTES
        if chunk and full:
            yield chunk
            chunk, size = [], 0
        chunk.append(entry)
        size += entry["_size"]
    if chunk:
        yield chunk
