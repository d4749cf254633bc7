"""``DelayRecovery``: the delay table's safety net, a function fed by the table's stream.

It delivers what the delay dispatcher could have missed: items the TTL deleted
before dispatch, and late writes behind the watermark (``worker_tier.delays.delay_recovery``
has the rules). The event source mapping passes only INSERTs and TTL REMOVEs of
message items; Lambda's stream reads and filtered-out records cost nothing.

Nothing is lost on the assumption that each stream record is processed within
the stream's 24-hour retention. The mapping retries a failing batch for
``STREAM_MAX_RECORD_AGE_SECONDS`` (12 h), splitting it to isolate a bad record,
then names it in the failure queue (alarmed) while the stream still holds its
records for the other 12 h; the IteratorAge alarm fires after
``ITERATOR_AGE_ALARM_SECONDS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from aws_cdk import Acknowledgment, Duration, Validations, aws_cloudwatch as cloudwatch, aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam, aws_lambda as lambda_, aws_sqs as sqs
from aws_cdk.aws_lambda_event_sources import SqsDlq
from constructs import Construct

from worker_tier_cdk import defaults
from worker_tier_cdk.alarms import count_alarm, queue_not_empty_alarm
from worker_tier_cdk.function import ServiceFunction, ServiceFunctionProps
from worker_tier_cdk.grants import CANCELLABLE_MESSAGE_KEY_PATTERN, REFILE_ACTIONS, grant_items, grant_keys
from worker_tier.delays import delay_recovery
from worker_tier.core import limits
from worker_tier.core.contract import DELAY_BUCKET_KEY_PREFIX as DELAYED_MESSAGE_KEY_PREFIX
from worker_tier.core.contract import DISPATCHER_KEY_PREFIX
from worker_tier.core.contract import METRIC_LATE_WRITES, METRIC_RECOVERED_FROM_TTL, METRIC_RECOVERY_WATERMARK_AHEAD, Resources
from worker_tier.core.settings import Settings

RECOVERY_HANDLER = "worker_tier.handlers.recovery.lambda_handler"
# A batch of 1,000 records needs at most 100 SendMessageBatch calls; a run of transient failures
# (retry.BATCH_ENTRIES's backoff) costs about 5 s before the batch stops.
RECOVERY_TIMEOUT_SECONDS = 90
# Measured in bench/scheduler_bench.py: the safety net is a few GetItems and SendMessageBatch calls per batch.
RECOVERY_MEMORY_MB = limits.LAMBDA_MIN_MEMORY_MB
# https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html
STREAM_BATCH_SIZE = 1000
# The longest window a stream mapping allows makes the fewest invocations (bench/scheduler_bench.py). It delays
# only what is already late (late writes, TTL recoveries) by up to 5 minutes, and refiles, which go into minutes
# more than 15 minutes ahead.
STREAM_MAX_BATCHING_WINDOW_SECONDS = limits.LAMBDA_STREAM_MAX_BATCHING_WINDOW_SECONDS
# The binding bound is the record age: half the stream's 24-hour retention, leaving the other half to replay.
STREAM_MAX_RECORD_AGE_SECONDS = delay_recovery.DYNAMODB_STREAM_RETENTION_SECONDS // 2
STREAM_RETRY_ATTEMPTS = 10_000  # Lambda's maximum: retries stop at the record age first
# Normal age is the batching window plus a second or two.
ITERATOR_AGE_ALARM_SECONDS = 30 * 60
# What Lambda's stream poller does with the function's role (the runtime itself reads no stream):
# https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html#services-ddb-permissions
STREAM_READ_ACTIONS = ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator")
# ListStreams names no resource type (Resource "*" only): https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html
STREAM_LIST_ACTIONS = ("dynamodb:ListStreams",)
STATE_READ_ACTIONS = ("dynamodb:GetItem",)
# A cancellable message's insert is sent only if its item is still there (not cancelled): one GetItem of the item,
# on the cancellable shard's keys (worker_tier.delays.delay_recovery's ``_cancelled``).
CANCELLABLE_READ_ACTIONS = ("dynamodb:GetItem",)


@dataclass
class DelayRecoveryProps:
    """The delay table, the dispatcher's state table, the work queue and its DLQ.

    The delay table must be built with ``dynamo_stream=StreamViewType.NEW_AND_OLD_IMAGES``
    (a TableV2 does not say at synth whether it has a stream, so this cannot be checked here).
    """

    delay_table: dynamodb.TableV2
    state_table: dynamodb.ITableV2
    queue: sqs.IQueue
    dead_letter_queue: sqs.IQueue
    alarm_actions: Sequence[cloudwatch.IAlarmAction] = field(default_factory=list)


class DelayRecovery(Construct):
    """Public attributes: ``function``, ``mapping``, ``failure_queue``, ``failure_alarm``,
    ``iterator_age_alarm``, ``late_write_alarm``, ``ttl_recovery_alarm`` and ``watermark_ahead_alarm``."""

    def __init__(self, scope: Construct, construct_id: str, props: DelayRecoveryProps) -> None:
        super().__init__(scope, construct_id)
        service = ServiceFunction(
            self,
            "Recovery",
            ServiceFunctionProps(
                handler=RECOVERY_HANDLER,
                timeout_seconds=RECOVERY_TIMEOUT_SECONDS,
                memory_mb=RECOVERY_MEMORY_MB,
                environment=Resources(
                    state_table=props.state_table.table_name, delay_table=props.delay_table.table_name,
                    queue_url=props.queue.queue_url, dlq_url=props.dead_letter_queue.queue_url,
                ).to_environment(),
                description="Worker Tier: delivers delayed messages the delay dispatcher missed (TTL expiry, late writes)",
            ),
        )
        self.function = service.function
        self._grant(props)
        self._add_failure_queue()
        self.mapping = self._mapping(props.delay_table)
        self.mapping.node.add_dependency(service.role)  # the role may read the stream before the mapping starts
        self._add_alarms(props.alarm_actions)

    def _grant(self, props: DelayRecoveryProps) -> None:
        """Read the stream and the dispatcher's items (watermark, minute records); refile message items; send to the queues."""
        stream_arn = props.delay_table.table_stream_arn
        if stream_arn is None:
            raise ValueError(f"DelayRecovery reads the delay table's stream, and table {props.delay_table.node.path} has none")
        self.function.add_to_role_policy(iam.PolicyStatement(actions=list(STREAM_READ_ACTIONS), resources=[stream_arn]))
        self.function.add_to_role_policy(iam.PolicyStatement(actions=list(STREAM_LIST_ACTIONS), resources=["*"]))
        Validations.of(self.function.role).acknowledge(  # type: ignore[arg-type]  # ServiceFunction always makes a role
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason="dynamodb:ListStreams, which Lambda's stream poller calls with this role, has no resource-level "
                "permissions: AWS requires Resource '*' for it. It lists stream ARNs and reads no data.",
            )
        )
        grant_items(props.state_table, self.function, actions=STATE_READ_ACTIONS, leading_key_prefixes=[DISPATCHER_KEY_PREFIX])
        grant_items(props.delay_table, self.function, actions=REFILE_ACTIONS, leading_key_prefixes=[DELAYED_MESSAGE_KEY_PREFIX])
        grant_keys(props.delay_table, self.function, CANCELLABLE_READ_ACTIONS, [CANCELLABLE_MESSAGE_KEY_PATTERN])
        props.queue.grant_send_messages(self.function)
        props.dead_letter_queue.grant_send_messages(self.function)

    def _add_failure_queue(self) -> None:
        """Where the mapping names a batch it gave up on (a standard queue: the only kind Lambda takes)."""
        self.failure_queue = sqs.Queue(self, "StreamFailureQueue", **defaults.dead_letter_queue_props(Settings()))
        Validations.of(self.failure_queue).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-SQS3",
                reason="This queue is itself a dead-letter queue: the stream mapping's on-failure destination, read by operators.",
            )
        )
        self.failure_alarm = queue_not_empty_alarm(
            self,
            "StreamFailureQueueNotEmpty",
            self.failure_queue,
            "The delay recovery function gave up on a stream batch: replay the named records from the delay "
            "table's stream before they are 24 h old, or delayed messages may be lost.",
        )

    def _mapping(self, table: dynamodb.TableV2) -> lambda_.EventSourceMapping:
        """INSERTs and TTL REMOVEs of message items, in large batches, retried from the first failed record."""
        return lambda_.EventSourceMapping(
            self,
            "StreamMapping",
            target=self.function,
            event_source_arn=table.table_stream_arn,
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=STREAM_BATCH_SIZE,
            max_batching_window=Duration.seconds(STREAM_MAX_BATCHING_WINDOW_SECONDS),
            bisect_batch_on_error=True,
            report_batch_item_failures=True,
            retry_attempts=STREAM_RETRY_ATTEMPTS,
            max_record_age=Duration.seconds(STREAM_MAX_RECORD_AGE_SECONDS),
            on_failure=SqsDlq(self.failure_queue),
            filters=stream_filters(),
        )

    def _add_alarms(self, actions: Sequence[cloudwatch.IAlarmAction]) -> None:
        self.iterator_age_alarm = self.function.metric(
            "IteratorAge", statistic="Maximum", period=Duration.minutes(5)
        ).create_alarm(
            self,
            "IteratorAge",
            threshold=ITERATOR_AGE_ALARM_SECONDS * 1000,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description="The delay recovery function trails the delay table's stream: records older than 24 h are "
            "trimmed, and with them any message they were to recover.",
        )
        self.late_write_alarm = count_alarm(self, "LateWrites", METRIC_LATE_WRITES,
                                             "A producer stored a delayed message behind the dispatcher: its clock is more "
                                             "than 60 s behind. The message was delivered late.")
        self.ttl_recovery_alarm = count_alarm(self, "RecoveredFromTtl", METRIC_RECOVERED_FROM_TTL,
                                               "The TTL deleted delayed messages the dispatcher had not sent (an outage or a "
                                               "stuck minute longer than the TTL margin). They were delivered late.")
        self.watermark_ahead_alarm = count_alarm(self, "WatermarkAhead", METRIC_RECOVERY_WATERMARK_AHEAD,
                                                  "The dispatcher's watermark is past minutes it cannot have reached: "
                                                  "delayed messages behind it were left in the delay table, unsent. "
                                                  "Inspect the scheduler#watermark item.")
        for alarm in (self.failure_alarm, self.iterator_age_alarm, self.late_write_alarm, self.ttl_recovery_alarm,
                      self.watermark_ahead_alarm):
            alarm.add_alarm_action(*actions)


def stream_filters() -> list[Mapping[str, Any]]:
    """The mapping's filters (OR): an INSERT, or a TTL's REMOVE, of a message item."""
    message_key = {"Keys": {"pk": {"S": lambda_.FilterRule.begins_with(delay_recovery.MESSAGE_KEY_PREFIX)}}}
    ttl = {name: lambda_.FilterRule.is_equal(value) for name, value in delay_recovery.TTL_PRINCIPAL.items()}
    return [
        lambda_.FilterCriteria.filter({"eventName": lambda_.FilterRule.is_equal(delay_recovery.INSERT), "dynamodb": message_key}),
        lambda_.FilterCriteria.filter(
            {"eventName": lambda_.FilterRule.is_equal(delay_recovery.REMOVE), "userIdentity": ttl, "dynamodb": message_key}
        ),
    ]
