"""Structured logging and CloudWatch metrics (Powertools Logger and Metrics, EMF)."""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from typing import Any, Callable, TypeVar

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from worker_tier.core.contract import (  # the metric names are the contract's, re-exported: importable from here too
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
    METRIC_THROTTLED as METRIC_THROTTLED,
    METRIC_VISIBILITY_REFUSED as METRIC_VISIBILITY_REFUSED,
    METRICS_NAMESPACE as METRICS_NAMESPACE,
    SERVICE_NAME as SERVICE_NAME,
)

logger = Logger(service=os.getenv("POWERTOOLS_SERVICE_NAME", SERVICE_NAME))
metrics = Metrics(
    namespace=os.getenv("POWERTOOLS_METRICS_NAMESPACE", METRICS_NAMESPACE),
    service=os.getenv("POWERTOOLS_SERVICE_NAME", SERVICE_NAME),
)


class _RunningRecordKeys(logging.Filter):
    """Adds the running record's ``message_id`` and ``path`` to each line a thread logs while it runs.

    The keys are read when a line is written, so a record that logs nothing pays one
    thread-local assignment for them (``logger.append_keys`` per record cost more than
    the rest of a message's handling). Each thread sees its own record: the container
    worker runs several at once. A line that names its own ``message_id`` or ``path``
    (``extra=``) keeps it.
    """

    def __init__(self) -> None:
        super().__init__()
        # Its ``task`` is this thread's record: ``set`` writes it; the worker's hot path writes it directly.
        self.running = threading.local()

    def set(self, task: Any) -> None:
        """Name ``task`` (anything with ``message_id`` and ``path``; None for none) on this thread's lines."""
        self.running.task = task

    def current(self) -> Any:
        """The record this thread runs (None outside a worker's task)."""
        return getattr(self.running, "task", None)

    def filter(self, record: logging.LogRecord) -> bool:
        task = getattr(self.running, "task", None)
        if task is not None:
            fields = record.__dict__
            fields.setdefault("message_id", task.message_id)
            fields.setdefault("path", task.path)
        return True


# On the handler, not the logger: lines from child loggers (``Logger(child=True)``) pass through it too.
running_record = _RunningRecordKeys()
logger.registered_handler.addFilter(running_record)
# Threads (the container worker's) share ``metrics``: adding a batch's metrics and flushing them take this lock.
_metrics_lock = threading.Lock()


# The container worker prints its metrics at most this often while busy: one EMF line per message cost more
# CPU than forwarding the message (docs/benchmarks.md, "HTTP forwarding"). A blob holds up to 100 values of a
# metric, and CloudWatch counts each value: sums, averages and maxima come out as with a line per message.
FLUSH_INTERVAL_SECONDS = 1.0
_last_flush = [float("-inf")]  # time.monotonic() of the last flush


def flush() -> None:
    """Print the metrics added so far as EMF and clear them (the Lambda handler's decorator does this per invocation).

    The container worker calls it before it exits, and ``flush_due`` between messages.
    """
    with _metrics_lock:
        _last_flush[0] = time.monotonic()
        if metrics.metric_set:
            metrics.flush_metrics()


def flush_due() -> None:
    """``flush``, unless the last one was less than ``FLUSH_INTERVAL_SECONDS`` ago."""
    if time.monotonic() - _last_flush[0] >= FLUSH_INTERVAL_SECONDS:
        flush()


_Handler = TypeVar("_Handler", bound=Callable[..., Any])
# json.dumps(blob, separators=(",", ":")), as Powertools prints EMF, with one encoder for the process rather than one
# per line; an EMF blob (dicts, lists, strings, numbers) is never circular, so it is not checked for that.
_encode_emf = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


def log_metrics(handler: _Handler) -> _Handler:
    """``metrics.log_metrics`` for a Lambda handler: after each invocation, its metrics as one EMF line (``flush_invocation``)."""

    @functools.wraps(handler)
    def flushing(event: Any, context: Any) -> Any:
        try:
            return handler(event, context)
        finally:
            flush_invocation()

    return flushing  # type: ignore[return-value]


def flush_invocation() -> None:
    """``metrics.flush_metrics()``, printing the same EMF line for less (about half its cost per batch).

    With no metrics, or metrics disabled (``POWERTOOLS_METRICS_DISABLED``, ``POWERTOOLS_DEV``), Powertools' own
    flush does what it does: it warns, or keeps them.
    """
    with _metrics_lock:
        if metrics.metric_set and not is_metrics_disabled():
            print(_encode_emf(metrics.serialize_metric_set()))
            metrics.clear_metrics()
        else:
            metrics.flush_metrics()


def count(name: str, value: float = 1) -> None:
    """Add a Count metric to the current EMF blob."""
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def count_shared(name: str, value: float = 1) -> None:
    """``count`` from any thread of the container worker, under the lock its flushes take (a task's Client counting)."""
    with _metrics_lock:
        count(name, value)


def milliseconds(name: str, value: float) -> None:
    """Add a Milliseconds metric to the current EMF blob."""
    metrics.add_metric(name=name, unit=MetricUnit.Milliseconds, value=value)


class BatchMetrics:
    """One batch's counts and timings, published as one value per metric.

    Powertools' add_metric costs about 25 µs a call, more than the rest of a
    message's handling, so a batch adds each metric once: counts summed, task
    duration as mean and max (each kept in a list, one append per task),
    message age as the batch's oldest.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.durations_ms: list[float] = []  # each timed task's, in order: appended to on the hot path
        self.oldest_age_ms: float | None = None
        self.throttled: dict[str, int] = {}  # task path → messages its flow control throttled

    def count_throttled(self, path: str) -> None:
        """One message of ``path`` waited for its flow control: ``Throttled`` with a ``Task`` dimension, per task."""
        self.throttled[path] = self.throttled.get(path, 0) + 1

    def count(self, name: str, value: int = 1) -> None:
        """Add to a count."""
        self.counts[name] = self.counts.get(name, 0) + value

    def task_duration(self, value_ms: float) -> None:
        """Record one task's run time (the hot path appends to ``durations_ms`` itself)."""
        self.durations_ms.append(value_ms)

    def message_age(self, value_ms: float) -> None:
        """Record one message's age when its task started."""
        if self.oldest_age_ms is None or value_ms > self.oldest_age_ms:
            self.oldest_age_ms = value_ms

    def publish(self) -> None:
        """Add the batch's metrics to the EMF blob the handler flushes; print the per-task ones (``Throttled`` by task)."""
        with _metrics_lock:
            self._add_all()
        if self.throttled:
            _print_per_task(METRIC_THROTTLED, self.throttled)

    def _add_all(self) -> None:
        for name, value in self.counts.items():
            _add_checked(name, _COUNT, value)
        durations = self.durations_ms
        if durations:
            _add_checked(METRIC_TASK_DURATION, _MILLISECONDS, sum(durations) / len(durations))
            _add_checked(METRIC_TASK_DURATION_MAX, _MILLISECONDS, max(durations))
        if self.oldest_age_ms is not None:
            _add_checked(METRIC_MESSAGE_AGE, _MILLISECONDS, self.oldest_age_ms)


# A metric's dimension value may be up to 1,024 characters; a task path is cut to this.
TASK_DIMENSION_CHARS = 250
TASK_DIMENSION = "Task"


def _print_per_task(name: str, counts: dict[str, int]) -> None:
    """One EMF line per task path: ``name`` with the service and ``Task`` dimensions (Powertools' ``single_metric``)."""
    if is_metrics_disabled():
        return
    from aws_lambda_powertools.metrics import single_metric

    for path, value in counts.items():
        with single_metric(name=name, unit=MetricUnit.Count, value=value, namespace=metrics.namespace,
                           default_dimensions={"service": metrics.service}) as metric:
            metric.add_dimension(name=TASK_DIMENSION, value=path[:TASK_DIMENSION_CHARS] or "/")


_COUNT = MetricUnit.Count.value
_MILLISECONDS = MetricUnit.Milliseconds.value
# Powertools flushes a blob at 100 metrics, or 100 values of one: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
_EMF_MAX_METRICS = 100


def _add_checked(name: str, unit: str, value: float) -> None:
    """``metrics.add_metric`` for a name and unit known valid: the entry it would write, without its checks.

    add_metric validates the name, unit, resolution and value on every call and formats a debug
    line even when debug is off (about 4 µs a call); a batch's names and units are our constants.
    Near Powertools' 100-metric limit, add_metric itself takes over, so it flushes as it would.
    """
    entry = metrics.metric_set.get(name)
    if entry is None and len(metrics.metric_set) < _EMF_MAX_METRICS - 1:
        metrics.metric_set[name] = {"Unit": unit, "StorageResolution": 60, "Value": [float(value)]}
    elif entry is not None and entry.get("Unit") == unit and len(entry["Value"]) < _EMF_MAX_METRICS - 1:
        entry["Value"].append(float(value))
    else:
        metrics.add_metric(name=name, unit=unit, value=value)
