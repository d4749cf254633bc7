"""The producer: ``Client.send`` and ``Client.send_batch``.

Every message is checked against SQS's rules (``worker_tier.sqs_rules``) before
anything is sent or stored, so a message the delay table keeps for later is one
SQS will take at dispatch. A ``dedupe_key`` means one thing on every queue type
and at every delay: at most one accepted message per key (see ``Client.send``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Mapping

from worker_tier import delay, limits, message, sqs_rules
from worker_tier.aws import LazyClient, error_code, is_condition_failure
from worker_tier.delay import DelayedMessage
from worker_tier.errors import MessageError, SendError

_log = logging.getLogger(__name__)

# Attempts per entry for SendMessageBatch entries that fail on SQS's side (throttling, internal errors).
MAX_ENTRY_ATTEMPTS = 5
ENTRY_RETRY_BASE_SECONDS = 0.05
ENTRY_RETRY_CAP_SECONDS = 2.0

# The smallest MaximumMessageSize a queue can have (belongs in limits.py):
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html

# Attribute names Worker Tier and sqsd set themselves (message.py's wire contract); users may not.
RESERVED_ATTRIBUTE_PREFIXES = ("worker_tier.", "beanstalk.sqsd.")
# The scheduler adds worker_tier.due_at at dispatch: "YYYY-MM-DDTHH:MM:SS.mmmZ", 24 characters.
DUE_AT_ATTRIBUTE_BYTES = len(message.DUE_AT_ATTRIBUTE) + len("String") + len("2026-01-01T00:00:00.000Z")
# A dedupe marker left unsent this long is taken to belong to a sender that died before sending.
DEDUPE_MARKER_LEASE_SECONDS = 60
# How long a dedupe_key on a standard queue holds: until this long after the message was due.
DEDUPE_RETENTION_SECONDS = delay.DISPATCHED_RETENTION_SECONDS
MAX_MARKER_CLAIM_ATTEMPTS = 3


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
    """What became of one message of ``send_batch``: its message id, or why it was refused."""

    index: int
    message_id: str | None = None
    error: str | None = None
    code: str | None = None

    @property
    def ok(self) -> bool:
        """True when SQS (or the delay table) accepted the message."""
        return self.message_id is not None


class Client:
    """Sends work to a Worker Tier queue.

    ``maximum_message_size`` is the queue's MaximumMessageSize in bytes. When it
    is not given, the Client reads it with one GetQueueAttributes call, the first
    time a message goes to the delay table (a message sent straight to SQS is
    checked by SQS itself); if that call fails, it logs a warning and assumes
    SQS's 1 MiB.

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
        maximum_message_size: int | None = None,
    ) -> None:
        if not queue_url:
            raise MessageError("Client needs a queue_url (or use Client.from_env() with WORKER_TIER_QUEUE_URL set)")
        if not 1 <= delay_shards <= delay.MAX_SHARDS:
            raise MessageError(f"delay_shards must be 1..{delay.MAX_SHARDS}, got {delay_shards}")
        if maximum_message_size is not None and not limits.SQS_MIN_MAXIMUM_MESSAGE_SIZE_BYTES <= maximum_message_size <= limits.SQS_MAX_MESSAGE_BYTES:
            raise MessageError(
                f"maximum_message_size must be {limits.SQS_MIN_MAXIMUM_MESSAGE_SIZE_BYTES}..{limits.SQS_MAX_MESSAGE_BYTES} bytes (SQS MaximumMessageSize), "
                f"got {maximum_message_size}"
            )
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
        self._maximum_message_size = maximum_message_size

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
        """Send one message to the task at ``path``; return its message id.

        Parameters
        ----------
        path
            The task's path; it travels in the ``beanstalk.sqsd.path`` attribute.
        body
            Sent exactly as given when a string; anything else is JSON-encoded.
        delay, at
            Seconds (or a timedelta), or an aware datetime (one in the past means
            now). Up to SQS's 15 minutes through DelaySeconds; beyond that, up to
            366 days, through the delay table.
        attributes
            Up to 9 (8 with a delay past 15 minutes): str → String, int/float →
            Number, bytes → Binary. Names starting with ``worker_tier.`` or
            ``beanstalk.sqsd.`` are Worker Tier's and sqsd's own and are refused.
        dedupe_key
            At most one message per key is accepted; a repeated send with the same
            key returns the first one's id and sends nothing. 1 to 128 ASCII
            letters, digits and punctuation. On a FIFO queue it is SQS's
            MessageDeduplicationId, which holds for SQS's 5 minutes. On a standard
            queue it needs the delay table, which keeps the key until
            ``DEDUPE_RETENTION_SECONDS`` (6 h) after the message is due, whatever
            the delay; the id returned is then derived from the key. While a send
            with the key is in flight, another returns at once; if the first then
            fails, its caller gets the error and the key is free again. If the
            sender that took the key dies between taking it and sending, a send
            with the key more than ``DEDUPE_MARKER_LEASE_SECONDS`` later sends
            it: a duplicate is possible there, a loss is not.
        group_id
            FIFO only, and required there: the MessageGroupId.

        Without a ``dedupe_key``, a FIFO message gets a random
        MessageDeduplicationId, kept across the Client's own retries, so two
        different messages are never deduplicated. Worker Tier's FIFO queues
        have content-based deduplication off; a producer that sends them no
        MessageDeduplicationId is refused by SQS (InvalidParameterValue) rather
        than silently deduplicated on its body.

        Raises MessageError for input SQS would refuse, naming the value and the
        rule, and SendError when SQS (or the delay table) refuses it anyway.
        """
        outgoing = OutgoingMessage(path, body, delay, at, attributes, dedupe_key, group_id)
        result = self.send_batch([outgoing])[0]
        if not result.ok:
            raise SendError(f"SQS refused the message for {path}: {result.error}", result.code or "")
        return result.message_id  # type: ignore[return-value]

    def send_batch(
        self,
        messages: Iterable[OutgoingMessage],
        *,
        _internal_attributes: Mapping[int, Mapping[str, str]] | None = None,
    ) -> list[SendResult]:
        """Send many messages in SendMessageBatch calls; return one SendResult per message, in order.

        Every message is checked before any is sent. Entries SQS fails on its side
        are retried with backoff; entries that still fail, or that SQS refuses as
        the sender's fault, come back with ``ok`` False and the reason.

        ``_internal_attributes`` is for Worker Tier itself (the worker re-sending
        a message with ``worker_tier.attempts``), never for users: message index →
        extra String attributes named ``worker_tier.*``, exempt from the
        reserved-name rule but not from SQS's rules.
        """
        messages = list(messages)
        internal = _internal_by_index(_internal_attributes or {}, len(messages))
        now = self._clock()
        entries = [self._entry(i, outgoing, now, internal.get(i, {})) for i, outgoing in enumerate(messages)]
        results: dict[int, SendResult] = {}
        direct = self._claim_dedupe_keys([e for e in entries if isinstance(e, dict)], results)
        for chunk in _chunks(direct, self._maximum_message_size or limits.SQS_MAX_MESSAGE_BYTES):
            results.update(self._send_chunk(chunk))
        self._settle_dedupe_keys(direct, results)
        results.update(self._store_delayed([e for e in entries if isinstance(e, tuple)]))
        return [results[index] for index in range(len(entries))]

    def _entry(
        self, index: int, outgoing: OutgoingMessage, now: float, internal: Mapping[str, str]
    ) -> dict[str, Any] | tuple[int, DelayedMessage]:
        """A SendMessageBatch entry, or (index, DelayedMessage) for the delay table; MessageError names the message and the rule."""
        try:
            return self._build_entry(index, outgoing, now, internal)
        except MessageError as error:
            raise MessageError(f"message {index} for {outgoing.path!r}: {error}") from None

    def _build_entry(
        self, index: int, outgoing: OutgoingMessage, now: float, internal: Mapping[str, str]
    ) -> dict[str, Any] | tuple[int, DelayedMessage]:
        """Check one message and route it: straight to SQS, or to the delay table."""
        if not isinstance(outgoing.path, str) or not outgoing.path.startswith("/"):
            raise MessageError(f"path must be a string starting with '/', got {outgoing.path!r}")
        body = _body_text(outgoing.body)
        attributes = _message_attributes(outgoing, internal)
        _check_ids(outgoing)
        seconds = due_in_seconds(outgoing.delay, outgoing.at, now)
        if math.ceil(seconds) > self._long_delay_threshold:
            return index, self._delayed(outgoing, body, attributes, now, seconds)
        size = _checked_size(body, attributes, self._maximum_message_size or limits.SQS_MAX_MESSAGE_BYTES)
        entry: dict[str, Any] = {"Id": str(index), "MessageBody": body, "MessageAttributes": attributes}
        entry.update(self._queue_options(outgoing, math.ceil(seconds), now + seconds))
        entry["_size"] = size
        return entry

    def _delayed(
        self, outgoing: OutgoingMessage, body: str, attributes: dict[str, Any], now: float, seconds: float
    ) -> DelayedMessage:
        """A message for the delay table, checked against what the table and the dispatch can carry."""
        wait = math.ceil(seconds)
        self._check_delay_table_use(outgoing, wait, len(attributes))
        limit = self._queue_maximum_message_size()
        _checked_size(body, attributes, limit, extra=DUE_AT_ATTRIBUTE_BYTES, what=f"with {message.DUE_AT_ATTRIBUTE} (added at dispatch)")
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

    def _check_delay_table_use(self, outgoing: OutgoingMessage, wait: int, attribute_count: int) -> None:
        """MessageError when a long delay cannot go through the delay table."""
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
        if attribute_count > limits.SQS_MAX_MESSAGE_ATTRIBUTES - 1:
            raise MessageError(
                f"a delayed message may carry at most {limits.SQS_MAX_MESSAGE_ATTRIBUTES - 2} attributes of its own "
                f"(the path and {message.DUE_AT_ATTRIBUTE} take two of SQS's {limits.SQS_MAX_MESSAGE_ATTRIBUTES}), "
                f"got {attribute_count - 1}"
            )

    def _queue_maximum_message_size(self) -> int:
        """The queue's MaximumMessageSize: as given, else read once per Client (SQS's 1 MiB if the read fails)."""
        if self._maximum_message_size is None:
            self._maximum_message_size = self._read_maximum_message_size()
        return self._maximum_message_size

    def _read_maximum_message_size(self) -> int:
        """One GetQueueAttributes call; a failure is logged and never blocks a send."""
        try:
            response = self._sqs.get().get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["MaximumMessageSize"])
            return int(response["Attributes"]["MaximumMessageSize"])
        except Exception as error:
            _log.warning(
                "could not read MaximumMessageSize of %s (%s: %s); assuming SQS's %d bytes",
                self.queue_url, error_code(error), error, limits.SQS_MAX_MESSAGE_BYTES,
            )
            return limits.SQS_MAX_MESSAGE_BYTES

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

    def _queue_options(self, outgoing: OutgoingMessage, delay_seconds: int, due: float) -> dict[str, Any]:
        """DelaySeconds and a standard queue's dedupe marker, or FIFO's group and deduplication ids."""
        if not self.fifo:
            if outgoing.group_id is not None:
                raise MessageError("group_id applies to FIFO queues (a queue URL ending in .fifo)")
            options: dict[str, Any] = {"DelaySeconds": delay_seconds} if delay_seconds else {}
            if outgoing.dedupe_key is not None:
                if not self.delay_table:
                    raise MessageError(
                        f"dedupe_key {outgoing.dedupe_key!r} on a standard queue needs the delay table, which keeps "
                        "the key; pass delay_table (or set WORKER_TIER_DELAY_TABLE)"
                    )
                options.update(_dedupe_key=outgoing.dedupe_key, _due=due)
            return options
        if delay_seconds:
            raise MessageError(
                f"a FIFO queue has no per-message delay (SQS rejects DelaySeconds on FIFO messages), got a delay of {delay_seconds} s"
            )
        if outgoing.group_id is None:
            raise MessageError("group_id is required for a FIFO queue")
        # Never left to content-based deduplication, which hashes the body only (two paths, one body: one message).
        dedupe = outgoing.dedupe_key if outgoing.dedupe_key is not None else uuid.uuid4().hex
        return {"MessageGroupId": outgoing.group_id, "MessageDeduplicationId": dedupe}

    def _dedupe_markers(self) -> _DedupeMarkers:
        """The standard queue's dedupe keys, in the delay table."""
        return _DedupeMarkers(self.delay_table or "", self._dynamodb.get(), self._clock)

    def _claim_dedupe_keys(self, entries: list[dict[str, Any]], results: dict[int, SendResult]) -> list[dict[str, Any]]:
        """Take each standard-queue dedupe key; entries whose key is taken get the holder's id and are not sent."""
        keyed = [e for e in entries if "_dedupe_key" in e]
        if not keyed:
            return entries
        markers, skipped = self._dedupe_markers(), set()
        for entry in keyed:
            index, key = int(entry["Id"]), entry["_dedupe_key"]
            try:
                entry["_claimed_ms"] = markers.claim(key, entry["_due"])
            except Exception as error:
                results[index] = SendResult(index, error=f"delay table did not take dedupe_key {key!r}: {error}", code=error_code(error))
                skipped.add(index)
                continue
            if entry["_claimed_ms"] is None:
                results[index] = SendResult(index, message_id=delay.new_message_id(key))
                skipped.add(index)
        return [e for e in entries if int(e["Id"]) not in skipped]

    def _settle_dedupe_keys(self, sent: list[dict[str, Any]], results: dict[int, SendResult]) -> None:
        """Mark each claimed key sent, or give it back so a retry sends; report the key's id for accepted ones."""
        keyed = [e for e in sent if "_dedupe_key" in e]
        markers = self._dedupe_markers() if keyed else None
        for entry in keyed:
            index, key = int(entry["Id"]), entry["_dedupe_key"]
            result = results[index]
            markers.settle(key, entry["_due"], entry["_claimed_ms"], result.message_id)  # type: ignore[union-attr]
            if result.ok:
                results[index] = SendResult(index, message_id=delay.new_message_id(key))

    def _send_chunk(self, chunk: list[dict[str, Any]]) -> dict[int, SendResult]:
        """One batch, retrying entries that failed on SQS's side."""
        results: dict[int, SendResult] = {}
        pending = [{k: v for k, v in entry.items() if not k.startswith("_")} for entry in chunk]
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


class _DedupeMarkers:
    """A standard queue's dedupe keys in the delay table, for messages sent straight to SQS.

    One item per key, the same one the delay table's own dedupe path writes
    (``pk = "dedupe#<key>"``, ``sk = "-"``), plus ``sent`` and ``claimed_ms``.
    A marker without ``sent`` was written with a delayed message and counts as sent.
    """

    def __init__(self, table: str, dynamodb: Any, clock: Callable[[], float]) -> None:
        self._table = table
        self._dynamodb = dynamodb
        self._clock = clock

    def claim(self, key: str, due: float) -> int | None:
        """This sender's claim time (ms) when it should send: the key was free or expired, or its unsent holder's lease ran out."""
        for _ in range(MAX_MARKER_CLAIM_ATTEMPTS):
            now_ms = int(self._clock() * 1000)
            free = {"condition": "attribute_not_exists(pk) OR #expiration < :now", "names": {"#expiration": delay.TTL_ATTRIBUTE}}
            if self._try_put(key, due, now_ms, **free, values={":now": {"N": str(now_ms // 1000)}}):
                return now_ms
            holder = self._dynamodb.get_item(TableName=self._table, Key=_marker_key(key), ConsistentRead=True).get("Item")
            if holder is not None:
                return self._take_over(key, due, now_ms, holder)
        return None  # the key keeps changing hands: another sender holds it

    def _take_over(self, key: str, due: float, now_ms: int, holder: Mapping[str, Any]) -> int | None:
        """Take an unsent marker whose lease ran out; None while it is sent, leased, or taken by another sender first."""
        if holder.get("sent", {"BOOL": True})["BOOL"]:
            return None
        if int(holder["claimed_ms"]["N"]) + DEDUPE_MARKER_LEASE_SECONDS * 1000 > now_ms:
            return None
        claimed = {"condition": "#claimed_ms = :claimed", "names": {"#claimed_ms": "claimed_ms"}}
        if not self._try_put(key, due, now_ms, **claimed, values={":claimed": dict(holder["claimed_ms"])}):
            return None
        _log.warning("dedupe_key %r: its marker was left unsent for over %d s; sending now", key, DEDUPE_MARKER_LEASE_SECONDS)
        return now_ms

    def settle(self, key: str, due: float, claimed_ms: int, sqs_message_id: str | None) -> None:
        """Mark the key sent, or give back this sender's claim so a retry sends at once; a failure is only logged."""
        try:
            if sqs_message_id is not None:
                self._dynamodb.put_item(TableName=self._table, Item=self._item(key, due, claimed_ms, sqs_message_id))
            else:
                self._dynamodb.delete_item(
                    TableName=self._table, Key=_marker_key(key), ConditionExpression="#claimed_ms = :mine",
                    ExpressionAttributeNames={"#claimed_ms": "claimed_ms"}, ExpressionAttributeValues={":mine": {"N": str(claimed_ms)}},
                )
        except Exception as error:  # an unsent marker waits out its lease; a sent one left unsent may be sent again
            _log.warning("dedupe_key %r: could not settle its marker (%s: %s)", key, error_code(error), error)

    def _try_put(self, key: str, due: float, now_ms: int, *, condition: str, names: dict[str, str], values: dict[str, Any]) -> bool:
        """Write an unsent marker under a condition; False when the condition does not hold."""
        try:
            self._dynamodb.put_item(
                TableName=self._table, Item=self._item(key, due, now_ms, None), ConditionExpression=condition,
                ExpressionAttributeNames=names, ExpressionAttributeValues=values,
            )
        except Exception as error:
            if is_condition_failure(error):
                return False
            raise
        return True

    @staticmethod
    def _item(key: str, due: float, claimed_ms: int, sqs_message_id: str | None) -> dict[str, Any]:
        """The marker: the key's message id, whether it was sent, when it was claimed, and its TTL."""
        item = {
            **_marker_key(key),
            "id": {"S": delay.new_message_id(key)},
            "sent": {"BOOL": sqs_message_id is not None},
            "claimed_ms": {"N": str(claimed_ms)},
            delay.TTL_ATTRIBUTE: {"N": str(math.ceil(due) + DEDUPE_RETENTION_SECONDS)},
        }
        if sqs_message_id is not None:
            item["sqs_message_id"] = {"S": sqs_message_id}
        return item


def _marker_key(key: str) -> dict[str, dict[str, str]]:
    """The dedupe marker's key, as the delay table's own dedupe path writes it."""
    return {delay.PK: {"S": delay.DEDUPE_PREFIX + key}, delay.SK: {"S": "-"}}


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
    """The body as SQS will carry it; MessageError for a body SQS refuses."""
    if not isinstance(body, str):
        try:
            body = json.dumps(body, separators=(",", ":"))
        except (TypeError, ValueError) as error:
            raise MessageError(f"body must be a string or JSON-serializable, got {type(body).__name__}: {error}") from None
    problem = sqs_rules.body_problem(body)
    if problem:
        raise MessageError(problem)
    return body


def _check_ids(outgoing: OutgoingMessage) -> None:
    """dedupe_key and group_id: SQS's MessageDeduplicationId / MessageGroupId rule, on every queue type."""
    problem = (outgoing.dedupe_key is not None and sqs_rules.group_id_problem(outgoing.dedupe_key, "dedupe_key")) or (
        outgoing.group_id is not None and sqs_rules.group_id_problem(outgoing.group_id, "group_id")
    )
    if problem:
        raise MessageError(problem)


def _checked_size(body: str, attributes: Mapping[str, Any], limit: int, *, extra: int = 0, what: str = "") -> int:
    """The message's size as SQS counts it; MessageError when over the queue's maximum."""
    size = message.message_bytes(body, attributes) + extra
    if size > limit:
        raise MessageError(
            f"message is {size} bytes with its attributes{' ' + what if what else ''}; "
            f"the queue allows at most {limit} (MaximumMessageSize)"
        )
    return size


def _message_attributes(outgoing: OutgoingMessage, internal: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The path, the user's attributes and any internal ones, in the SQS API's shape, checked as SQS checks them."""
    user = outgoing.attributes or {}
    if len(user) + 1 > limits.SQS_MAX_MESSAGE_ATTRIBUTES:
        raise MessageError(
            f"{len(user)} attributes given; SQS allows {limits.SQS_MAX_MESSAGE_ATTRIBUTES} per message "
            f"and Worker Tier uses one for the path, so at most {limits.SQS_MAX_MESSAGE_ATTRIBUTES - 1}"
        )
    attributes = {message.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": outgoing.path}}
    attributes.update({_user_attribute_name(name): _attribute_value(name, value) for name, value in user.items()})
    attributes.update({name: {"DataType": "String", "StringValue": value} for name, value in internal.items()})
    problem = sqs_rules.attributes_problem(attributes)
    if problem:
        raise MessageError(problem)
    return attributes


def _user_attribute_name(name: Any) -> Any:
    """Refuse the names Worker Tier and sqsd set themselves; SQS's own rules are checked with the values."""
    if name == message.PATH_ATTRIBUTE:
        raise MessageError(f"attribute {name!r} is set from the path argument; do not pass it")
    if isinstance(name, str) and name.startswith(RESERVED_ATTRIBUTE_PREFIXES):
        raise MessageError(
            f"attribute name {name!r} is reserved: names starting with "
            f"{' or '.join(repr(p) for p in RESERVED_ATTRIBUTE_PREFIXES)} are set by Worker Tier and sqsd; rename it"
        )
    return name


def _attribute_value(name: Any, value: Any) -> dict[str, Any]:
    """One attribute value in the SQS API's shape: str → String, int/float → Number, bytes → Binary."""
    if isinstance(value, bool):
        raise MessageError(f"attribute {name!r} is a bool; send 'true'/'false' as a string or 1/0 as a number")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise MessageError(f"attribute {name!r} must be a finite number, got {value!r}")
        return {"DataType": "Number", "StringValue": sqs_rules.format_number(value)}
    if isinstance(value, (bytes, bytearray)):
        return {"DataType": "Binary", "BinaryValue": bytes(value)}
    if isinstance(value, str):
        return {"DataType": "String", "StringValue": value}
    raise MessageError(f"attribute {name!r} must be str, int, float or bytes, got {type(value).__name__}")


def _internal_by_index(internal: Mapping[int, Mapping[str, str]], count: int) -> dict[int, Mapping[str, str]]:
    """Check ``_internal_attributes``: indexes of this batch, reserved names (``worker_tier.*``, and
    ``beanstalk.sqsd.*`` for a periodic task's copy), String values; never the path or ``due_at``."""
    for index, attributes in internal.items():
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise MessageError(f"_internal_attributes: index {index!r} is not a message of this batch (0..{count - 1})")
        for name, value in attributes.items():
            if (
                not isinstance(name, str)
                or not name.startswith(RESERVED_ATTRIBUTE_PREFIXES)
                or name in (message.DUE_AT_ATTRIBUTE, message.PATH_ATTRIBUTE)
            ):
                raise MessageError(
                    f"_internal_attributes: name {name!r} must start with "
                    f"{' or '.join(repr(p) for p in RESERVED_ATTRIBUTE_PREFIXES)} and not be {message.DUE_AT_ATTRIBUTE!r} "
                    f"(set by the delay scheduler) or {message.PATH_ATTRIBUTE!r} (set from the path)"
                )
            if not isinstance(value, str):
                raise MessageError(f"_internal_attributes: {name!r} must be a string, got {type(value).__name__}")
    return dict(internal)


def _chunks(entries: list[dict[str, Any]], max_bytes: int) -> Iterable[list[dict[str, Any]]]:
    """Split entries into SendMessageBatch calls: at most 10 entries and ``max_bytes`` each."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for entry in entries:
        full = len(chunk) == limits.SQS_MAX_BATCH_ENTRIES or size + entry["_size"] > max_bytes
        if chunk and full:
            yield chunk
            chunk, size = [], 0
        chunk.append(entry)
        size += entry["_size"]
    if chunk:
        yield chunk
