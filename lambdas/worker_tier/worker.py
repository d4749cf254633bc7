"""The processing core: routes each message of a batch to its task and decides its fate.

Every record ends in exactly one of:

- succeeded: reported done, so the event source deletes it;
- dead-lettered: copied to the DLQ with ``worker_tier.failure``, then reported done;
- retrying: reported failed, its visibility set to the backoff (or ``RetryLater``) delay;
- released: not started (timeout guard, FIFO group stopped), reported failed with visibility 0.

All visibility changes of a batch go out together, 10 per ChangeMessageVisibilityBatch call.
"""

from __future__ import annotations

import os
import random as _random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Mapping

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, SqsFifoPartialProcessor

from worker_tier import backoff, limits, message, observability
from worker_tier.aws import LazyClient
from worker_tier.dead_letter import DeadLetterError, send_to_dead_letter_queue
from worker_tier.errors import MalformedBodyError, NonRetryableError, RetryLater, UnknownPathError
from worker_tier.idempotency import IdempotentRunner
from worker_tier.observability import logger
from worker_tier.registry import DEFAULT_REGISTRY, Registry, TaskDefinition
from worker_tier.settings import Settings
from worker_tier.task import Task
from worker_tier.visibility import VisibilityChange, change_visibility

if TYPE_CHECKING:
    from worker_tier.heartbeat import Heartbeat

OUTCOME_SUCCEEDED = "succeeded"
OUTCOME_RETRYING = "retrying"
OUTCOME_DEAD_LETTERED = "dead_lettered"
OUTCOME_RELEASED = "released"


@dataclass(frozen=True)
class Outcome:
    """What became of one message; passed to outcome listeners (the local environment prints them)."""

    status: str
    message_id: str
    path: str
    receive_count: int
    detail: str = ""
    visibility_seconds: int | None = None


OutcomeListener = Callable[[Outcome], None]
_listeners: list[OutcomeListener] = []


def add_outcome_listener(listener: OutcomeListener) -> None:
    """Call ``listener`` with every Outcome any Worker in this process decides."""
    _listeners.append(listener)


def remove_outcome_listener(listener: OutcomeListener) -> None:
    """Stop calling ``listener``."""
    _listeners.remove(listener)


class InvocationEndingError(Exception):
    """The invocation's remaining time fell below the safety margin before this record started."""


@dataclass
class _Invocation:
    """Per-invocation state: the Lambda context and the visibility changes decided so far."""

    context: Any
    margin_ms: int
    changes: dict[str, VisibilityChange] = field(default_factory=dict)
    metrics: observability.BatchMetrics = field(default_factory=observability.BatchMetrics)
    heartbeat: Heartbeat | None = None
    leases: dict[str, threading.Event] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # None outside Lambda (tests, tools): then there is no deadline to guard.
        self.remaining_ms: Callable[[], int] | None = getattr(self.context, "get_remaining_time_in_millis", None)

    def time_is_short(self) -> bool:
        return self.remaining_ms is not None and self.remaining_ms() < self.margin_ms

    def set_visibility(self, record: Mapping[str, Any], seconds: int) -> None:
        if self.heartbeat is not None:  # its visibility is now set on purpose: stop extending it
            self.heartbeat.release(record["messageId"])
        seconds = max(0, min(int(seconds), limits.SQS_MAX_VISIBILITY_TIMEOUT_SECONDS))
        self.changes[record["messageId"]] = VisibilityChange(record["messageId"], record["receiptHandle"], seconds)


class Worker:
    """Processes Lambda SQS events against a task registry.

    Examples
    --------
    >>> worker = Worker(Settings(), queue_url="https://sqs.example/q", dead_letter_queue_url="https://sqs.example/dlq")
    >>> worker.handle({"Records": []}, None)
    {'batchItemFailures': []}
    """

    def __init__(
        self,
        settings: Settings,
        *,
        queue_url: str | None,
        dead_letter_queue_url: str | None,
        state_table: str | None = None,
        registry: Registry = DEFAULT_REGISTRY,
        sqs: Any = None,
        dynamodb: Any = None,
        clock: Callable[[], float] = time.time,
        random: Callable[[], float] = _random.random,
        long_queue_url: str | None = None,
    ) -> None:
        self.settings = settings
        self._long_queue_url = long_queue_url
        self.registry = registry
        self._queue_url = queue_url
        self._dead_letter_queue_url = dead_letter_queue_url
        self._sqs = LazyClient("sqs", sqs)
        self._dynamodb = LazyClient("dynamodb", dynamodb)
        self._idempotency = IdempotentRunner(state_table, self._dynamodb.get)
        self._clock = clock
        self._random = random

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ, **overrides: Any) -> Worker:
        """A Worker configured by ``WORKER_TIER_*`` variables, with its task modules imported."""
        settings = Settings.from_environment(environ)
        registry = overrides.pop("registry", DEFAULT_REGISTRY)
        registry.import_modules(settings.task_modules.split(","))
        return cls(
            settings,
            queue_url=environ.get("WORKER_TIER_QUEUE_URL"),
            dead_letter_queue_url=environ.get("WORKER_TIER_DLQ_URL"),
            state_table=environ.get("WORKER_TIER_STATE_TABLE"),
            long_queue_url=environ.get("WORKER_TIER_LONG_QUEUE_URL"),
            registry=registry,
            **overrides,
        )

    def handle(self, event: Mapping[str, Any], context: Any, heartbeat: Heartbeat | None = None) -> dict[str, Any]:
        """Process one Lambda SQS event; return ``{"batchItemFailures": [...]}``.

        ``heartbeat``: one the caller runs and already holds the messages in (the
        container worker); without it, the batch gets its own when asked for.
        """
        records = list(event.get("Records") or [])
        invocation = _Invocation(context, self.settings.timeout_margin * 1000)
        self._count_batch(records, invocation)
        processor = self._new_processor()

        def record_handler(record: Any) -> None:  # Powertools requires the name ``record``
            self._process_record(record.raw_event, invocation)

        if heartbeat is None:
            self._start_heartbeat(records, invocation)
        else:
            invocation.heartbeat = heartbeat
            invocation.leases = {r["messageId"]: lease for r in records if (lease := heartbeat.lease(r["messageId"]))}
        try:
            with processor(records, record_handler, lambda_context=None):
                processor.process()
        finally:
            logger.remove_keys(["message_id", "path"])
            if heartbeat is None and invocation.heartbeat is not None:
                invocation.heartbeat.stop()  # before the batch's own visibility changes go out
        response = processor.response()
        dead_lettered = invocation.metrics.counts.get(observability.METRIC_DEAD_LETTERED, 0)
        invocation.metrics.count(observability.METRIC_SUCCEEDED, len(processor.success_messages) - dead_lettered)
        self._release_undecided(records, response, invocation)
        self._flush(records, invocation)
        invocation.metrics.publish()
        return response

    def sqs(self) -> Any:
        """The SQS client this worker uses (created on first use)."""
        return self._sqs.get()

    def _start_heartbeat(self, records: list[Any], invocation: _Invocation) -> None:
        """Hold every message of the batch while it runs, when the setting or one of its tasks asks.

        Succeeded messages stay held too: the event source deletes them only after the
        invocation returns, and until then they must not reach another consumer.
        """
        if not records or not (self.settings.heartbeat or self.registry.any_heartbeat()):
            return
        wanted = self.settings.heartbeat or any(
            getattr(self.registry.get(message.record_path(r, self.settings.http_path)), "heartbeat", False) for r in records
        )
        if not wanted:
            return
        from worker_tier.heartbeat import Heartbeat

        heartbeat = Heartbeat(self._sqs.get(), self._resolve_queue_url(records), interval_seconds=self.settings.heartbeat_interval)
        # Received up to a batching window before the invocation started: count the cap from then.
        received_at = time.monotonic() - self.settings.max_batching_window
        for record in records:
            invocation.leases[record["messageId"]] = heartbeat.hold(record["messageId"], record["receiptHandle"], received_at).expired
        invocation.heartbeat = heartbeat
        heartbeat.start()

    def _new_processor(self) -> BatchProcessor:
        """Powertools' partial-batch processor; a FIFO queue stops only the failed message group."""
        if self.settings.fifo:
            processor: BatchProcessor = SqsFifoPartialProcessor(skip_group_on_error=True)
        else:
            processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        # Every failure is reported per item, never as a raised BatchProcessingError.
        processor.raise_on_entire_batch_failure = False
        return processor

    def _process_record(self, record: Mapping[str, Any], invocation: _Invocation) -> None:
        """Run one record with its message id and path on every log line (replaced per record, removed per batch)."""
        task = Task.from_record(
            record,
            default_path=self.settings.http_path,
            content_type=self.settings.mime_type,
            remaining_time_ms=invocation.remaining_ms,
            lease=invocation.leases.get(record["messageId"]),
        )
        logger.append_keys(message_id=task.message_id, path=task.path)
        self._run(record, task, invocation)

    def _run(self, record: Mapping[str, Any], task: Task, invocation: _Invocation) -> None:
        """Route, run and decide; raising marks the record failed for the processor."""
        if invocation.time_is_short():
            self._release(record, task, invocation, "invocation ending")
            raise InvocationEndingError(f"less than {invocation.margin_ms} ms left, the safety margin")
        try:
            definition = self._definition(task)
            if definition.container and self._long_queue_url:
                self._forward(record, task, invocation)
                return
            if definition.parser is not None:
                self._parse(definition, task)
            self._call(definition, task, invocation)
        except RetryLater as retry:
            self._retry(record, task, invocation, retry.delay_seconds, retry)
            raise
        except NonRetryableError as error:
            self._dead_letter(record, task, invocation, error)
        except Exception as error:  # a task's failure, whatever its type
            if task.receive_count >= self.settings.max_retries:
                self._dead_letter(record, task, invocation, error)
                return
            delay = backoff.backoff_seconds(
                task.receive_count, self.settings.error_visibility_timeout, self.settings.max_backoff, self._random
            )
            self._retry(record, task, invocation, delay, error)
            raise
        else:
            if _listeners:
                self._emit(OUTCOME_SUCCEEDED, task)

    def _forward(self, record: Mapping[str, Any], task: Task, invocation: _Invocation) -> None:
        """Hand a long task to the container worker's queue, as it came; an error retries it here."""
        self._sqs.get().send_message(
            QueueUrl=self._long_queue_url,
            MessageBody=record.get("body") or "",
            MessageAttributes=message.sqs_attributes(record.get("messageAttributes") or {}),
        )
        invocation.metrics.count(observability.METRIC_FORWARDED)
        if _listeners:
            self._emit(OUTCOME_SUCCEEDED, task, "forwarded to the container worker")

    def _definition(self, task: Task) -> TaskDefinition:
        """The task registered for the message's path, or UnknownPathError."""
        definition = self.registry.get(task.path)
        if definition is None:
            raise UnknownPathError(
                f"no task is registered for path {task.path!r}; registered paths: {', '.join(self.registry.paths()) or 'none'}"
            )
        return definition

    @staticmethod
    def _parse(definition: TaskDefinition, task: Task) -> None:
        """Set ``task.payload`` with the declared parser; MalformedBodyError when it refuses."""
        try:
            task.payload = definition.parser(task.body)  # type: ignore[misc]
        except Exception as error:
            name = getattr(definition.parser, "__qualname__", repr(definition.parser))
            raise MalformedBodyError(
                f"parser {name} of task {task.path!r} rejected the body of message {task.message_id}: {error}"
            ) from error

    def _call(self, definition: TaskDefinition, task: Task, invocation: _Invocation) -> None:
        """Run the handler, through the idempotency layer when the task asks for it."""
        started = time.perf_counter()
        try:
            if definition.idempotent:
                self._idempotency.run(definition, task, invocation.context)
            else:
                definition.handler(task)
        finally:
            invocation.metrics.task_duration((time.perf_counter() - started) * 1000)

    def _retry(
        self, record: Mapping[str, Any], task: Task, invocation: _Invocation, delay: int, error: BaseException
    ) -> None:
        """Schedule a retry after ``delay`` seconds."""
        invocation.set_visibility(record, delay)
        invocation.metrics.count(observability.METRIC_FAILED)
        invocation.metrics.count(observability.METRIC_RETRIED)
        logger.warning("task failed; retrying", extra={"error": repr(error), "retry_in_seconds": delay})
        self._emit(OUTCOME_RETRYING, task, _describe(error), delay)

    def _dead_letter(
        self, record: Mapping[str, Any], task: Task, invocation: _Invocation, error: BaseException
    ) -> None:
        """Copy the message to the DLQ with its reason; if that fails, keep it and retry later."""
        try:
            send_to_dead_letter_queue(
                self._sqs.get(),
                self._require_dead_letter_queue_url(),
                record,
                error,
                attempts=task.receive_count,
                path=task.path,
                now=datetime.fromtimestamp(self._clock(), tz=timezone.utc),
            )
        except DeadLetterError as failure:
            logger.error("dead-letter send failed; message kept for retry", extra={"error": str(failure)})
            delay = backoff.backoff_seconds(
                task.receive_count, self.settings.error_visibility_timeout, self.settings.max_backoff, self._random
            )
            self._retry(record, task, invocation, delay, failure)
            raise
        invocation.metrics.count(observability.METRIC_FAILED)
        invocation.metrics.count(observability.METRIC_DEAD_LETTERED)
        logger.error("task dead-lettered", extra={"error": repr(error), "attempts": task.receive_count})
        self._emit(OUTCOME_DEAD_LETTERED, task, _describe(error))

    def _require_dead_letter_queue_url(self) -> str:
        if not self._dead_letter_queue_url:
            raise DeadLetterError("no dead-letter queue is configured (set WORKER_TIER_DLQ_URL)")
        return self._dead_letter_queue_url

    def _count_batch(self, records: list[Any], invocation: _Invocation) -> None:
        """Processed count, and the age of the batch's oldest message when the batch starts."""
        invocation.metrics.count(observability.METRIC_PROCESSED, len(records))
        sent = [int(r["attributes"]["SentTimestamp"]) for r in records if (r.get("attributes") or {}).get("SentTimestamp")]
        if sent:
            invocation.metrics.message_age(max(0.0, self._clock() * 1000 - min(sent)))

    def _release_undecided(self, records: list[Any], response: Mapping[str, Any], invocation: _Invocation) -> None:
        """Failed records with no decision of ours (a stopped FIFO group) return at once."""
        failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
        for record in records:
            if record["messageId"] in failed and record["messageId"] not in invocation.changes:
                task = Task.from_record(record, default_path=self.settings.http_path, content_type=self.settings.mime_type)
                self._release(record, task, invocation, "an earlier message of its group failed")

    def _release(self, record: Mapping[str, Any], task: Task, invocation: _Invocation, detail: str) -> None:
        """Give an unstarted message back at once: visibility 0."""
        invocation.set_visibility(record, 0)
        invocation.metrics.count(observability.METRIC_RELEASED)
        self._emit(OUTCOME_RELEASED, task, detail, 0)

    def _flush(self, records: list[Any], invocation: _Invocation) -> None:
        """Send every visibility change of the batch, 10 per call."""
        if not invocation.changes:
            return
        change_visibility(self._sqs.get(), self._resolve_queue_url(records), list(invocation.changes.values()))

    def _resolve_queue_url(self, records: list[Any]) -> str:
        """The source queue's URL: configured, or looked up once from the event source ARN."""
        if self._queue_url is None:
            _, _, _, _, account, name = records[0]["eventSourceARN"].split(":", 5)
            self._queue_url = self._sqs.get().get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
        return self._queue_url

    def _emit(self, status: str, task: Task, detail: str = "", visibility: int | None = None) -> None:
        """Tell the outcome listeners."""
        outcome = Outcome(status, task.message_id, task.path, task.receive_count, detail, visibility)
        for listener in tuple(_listeners):
            listener(outcome)


def _describe(error: BaseException) -> str:
    """``Type: message`` for logs and outcomes."""
    return f"{type(error).__name__}: {error}"
