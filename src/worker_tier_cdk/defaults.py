"""Resource defaults, in one place: every queue and table Worker Tier creates starts from these."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, RemovalPolicy, aws_dynamodb as dynamodb, aws_logs as logs, aws_sqs as sqs

from worker_tier.core.contract import (
    DEAD_LETTER_RETENTION_SECONDS,
    FIFO_CONTENT_BASED_DEDUPLICATION,
    STATE_PARTITION_KEY,
    STATE_TTL_ATTRIBUTE,
)
from worker_tier.core.settings import Settings

LOG_RETENTION = logs.RetentionDays.ONE_MONTH
# What `cdk destroy` does with a dead-letter queue: keeps it, and the dead letters in it (docs/operations.md).
DEAD_LETTER_QUEUE_REMOVAL_POLICY = RemovalPolicy.RETAIN


def queue_props(settings: Settings) -> dict[str, Any]:
    """A work queue: SSE-SQS, TLS only, timeouts and retention from the settings."""
    return {
        "encryption": sqs.QueueEncryption.SQS_MANAGED,
        "enforce_ssl": True,
        "visibility_timeout": Duration.seconds(settings.visibility_timeout),
        "retention_period": Duration.seconds(settings.retention_period),
        **_fifo_props(settings),
    }


def dead_letter_queue_props(settings: Settings) -> dict[str, Any]:
    """A dead-letter queue: SSE-SQS, TLS only, kept for SQS's maximum 14 days, and kept by ``cdk destroy``.

    Retained so that destroying a stack never deletes its dead letters with it (the tables and log groups are
    retained too); ``dead_letter_queue_props={"removal_policy": RemovalPolicy.DESTROY}`` deletes it instead.
    """
    return {
        "encryption": sqs.QueueEncryption.SQS_MANAGED,
        "enforce_ssl": True,
        "retention_period": Duration.seconds(DEAD_LETTER_RETENTION_SECONDS),
        "removal_policy": DEAD_LETTER_QUEUE_REMOVAL_POLICY,
        **_fifo_props(settings),
    }


def _fifo_props(settings: Settings) -> dict[str, Any]:
    """FIFO queues (a DLQ of a FIFO queue is FIFO too) without content-based deduplication (see worker_tier.core.contract)."""
    return {"fifo": True, "content_based_deduplication": FIFO_CONTENT_BASED_DEDUPLICATION} if settings.fifo else {}


def state_table_props() -> dict[str, Any]:
    """The shared state table: on-demand, encrypted, point-in-time recovery, TTL."""
    return {
        "partition_key": dynamodb.Attribute(name=STATE_PARTITION_KEY, type=dynamodb.AttributeType.STRING),
        "billing": dynamodb.Billing.on_demand(),
        "encryption": dynamodb.TableEncryptionV2.aws_managed_key(),
        "point_in_time_recovery_specification": dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        "time_to_live_attribute": STATE_TTL_ATTRIBUTE,
        "removal_policy": RemovalPolicy.RETAIN,
    }
