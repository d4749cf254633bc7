"""Alarm shapes used by more than one construct."""

from __future__ import annotations

from aws_cdk import Duration, aws_cloudwatch as cloudwatch, aws_sqs as sqs
from constructs import Construct


def queue_not_empty_alarm(scope: Construct, construct_id: str, queue: sqs.IQueue, description: str) -> cloudwatch.Alarm:
    """Alarm as soon as a (dead-letter) queue holds any visible message."""
    return queue.metric_approximate_number_of_messages_visible(period=Duration.minutes(1), statistic="Maximum").create_alarm(
        scope,
        construct_id,
        threshold=0,
        evaluation_periods=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        alarm_description=description,
    )
