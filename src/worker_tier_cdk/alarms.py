"""Alarm shapes used by more than one construct."""

from __future__ import annotations

from aws_cdk import Duration, aws_cloudwatch as cloudwatch, aws_sqs as sqs
from constructs import Construct

from worker_tier.core.contract import METRICS_NAMESPACE, SERVICE_NAME


def queue_not_empty_alarm(scope: Construct, construct_id: str, queue: sqs.IQueue, description: str) -> cloudwatch.Alarm:
    """Alarm as soon as a (dead-letter) queue holds any visible message."""
    metric = queue.metric_approximate_number_of_messages_visible(period=Duration.minutes(1), statistic="Maximum")
    return nonzero_alarm(scope, construct_id, metric, description)


def nonzero_alarm(scope: Construct, construct_id: str, metric: cloudwatch.Metric, description: str) -> cloudwatch.Alarm:
    """Alarm on any value above zero in one period; no data is no trouble."""
    return metric.create_alarm(
        scope,
        construct_id,
        threshold=0,
        evaluation_periods=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        alarm_description=description,
    )


def count_metric(metric_name: str, period_minutes: int = 1) -> cloudwatch.Metric:
    """The Sum of one of Worker Tier's own count metrics (EMF, namespace and service dimension)."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=metric_name,
        dimensions_map={"service": SERVICE_NAME},
        statistic="Sum",
        period=Duration.minutes(period_minutes),
    )


def count_alarm(scope: Construct, construct_id: str, metric_name: str, description: str) -> cloudwatch.Alarm:
    """Alarm on any non-zero count of one of Worker Tier's own metrics within five minutes."""
    return nonzero_alarm(scope, construct_id, count_metric(metric_name, period_minutes=5), description)
