"""Structured logging and CloudWatch metrics (Powertools Logger and Metrics, EMF)."""

from __future__ import annotations

import os
import threading

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from worker_tier.contract import (  # the metric names are the contract's, re-exported: importable from here too
    METRIC_DEAD_LETTER_FAILED as METRIC_DEAD_LETTER_FAILED,
    METRIC_DEAD_LETTERED as METRIC_DEAD_LETTERED,
    METRIC_FAILED as METRIC_FAILED,
    METRIC_FORWARDED as METRIC_FORWARDED,
    METRIC_HELD_BACK as METRIC_HELD_BACK,
    METRIC_LEASE_LOST_BEFORE_START as METRIC_LEASE_LOST_BEFORE_START,
    METRIC_MALFORMED_RECORDS as METRIC_MALFORMED_RECORDS,
    METRIC_MESSAGE_AGE as METRIC_MESSAGE_AGE,
    METRIC_PROCESSED as METRIC_PROCESSED,
    METRIC_RELEASED as METRIC_RELEASED,
    METRIC_RESCHEDULED as METRIC_RESCHEDULED,
    METRIC_RETRIED as METRIC_RETRIED,
    METRIC_RETRY_DELAY_SHORTENED as METRIC_RETRY_DELAY_SHORTENED,
    METRIC_SUCCEEDED as METRIC_SUCCEEDED,
    METRIC_TASK_DURATION as METRIC_TASK_DURATION,
    METRIC_TASK_DURATION_MAX as METRIC_TASK_DURATION_MAX,
    METRIC_VISIBILITY_REFUSED as METRIC_VISIBILITY_REFUSED,
    METRICS_NAMESPACE as METRICS_NAMESPACE,
    SERVICE_NAME as SERVICE_NAME,
)

logger = Logger(service=os.getenv("POWERTOOLS_SERVICE_NAME", SERVICE_NAME))
metrics = Metrics(
    namespace=os.getenv("POWERTOOLS_METRICS_NAMESPACE", METRICS_NAMESPACE),
    service=os.getenv("POWERTOOLS_SERVICE_NAME", SERVICE_NAME),
)
# Threads (the container worker's) share ``metrics``: adding a batch's metrics and flushing them take this lock.
_metrics_lock = threading.Lock()


def flush() -> None:
    """Print the metrics added so far as EMF and clear them (the Lambda handler's decorator does this per invocation).

    The container worker calls it after each message and before it exits.
    """
    with _metrics_lock:
        if metrics.metric_set:
            metrics.flush_metrics()


def count(name: str, value: float = 1) -> None:
    """Add a Count metric to the current EMF blob."""
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def milliseconds(name: str, value: float) -> None:
    """Add a Milliseconds metric to the current EMF blob."""
    metrics.add_metric(name=name, unit=MetricUnit.Milliseconds, value=value)


class BatchMetrics:
    """One batch's counts and timings, published as one value per metric.

    Powertools' add_metric costs about 25 µs a call, more than the rest of a
    message's handling, so a batch adds each metric once: counts summed, task
    duration as mean and max, message age as the batch's oldest.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.durations_ms: list[float] = []
        self.oldest_age_ms: float | None = None

    def count(self, name: str, value: int = 1) -> None:
        """Add to a count."""
        self.counts[name] = self.counts.get(name, 0) + value

    def task_duration(self, value_ms: float) -> None:
        """Record one task's run time."""
        self.durations_ms.append(value_ms)

    def message_age(self, value_ms: float) -> None:
        """Record one message's age when its task started."""
        if self.oldest_age_ms is None or value_ms > self.oldest_age_ms:
            self.oldest_age_ms = value_ms

    def publish(self) -> None:
        """Add the batch's metrics to the EMF blob the handler flushes."""
        with _metrics_lock:
            self._add_all()

    def _add_all(self) -> None:
        for name, value in self.counts.items():
            count(name, value)
        if self.durations_ms:
            milliseconds(METRIC_TASK_DURATION, sum(self.durations_ms) / len(self.durations_ms))
            milliseconds(METRIC_TASK_DURATION_MAX, max(self.durations_ms))
        if self.oldest_age_ms is not None:
            milliseconds(METRIC_MESSAGE_AGE, self.oldest_age_ms)
