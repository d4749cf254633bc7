"""What a local run leaves undone at exit: messages in its queues, and delayed messages not yet dispatched.

moto keeps its state in the process, so whatever is pending when ``make run`` ends is gone with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterator

from worker_tier.core import contract
from worker_tier.delays import delay
from worker_tier.delays.dispatch_state import shard_positions, state_reader
from worker_tier.core.errors import StateError

QUEUE_COUNT_ATTRIBUTES = {  # SQS's approximate counts, by what a person calls them
    "waiting": "ApproximateNumberOfMessages",
    "in flight": "ApproximateNumberOfMessagesNotVisible",
    "delayed": "ApproximateNumberOfMessagesDelayed",
}


@dataclass(frozen=True)
class QueueBacklog:
    """One queue's messages by state: waiting (visible), in flight (received, or waiting out a retry), delayed."""

    name: str
    waiting: int
    in_flight: int
    delayed: int

    @property
    def total(self) -> int:
        """Every message still in the queue."""
        return self.waiting + self.in_flight + self.delayed


@dataclass(frozen=True)
class Pending:
    """Work a run leaves behind: each queue's backlog and the delay table's undispatched messages.

    Examples
    --------
    >>> Pending((QueueBacklog("queue", 0, 1, 2),), undispatched=3, delay_table="delays").lines()[1]
    '  queue: 3 (0 waiting, 1 in flight, 2 delayed)'
    """

    queues: tuple[QueueBacklog, ...]
    undispatched: int
    delay_table: str
    next_due_ms: int | None = None  # the first undispatched message's due time

    @property
    def total(self) -> int:
        """Messages not yet processed, wherever they are."""
        return sum(queue.total for queue in self.queues) + self.undispatched

    def lines(self) -> list[str]:
        """What a person reads at exit: a headline, then one line per place that holds work."""
        if self.total == 0:
            return ["nothing pending at exit: every message sent was processed or dead-lettered"]
        lines = [f"still pending at exit: {self.total} message(s), lost with moto's in-memory state"]
        lines += [f"  {queue.name}: {queue.total} ({queue.waiting} waiting, {queue.in_flight} in flight, "
                  f"{queue.delayed} delayed)" for queue in self.queues if queue.total]
        if self.undispatched:
            lines.append(f"  delay table {self.delay_table}: {self.undispatched} delayed message(s) "
                         f"not yet moved to the queue by the delay dispatcher{_next_due(self.next_due_ms)}")
        return lines


def _next_due(due_ms: int | None) -> str:
    """', the first due at HH:MM:SS' (local time), or nothing."""
    if due_ms is None:
        return ""
    return f", the first due at {datetime.fromtimestamp(due_ms / 1000).astimezone():%H:%M:%S}"


def queue_backlog(sqs: Any, name: str, queue_url: str) -> QueueBacklog:
    """``queue_url``'s counts, named ``name``."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=list(QUEUE_COUNT_ATTRIBUTES.values()))
    counts = {key: int(attributes["Attributes"].get(name, 0)) for key, name in QUEUE_COUNT_ATTRIBUTES.items()}
    return QueueBacklog(name, counts["waiting"], counts["in flight"], counts["delayed"])


def undispatched(dynamodb: Any, delay_table: str, state_table: str) -> tuple[int, int | None]:
    """How many delayed messages the dispatcher has not sent, and when the first of them is due (epoch ms, or None).

    Sent ones stay in the table until their TTL: those not sent are past their shard's position (its minute, then its cursor).
    """
    positions = _positions(dynamodb, state_table)
    count, next_due_ms = 0, None
    for item in _scan(dynamodb, delay_table):
        pk, sk = item[contract.DELAY_PARTITION_KEY]["S"], item[contract.DELAY_SORT_KEY]["S"]
        parsed = delay.parse_bucket_key(pk) if delay.is_scheduled_key(pk) else None
        if parsed is None:  # a dedupe item, not a message
            continue
        minute, shard = parsed
        bucket, cursor = positions.get(shard, (-1, ""))
        if minute > bucket or (minute == bucket and sk > cursor):
            due_ms = int(sk.split("#", 1)[0])
            count, next_due_ms = count + 1, due_ms if next_due_ms is None else min(next_due_ms, due_ms)
    return count, next_due_ms


def _positions(dynamodb: Any, state_table: str) -> dict[int, tuple[int, str]]:
    """The dispatcher's (minute, cursor) per shard; minute -1 (nothing dispatched) where unknown or unreadable."""
    read = state_reader(dynamodb, state_table)

    try:
        return shard_positions(read)
    except StateError:
        return {}


def _scan(dynamodb: Any, table: str) -> Iterator[dict[str, Any]]:
    """Every item of ``table`` (a local table is small)."""
    for page in dynamodb.get_paginator("scan").paginate(TableName=table):
        yield from page.get("Items", [])
