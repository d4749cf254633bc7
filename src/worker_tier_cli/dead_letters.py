"""Reading the dead-letter queue without consuming it, and grouping what died by path and error type.

Reading a queue means receiving its messages, which hides them for the receive's visibility timeout. A
peek receives with ``PEEK_VISIBILITY_SECONDS`` and releases every message it read (visibility 0, in
batches) before it returns, so the DLQ is as it was: only a receive count has grown. A message that
reappears during a long peek is counted once (by message id).

A message too large to carry its reason is preceded in the DLQ by a reason record (``worker_tier.worker.dead_letter``):
a DLQ message of its own that is not a dead message. ``join`` attaches each record's reason to its message (by
the MD5 of the message's body, which the record names) and sets the records aside, so a reader sees one entry
per dead message; a standard DLQ can hold several records for one message (one per attempt), and the latest
attempt's reason is the one shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Callable

from worker_tier.core import contract, limits, payloads
from worker_tier.worker.dead_letter import reason_record
from worker_tier.core.envelope import Envelope, body_md5
from worker_tier.core.retry import chunks

PEEK_VISIBILITY_SECONDS = 60  # long enough to read --limit messages; released at once after
DEFAULT_PEEK_LIMIT = 1000  # messages read by `dlq list` unless --limit says otherwise
RECEIVE_WAIT_SECONDS = 1  # short polls of a small queue can come back empty while messages wait
UNKNOWN = "-"  # the path or error type of a message without a readable reason
# What a redrive leaves out of the copy it sends back: the reason, and the failure history that would make the
# message's fresh start its last (worker_tier.attempts adds earlier receives to max_retries' count;
# worker_tier.first_received_at counts an app's retention_period from the first death).
REDRIVE_DROPPED_ATTRIBUTES = (contract.FAILURE_ATTRIBUTE, contract.ATTEMPTS_ATTRIBUTE, contract.FIRST_RECEIVED_ATTRIBUTE)


@dataclass(frozen=True)
class DeadLetter:
    """One message read from the DLQ, with its ``worker_tier.failure`` reason (empty when it has none)."""

    message_id: str
    receipt_handle: str
    body: str
    attributes: dict[str, dict[str, Any]]
    system: dict[str, str]
    reason: dict[str, Any]
    # A reason record: the MD5 of the body of the message it describes and the source message id; else None.
    describes: tuple[str, str] | None = None
    # The reason record(s) joined to this message (``join``): a redrive deletes them with it.
    records: tuple[DeadLetter, ...] = ()

    @classmethod
    def from_sqs(cls, received: dict[str, Any]) -> DeadLetter:
        """A ReceiveMessage entry, its reason parsed (an unreadable one kept as its raw text)."""
        envelope = Envelope.from_received(received)
        attributes = {name: _api_value(value) for name, value in envelope.attributes.items()}
        raw = attributes.get(contract.FAILURE_ATTRIBUTE, {}).get("StringValue")
        try:
            reason = json.loads(raw) if raw else {}
        except ValueError:
            reason = {"error_message": raw}
        body = envelope.body
        record = reason_record(body, attributes)
        describes = (str(record.get("body_md5") or ""), str(record["source_message_id"])) if record else None
        if record is not None and isinstance(record.get("reason"), dict):
            reason = record["reason"]
        return cls(received["MessageId"], received["ReceiptHandle"], body, attributes,
                   dict(received.get("Attributes") or {}), reason if isinstance(reason, dict) else {"error_message": raw},
                   describes)

    @property
    def points_to(self) -> dict[str, str] | None:
        """For a delay pointer, its ``delay_table``, ``pk`` and ``sk``; else None.

        A delay pointer is what the delay path (``worker_tier.delays.delivery``) dead-letters when the DLQ refuses a
        delayed message's full copy, or when a delay-table item is unreadable: a body naming the item
        (``{"delay_table", "pk", "sk", "reason", ...}``) with ``worker_tier.failure``. It is not a task body:
        the message itself stays in the delay table until its TTL, so it is never redriven as work."""
        if not self.carries_reason or not self.body.startswith("{"):
            return None
        try:
            body = json.loads(self.body)
        except ValueError:
            return None
        keys = ("delay_table", contract.DELAY_PARTITION_KEY, contract.DELAY_SORT_KEY)
        if not isinstance(body, dict) or "reason" not in body or not all(isinstance(body.get(k), str) for k in keys):
            return None
        return {k: str(body[k]) for k in keys}

    @property
    def offloaded(self) -> bool:
        """Whether its body is a pointer to S3 (``ExtendedPayloadSize``): a redrive moves the pointer, the object stays."""
        return payloads.is_offloaded(self.attributes)

    @property
    def body_md5(self) -> str:
        """The MD5 of the body's UTF-8 (SQS's ``MD5OfBody``): what a reason record names its message by."""
        return body_md5(self.body)

    @property
    def carries_reason(self) -> bool:
        """Whether it came with ``worker_tier.failure`` (a reason record does too); one without may have a record."""
        return contract.FAILURE_ATTRIBUTE in self.attributes

    def joined(self, records: list[DeadLetter]) -> DeadLetter:
        """This message with its reason records: the latest attempt's reason becomes its own."""
        latest = max(records, key=lambda r: (int(r.reason.get("attempts") or 0), str(r.reason.get("failed_at") or "")))
        return replace(self, reason=dict(latest.reason), records=tuple(records))

    @property
    def path(self) -> str:
        """The reason's path, else the routing attribute, else ``UNKNOWN``."""
        routed = self.attributes.get(contract.PATH_ATTRIBUTE, {}).get("StringValue")
        return str(self.reason.get("path") or routed or UNKNOWN)

    @property
    def error_type(self) -> str:
        return str(self.reason.get("error_type") or UNKNOWN)

    @property
    def failed_at(self) -> str | None:
        value = self.reason.get("failed_at")
        return str(value) if value else None

    @property
    def dropped_attributes(self) -> list[str]:
        """The attributes the dead-lettering dropped (the reason names them; their values are gone)."""
        names = self.reason.get("dropped_attributes")
        return [str(name) for name in names] if isinstance(names, list) else []

    def original_attributes(self) -> dict[str, dict[str, Any]]:
        """The attributes it came with, without the reason: what ``dlq show`` prints."""
        return {name: value for name, value in self.attributes.items() if name != contract.FAILURE_ATTRIBUTE}

    def redriven_attributes(self) -> dict[str, dict[str, Any]]:
        """What a redrive sends back: its attributes without the reason and the failure history
        (``REDRIVE_DROPPED_ATTRIBUTES``), so it starts afresh as the docs promise."""
        return {name: value for name, value in self.attributes.items() if name not in REDRIVE_DROPPED_ATTRIBUTES}

    def redriven(self) -> Envelope:
        """The message a redrive sends back: its body and ``redriven_attributes``."""
        return Envelope(self.body, self.redriven_attributes())


class RecordShelf:
    """Reason records read and not yet joined, by the MD5 they name and then by source message id (a standard
    DLQ can hold several records of one message: one per attempt)."""

    def __init__(self) -> None:
        self.by_md5: dict[str, dict[str, list[DeadLetter]]] = {}

    def add(self, record: DeadLetter) -> None:
        md5, source = record.describes or ("", "")
        self.by_md5.setdefault(md5, {}).setdefault(source, []).append(record)

    def has(self, md5: str) -> bool:
        return bool(self.by_md5.get(md5))

    def take(self, md5: str) -> list[DeadLetter]:
        """One message's records (all those of one source message id) naming ``md5``; [] when none."""
        sources = self.by_md5.get(md5)
        if not sources:
            return []
        records = sources.pop(next(iter(sources)))
        if not sources:
            del self.by_md5[md5]
        return records

    def left(self) -> list[DeadLetter]:
        return [r for sources in self.by_md5.values() for records in sources.values() for r in records]


def join(letters: list[DeadLetter]) -> tuple[list[DeadLetter], list[DeadLetter]]:
    """The dead messages among ``letters``, each with its reason records joined, and the records whose message
    was not among them (still in flight, past a read's limit, or a record whose message's send failed)."""
    shelf = RecordShelf()
    for letter in letters:
        if letter.describes is not None:
            shelf.add(letter)
    joined = []
    for letter in letters:
        if letter.describes is not None:
            continue
        records = [] if letter.carries_reason else shelf.take(letter.body_md5)
        joined.append(letter.joined(records) if records else letter)
    return joined, shelf.left()


def _api_value(value: dict[str, Any]) -> dict[str, Any]:
    """A received attribute as SendMessage takes it (moto and SQS add empty list fields)."""
    kept = {"DataType": value["DataType"]}
    for key in ("StringValue", "BinaryValue"):
        if key in value:
            kept[key] = value[key]
    return kept


@dataclass(frozen=True)
class Filter:
    """Which dead letters a command acts on: by path, error type, failed_at and message id (all optional)."""

    path: str | None = None
    error_type: str | None = None
    since: datetime | None = None
    message_id: str | None = None  # one dead letter (the dashboard's "redrive this one")

    @property
    def empty(self) -> bool:
        return self.path is None and self.error_type is None and self.since is None and self.message_id is None

    def matches(self, letter: DeadLetter) -> bool:
        if self.message_id is not None and letter.message_id != self.message_id:
            return False
        if self.path is not None and letter.path != self.path:
            return False
        if self.error_type is not None and letter.error_type != self.error_type:
            return False
        if self.since is not None:
            failed_at = _parse_time(letter.failed_at)
            return failed_at is not None and failed_at >= self.since
        return True


def _parse_time(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


def receive(sqs: Any, queue_url: str, visibility_seconds: int, wait_seconds: int) -> list[DeadLetter]:
    """One ReceiveMessage of up to 10 messages, with every attribute."""
    response = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=limits.SQS_MAX_BATCH_ENTRIES, VisibilityTimeout=visibility_seconds,
        WaitTimeSeconds=wait_seconds, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"],
    )
    return [DeadLetter.from_sqs(m) for m in response.get("Messages") or []]


def release(sqs: Any, queue_url: str, letters: list[DeadLetter]) -> int:
    """Make ``letters`` visible again (ChangeMessageVisibilityBatch, 0 s); return how many SQS refused."""
    refused = 0
    for batch in chunks(letters, limits.SQS_MAX_BATCH_ENTRIES):
        entries = [{"Id": str(i), "ReceiptHandle": letter.receipt_handle, "VisibilityTimeout": 0} for i, letter in enumerate(batch)]
        try:
            refused += len(sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries).get("Failed") or [])
        except Exception:  # they come back by themselves when their visibility timeout ends
            refused += len(batch)
    return refused


@contextmanager
def peek(sqs: Any, queue_url: str, limit: int = DEFAULT_PEEK_LIMIT, wait_seconds: int = RECEIVE_WAIT_SECONDS,
         progress: Callable[[int], None] = lambda read: None) -> Iterator[list[DeadLetter]]:
    """Up to ``limit`` distinct messages of the queue, released when the block ends (even on error).

    ``progress`` is called with the count read so far after each receive.
    """
    held: dict[str, DeadLetter] = {}
    try:
        while len(held) < limit:
            fresh = [m for m in receive(sqs, queue_url, PEEK_VISIBILITY_SECONDS, wait_seconds) if m.message_id not in held]
            if not fresh:
                break
            held.update((m.message_id, m) for m in fresh)
            progress(min(len(held), limit))
        yield list(held.values())[:limit]
    finally:
        release(sqs, queue_url, list(held.values()))


@dataclass
class Group:
    """Dead letters of one path and error type: how many (and how many of those hold their body in S3), first and
    last failed_at, one sample reason, their message ids."""

    path: str
    error_type: str
    count: int = 0
    offloaded: int = 0
    first_failed_at: str | None = None
    last_failed_at: str | None = None
    sample_reason: str = ""
    message_ids: list[str] = field(default_factory=list)

    def add(self, letter: DeadLetter) -> None:
        self.count += 1
        self.offloaded += letter.offloaded
        self.message_ids.append(letter.message_id)
        self.sample_reason = self.sample_reason or str(letter.reason.get("error_message") or "")
        stamp = letter.failed_at
        if stamp is not None:
            self.first_failed_at = min(filter(None, (self.first_failed_at, stamp)))
            self.last_failed_at = max(filter(None, (self.last_failed_at, stamp)))


def group(letters: list[DeadLetter]) -> list[Group]:
    """Groups by (path, error_type), the largest first."""
    groups: dict[tuple[str, str], Group] = {}
    for letter in letters:
        groups.setdefault((letter.path, letter.error_type), Group(letter.path, letter.error_type)).add(letter)
    return sorted(groups.values(), key=lambda g: (-g.count, g.path, g.error_type))
