"""Resource defaults, in one place: every queue and table Worker Tier creates starts from these."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, RemovalPolicy, aws_dynamodb as dynamodb, aws_logs as logs, aws_s3 as s3, aws_sqs as sqs

from worker_tier.core.contract import (
    DEAD_LETTER_RETENTION_SECONDS,
    FIFO_CONTENT_BASED_DEDUPLICATION,
    STATE_PARTITION_KEY,
    STATE_TTL_ATTRIBUTE,
)
from worker_tier.core import payloads
from worker_tier.core.settings import Settings

LOG_RETENTION = logs.RetentionDays.ONE_MONTH
# What `cdk destroy` does with a dead-letter queue: keeps it, and the dead letters in it (docs/operations.md).
DEAD_LETTER_QUEUE_REMOVAL_POLICY = RemovalPolicy.RETAIN
# What `cdk destroy` does with the payload bucket: keeps it, as the dead letters whose bodies it holds are kept.
PAYLOAD_BUCKET_REMOVAL_POLICY = RemovalPolicy.RETAIN
# An upload S3 never completed (PayloadStore makes none, another producer may) is aborted after a day.
PAYLOAD_ABORT_INCOMPLETE_UPLOAD_DAYS = 1


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


def payload_bucket_props(settings: Settings, longest_delay_seconds: int) -> dict[str, Any]:
    """The payload bucket: SSE-S3, no public access, TLS only, unversioned, objects expiring after the longest life
    of a message (``payloads.expiration_days``), and kept by ``cdk destroy``.

    ``longest_delay_seconds``: the delay table's longest delay when the stack has a delay dispatcher, else 0.
    Retained because a dead letter's body lives only here: destroying the stack keeps the DLQ, so it keeps the bucket.
    """
    days = payloads.expiration_days(settings.retention_period, DEAD_LETTER_RETENTION_SECONDS, longest_delay_seconds)
    return {
        "encryption": s3.BucketEncryption.S3_MANAGED,
        "block_public_access": s3.BlockPublicAccess.BLOCK_ALL,
        "object_ownership": s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        "enforce_ssl": True,
        "versioned": False,
        "lifecycle_rules": [
            s3.LifecycleRule(
                id="ExpirePayloads",
                expiration=Duration.days(days),
                abort_incomplete_multipart_upload_after=Duration.days(PAYLOAD_ABORT_INCOMPLETE_UPLOAD_DAYS),
            )
        ],
        "removal_policy": PAYLOAD_BUCKET_REMOVAL_POLICY,
    }
