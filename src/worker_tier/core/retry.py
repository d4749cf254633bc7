"""Our own retries of AWS calls, and batching: one helper each, so every loop backs off the same way.

botocore already retries a throttled or failed *call* (``aws.CLIENT_MAX_ATTEMPTS``). These
retry what it cannot: the entries a batch call reports as failed (SendMessageBatch's
``Failed`` with ``SenderFault: false``, BatchWriteItem's ``UnprocessedItems``) and reads
that must succeed before a run may go on. Waits double from ``base_seconds`` up to
``cap_seconds``; the delay dispatcher and the client wait at most a few seconds in all,
well inside a one-minute run.

A task's own retry delay is something else: ``backoff.backoff_seconds`` (full jitter,
through SQS visibility).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Retry:
    """A retry budget: ``attempts`` tries in all, waiting ``base_seconds`` * 2**n (capped) between them.

    >>> [Retry(4, 0.05, 0.15).pause(n) for n in range(3)]
    [0.05, 0.1, 0.15]
    """

    attempts: int
    base_seconds: float
    cap_seconds: float

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"Retry attempts must be at least 1 (the first try counts), got {self.attempts}")
        if not 0 <= self.base_seconds <= self.cap_seconds:
            raise ValueError(
                f"Retry waits must satisfy 0 <= base_seconds <= cap_seconds, got base_seconds={self.base_seconds} "
                f"and cap_seconds={self.cap_seconds}"
            )

    def total_seconds(self) -> float:
        """The longest this budget waits in all (every pause, when every attempt fails).

        >>> SEND_ENTRIES.total_seconds()
        1.5
        """
        return sum(self.pause(retry) for retry in range(self.attempts - 1))

    def pause(self, retry: int) -> float:
        """The wait before retry number ``retry`` (0 = the first retry)."""
        return min(self.cap_seconds, self.base_seconds * 2.0**retry)

    def attempts_with_pauses(self, sleep: Callable[[float], None] = time.sleep) -> Iterator[int]:
        """Attempt numbers 0..attempts-1, sleeping the pause before each one after the first.

        The loop body breaks when it is done; the pause comes only if it asks for another try.
        """
        for attempt in range(self.attempts):
            if attempt:
                sleep(self.pause(attempt - 1))
            yield attempt

    def call(
        self,
        call: Callable[[], T],
        *,
        give_up: Callable[[Exception], bool] = lambda error: False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> T:
        """``call()`` until it returns; the last error, or the first that ``give_up`` names, propagates."""
        for attempt in self.attempts_with_pauses(sleep):
            try:
                return call()
            except Exception as error:
                if attempt == self.attempts - 1 or give_up(error):
                    raise
        raise AssertionError(f"unreachable: {self} made no attempt")


# S3 calls for an offloaded body (worker_tier.core.payloads): throttling (SlowDown, 503) and 5xx, on top of
# botocore's own retries (1.55 s of waits).
S3_CALLS = Retry(attempts=6, base_seconds=0.05, cap_seconds=2.0)
# The budgets, named once. Batch entries: SendMessageBatch / BatchWriteItem partial failures (5.15 s of waits).
BATCH_ENTRIES = Retry(attempts=8, base_seconds=0.05, cap_seconds=2.0)
# The client's SendMessageBatch entries: 1.5 s of waits in all, so a send from inside a task ends well within its Lambda's time.
SEND_ENTRIES = Retry(attempts=5, base_seconds=0.1, cap_seconds=2.0)
# State reads and writes a run cannot go on without (the dispatcher's watermark and minute records).
STATE_CALLS = Retry(attempts=8, base_seconds=0.05, cap_seconds=2.0)
# Marking a sent tick's claim sent: 1 s apart, 2 s of waits, well inside the tick's lease (periodic.TICK_LEASE_SECONDS).
TICK_MARK = Retry(attempts=3, base_seconds=1.0, cap_seconds=1.0)


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in consecutive slices of at most ``size`` (an AWS batch limit from ``limits``).

    >>> [list(c) for c in chunks([1, 2, 3, 4, 5], 2)]
    [[1, 2], [3, 4], [5]]
    """
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, got {size}")
    for start in range(0, len(items), size):
        yield items[start:start + size]


def batches(items: Iterable[T], size_of: Callable[[T], int], *, max_count: int, max_bytes: int) -> Iterator[list[T]]:
    """``items`` in order, in consecutive batches of at most ``max_count`` items and ``max_bytes`` in all.

    An item larger than ``max_bytes`` goes alone (the caller checks single sizes against SQS's rules).

    >>> list(batches([400, 500, 300, 900], lambda n: n, max_count=10, max_bytes=1000))
    [[400, 500], [300], [900]]
    """
    batch: list[T] = []
    total = 0
    for item in items:
        size = size_of(item)
        if batch and (len(batch) == max_count or total + size > max_bytes):
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += size
    if batch:
        yield batch
