"""The middleware every Worker runs, in this order (``docs/middleware.md``), before any of the user's:

1. ``BatchMetricsPublisher``: the batch's counts and timings, published once per batch (``observability.BatchMetrics``).
2. ``Heartbeats``: holds the batch's messages while they run, when the settings or a task ask (``worker_tier.worker.heartbeat``).

then the ``middleware`` setting's, then a task's own (``@task(middleware=...)``), and innermost
``Idempotency`` (``worker_tier.worker.idempotency``), which wraps idempotent tasks only. The heavy parts
(the heartbeat's thread, Powertools idempotency) are imported when first needed.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Callable

from worker_tier.core import contract, message
from worker_tier.core import wall_clock
from worker_tier.pipeline.middleware import CallNext, Middleware

if TYPE_CHECKING:
    from worker_tier.worker.fates import _Invocation as Batch
    from worker_tier.worker.idempotency import IdempotentRunner
    from worker_tier.worker.registry import TaskDefinition
    from worker_tier.core.task import Task
    from worker_tier.worker.batch import Worker


class BatchMetricsPublisher(Middleware):
    """Counts the batch's messages and their age when it starts, and publishes the batch's metrics after it.

    The core times each task's handler where it calls it (``TaskDuration``: the task's own time, without the
    middleware around it), and the fates count their own decisions (retried, dead-lettered...), into the same
    ``batch.metrics``.
    """

    def __init__(self, clock: Callable[[], float] = wall_clock.now) -> None:
        self._clock = clock

    def before_batch(self, batch: Batch) -> None:
        batch.metrics.count(contract.METRIC_PROCESSED, len(batch.received))
        oldest_ms = _oldest_sent_ms(batch.received)
        if oldest_ms is not None:
            batch.metrics.message_age(max(0.0, self._clock() * 1000 - oldest_ms))

    def after_batch(self, batch: Batch) -> None:
        """Succeeded: reported done, less those reported done because they were dead-lettered or replaced; then publish."""
        counts = batch.metrics.counts
        replaced = (counts.get(contract.METRIC_DEAD_LETTERED, 0) + counts.get(contract.METRIC_RESCHEDULED, 0)
                    + counts.get(contract.METRIC_REFRESHED, 0))
        batch.metrics.count(contract.METRIC_SUCCEEDED, batch.reported_done - replaced)
        batch.metrics.publish()


class Heartbeats(Middleware):
    """Holds the batch's messages while it runs: in the caller's heartbeat (the container worker), or in the batch's own.

    The batch's own starts when the ``heartbeat`` setting or a task of the batch asks, and stops after the batch.
    """

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    def before_batch(self, batch: Batch) -> None:
        if batch.caller_heartbeat is None:
            self._start(batch)
            return
        heartbeat = batch.heartbeat = batch.caller_heartbeat
        batch.leases = {r["messageId"]: lease for r in batch.records if (lease := heartbeat.lease(r["messageId"]))}
        from worker_tier.worker.idempotency import LeaseContext  # the container worker's path: kept off the Lambda cold start

        batch.lease_context = LeaseContext(heartbeat.extension_seconds)
        # The caller received them: count SQS's 12 hours from its receive, however long they waited since.
        ages = [age for r in batch.records if (age := heartbeat.held_for(r["messageId"])) is not None]
        batch.received_at = self._worker._clock() - max(ages, default=0.0)

    def _start(self, batch: Batch) -> None:
        """The batch's own heartbeat, when asked for. Succeeded messages stay held too: the event source
        deletes them only after the invocation returns, and until then they must not reach another consumer."""
        worker, records = self._worker, batch.records
        if not records or not (worker.settings.heartbeat or worker.registry.any_heartbeat()):
            return
        wanted = worker.settings.heartbeat or any(
            getattr(worker.registry.get(message.record_path(r, worker.settings.http_path)), "heartbeat", False) for r in records
        )
        if not wanted:
            return
        from worker_tier.worker.heartbeat import Heartbeat

        heartbeat = Heartbeat(
            worker._heartbeat_sqs.get(), worker._resolve_queue_url(records), interval_seconds=worker.settings.heartbeat_interval
        )
        # Received up to the receive lag before the invocation started: count the cap from then.
        received_at = time.monotonic() - worker._receive_lag_seconds()
        for record in records:
            batch.leases[record["messageId"]] = heartbeat.hold(record["messageId"], record["receiptHandle"], received_at).expired
        batch.heartbeat = heartbeat
        heartbeat.start()

    def after_batch(self, batch: Batch) -> None:
        if batch.heartbeat is not None and batch.heartbeat is not batch.caller_heartbeat:
            batch.heartbeat.stop()


class Idempotency(Middleware):
    """Runs idempotent tasks at most once per key (``worker_tier.worker.idempotency``); with the caller's heartbeat, the record's
    in-progress expiry follows the message's lease."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self._runner: IdempotentRunner | None = None  # built with the first idempotent task

    def wraps(self, definition: TaskDefinition | None) -> bool:
        return definition is not None and definition.idempotent

    def around_task(self, batch: Batch, task: Task, call_next: CallNext) -> None:
        definition = self._worker.registry.get(task.path)
        assert definition is not None  # wraps() chose this task's chain by its definition
        definition = dataclasses.replace(definition, handler=lambda t: call_next(batch, t))
        runner = self.runner()
        if batch.context is not None or batch.heartbeat is None:
            runner.run(definition, task, batch.context)
            return
        heartbeat = batch.heartbeat
        runner.run(definition, task, batch.lease_context, on_lease=lambda extend: heartbeat.on_extended(task.message_id, extend))

    def runner(self) -> IdempotentRunner:
        """The idempotency layer, imported and built on first use: a function without idempotent tasks never pays for it."""
        if self._runner is None:
            from worker_tier.worker.idempotency import IdempotentRunner

            self._runner = IdempotentRunner(self._worker._state_table, self._worker._dynamodb.get)
        return self._runner


def _oldest_sent_ms(records: list[Any]) -> int | None:
    """The batch's oldest SentTimestamp (epoch ms); None when no record has a readable one.

    SQS writes them as digit strings, all of one length (13 digits until the year 2286), and
    among those text order is number order: one ``int`` per batch rather than one per record.
    """
    try:  # Lambda gives every record its SentTimestamp
        stamps = [r["attributes"]["SentTimestamp"] for r in records]
        if len(set(map(len, stamps))) == 1:
            return int(min(stamps))
        return min(map(int, stamps))
    except (AttributeError, KeyError, TypeError, ValueError):  # a hand-built or malformed record: read each with care
        sent = [ms for r in records if (ms := message.sent_timestamp_ms(r)) is not None]
        return min(sent) if sent else None
