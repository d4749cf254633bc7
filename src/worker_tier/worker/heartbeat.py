"""Heartbeats: keep held messages invisible while their work is alive, and only then.

A background thread extends the visibility of every message it holds by
``interval + margin`` every ``interval``, in ChangeMessageVisibilityBatch calls of
10. A live task therefore keeps its message; a dead one (its process or thread
gone, so no more beats) gives it back within ``interval + margin`` of the last beat.

SQS caps a message's visibility at 12 hours from when it was received
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html).
Near that cap the heartbeat stops extending the message, releases it for retry
(visibility 0) rather than let it silently overrun, and sets the message's
``expired`` event so the task can see it (``Task.lease_expired()``).

The lease is lost the same way when SQS says the message is no longer ours (its
receipt handle is invalid or the message is not in flight: deleted, or received
again elsewhere), and when no extension has succeeded for longer than the
extension window (a run of failed calls: the message may already be visible). A
failed extension is retried at once, up to ``EXTENSION_RETRIES`` times about a second
apart while its window lasts (the next beat comes after the window ends); when those
fail too and the window ends before the next beat, the lease is lost then.

A beat never overwrites a visibility decided elsewhere: ``release`` waits for a beat
in progress (snapshot to send), so the caller's own change goes out after it. After
each successful extension a message's ``on_extended`` callbacks run (the worker
moves its idempotency record's in-progress expiry along with the lease).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from worker_tier.core import limits
from worker_tier.core.message import safe_repr
from worker_tier.core.observability import logger
from worker_tier.core.settings import DEFAULT_HEARTBEAT_INTERVAL_SECONDS, HEARTBEAT_MARGIN_SECONDS
from worker_tier.core.visibility import VisibilityChange, VisibilityRefusal, change_visibility

# Retries of a failed extension within its window: deployed (interval 30 s, margin 10 s) three tries 1 s apart.
EXTENSION_RETRIES = 3
EXTENSION_RETRY_PAUSE_SECONDS = 1.0


@dataclass
class HeldMessage:
    """A message a heartbeat keeps invisible."""

    message_id: str
    receipt_handle: str
    received_at: float
    expired: threading.Event = field(default_factory=threading.Event)
    extended_at: float = field(kw_only=True)  # last successful extension (this clock); the hold time until the first
    on_extended: list[Callable[[], None]] = field(default_factory=list)


class Heartbeat:
    """Extends the visibility of held messages on a background thread.

    Examples
    --------
    >>> with Heartbeat(sqs, queue_url, interval_seconds=30) as heartbeat:  # doctest: +SKIP
    ...     heartbeat.hold("m1", receipt_handle)
    ...     run_long_task()
    """

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        *,
        interval_seconds: float = DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
        margin_seconds: float = HEARTBEAT_MARGIN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        max_visibility_seconds: float = limits.SQS_MAX_VISIBILITY_TIMEOUT_SECONDS,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self.interval_seconds = interval_seconds
        self.extension_seconds = max(1, round(interval_seconds + margin_seconds))
        self._clock = clock
        self._sleep = sleep
        # Retries fit in the margin, the window's time left after the next scheduled beat.
        self.retry_pause_seconds = min(EXTENSION_RETRY_PAUSE_SECONDS, margin_seconds / (EXTENSION_RETRIES + 1))
        self._max_visibility_seconds = max_visibility_seconds
        self._held: dict[str, HeldMessage] = {}
        self._lock = threading.Lock()
        # Held from a beat's snapshot to the end of its send, and by release(): a released message's own
        # visibility change (sent after release returns) always lands after the beat's extension.
        self._sending = threading.RLock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.calls = 0

    def __enter__(self) -> Heartbeat:
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def hold(self, message_id: str, receipt_handle: str, received_at: float | None = None) -> HeldMessage:
        """Start keeping a message invisible; ``received_at`` (this clock) defaults to now."""
        now = self._clock()
        held = HeldMessage(message_id, receipt_handle, now if received_at is None else received_at, extended_at=now)
        with self._lock:
            self._held[message_id] = held
        return held

    def release(self, message_id: str, receipt_handle: str | None = None) -> None:
        """Stop extending a message (its fate is decided elsewhere: deleted, or given a backoff).

        With ``receipt_handle``, only the hold of that receive is released: a later receive of the same
        message (it came back and runs again) keeps its own. Waits for a beat in progress, so a
        visibility change the caller sends next is not overwritten by it.
        """
        with self._sending, self._lock:
            held = self._held.get(message_id)
            if held is not None and (receipt_handle is None or held.receipt_handle == receipt_handle):
                del self._held[message_id]

    def on_extended(self, message_id: str, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the heartbeat's thread) after each successful extension of a held message."""
        with self._lock:
            held = self._held.get(message_id)
            if held is not None:
                held.on_extended.append(callback)

    def held_for(self, message_id: str) -> float | None:
        """Seconds since a held message was received (this clock), or None when it is not held."""
        with self._lock:
            held = self._held.get(message_id)
        return None if held is None else self._clock() - held.received_at

    def lease(self, message_id: str) -> threading.Event | None:
        """The event set when a held message's lease ends: the 12-hour cap, or lost (``Task.lease_expired``)."""
        with self._lock:
            held = self._held.get(message_id)
        return held.expired if held is not None else None

    def held(self) -> list[str]:
        """Ids of the messages being kept invisible."""
        with self._lock:
            return list(self._held)

    def start(self) -> None:
        """Beat every interval on a daemon thread (it dies with the process, so a dead holder stops beating)."""
        self._stopped.clear()
        self._thread = threading.Thread(target=self._run, name="worker-tier-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and wait for a beat in progress to finish."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def beat(self) -> None:
        """One round: extend every held message, 10 per call; release those at SQS's 12-hour cap; drop lost ones.

        Extensions that failed are retried within their window; the lease is lost if they never succeed in time.
        """
        with self._sending:
            extended, failed = self._beat_and_send()
        for _ in range(EXTENSION_RETRIES):
            if not failed:
                break
            self._sleep(self.retry_pause_seconds)
            with self._sending:
                done, failed = self._retry(failed)
            extended += done
        self._give_up(failed)
        for message in extended:
            self._after_extension(message)

    def _retry(self, failed: list[HeldMessage]) -> tuple[list[HeldMessage], list[HeldMessage]]:
        """Send the failed extensions again, for messages still held whose window has not ended."""
        now = self._clock()
        with self._lock:
            still = [m for m in failed if self._held.get(m.message_id) is m]
        late = [m for m in still if now - m.extended_at >= self.extension_seconds]
        for message in late:
            self._lose(message, "no extension succeeded within the extension window")
        retry = [m for m in still if m not in late]
        if not retry:
            return [], []
        changes = [VisibilityChange(m.message_id, m.receipt_handle, self.extension_seconds) for m in retry]
        self.calls += -(-len(changes) // limits.SQS_MAX_BATCH_ENTRIES)
        return self._settle(retry, change_visibility(self._sqs, self._queue_url, changes), now)

    def _give_up(self, failed: list[HeldMessage]) -> None:
        """After the retries: a message whose window ends before the next beat has lost its lease."""
        now = self._clock()
        with self._lock:
            still = [m for m in failed if self._held.get(m.message_id) is m]
        for message in still:
            if message.extended_at + self.extension_seconds < now + self.interval_seconds:
                self._lose(message, f"the extension and {EXTENSION_RETRIES} retries failed within the extension window")

    def _beat_and_send(self) -> tuple[list[HeldMessage], list[HeldMessage]]:
        """Snapshot, decide and send one round; the messages extended, and those whose extension failed."""
        now = self._clock()
        with self._lock:
            held = list(self._held.values())
        extend: list[HeldMessage] = []
        expire: list[HeldMessage] = []
        for message in held:
            if now - message.extended_at > self.extension_seconds:
                self._lose(message, "no extension succeeded within the extension window")
                continue
            left = message.received_at + self._max_visibility_seconds - now
            (extend if left >= self.extension_seconds + self.interval_seconds else expire).append(message)
        changes = [VisibilityChange(m.message_id, m.receipt_handle, self.extension_seconds) for m in extend]
        changes += [VisibilityChange(m.message_id, m.receipt_handle, 0) for m in expire]
        for message in expire:
            logger.warning("message near SQS's 12-hour visibility cap: released for retry", extra={"message_id": message.message_id})
            message.expired.set()
            self.release(message.message_id)
        if not changes:
            return [], []
        self.calls += -(-len(changes) // limits.SQS_MAX_BATCH_ENTRIES)
        return self._settle(extend, change_visibility(self._sqs, self._queue_url, changes), now)

    def _settle(
        self, extended: list[HeldMessage], refusals: list[VisibilityRefusal], now: float
    ) -> tuple[list[HeldMessage], list[HeldMessage]]:
        """Record successful extensions; a message SQS says is no longer ours loses its lease at once.

        Returns the messages extended and those whose extension failed for now (worth a retry).
        """
        refused = {r.message_id: r for r in refusals}
        succeeded, failed = [], []
        for message in extended:
            refusal = refused.get(message.message_id)
            if refusal is None:
                message.extended_at = now
                succeeded.append(message)
            elif refusal.lost():
                self._lose(message, f"SQS refused the extension: {refusal.code}: {refusal.message}")
            else:
                failed.append(message)
        return succeeded, failed

    @staticmethod
    def _after_extension(message: HeldMessage) -> None:
        """Run a message's ``on_extended`` callbacks; one that raises is logged, never stops the beat."""
        for callback in tuple(message.on_extended):
            try:
                callback()
            except Exception as error:
                logger.warning("on_extended callback failed", extra={"message_id": message.message_id, "error": safe_repr(error)})

    def _lose(self, message: HeldMessage, why: str) -> None:
        """Stop holding a message that may now be with another consumer, and tell its task."""
        logger.warning("heartbeat lost a message's lease", extra={"message_id": message.message_id, "reason": why})
        message.expired.set()
        self.release(message.message_id)

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_seconds):
            try:
                self.beat()
            except Exception as error:  # a failed beat is retried on the next one; the thread must not die
                logger.warning("heartbeat failed", extra={"error": safe_repr(error)})
