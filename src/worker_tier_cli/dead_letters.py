"""Reading the dead-letter queue without consuming it, and grouping what died by path and error type.

Reading a queue means receiving its messages, which hides them for the receive's visibility timeout. A
peek receives with ``PEEK_VISIBILITY_SECONDS`` and releases every message it read (visibility 0, in
batches) before it returns, so the DLQ is as it was: only a receive count has grown. A message that
reappears during a long peek is counted once (by message id).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from worker_tier import contract, limits
from worker_tier.retry import chunks

PEEK_VISIBILITY_SECONDS = 60  # long enough to read --limit messages; released at once after
DEFAULT_PEEK_LIMIT = 1000  # messages read by `dlq list` unless --limit says otherwise
RECEIVE_WAIT_SECONDS = 1  # short polls of a small queue can come back empty while messages wait
UNKNOWN = "-"  # the path or error type of a message without a readable reason


@dataclass(frozen=True)
class DeadLetter:
    """One message read from the DLQ, with its ``worker_tier.failure`` reason (empty when it has none)."""

    message_id: str
    receipt_handle: str
    body: str
    attributes: dict[str, dict[str, Any]]
    system: dict[str, str]
    reason: dict[str, Any]

    @classmethod
    def from_sqs(cls, received: dict[str, Any]) -> DeadLetter:
        """A ReceiveMessage entry, its reason parsed (an unreadable one kept as its raw text)."""
        attributes = {name: _api_value(value) for name, value in (received.get("MessageAttributes") or {}).items()}
        raw = attributes.get(contract.FAILURE_ATTRIBUTE, {}).get("StringValue")
        try:
            reason = json.loads(raw) if raw else {}
        except ValueError:
            reason = {"error_message": raw}
        return cls(received["MessageId"], received["ReceiptHandle"], received.get("Body", ""), attributes,
                   dict(received.get("Attributes") or {}), reason if isinstance(reason, dict) else {"error_message": raw})

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
        """The attributes it came with, without the reason: what a redrive sends back."""
        return {name: value for name, value in self.attributes.items() if name != contract.FAILURE_ATTRIBUTE}


def _api_value(value: dict[str, Any]) -> dict[str, Any]:
    """A received attribute as SendMessage takes it (moto and SQS add empty list fields)."""
    kept = {"DataType": value["DataType"]}
    for key in ("StringValue", "BinaryValue"):
        if key in value:
            kept[key] = value[key]
    return kept


@dataclass(frozen=True)
class Filter:
    """Which dead letters a command acts on: by path, error type and failed_at (all optional)."""

    path: str | None = None
    error_type: str | None = None
    since: datetime | None = None

    @property
    def empty(self) -> bool:
        return self.path is None and self.error_type is None and self.since is None

    def matches(self, letter: DeadLetter) -> bool:
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
    """Dead letters of one path and error type: how many, first and last failed_at, one sample reason."""

    path: str
    error_type: str
    count: int = 0
    first_failed_at: str | None = None
    last_failed_at: str | None = None
    sample_reason: str = ""
    message_ids: list[str] = field(default_factory=list)

    def add(self, letter: DeadLetter) -> None:
        self.count += 1
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
