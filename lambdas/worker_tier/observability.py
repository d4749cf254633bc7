"""Structured logging and CloudWatch metrics (Powertools Logger and Metrics, EMF)."""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

SERVICE_NAME = "worker-tier"
METRICS_NAMESPACE = "WorkerTier"

# Metric names; the dashboard and alarms use the same constants.
METRIC_PROCESSED = "Processed"
METRIC_SUCCEEDED = "Succeeded"
METRIC_FAILED = "Failed"
METRIC_RETRIED = "Retried"
METRIC_DEAD_LETTERED = "DeadLettered"
METRIC_RELEASED = "Released"
METRIC_TASK_DURATION = "TaskDuration"
METRIC_MESSAGE_AGE = "MessageAgeAtStart"

logger = Logger(service=os.getenv("POWERTOOLS_SERVICE_NAME", SERVICE_NAME))
metrics = Metrics(
    namespace=os.getenv("POWERTOOLS_METRICS_NAMESPACE", METRICS_NAMESPACE),
    service=os.getenv("POWERTOOLS_SERVICE_NAME", SERVICE_NAME),
)


def count(name: str, value: float = 1) -> None:
    """Add a Count metric to the current EMF blob."""
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def milliseconds(name: str, value: float) -> None:
    """Add a Milliseconds metric to the current EMF blob."""
    metrics.add_metric(name=name, unit=MetricUnit.Milliseconds, value=value)
