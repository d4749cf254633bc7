"""What becomes of a message: the fates ``worker`` lists, decided and carried out per invocation.

``Fates`` holds the decisions (retry, reschedule, dead-letter, release, hold back, lease
lost, wait for a flow limit, and the count of attempts apart from waits) and ``_Invocation`` the
state they write to (visibility changes, metrics, what is already dead-lettered); ``Worker`` routes
and runs each record, then calls on them. Outcome listeners (the local environment prints them) and
the middleware's ``after_task`` hooks (``worker_tier.pipeline.middleware``) hear every decision.

The module is one idea, a message's fate once its task has had its say: every way a message leaves
the worker's hands is decided here, so that each keeps the same guarantees (never lost, never silent).
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Mapping

from worker_tier.core import backoff, contract, limits, message, observability
from worker_tier.worker.dead_letter import DeadLetterQueueSize, send_to_dead_letter_queue
from worker_tier.core.errors import DeadLetterError, NonRetryableError, RetryLater, ThrottledError, WorkerTierError
from worker_tier.core.message import safe_repr
from worker_tier.core.observability import logger
from worker_tier.core.settings import Settings
from worker_tier.core.task import Task
from worker_tier.core.visibility import VisibilityChange

if TYPE_CHECKING:
    from worker_tier.core.aws import LazyClient
    from worker_tier.flow.limiter import Waits
    from worker_tier.worker.registry import Registry
    from worker_tier.worker.tracking import JobTracker
    from worker_tier.core.payloads import Pointer
    from worker_tier.producer.client import Client
    from worker_tier.worker.heartbeat import Heartbeat
    from worker_tier.worker.idempotency import LeaseContext
    from worker_tier.pipeline.middleware import Pipeline

OUTCOME_SUCCEEDED = "succeeded"
OUTCOME_RETRYING = "retrying"
OUTCOME_DEAD_LETTERED = "dead_lettered"
OUTCOME_RESCHEDULED = "rescheduled"
OUTCOME_HELD_BACK = "held_back"
OUTCOME_RELEASED = "released"
OUTCOME_THROTTLED = "throttled"
# The fates a tracked job records (retrying, rescheduled as retrying, dead-lettered); the others are no change of its state.
_JOB_FATES = frozenset({OUTCOME_RETRYING, OUTCOME_RESCHEDULED, OUTCOME_DEAD_LETTERED})

# A throttled message comes back after its wait plus up to this share of it (at most FLOW_JITTER_MAX_SECONDS), so
# the messages one limit throttled together do not all come back in the same second.
FLOW_JITTER_SHARE = 0.5
FLOW_JITTER_MAX_SECONDS = 30

# Kept below SQS's 12-hour visibility limit, which counts from the receive (time to send the change, clock drift).
VISIBILITY_SAFETY_MARGIN_SECONDS = 60


class ThisProcess:
    """This process's id, kept current across ``os.fork`` by an at-fork hook: ``Worker._run`` compares it with its
    invocation's for every message, and ``os.getpid()`` is a system call each time (glibc stopped caching it)."""

    pid = os.getpid()

    @classmethod
    def forked(cls) -> None:
        cls.pid = os.getpid()


os.register_at_fork(after_in_child=ThisProcess.forked)


@dataclass(frozen=True)
class Outcome:
    """What became of one message; passed to outcome listeners (the local environment prints them)."""

    status: str
    message_id: str
    path: str
    receive_count: int
    detail: str = ""
    visibility_seconds: int | None = None
    error: BaseException | None = field(default=None, compare=False, repr=False)  # the failure behind it, if any


OutcomeListener = Callable[[Outcome], None]
_listeners: list[OutcomeListener] = []


def add_outcome_listener(listener: OutcomeListener) -> None:
    """Call ``listener`` with every Outcome any Worker in this process decides."""
    _listeners.append(listener)


def remove_outcome_listener(listener: OutcomeListener) -> None:
    """Stop calling ``listener``."""
    _listeners.remove(listener)


class NoFreshCopyError(WorkerTierError):
    """A message its waits brought to the redrive policy's last receive, with no fresh copy possible: dead-lettered
    with this reason rather than moved by the redrive policy without one."""


class WaitedError(WorkerTierError):
    """A message given back unstarted (the invocation ran out of time): a wait, not an attempt; the reason its fresh
    copy is logged with."""


class HeartbeatLeaseLostError(WorkerTierError):
    """The heartbeat lost the message's lease (its visibility) before its task started: another consumer may run it now.

    Not the delay dispatcher's ``worker_tier.core.errors.LeaseLostError``, which is its run's lease on the state table.
    """


@dataclass
class _Invocation:
    """Per-invocation state: the Lambda context and the visibility changes decided so far.

    It is the ``batch`` the middleware hooks receive: ``records`` (those the worker runs), ``context``
    (Lambda's, None on the container worker), ``metrics`` and ``heartbeat`` are theirs to read.
    """

    context: Any
    margin_ms: int
    received_at: float = 0.0  # worker clock: the batch's messages were received no earlier than this
    changes: dict[str, VisibilityChange] = field(default_factory=dict)
    metrics: observability.BatchMetrics = field(default_factory=observability.BatchMetrics)
    heartbeat: Heartbeat | None = None
    leases: dict[str, threading.Event] = field(default_factory=dict)
    lease_context: LeaseContext | None = None
    dead_lettered: set[str] = field(default_factory=set)  # already in the DLQ: never reported failed
    waits_counted: dict[str, int] = field(default_factory=dict)  # message id → waits taken out of task.receive_count
    left_alone: set[str] = field(default_factory=set)  # reported failed with no visibility change of ours
    pid: int = field(default_factory=lambda: ThisProcess.pid)  # the worker's process: a task's forked child differs
    records: list[Any] = field(default_factory=list)  # the records the batch loop runs
    received: list[Any] = field(default_factory=list)  # every record with a message id, readable or not
    caller_heartbeat: Heartbeat | None = None  # the caller's (the container worker's), which it keeps running
    reported_done: int = 0  # records reported done (succeeded, dead-lettered or replaced), once the batch loop ended
    hooks: _MessageHooks | None = None  # the running message's after_task and on_dead_letter hooks
    # Succeeded offloaded messages and their pointers: their objects go once the messages are deleted (``offloaded``).
    succeeded_payloads: list[tuple[Mapping[str, Any], Pointer]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # None outside Lambda (tests, tools): then there is no deadline to guard.
        self.remaining_ms: Callable[[], int] | None = getattr(self.context, "get_remaining_time_in_millis", None)

    def set_visibility(self, record: Mapping[str, Any], seconds: int, key: str | None = None) -> None:
        key = key or record["messageId"]
        if self.heartbeat is not None:  # its visibility is now set on purpose: stop extending it
            self.heartbeat.release(key)
        handle = record.get("receiptHandle")
        if not isinstance(handle, str) or not handle:
            logger.error("record has no receipt handle: its visibility cannot be set", extra={"message_id": key})
            return
        seconds = max(0, min(int(seconds), limits.SQS_MAX_VISIBILITY_TIMEOUT_SECONDS))
        self.changes[key] = VisibilityChange(key, handle, seconds)


class Fates:
    """The decisions ``Worker`` makes for each message, on the worker's settings, clients and clock."""

    settings: Settings
    _sqs: LazyClient
    _dynamodb: LazyClient
    _clock: Callable[[], float]
    _random: Callable[[], float]
    _dead_letter_queue_url: str | None
    _dead_letter_queue_size: DeadLetterQueueSize
    _delay_table: str | None
    _producers: dict[str, Client]
    _resolve_queue_url: Callable[[list[Any]], str]
    registry: Registry

    def job_tracker(self, invocation: _Invocation | None = None) -> JobTracker:
        """The tracked jobs' writer (``worker_tier.worker.tracking``), imported and built with the first tracked message."""
        tracker = self.__dict__.get("_job_tracker")
        if tracker is None:
            from worker_tier.worker.tracking import JobTracker

            tracker = self.__dict__["_job_tracker"] = JobTracker(self)
        return tracker

    def _lease_lost(self, task: Task, invocation: _Invocation) -> HeartbeatLeaseLostError:
        """A task whose message the heartbeat lost is not started: the error to report it failed with, its visibility left alone."""
        invocation.left_alone.add(task.message_id)
        invocation.metrics.count(contract.METRIC_LEASE_LOST_BEFORE_START)
        logger.warning("message's lease was lost before its task started: not run, left to its new holder")
        return HeartbeatLeaseLostError(f"message {task.message_id} lost its lease before its task started")

    def _fail_safely(self, record: Mapping[str, Any], task: Task, invocation: _Invocation, error: BaseException) -> bool:
        """``_fail``, with a net: if deciding raises, the message backs off (never visibility 0) unless dead-lettered."""
        try:
            return self._fail(record, task, invocation, error)
        except BaseException as failure:  # a listener, a log handler, an error's own methods: never lose the decision
            logger.error(
                "deciding a failed task's fate raised; its message backs off",
                extra={"message_id": task.message_id, "error": safe_repr(failure)},
            )
            if task.message_id in invocation.dead_lettered:
                return False
            if task.message_id not in invocation.changes:
                invocation.set_visibility(record, self._backoff(task))
            return True

    def _fail(self, record: Mapping[str, Any], task: Task, invocation: _Invocation, error: BaseException) -> bool:
        """Decide a failed task's fate; True when its message stays in the queue (reported failed)."""
        if isinstance(error, ThrottledError):
            return self._wait(record, task, invocation, error)
        if not isinstance(error, Exception):
            logger.error("task raised a BaseException; handled as its message's failure", extra={"error": safe_repr(error)})
        self.count_waits(record, task, invocation)
        if isinstance(error, NonRetryableError) or task.receive_count >= self.settings.max_retries:
            return self._dead_letter(record, task, invocation, error)
        return self._retry(record, task, invocation, self._retry_delay(task, error), error)

    def count_waits(self, record: Mapping[str, Any], task: Task, invocation: _Invocation) -> None:
        """Take the receives the message spent waiting (``worker_tier.flow``) out of ``task.receive_count``, its attempts.

        Read only where a wait can have been recorded (a worker with flow-controlled tasks, or the container worker,
        which gives back prefetched messages unstarted) and only after a first receive. Unreadable: left as SQS counts.
        """
        if message.approximate_receive_count(record) <= 1 or task.message_id in invocation.waits_counted:
            return
        if not (invocation.caller_heartbeat is not None or self.registry.any_flow_control()):
            return
        waits = self._waits()
        if waits is None:
            return
        invocation.waits_counted[task.message_id] = 0
        try:
            count = waits.count(task.message_id)
        except Exception as failure:
            logger.warning("the message's waits could not be read: its receives count as attempts",
                           extra={"message_id": task.message_id, "error": _describe(failure)})
            return
        if count:
            before = task.receive_count
            task.__dict__["receive_count"] = max(1, before - count)  # Task.receive_count is a cached property
            invocation.waits_counted[task.message_id] = before - task.receive_count

    def _waits(self) -> Waits | None:
        """The state table's wait counts, or None without a state table."""
        table = getattr(self, "_state_table", None)
        if not table:
            return None
        from worker_tier.flow.limiter import Waits

        return Waits(self._dynamodb.get, table)

    def record_wait(self, task: Task, invocation: _Invocation, seconds: float, limiter: str) -> int | None:
        """Count one wait of ``task``'s message (not an attempt); its attempts so far, or None when it was not recorded."""
        count = self.add_wait(task.message_id, seconds, limiter)
        if count is None:
            invocation.metrics.count(contract.METRIC_WAIT_UNRECORDED)
            return None
        # SQS's receives (with those carried by earlier copies), less every wait: the ones count_waits took out already
        # are added back first, so no wait is taken out twice.
        return max(0, task.receive_count + invocation.waits_counted.get(task.message_id, 0) - count)

    def add_wait(self, message_id: str, seconds: float, why: str) -> int | None:
        """Count one wait of a message, back in ``seconds``: its waits so far; None (logged) when it could not be counted,
        and the receive may then count as an attempt."""
        waits = self._waits()
        if waits is None:
            return None
        try:
            return waits.add(message_id, self._clock() + seconds, why)
        except Exception as failure:
            logger.warning("a wait could not be recorded in the state table: this receive may count as an attempt",
                           extra={"message_id": message_id, "error": _describe(failure)})
            return None

    def _wait(self, record: Mapping[str, Any], task: Task, invocation: _Invocation, error: ThrottledError) -> bool:
        """A message over its task's limit: back after the wait plus jitter, the wait counted as no attempt; False when a
        fresh copy replaced it (its waits had brought SQS's receive count to ``max_retries``) or it was dead-lettered
        (its waits could not be recorded, so they counted as attempts, up to ``max_retries``)."""
        wait = max(0.0, float(error.wait_seconds))
        seconds = max(1, math.ceil(wait + self._random() * min(wait * FLOW_JITTER_SHARE, FLOW_JITTER_MAX_SECONDS)))
        seconds = min(seconds, self._longest_visibility(invocation))
        if not self._delay_table:  # a fresh copy could be delayed no longer: the wait repeats if it must
            seconds = min(seconds, limits.SQS_MAX_DELAY_SECONDS)
        attempts = self.record_wait(task, invocation, seconds, error.limit or str(error))
        invocation.metrics.count(contract.METRIC_THROTTLED)
        invocation.metrics.count_throttled(task.path)
        if attempts is None:  # not recorded: this receive counts as an attempt, and max_retries still ends it with a reason
            self.count_waits(record, task, invocation)  # the waits recorded before still are not attempts
            attempts = task.receive_count
            if attempts >= self.settings.max_retries:
                unrecorded = ThrottledError(error.wait_seconds, f"{error}; the state table could not record its waits, so "
                                            f"they counted as attempts, and max_retries ({self.settings.max_retries}) is "
                                            "reached", error.limit)
                return self._dead_letter(record, task, invocation, unrecorded)
        if self._refresh(record, task, invocation, seconds, error, attempts):
            return False
        if attempts < self.settings.max_retries and self._dead_letter_before_the_redrive(record, task, invocation, error):
            return False
        invocation.set_visibility(record, seconds)
        logger.info("over a flow limit: waits, not an attempt", extra={"error": str(error), "back_in_seconds": seconds})
        self._emit(invocation, OUTCOME_THROTTLED, task, str(error), seconds, error)
        return True

    def refresh_released(self, record: Mapping[str, Any], waits: int, why: str) -> bool:
        """The container worker's release of an unstarted message that has ``waits`` waits: True when a fresh copy
        carrying its attempts replaced it (then the caller deletes it rather than releasing it)."""
        task = Task.from_record(record, default_path=self.settings.http_path, content_type=self.settings.mime_type)
        invocation = _Invocation(None, 0)
        attempts = max(0, task.receive_count - waits)
        waited = WaitedError(why)
        replaced = (self._refresh(record, task, invocation, 0, waited, attempts)
                    or self._dead_letter_before_the_redrive(record, task, invocation, waited))
        invocation.metrics.publish()
        return replaced

    def release_unstarted(self, record: Mapping[str, Any], task: Task, invocation: _Invocation, why: str) -> bool:
        """Count a message given back unstarted as a wait (on a worker with flow-controlled tasks); True when a fresh
        copy replaced it (SQS's count had reached ``max_retries``): it is then done, not released."""
        if not self.registry.any_flow_control():
            return False
        attempts = self.record_wait(task, invocation, 0, why)
        if attempts is None:
            return False
        waited = WaitedError(why)
        return (self._refresh(record, task, invocation, 0, waited, attempts)
                or self._dead_letter_before_the_redrive(record, task, invocation, waited))

    def _refresh(
        self, record: Mapping[str, Any], task: Task, invocation: _Invocation, delay: int, error: BaseException, attempts: int
    ) -> bool:
        """Replace a message whose waits brought SQS's receive count to ``max_retries`` with a fresh copy carrying its
        real ``attempts``, so the redrive policy (at ``max_retries`` + its margin) never moves it for its waits.
        False when no copy was made (the message then goes back as it is)."""
        if message.approximate_receive_count(record) < self.settings.max_retries or attempts >= self.settings.max_retries:
            return False
        if not self._delay_table:  # SQS's own delay: a wait comes back within 15 minutes, to wait again if it must
            delay = min(delay, limits.SQS_MAX_DELAY_SECONDS)
        status = OUTCOME_THROTTLED if isinstance(error, (ThrottledError, WaitedError)) else OUTCOME_RETRYING
        if not self._reschedule(record, task, invocation, delay, error, attempts=attempts, status=status):
            # No room for the attempts attribute (a message with all of SQS's 10): a copy without it (nor the source
            # id an idempotent task's copy carries) runs up to max_retries times more, which is better than the
            # redrive policy moving it without a reason.
            if not self._reschedule(record, task, invocation, delay, error, attempts=0, status=status, minimal=True):
                return False
            invocation.metrics.count(contract.METRIC_ATTEMPTS_DROPPED)
            logger.warning("a fresh copy had no room for its attempts: it starts again from its first",
                           extra={"message_id": task.message_id, "attempts": attempts})
        invocation.metrics.count(contract.METRIC_REFRESHED)
        return True

    def _retry_delay(self, task: Task, error: BaseException) -> int:
        """RetryLater's delay; the backoff for any other error (and for a RetryLater that never set its delay)."""
        delay = getattr(error, "delay_seconds", None) if isinstance(error, RetryLater) else None
        if type(delay) is not int:
            return self._backoff(task)
        return delay

    def _held_back(self, record: Mapping[str, Any], task: Task, invocation: _Invocation) -> bool:
        """True (and its visibility set to the time left) when a delayed message is not due by this clock."""
        due_at = task.due_at
        wait = math.ceil(_trusted_due(task, due_at) - self._clock()) if due_at is not None else 0
        if wait <= 0:
            return False
        wait = min(wait, self._longest_visibility(invocation))
        invocation.set_visibility(record, wait)
        invocation.metrics.count(contract.METRIC_HELD_BACK)
        logger.info("message not due yet: held back", extra={"due_at": str(due_at), "back_in_seconds": wait})
        self._emit(invocation, OUTCOME_HELD_BACK, task, f"due at {due_at}", wait)
        return True

    def _backoff(self, task: Task) -> int:
        """The full-jitter backoff after this receive."""
        return backoff.backoff_seconds(
            task.receive_count, self.settings.error_visibility_timeout, self.settings.max_backoff, self._random
        )

    def _longest_visibility(self, invocation: _Invocation) -> int:
        """The longest visibility SQS still allows this receive: 12 hours from the receive, less a margin."""
        elapsed = self._clock() - invocation.received_at
        return max(0, int(limits.SQS_MAX_VISIBILITY_TIMEOUT_SECONDS - elapsed - VISIBILITY_SAFETY_MARGIN_SECONDS))

    def _retry(
        self, record: Mapping[str, Any], task: Task, invocation: _Invocation, delay: int, error: BaseException
    ) -> bool:
        """Schedule a retry after ``delay`` seconds; False when a delayed copy replaced the message."""
        longest = self._longest_visibility(invocation)
        if self._refresh(record, task, invocation, min(delay, longest), error, task.receive_count):
            invocation.metrics.count(contract.METRIC_FAILED)
            invocation.metrics.count(contract.METRIC_RETRIED)
            return False
        if delay > longest:
            if self._reschedule(record, task, invocation, delay, error):
                return False
            invocation.metrics.count(contract.METRIC_RETRY_DELAY_SHORTENED)
            logger.warning(
                "retry delay beyond SQS's visibility limit: shortened to it",
                extra={"wanted_seconds": delay, "retry_in_seconds": longest},
            )
            delay = longest
        invocation.set_visibility(record, delay)
        invocation.metrics.count(contract.METRIC_FAILED)
        invocation.metrics.count(contract.METRIC_RETRIED)
        logger.warning("task failed; retrying", extra={"error": safe_repr(error), "retry_in_seconds": delay})
        self._emit(invocation, OUTCOME_RETRYING, task, _describe(error), delay, error)
        return True

    def _reschedule(
        self, record: Mapping[str, Any], task: Task, invocation: _Invocation, delay: int, error: BaseException,
        attempts: int | None = None, status: str = OUTCOME_RESCHEDULED, minimal: bool = False,
    ) -> bool:
        """Re-send the message as a copy due in ``delay`` seconds (through the delay table past SQS's 15 minutes),
        carrying ``attempts`` (default: this receive's count); False when that is not possible."""
        if self.settings.fifo or (not self._delay_table and delay > limits.SQS_MAX_DELAY_SECONDS):
            return False
        from worker_tier.producer.client import OutgoingMessage

        attributes, internal = message.copy_attributes(record)
        carried = task.receive_count if attempts is None else attempts
        if carried:  # none to carry: a copy starting at receive 1 counts right without it, and keeps an attribute free
            internal[contract.ATTEMPTS_ATTRIBUTE] = str(carried)
        if not minimal and self._keeps_source_id(task):  # the copy must be the same message to the idempotency layer
            internal[contract.SOURCE_MESSAGE_ID_ATTRIBUTE] = task.attributes.get(contract.SOURCE_MESSAGE_ID_ATTRIBUTE) or task.message_id
        first_received = message.first_received_ms(record)
        if first_received is not None and getattr(self, "app_target", None) is not None:
            # For an app's message, retention_period counts from the original's first receive (an attribute of
            # SQS's 10, so only where an app, the one retention applies to, is served)
            internal[contract.FIRST_RECEIVED_ATTRIBUTE] = str(first_received)
        # An offloaded message's copy carries its pointer (the record's body, with ExtendedPayloadSize among the
        # internal attributes), never the body read from S3: the same object serves the copy.
        offloaded = contract.PAYLOAD_SIZE_ATTRIBUTE in internal or contract.LEGACY_PAYLOAD_SIZE_ATTRIBUTE in internal
        body = (record.get("body") or "") if offloaded else task.body
        copy = OutgoingMessage(task.path, body, delay=delay, attributes=attributes)
        try:
            [result] = self._client(record).send_batch([copy], _internal_attributes={0: internal})
            problem = result.error
        except Exception as failure:  # MessageError (it cannot be stored), or the table refused it
            problem = _describe(failure)
        if problem is not None:
            logger.warning("retry could not be re-sent through the delay table", extra={"error": problem})
            return False
        self._keep_payload(record)
        if status == OUTCOME_RESCHEDULED:
            invocation.metrics.count(contract.METRIC_RESCHEDULED)
            logger.info("retry re-sent through the delay table", extra={"error": safe_repr(error), "retry_in_seconds": delay})
        else:  # a fresh copy that keeps the redrive policy from moving a message for its waits
            logger.info("re-sent as a fresh copy: its waits brought SQS's receive count to max_retries",
                        extra={"error": safe_repr(error), "back_in_seconds": delay, "attempts": attempts})
        self._emit(invocation, status, task, _describe(error), delay, error)
        return True

    def _dead_letter_before_the_redrive(
        self, record: Mapping[str, Any], task: Task, invocation: _Invocation, error: BaseException
    ) -> bool:
        """No fresh copy could be made: when the redrive policy would move the message on its next receive, dead-letter
        it now with a reason saying so (True: its copy is in the DLQ; False: it goes back as it is)."""
        if message.approximate_receive_count(record) < self.settings.redrive_max_receive_count - 1:
            return False
        reason = NoFreshCopyError(f"{_describe(error)}; no fresh copy of the message could be sent (its attributes leave "
                                  "no room, or the queue refused it), and the redrive policy would move it on its next "
                                  "receive without a reason")
        self._dead_letter(record, task, invocation, reason)
        return task.message_id in invocation.dead_lettered  # False when the DLQ refused it: it goes back, never lost

    def _keeps_source_id(self, task: Task) -> bool:
        """True when ``task``'s copy must carry its message id: its task is idempotent, keyed by the message id."""
        definition = self.registry.get(task.path)
        return definition is not None and definition.idempotent and definition.idempotency_key is None

    def _keep_payload(self, record: Mapping[str, Any]) -> None:
        """An offloaded message's copy begins a new life (in the DLQ, or re-sent through the delay table): its object's
        lifecycle clock restarts, so the bucket's rule never removes a body a live copy points at
        (``worker_tier.worker.offloaded.keep_for_new_life``)."""
        attributes = record.get("messageAttributes") or {}
        store = getattr(self, "payloads", None)
        if store is not None and (contract.PAYLOAD_SIZE_ATTRIBUTE in attributes
                                  or contract.LEGACY_PAYLOAD_SIZE_ATTRIBUTE in attributes):
            from worker_tier.worker import offloaded

            offloaded.keep_for_new_life(store, record)

    def _client(self, record: Mapping[str, Any]) -> Client:
        """The producer the worker re-sends a copy of ``record`` with: one per source queue (built on first use), so a
        copy goes back to its own record's queue (its priority level's, or the container worker's own)."""
        queue_url = self._resolve_queue_url([record])
        producer = self._producers.get(queue_url)
        if producer is None:
            from worker_tier.producer.client import Client

            producer = self._producers[queue_url] = Client(
                queue_url, self._delay_table, sqs=self._sqs.get(), dynamodb=self._dynamodb.get(),
                clock=self._clock, delay_shards=self.settings.delay_shards,
            )
        return producer

    def _dead_letter(self, record: Mapping[str, Any], task: Task, invocation: _Invocation, error: BaseException) -> bool:
        """Copy the message to the DLQ with its reason; if anything fails, keep it and back off (True)."""
        try:
            sqs, dead_letter_queue_url = self._sqs.get(), self._require_dead_letter_queue_url()
            send_to_dead_letter_queue(
                sqs,
                dead_letter_queue_url,
                record,
                error,
                attempts=task.receive_count,
                path=task.path,
                now=datetime.fromtimestamp(self._clock(), tz=timezone.utc),
                max_message_bytes=self._dead_letter_queue_size.of(sqs, dead_letter_queue_url),
                last_receive=task.receive_count >= self.settings.redrive_max_receive_count,
                size_known=self._dead_letter_queue_size.known(dead_letter_queue_url),
            )
        except Exception as failure:  # the DLQ refused it, or building the copy raised: never let it escape
            logger.error(
                "dead-letter failed; message kept for retry", extra={"message_id": task.message_id, "error": _describe(failure)}
            )
            invocation.metrics.count(contract.METRIC_DEAD_LETTER_FAILED)
            return self._retry(record, task, invocation, self._backoff(task), failure)
        invocation.dead_lettered.add(task.message_id)
        self._keep_payload(record)
        invocation.metrics.count(contract.METRIC_FAILED)
        invocation.metrics.count(contract.METRIC_DEAD_LETTERED)
        logger.error("task dead-lettered", extra={"error": safe_repr(error), "attempts": task.receive_count})
        hooks = invocation.hooks
        if hooks is not None and hooks.on_dead_letter:
            told(hooks.on_dead_letter, "on_dead_letter", invocation, task, error)
        self._emit(invocation, OUTCOME_DEAD_LETTERED, task, _describe(error), None, error)
        return False

    def _require_dead_letter_queue_url(self) -> str:
        if not self._dead_letter_queue_url:
            raise DeadLetterError(f"no dead-letter queue is configured (set {contract.DLQ_URL_VARIABLE})")
        return self._dead_letter_queue_url

    def _backoff_first(self) -> int:
        """The backoff after a first receive (a record whose receive count cannot be read)."""
        return backoff.backoff_seconds(1, self.settings.error_visibility_timeout, self.settings.max_backoff, self._random)

    def _release(self, record: Mapping[str, Any], task: Task, invocation: _Invocation, detail: str) -> None:
        """Give an unstarted message back at once: visibility 0."""
        invocation.set_visibility(record, 0)
        invocation.metrics.count(contract.METRIC_RELEASED)
        self._emit(invocation, OUTCOME_RELEASED, task, detail, 0)

    def _emit(
        self, invocation: _Invocation, status: str, task: Task, detail: str = "", visibility: int | None = None,
        error: BaseException | None = None,
    ) -> None:
        """Tell the outcome listeners, then the middleware's ``after_task`` hooks (whose errors are only logged)."""
        if status in _JOB_FATES:
            attributes = task.record.get("messageAttributes")
            if attributes and contract.JOB_ATTRIBUTE in attributes:  # a tracked message (worker_tier.worker.tracking)
                self.job_tracker(invocation).fate(task, status, detail, visibility)
        outcome = Outcome(status, task.message_id, task.path, task.receive_count, detail, visibility, error)
        for listener in tuple(_listeners):
            listener(outcome)
        hooks = invocation.hooks
        if hooks is not None and hooks.after_task:
            told(hooks.after_task, "after_task", invocation, task, outcome)


@dataclass(frozen=True)
class _MessageHooks:
    """A message's middleware: its task's around-task chain (None before routing) and the hooks that hear its fate."""

    call: Callable[[Any, Task], None] | None
    before_task: tuple[Callable[..., None], ...]  # the task's own middleware's (the worker's ran before routing)
    after_task: tuple[Callable[..., None], ...]
    on_dead_letter: tuple[Callable[..., None], ...]

    @classmethod
    def of(cls, pipeline: Pipeline, call: Callable[[Any, Task], None] | None = None, own: Pipeline | None = None) -> _MessageHooks:
        """``pipeline``'s hooks that hear a fate, with ``call``; ``own`` (the task's own middleware) adds its before_task."""
        return cls(call, own.before_task if own is not None else (), pipeline.after_task, pipeline.on_dead_letter)


def told(hooks: tuple[Callable[..., None], ...], name: str, *args: Any) -> None:
    """Call hooks that come after a decision: one that raises is logged, and the decision stands."""
    for hook in hooks:
        try:
            hook(*args)
        except BaseException as error:  # a hook's bug must not undo or repeat a fate already carried out
            logger.error(
                f"middleware {name} hook raised; logged, the message's fate stands",
                extra={"hook": getattr(hook, "__qualname__", safe_repr(hook)), "error": _describe(error)},
            )


def _describe(error: BaseException) -> str:
    """``Type: message`` for logs and outcomes, cut to ``message.MAX_LOGGED_ERROR_CHARS``."""
    return f"{type(error).__name__}: {message.error_text(error, message.MAX_LOGGED_ERROR_CHARS)}"


def _trusted_due(task: Task, due_at: datetime) -> float:
    """The due time to hold a message to: its ``due_at``, but never past what its sender could have meant.

    Whoever sent it (the delay dispatcher, or a Client's ``at=``) gave it at most SQS's 900 s of DelaySeconds,
    so by SQS's own clock it was due at most 900 s plus the clock-skew tolerance after it was sent. A
    ``due_at`` beyond that comes from a sender's clock far ahead: holding the message to it would only
    spend receives until the redrive took it without a reason.
    """
    due = due_at.timestamp()
    sent = task.sent_at
    if sent is None:
        return due
    from worker_tier.delays.delay import MAX_CLOCK_SKEW_SECONDS  # the delay path's module, kept off the worker's cold start

    latest = sent.timestamp() + limits.SQS_MAX_DELAY_SECONDS + MAX_CLOCK_SKEW_SECONDS
    if due > latest:
        logger.warning(
            f"{contract.DUE_AT_ATTRIBUTE} is further ahead than its sender could have meant: held to send time + "
            f"{limits.SQS_MAX_DELAY_SECONDS + MAX_CLOCK_SKEW_SECONDS} s instead",
            extra={"due_at": str(due_at), "sent_at": str(sent)},
        )
        return latest
    return due
