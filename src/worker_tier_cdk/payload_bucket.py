"""``PayloadBucket``: the S3 bucket that holds message bodies too large for their queue (docs/large-payloads.md).

A producer puts the body under ``payloads/`` and sends a pointer to it, in AWS's SQS Extended Client format; the
worker reads the body, and deletes the object once the message succeeded. The bucket is private (every public
access blocked, ACLs off), refuses plain HTTP, is unversioned (a deleted body is gone), and is encrypted with
S3-managed keys, or with its own customer managed KMS key, rotated yearly, under the ``payload_kms`` setting.

Its lifecycle rule removes what a crash or an unknown send outcome left: every object expires after the longest
life a message can have (``worker_tier.core.payloads.expiration_days``), and an incomplete multipart upload after
a day. ``cdk destroy`` keeps it (and its key), as it keeps the dead-letter queue whose messages point into it.

S3 server access logs go to the existing bucket the ``payload_access_log_bucket`` setting names, under this
construct's path; without one, the cdk-nag finding is acknowledged here with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from aws_cdk import Acknowledgment, Validations, aws_kms as kms, aws_s3 as s3
from constructs import Construct

from worker_tier_cdk import defaults
from worker_tier_cdk.settings import Settings


@dataclass
class PayloadBucketProps:
    """The settings (``payload_kms``, ``payload_access_log_bucket``, ``retention_period``), the longest delay a
    message may wait before its queue (the delay table's, when the stack has a delay dispatcher; else 0), and
    ``bucket_props`` overriding the defaults (``worker_tier_cdk.defaults.payload_bucket_props``)."""

    settings: Settings
    longest_delay_seconds: int = 0
    bucket_props: Mapping[str, Any] | None = None


class PayloadBucket(Construct):
    """Public attributes: ``bucket``, and ``encryption_key`` (None unless the ``payload_kms`` setting is on)."""

    def __init__(self, scope: Construct, construct_id: str, props: PayloadBucketProps) -> None:
        super().__init__(scope, construct_id)
        settings = props.settings
        self.encryption_key = kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            description=f"Worker Tier: encrypts the payload bucket {self.node.path}",
            removal_policy=defaults.PAYLOAD_BUCKET_REMOVAL_POLICY,  # the objects it encrypts outlive the stack
        ) if settings.payload_kms else None
        encryption: dict[str, Any] = {} if self.encryption_key is None else {
            "encryption": s3.BucketEncryption.KMS, "encryption_key": self.encryption_key, "bucket_key_enabled": True,
        }
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            **{
                **defaults.payload_bucket_props(settings, props.longest_delay_seconds),
                **encryption,
                **self._access_logs(settings),
                **(props.bucket_props or {}),
            },
        )
        if self.bucket.policy is not None:  # the TLS-only policy stays with the bucket destroy keeps
            self.bucket.policy.apply_removal_policy(defaults.PAYLOAD_BUCKET_REMOVAL_POLICY)
        if not settings.payload_access_log_bucket:
            Validations.of(self.bucket).acknowledge(
                Acknowledgment(
                    id="AwsSolutions::AwsSolutions-S1",
                    reason="Server access logs need a bucket of the team's to go to: the payload_access_log_bucket "
                    "setting names one. Without it, CloudTrail data events (if the account records them) are the "
                    "record of who read or wrote a payload.",
                )
            )

    def _access_logs(self, settings: Settings) -> dict[str, Any]:
        """The log bucket and this bucket's prefix in it, when the setting names one."""
        if not settings.payload_access_log_bucket:
            return {}
        return {
            "server_access_logs_bucket": s3.Bucket.from_bucket_name(self, "AccessLogs", settings.payload_access_log_bucket),
            "server_access_logs_prefix": f"{self.node.path}/",  # one prefix per payload bucket, named by its path
        }
