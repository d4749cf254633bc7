"""The container worker: a long-running SQS consumer for tasks longer than Lambda's 15 minutes.

It runs the same registered tasks through the same ``Worker`` core as the Lambda
handler (routing, Task, backoff, RetryLater, NonRetryableError, DLQ with reason,
idempotency): each received message becomes a one-record Lambda-shaped event.
Heartbeats are always on. On SIGTERM it stops receiving, releases (visibility 0) what
it had not started, and lets running tasks finish within a grace period. A message
whose task is still running is never released: two workers would run it at once.
Instead the heartbeat keeps it hidden and the process exits, so the task dies with
it; the message returns when its last extension lapses (interval + margin). The grace
period counts from SIGTERM, and messages a poll returns after it are released at once.
On ECS it keeps task scale-in protection on while it holds work (``protection``).
With HTTP forwarding (``app_port``) it takes no message before the app's health check
answers 200 (``HttpTarget.wait_until_healthy``); a SIGTERM meanwhile ends it cleanly.

A failed ReceiveMessage is logged and retried after a capped backoff; only a
configuration error (access denied, no such queue) stops the worker, after the
same drain as SIGTERM. Messages are received hidden for the heartbeat's window, so a
crash before the first beat gives them back within it. On a FIFO queue the messages
of one group run one after another; after a failure the rest of the group is
released (visibility 0), so the group keeps its order.

It receives no more messages than it has free threads, so none waits hidden behind a
long task (but for the earlier messages of its own FIFO group), and the Worker counts
SQS's 12 hours from each message's real receive. The one exception is a bounded prefetch,
on standard queues only, while tasks are short: once ``PREFETCH_AFTER_SHORT_TASKS`` tasks in
a row each took at most ``PREFETCH_SHORT_TASK_SECONDS``, no running task is older than that,
and fewer than a batch of deletes wait, a receive may take ``Consumer.prefetch`` messages
beyond the free threads (enough to fill a receive of 10, at least one per thread). They are
held by the heartbeat from their receive (scale-in protection counts them) and wait for a
thread; one not started within ``PREFETCH_HOLD_SECONDS`` of its receive is released
(visibility 0) and prefetch stops until tasks are short again, so a long task holds none
hidden beyond that bound; the stop releases them with the other unstarted messages.
Its metrics are printed (EMF) at most once a second while it works (``observability.flush_due``), after a
receive (so within one long poll of the last message when the queue falls idle), while it waits for a thread (so
a long task holds back no earlier message's), and before it exits (again after the drain).
With priorities (``priority_queue_urls``: the work queue's levels, highest first, when it reads them itself under
HTTP forwarding), each receive polls the levels in order, short polls each asking only for the room the higher ones
left, so a backlog on a lower level never holds back a higher one's messages; only when every level came back
empty does it long-poll, on the highest level, for at most ``PRIORITY_LONG_POLL_SECONDS``, so a lower level's new
message waits no longer than that. Each level's messages are held, deleted and released on their own queue.
The module is one idea, the consumer's loop: receiving, prefetching, running, releasing and
draining share one lock and one table of pending chains, so they are kept together.

A succeeded message is deleted in a DeleteMessageBatch shared with other messages
(``worker_tier.container.deletions``: on a standard queue handed to one sender thread, on a FIFO queue
sent by the threads that wait on them), and the heartbeat holds it until SQS answers. Task
scale-in protection stays on while deletes wait. A message whose lease is lost while its
delete waits (its extensions failed) may run again, here or on another worker, as it would
after any lost lease. A delete that fails is logged: the message returns and runs again,
and on a FIFO queue the rest of its group is released, as after a failed task.
From the stop, waiting deletes go out without lingering, within the grace period; a delete
still unanswered at its end is held like a running task, and the exit names it. Before each receive, while fewer than half
the room (threads, plus the prefetch while it is on) is free, running tasks get up to ``RECEIVE_GATHER_SECONDS``
to end, so one receive fills several threads; a long task delays no receive.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from worker_tier.core import contract, limits, observability
from worker_tier.core.aws import error_code
from worker_tier.container.deletions import (
    BACKGROUND_DELETE_LINGER_SECONDS,
    DELETE_LINGER_SECONDS,
    BackgroundDeletions,
    Deletions,
)
from worker_tier.core.errors import QueueConfigurationError
from worker_tier.worker.heartbeat import Heartbeat
from worker_tier.core.envelope import lambda_record
from worker_tier.core.message import safe_repr
from worker_tier.core.observability import logger
from worker_tier.container.protection import PROTECTION_MINUTES, TaskProtection  # noqa: F401 - imported from here too
from worker_tier.core.settings import DEFAULT_CONTAINER_CONCURRENCY, DEFAULT_CONTAINER_GRACE_SECONDS, Settings
from worker_tier.core.visibility import VisibilityChange, change_visibility
from worker_tier.worker.batch import Worker

POLL_WAIT_SECONDS = limits.SQS_MAX_WAIT_TIME_SECONDS
# After the grace period: time to release messages, flush metrics and exit before the stop timeout's SIGKILL.
RELEASE_SECONDS = 5
# EX_TEMPFAIL (sysexits.h): tasks were cut short by the shutdown; their messages return for a retry.
EXIT_CODE_TASKS_ABANDONED = 75
# EX_CONFIG (sysexits.h): the queue cannot be read (access denied, no such queue); no retry can fix it.
EXIT_CODE_CONFIGURATION = 78
# A failed ReceiveMessage (after botocore's own retries) waits 1, 2, 4... seconds, at most 30, before the next.
RECEIVE_BACKOFF_BASE_SECONDS = 1.0
RECEIVE_BACKOFF_MAX_SECONDS = 30.0
# ReceiveMessage errors no retry can fix: the worker drains and exits. The query protocol spells the queue's
# code AWS.SimpleQueueService.NonExistentQueue, the JSON protocol QueueDoesNotExist.
CONFIGURATION_ERROR_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"}
)


def exit_now(code: int) -> None:
    """Flush the logs and end the process now, non-daemon task threads and all (``sys.exit`` would wait for them)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def threads_left() -> list[threading.Thread]:
    """Non-daemon threads still running beside the main thread (a task's own): ``sys.exit`` would wait for them."""
    return [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]


def _queue_arn(sqs: Any, queue_url: str) -> str:
    """The queue's ARN; QueueConfigurationError when SQS refuses in a way no retry fixes (no such queue, access denied)."""
    try:
        response = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    except Exception as error:
        code = error_code(error)
        if code in CONFIGURATION_ERROR_CODES:
            raise _refused("GetQueueAttributes", queue_url, code) from error
        raise
    return str(response["Attributes"]["QueueArn"])


def _refused(operation: str, queue_url: str, code: str) -> QueueConfigurationError:
    """The one-line error of a queue call refused for good: the call, the queue URL, the code, and what to check."""
    return QueueConfigurationError(
        f"{operation} on {queue_url} was refused with {code}: check the queue URL ({contract.QUEUE_URL_VARIABLE}) "
        f"and the task role's sqs:{operation} permission"
    )


class StopSignal(threading.Event):
    """An event that remembers when it was first set (the grace period counts from then)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self.set_at: float | None = None

    def set(self) -> None:
        """Set it, and note the time on the first call."""
        if self.set_at is None:
            self.set_at = self._clock()
        super().set()


@dataclass
class _Source:
    """One queue the consumer reads: its URL and ARN, the heartbeat holding its messages, and its deletes."""

    url: str
    arn: str
    heartbeat: Heartbeat
    deletions: Deletions | None = None
    background: BackgroundDeletions | None = None


@dataclass
class _Chain:
    """Messages run one after another on one thread: one message, or one FIFO group's in receive order."""

    waiting: list[dict[str, Any]]
    current: dict[str, Any] | None = None
    # A prefetched chain (received beyond the free threads) not started by then is released (``_expire_prefetched``).
    hold_until: float | None = None
    started: bool = False
    current_since: float | None = None  # time.monotonic() when ``current`` started


class Consumer:
    """Long-polls a queue and runs each message through ``Worker`` on a pool of threads."""

    def __init__(
        self,
        worker: Worker,
        sqs: Any,
        queue_url: str,
        *,
        concurrency: int = DEFAULT_CONTAINER_CONCURRENCY,
        grace_seconds: float = DEFAULT_CONTAINER_GRACE_SECONDS,
        poll_wait_seconds: int | None = None,
        heartbeat_interval: float | None = None,
        heartbeat: Heartbeat | None = None,
        protection: TaskProtection | None = None,
        exit_process: Callable[[int], None] = exit_now,
        stop_timeout_seconds: float = limits.ECS_FARGATE_MAX_STOP_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        delete_linger_seconds: float | None = None,
        delete_sqs: Any | None = None,
        priority_queue_urls: Sequence[str] = (),
        heartbeat_sqs: Any | None = None,
    ) -> None:
        self.worker = worker
        self.sqs = sqs
        self.queue_url = queue_url
        self.concurrency = concurrency
        self.grace_seconds = grace_seconds
        self.poll_wait_seconds = _poll_wait(poll_wait_seconds, grace_seconds, stop_timeout_seconds)
        interval = heartbeat_interval if heartbeat_interval is not None else worker.settings.heartbeat_interval
        self.heartbeat = heartbeat if heartbeat is not None else Heartbeat(sqs, queue_url, interval_seconds=interval)
        self.protection = protection or TaskProtection()
        self._exit_process = exit_process
        self._clock = clock
        self.stopping = StopSignal(clock)
        self._queue_arn = _queue_arn(sqs, queue_url)
        self._region = self._queue_arn.split(":")[3]
        self._interval, self._heartbeat_sqs = interval, heartbeat_sqs if heartbeat_sqs is not None else sqs
        self._pending: dict[Future[None], _Chain] = {}
        self._ended = threading.Event()  # set each time a chain ends (``_done``): what ``_gather`` waits on
        self._lock = threading.Lock()
        self._receive_failures = 0
        self._short_streak = 0  # tasks in a row that took at most PREFETCH_SHORT_TASK_SECONDS
        self._fatal: QueueConfigurationError | None = None
        deleting_sqs = delete_sqs if delete_sqs is not None else sqs
        self._deletions: Deletions | None = None
        self._background: BackgroundDeletions | None = None
        if queue_url.endswith(".fifo"):  # a group's next message waits until the previous one is deleted
            linger = DELETE_LINGER_SECONDS if delete_linger_seconds is None else delete_linger_seconds
            self._deletions = Deletions(deleting_sqs, queue_url, self._busy, linger, clock)
        else:
            linger = BACKGROUND_DELETE_LINGER_SECONDS if delete_linger_seconds is None else delete_linger_seconds
            self._background = BackgroundDeletions(deleting_sqs, queue_url, self.heartbeat.release, linger, clock)
        primary = _Source(queue_url, self._queue_arn, self.heartbeat, self._deletions, self._background)
        # The queues it polls, highest priority first (``priority_queue_urls``); queue_url alone without priorities.
        self._sources = [primary if url == queue_url else self._level_source(url, deleting_sqs, linger, clock)
                         for url in (priority_queue_urls or (queue_url,))]
        self._primary = primary
        if primary not in self._sources:
            raise QueueConfigurationError(f"priority_queue_urls {list(priority_queue_urls)!r} must include queue_url {queue_url!r}")

    def _level_source(self, url: str, deleting_sqs: Any, linger: float, clock: Callable[[], float]) -> _Source:
        """A priority level's queue beside queue_url: its own heartbeat and background deletes (standard queues only)."""
        heartbeat = Heartbeat(self._heartbeat_sqs, url, interval_seconds=self._interval)
        return _Source(url, _queue_arn(self.sqs, url), heartbeat,
                       background=BackgroundDeletions(deleting_sqs, url, heartbeat.release, linger, clock))

    def run(self) -> None:
        """Consume until ``stopping`` is set, then drain within the grace period (counted from the stop).

        If tasks still run after it, their messages stay held and the process exits
        (``exit_process``) with ``EXIT_CODE_TASKS_ABANDONED``. A configuration error
        from ReceiveMessage stops consuming the same way; ``QueueConfigurationError`` is raised after the drain.
        """
        if not self._app_healthy():
            logger.info("stopped before the app was healthy: no message was taken")
            return
        for source in self._sources:
            source.heartbeat.start()
        self.protection.start(self._holds_work)
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="worker-tier-task")
        if self._background is not None:  # prefetch is for standard queues only: its holds are watched from here
            threading.Thread(target=self._watch_prefetched, name="worker-tier-prefetch", daemon=True).start()
        try:
            self._consume(pool)
        except Exception:  # logged here: an exit for abandoned tasks below would hide it
            logger.exception("container worker stopped consuming on an error")
            raise
        finally:
            self._finish(pool)
        if self._fatal is not None:
            raise self._fatal

    def _app_healthy(self) -> bool:
        """HTTP forwarding: wait until the app's health check answers 200 (False if stopped first); else True."""
        gate = getattr(getattr(self.worker, "app_target", None), "wait_until_healthy", None)
        return gate is None or bool(gate(self.stopping))

    def _consume(self, pool: ThreadPoolExecutor) -> None:
        """Receive while there are free threads (or room to prefetch), until stopping."""
        while not self.stopping.is_set():
            self._gather()
            # The room is read once: it may shrink at any moment (the prefetch stops), and SQS refuses a receive of 0.
            room = min(self._capacity() - self._in_flight(), limits.SQS_MAX_BATCH_ENTRIES)
            if self.stopping.is_set() or room < 1:
                continue
            self._receive_into(pool, room)
            self.protection.hold(self._holds_work())
            observability.flush_due()  # metrics of the last messages before an idle spell: within one long poll

    def _gather(self) -> None:
        """Let running tasks end before a receive, so that one receive fills several threads.

        While fewer than half the threads are free it waits up to RECEIVE_GATHER_SECONDS for
        one to end (with none free, as long as it takes); then only while others end within
        RECEIVE_FOLLOW_SECONDS of each other, so a long task delays no receive.
        """
        deadline = self._clock() + RECEIVE_GATHER_SECONDS
        while True:
            self._ended.clear()  # before the count: a task that ends after it sets it again (no wake-up is lost)
            if self.stopping.is_set() or (free := (capacity := self._capacity()) - self._in_flight()) >= capacity:
                return
            few = 2 * free < capacity
            timeout = (1.0 if free == 0 else deadline - self._clock()) if few else RECEIVE_FOLLOW_SECONDS
            with self._lock:
                running = any(not future.done() for future in self._pending)
            if not running or timeout <= 0:
                return
            # One event set by every task's end, not concurrent.futures.wait over each running future (a waiter
            # installed on up to ``concurrency`` futures, every time one ends).
            if not self._ended.wait(timeout) and not few:
                return
            observability.flush_due()  # the metrics of tasks that ended just before a long one: within a second or so

    def _finish(self, pool: ThreadPoolExecutor) -> None:
        """Drain and send the waiting deletes; exit with the messages still running (or undeleted) held, or stop
        the heartbeat and protection."""
        self.stopping.set()
        for source in self._sources:
            if source.background is not None:
                source.background.hurry()
        observability.flush()
        still_running = self._drain(pool)
        unanswered = [message for source in self._sources if source.background is not None
                      for message in source.background.close(self._grace_left())]
        observability.flush()  # again: the tasks (and deletes) that ended during the grace period counted after the first
        self.protection.stop()
        if still_running or unanswered:
            self._abandon(still_running, unanswered)
        else:
            for source in self._sources:
                source.heartbeat.stop()
            self.protection.hold(False)

    def _receive_into(self, pool: ThreadPoolExecutor, room: int) -> None:
        """One long poll for ``room`` messages (1 to 10: the free threads, and room to prefetch); each is held by the
        heartbeat from its arrival, and one received beyond the free threads must start within PREFETCH_HOLD_SECONDS."""
        messages = self._receive_levels(room)
        if messages and self.stopping.is_set():
            self._release(messages, "received after the stop")
            return
        for message in messages:
            self._source_of(message).heartbeat.hold(message["MessageId"], message["ReceiptHandle"])
        idle_threads = self.concurrency - self._busy()
        hold_until = self._clock() + PREFETCH_HOLD_SECONDS
        for index, chain in enumerate(_chains(messages)):
            if index >= idle_threads:
                chain.hold_until = hold_until
            future = pool.submit(self._run_chain, chain)
            with self._lock:
                self._pending[future] = chain
            future.add_done_callback(self._done)

    def _receive_levels(self, room: int) -> list[dict[str, Any]]:
        """One long poll of the one queue; with priorities, a short poll of each level highest first for the room left,
        then, only if all were empty, a long poll of the highest level bounded by ``PRIORITY_LONG_POLL_SECONDS``."""
        if len(self._sources) == 1:
            return self._receive(room)
        got: list[dict[str, Any]] = []
        for index, source in enumerate(self._sources):
            if room - len(got) < 1 or self.stopping.is_set() or self._fatal is not None:
                break
            got += _tagged(self._receive(room - len(got), source, 0), index)
        if got or self.stopping.is_set() or self._fatal is not None:
            return got
        return _tagged(self._receive(room, self._sources[0], min(self.poll_wait_seconds, PRIORITY_LONG_POLL_SECONDS)), 0)

    def _source_of(self, message: Mapping[str, Any]) -> _Source:
        """The queue a message came from (the one queue without priorities)."""
        index = message.get(SOURCE_KEY)
        return self._sources[index] if isinstance(index, int) else self._primary

    def _receive(self, free: int, source: _Source | None = None, wait_seconds: int | None = None) -> list[dict[str, Any]]:
        """One ReceiveMessage, hidden for the heartbeat's window; a failure is handled and gives no messages."""
        url = self.queue_url if source is None else source.url
        try:
            response = self.sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=free,
                WaitTimeSeconds=self.poll_wait_seconds if wait_seconds is None else wait_seconds,
                VisibilityTimeout=self.heartbeat.extension_seconds,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
        except Exception as error:  # any AWS or network error: decide between a pause and a stop
            self._receive_failed(error, url)
            return []
        self._receive_failures = 0
        return response.get("Messages") or []

    def _receive_failed(self, error: Exception, url: str) -> None:
        """Stop (after a drain) on a configuration error; otherwise pause, longer each time, and poll again."""
        code = error_code(error)
        if code in CONFIGURATION_ERROR_CODES:
            logger.error(
                "the queue cannot be read: draining running tasks, then exiting",
                extra={"queue": url, "code": code, "error": safe_repr(error)},
            )
            self._fatal = _refused("ReceiveMessage", url, code)
            self._fatal.__cause__ = error
            self.stopping.set()
            return
        self._receive_failures += 1
        exponent = min(self._receive_failures - 1, 10)
        pause = min(RECEIVE_BACKOFF_MAX_SECONDS, RECEIVE_BACKOFF_BASE_SECONDS * 2**exponent)
        logger.warning(
            "ReceiveMessage failed: polling again after a pause; running tasks go on",
            extra={"code": code, "error": safe_repr(error), "failures_in_a_row": self._receive_failures, "pause_seconds": pause},
        )
        self.stopping.wait(pause)

    def _run_chain(self, chain: _Chain) -> None:
        """Run a chain's messages in order; after a failure, release the rest of it (visibility 0)."""
        with self._lock:
            chain.started = True
        while (message := self._next(chain)) is not None:
            try:
                succeeded = self._process(message)
            except BaseException:
                self._release_rest(chain, "an earlier message of its group failed")
                raise
            finally:
                with self._lock:
                    short = chain.current_since is not None and _since(chain.current_since) <= PREFETCH_SHORT_TASK_SECONDS
                    chain.current, chain.current_since = None, None
                    self._short_streak = self._short_streak + 1 if short else 0
            if not succeeded:
                self._release_rest(chain, "an earlier message of its group failed")
                return

    def _next(self, chain: _Chain) -> dict[str, Any] | None:
        """The chain's next message, now current; None when it is done, or stopping (the rest is released)."""
        with self._lock:
            if chain.waiting and not self.stopping.is_set():
                chain.current = chain.waiting.pop(0)
                chain.current_since = time.monotonic()
                return chain.current
        self._release_rest(chain, "not started before the stop")
        return None

    def _release_rest(self, chain: _Chain, why: str) -> None:
        """Release the chain's messages not yet started."""
        with self._lock:
            rest, chain.waiting = chain.waiting, []
        self._release(rest, why)

    def _process(self, message: dict[str, Any]) -> bool:
        """Run one message through the shared Worker core; delete it unless it was reported failed (False).

        The worker leaves a succeeded offloaded message's delete to this one (``Worker.handle_batch``), and its
        object is deleted only once SQS confirmed the message's (``Worker.delete_payload``). A delete that fails
        also gives False. Whatever happens, the heartbeat holds the
        message until its fate is settled (deleted, or failed), and the metrics are printed when due.
        """
        handed_off = False
        source = self._source_of(message)
        try:
            record = lambda_record(message, source.arn, self._region)
            handled = self.worker.handle_batch({"Records": [record]}, None, heartbeat=source.heartbeat)
            if handled.response["batchItemFailures"]:
                return False
            pointer = handled.payloads.get(message["MessageId"])
            then = None if pointer is None else functools.partial(self.worker.delete_payload, pointer)
            if source.background is None:
                deleted = source.deletions is not None and source.deletions.delete(message)
                if deleted and then is not None:  # a succeeded offloaded message's object goes after it
                    then()
                return deleted
            source.background.hand_off(message, then)  # its answer releases it from the heartbeat, then runs ``then``
            handed_off = True
            return True
        finally:
            if not handed_off:
                source.heartbeat.release(message["MessageId"])
            observability.flush_due()

    def _done(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.pop(future, None)
        self._ended.set()
        error = None if future.cancelled() else future.exception()
        if error is not None:
            logger.error("message processing crashed", extra={"error": safe_repr(error)})

    def _capacity(self) -> int:
        """Messages it may hold not yet finished: its threads, plus on a standard queue, while tasks are short (the
        last PREFETCH_AFTER_SHORT_TASKS in a row, and every one running now) and SQS keeps up with the deletes (fewer
        than PREFETCH_MAX_PENDING_DELETES wait), ``prefetch`` more."""
        if self._background is None or self._pending_deletes() >= PREFETCH_MAX_PENDING_DELETES:
            return self.concurrency
        with self._lock:
            short = self._short_streak >= PREFETCH_AFTER_SHORT_TASKS and all(
                c.current_since is None or _since(c.current_since) <= PREFETCH_SHORT_TASK_SECONDS
                for c in self._pending.values()
            )
        return self.concurrency + self.prefetch if short else self.concurrency

    @property
    def prefetch(self) -> int:
        """Messages received ahead of the free threads while tasks are short."""
        return max(self.concurrency, limits.SQS_MAX_BATCH_ENTRIES - self.concurrency)

    def _watch_prefetched(self) -> None:
        """Until the stop, release prefetched chains held too long; at the stop, every prefetched chain not started
        (the drain would, but only once the long poll in progress ends: up to ``poll_wait_seconds`` later)."""
        while not self.stopping.wait(PREFETCH_CHECK_SECONDS):
            self._expire_prefetched()
        self._expire_prefetched(stopped=True)

    def _expire_prefetched(self, stopped: bool = False) -> None:
        """Release (visibility 0) each prefetched chain not started by its ``hold_until`` (all of them once
        ``stopped``); prefetch stops until tasks are short again, as its threads are taken by longer tasks."""
        now = self._clock()
        with self._lock:
            late = [
                (f, c) for f, c in self._pending.items()
                if not c.started and c.hold_until is not None and (stopped or c.hold_until <= now)
            ]
        expired = [chain for future, chain in late if future.cancel()]  # False: it has just started
        if expired:
            with self._lock:
                self._short_streak = 0
            why = "not started before the stop" if stopped else f"prefetched and not started within {PREFETCH_HOLD_SECONDS} s"
            for chain in expired:
                self._release_rest(chain, why)

    def _holds_work(self) -> bool:
        """Whether a message is running, waiting in a chain, or waiting for its delete (scale-in protection)."""
        return self._in_flight() > 0 or self._pending_deletes() > 0

    def _pending_deletes(self) -> int:
        """Succeeded messages whose background delete SQS has not answered yet, on every queue it reads."""
        return sum(source.background.pending() for source in self._sources if source.background is not None)

    def _busy(self) -> int:
        """Threads that hold or will soon hold a message: one per chain received and not yet finished."""
        with self._lock:
            return len(self._pending)

    def _in_flight(self) -> int:
        """Messages received and not yet finished (running or waiting in a chain)."""
        with self._lock:
            return sum(len(c.waiting) + (c.current is not None) for c in self._pending.values())

    def _drain(self, pool: ThreadPoolExecutor) -> list[dict[str, Any]]:
        """Release what never started, give running work the rest of the grace period; return the messages still running."""
        with self._lock:
            pending = dict(self._pending)
            unstarted = [m for chain in pending.values() for m in chain.waiting]
            for chain in pending.values():
                chain.waiting = []
        running = [future for future in pending if not future.cancel()]
        self._release(unstarted, "not started before the stop")
        _, still_running = wait(running, timeout=self._grace_left())
        # Nothing running: the idle pool threads end at once (joined, so the exit does not count them as left behind).
        pool.shutdown(wait=not still_running, cancel_futures=True)
        with self._lock:
            return [current for f in still_running if (current := pending[f].current) is not None]

    def _grace_left(self) -> float:
        """Seconds of the grace period left: it counts from the stop (SIGTERM), not from the end of the poll."""
        stopped_at = self.stopping.set_at if self.stopping.set_at is not None else self._clock()
        return max(0.0, stopped_at + self.grace_seconds - self._clock())

    def _abandon(self, running: list[dict[str, Any]], unanswered: list[dict[str, Any]]) -> None:
        """Exit with the heartbeat still holding these messages: they return once its last extension lapses."""
        for messages, what in ((running, "tasks still running"), (unanswered, "deletes of succeeded messages unanswered")):
            if messages:
                logger.warning(
                    f"{what} after the grace period: exiting without releasing their messages (they run again)",
                    extra={
                        "count": len(messages),
                        "message_ids": [m["MessageId"] for m in messages],
                        "grace_seconds": self.grace_seconds,
                        "visible_again_within_seconds": self.heartbeat.extension_seconds,
                    },
                )
        self._exit_process(EXIT_CODE_TASKS_ABANDONED)

    def _refreshed(self, message: dict[str, Any], waits: int, why: str) -> bool:
        """True when a released message's waits brought SQS's count to ``max_retries`` and a fresh copy replaced it."""
        source = self._source_of(message)
        record = lambda_record(message, source.arn, self._region)
        if int(record.get("attributes", {}).get("ApproximateReceiveCount", "1")) < self.worker.settings.max_retries:
            return False
        try:
            return self.worker.refresh_released(record, waits, why)
        except Exception as error:  # the release still happens: the wait is counted, the copy was not made
            logger.warning("a released message could not be replaced by a fresh copy",
                           extra={"message_id": message["MessageId"], "error": f"{type(error).__name__}: {error}"[:300]})
            return False

    def _delete_replaced(self, source: _Source, message: dict[str, Any]) -> None:
        """Delete a message a fresh copy replaced. If SQS refuses (botocore retried already), it stays held by the
        heartbeat until its window ends and then comes back beside its copy: a duplicate, logged, never a loss."""
        try:
            self.sqs.delete_message(QueueUrl=source.url, ReceiptHandle=message["ReceiptHandle"])
        except Exception as error:
            logger.error("a message replaced by a fresh copy could not be deleted: it may run beside its copy",
                         extra={"message_id": message["MessageId"], "error": f"{type(error).__name__}: {error}"[:300]})
        source.heartbeat.release(message["MessageId"])

    def _release(self, messages: list[dict[str, Any]], why: str) -> None:
        """Visibility 0: another worker takes them at once. Each counts a wait first (``worker_tier.flow``): the
        receive it spent unstarted is not an attempt, so it never costs the message one of its ``max_retries``."""
        replaced = []
        for message in messages:
            count = self.worker.add_wait(message["MessageId"], 0, why)
            if count is None and self.worker._state_table:
                observability.count_shared(contract.METRIC_WAIT_UNRECORDED)
            elif count is not None and self._refreshed(message, count, why):
                replaced.append(message)
        if replaced:  # a fresh copy carrying its attempts took each one's place: delete it rather than release it
            messages = [m for m in messages if m not in replaced]
            for source in self._sources:
                for message in (m for m in replaced if self._source_of(m) is source):
                    self._delete_replaced(source, message)
        if messages:
            logger.info("released messages", extra={"count": len(messages), "reason": why})
        for source in self._sources:
            mine = [m for m in messages if self._source_of(m) is source]
            for message in mine:
                source.heartbeat.release(message["MessageId"])
            if mine:
                change_visibility(
                    self.sqs, source.url, [VisibilityChange(m["MessageId"], m["ReceiptHandle"], 0) for m in mine]
                )


# Before a receive, while fewer than half the threads are free, running tasks get at most this long to end, so
# that short tasks are received a few threads at a time rather than a poll per thread freed.
RECEIVE_GATHER_SECONDS = 0.2
# Once enough threads are free, a receive waits for more only while they keep ending this close together.
RECEIVE_FOLLOW_SECONDS = 0.02
# Prefetch (standard queues): after this many tasks in a row of at most PREFETCH_SHORT_TASK_SECONDS each, a receive
# may take ``Consumer.prefetch`` messages beyond the free threads; one not started within PREFETCH_HOLD_SECONDS of
# its receive is released (checked every PREFETCH_CHECK_SECONDS), and prefetch stops until tasks are short again.
PREFETCH_AFTER_SHORT_TASKS = 10
PREFETCH_SHORT_TASK_SECONDS = 0.05
PREFETCH_HOLD_SECONDS = 1.0
PREFETCH_CHECK_SECONDS = 0.1
# No prefetch while this many deletes wait (one batch): SQS is slow to answer, and task threads may soon stop for them.
PREFETCH_MAX_PENDING_DELETES = limits.SQS_MAX_BATCH_ENTRIES


# With priorities, the long poll made when every level's short poll came back empty (on the highest level): a lower
# level's message that arrives meanwhile waits at most this long.
PRIORITY_LONG_POLL_SECONDS = 2
# The key a received message carries, with priorities, naming the index of the queue it came from.
SOURCE_KEY = "worker_tier.source"


def _tagged(messages: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    """Each message marked with the index of the queue it came from."""
    for message in messages:
        message[SOURCE_KEY] = index
    return messages


def concurrency(settings: Settings) -> int:
    """Messages the container worker runs at once: http_connections when it forwards to an app over HTTP
    (``app_port``; EB HttpConnections), else container_concurrency."""
    return settings.http_connections if settings.app_port else settings.container_concurrency


def _since(moment: float) -> float:
    """Seconds since a ``time.monotonic()`` moment (task durations: the injected clock is for the grace period)."""
    return time.monotonic() - moment


def _chains(messages: list[dict[str, Any]]) -> list[_Chain]:
    """One chain per message, except on a FIFO queue: one per message group, in receive order."""
    groups: dict[str, _Chain] = {}
    chains: list[_Chain] = []
    for message in messages:
        group = (message.get("Attributes") or {}).get("MessageGroupId")
        if group is None:
            chains.append(_Chain([message]))
            continue
        if group not in groups:
            groups[group] = _Chain([])
            chains.append(groups[group])
        groups[group].waiting.append(message)
    return chains


def _poll_wait(requested: int | None, grace_seconds: float, stop_timeout_seconds: float) -> int:
    """The long poll's wait: at most SQS's 20 s and the stop timeout less the grace and the release time.

    A poll in progress at SIGTERM is not interrupted, so a longer one could push the drain past SIGKILL.
    """
    budget = stop_timeout_seconds - grace_seconds - RELEASE_SECONDS
    allowed = max(1, min(POLL_WAIT_SECONDS, int(budget)))
    if budget < 1:
        logger.warning(
            f"grace_seconds {grace_seconds} + {RELEASE_SECONDS} s to release and exit leave no room for a long poll "
            f"within the {stop_timeout_seconds} s stop timeout: SIGKILL may land during the drain; polling 1 s"
        )
    if requested is None or requested <= allowed:
        return allowed if requested is None else requested
    logger.warning(
        f"poll_wait_seconds cut from {requested} to {allowed}: it must be <= stop timeout {stop_timeout_seconds} s "
        f"- grace_seconds {grace_seconds} - {RELEASE_SECONDS} s to release, so the drain ends before SIGKILL"
    )
    return allowed
