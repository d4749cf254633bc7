"""What a local run leaves undone at exit: messages in its queues, delayed messages not yet dispatched, and by name
each message the run sent that no task has finished with.

moto keeps its state in the process, so whatever is pending when ``make run`` ends is gone with it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterator

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
    unhandled: tuple[SentMessage, ...] = ()  # what the run itself sent that no task finished with (SentLedger)

    @property
    def total(self) -> int:
        """Messages not yet processed, wherever they are (at least those the run sent and saw no end of)."""
        return max(sum(queue.total for queue in self.queues) + self.undispatched, len(self.unhandled))

    def lines(self, now: float | None = None) -> list[str]:
        """What a person reads at exit: a headline, one line per place that holds work, one per message the run sent."""
        if self.total == 0:
            return ["nothing pending at exit: every message sent was processed or dead-lettered"]
        lines = [f"still pending at exit: {self.total} message(s), lost with moto's in-memory state"]
        lines += [f"  {queue.name}: {queue.total} ({queue.waiting} waiting, {queue.in_flight} in flight, "
                  f"{queue.delayed} delayed)" for queue in self.queues if queue.total]
        if self.undispatched:
            lines.append(f"  delay table {self.delay_table}: {self.undispatched} delayed message(s) "
                         f"not yet moved to the queue by the delay dispatcher{_next_due(self.next_due_ms)}")
        if self.unhandled:
            now = time.time() if now is None else now
            lines.append("  sent by this run and not finished (a longer --duration sees them through):")
            lines += [f"    {sent.line(now)}" for sent in self.unhandled]
        return lines


@dataclass(frozen=True)
class SentMessage:
    """One message a run sent: its path, its id and when it is due (epoch seconds)."""

    path: str
    message_id: str
    due: float

    def line(self, now: float) -> str:
        """'/hello   1a2b3c4d  due at 12:02:30 (due in 3 s)', or '(due 2 s ago, not yet handled)' once due."""
        seconds = math.ceil(self.due - now)
        relative = f"due in {seconds} s" if seconds > 0 else f"due {-seconds} s ago, not yet handled"
        return f"{self.path:<8} {self.message_id[:8]}  due at {_clock_time(self.due)} ({relative})"


class SentLedger:
    """The messages a run sent, each until a task finishes with it (it succeeded or was dead-lettered).

    A message the delay dispatcher delivers, or the worker forwards to the container worker, reaches its task under a
    new id: a finish for a path under an id the run did not send settles that path's earliest message already due.

    Examples
    --------
    >>> ledger = SentLedger(clock=lambda: 1000.0)
    >>> ledger.sent("/hello", "m-1"); ledger.sent("/hello", "m-2", delay_seconds=150)
    >>> ledger.finished("m-1", "/hello")
    >>> [(sent.message_id, sent.due) for sent in ledger.unhandled()]
    [('m-2', 1150.0)]
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._sent: dict[str, SentMessage] = {}

    def sent(self, path: str, message_id: str, delay_seconds: float | None = None) -> None:
        """Note a message sent now with ``delay_seconds``."""
        self._sent[message_id] = SentMessage(path, message_id, self._clock() + (delay_seconds or 0))

    def finished(self, message_id: str, path: str) -> None:
        """A task finished with ``message_id`` (of ``path``): its message is handled."""
        if self._sent.pop(message_id, None) is not None:
            return
        due = sorted((s for s in self._sent.values() if s.path == path and s.due <= self._clock()), key=lambda s: s.due)
        if due:
            del self._sent[due[0].message_id]

    def unhandled(self) -> tuple[SentMessage, ...]:
        """The messages sent and not finished, soonest due first."""
        return tuple(sorted(self._sent.values(), key=lambda s: s.due))


def _clock_time(epoch_seconds: float) -> str:
    """HH:MM:SS in local time."""
    return f"{datetime.fromtimestamp(epoch_seconds).astimezone():%H:%M:%S}"


def _next_due(due_ms: int | None) -> str:
    """', the first due at HH:MM:SS' (local time), or nothing."""
    if due_ms is None:
        return ""
    return f", the first due at {_clock_time(due_ms / 1000)}"


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
