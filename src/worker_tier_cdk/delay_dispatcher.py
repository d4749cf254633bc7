"""``DelayDispatcher``: the delay table, the dispatcher function, its one-minute schedule per shard group and its lag alarm."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy, aws_cloudwatch as cloudwatch, aws_dynamodb as dynamodb
from aws_cdk import aws_events as events, aws_events_targets as events_targets, aws_iam as iam, aws_sqs as sqs
from constructs import Construct

from worker_tier_cdk.alarms import count_alarm
from worker_tier_cdk.delay_recovery import DelayRecovery, DelayRecoveryProps
from worker_tier_cdk.outputs import publish
from worker_tier_cdk.function import ServiceFunction, ServiceFunctionProps
from worker_tier_cdk.grants import (
    REFILE_ACTIONS,
    DISPATCHER_STATE_ACTIONS,
    grant_delay_produce,
    grant_items,
)
from worker_tier_cdk.settings import Settings
from worker_tier.core import contract
from worker_tier.core.contract import DELAY_BUCKET_KEY_PREFIX as DELAYED_MESSAGE_KEY_PREFIX
from worker_tier.core.contract import DISPATCHER_KEY_PREFIX
from worker_tier.core.contract import (
    DELAY_SHARDS_VARIABLE,
    DISPATCH_GROUP_FIELD,
    DISPATCH_GROUPS_VARIABLE,
    METRIC_DISPATCHER_LAG,
    METRIC_DISPATCHER_STATE_UNREADABLE,
    METRIC_DISPATCHER_WATERMARK_AHEAD,
    METRICS_NAMESPACE,
    SERVICE_NAME,
    Resources,
)

DISPATCHER_HANDLER = "worker_tier.handlers.dispatcher.lambda_handler"
# Below the dispatcher's lease (dispatch_state.LEASE_SECONDS, 120 s), so a run that lives holds it throughout, and no
# more than one run period (DISPATCHER_PERIOD_SECONDS) below it: a killed run's lease blocks at most the one
# scheduled run that starts before it expires (120 − 60 = 60 s after the killed run's end).
DISPATCHER_TIMEOUT_SECONDS = 60
DISPATCHER_PERIOD_SECONDS = 60
DISPATCHER_MEMORY_MB = 256
# Fanned out (dispatch_groups > 1), each group's run gets a full vCPU: one run is bound by its CPU (one GIL), and at
# 1,769 MB "a function has the equivalent of one vCPU" (https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html).
FANOUT_MEMORY_MB = 1769
# Normal lag is under a minute (one run per minute); three minutes means runs are failing or missing.
LAG_ALARM_SECONDS = 3 * 60


@dataclass
class DelayDispatcherProps:
    """The queue the dispatcher feeds, the DLQ for what that queue refuses, and the state table of its lease and watermark."""

    settings: Settings
    queue: sqs.IQueue
    dead_letter_queue: sqs.IQueue
    state_table: dynamodb.ITableV2


class DelayDispatcher(Construct):
    """Public attributes: ``table`` (the delay table), ``function``, ``rule`` (group 0's), ``rules`` (one per shard group,
    ``settings.dispatch_groups``), ``lag_alarm``, ``watermark_ahead_alarm``, ``state_unreadable_alarm`` and ``recovery``
    (its safety net)."""

    def __init__(self, scope: Construct, construct_id: str, props: DelayDispatcherProps) -> None:
        super().__init__(scope, construct_id)
        self._state_table = props.state_table
        self.table = dynamodb.TableV2(
            self,
            "DelayTable",
            partition_key=dynamodb.Attribute(name=contract.DELAY_PARTITION_KEY, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=contract.DELAY_SORT_KEY, type=dynamodb.AttributeType.STRING),
            billing=dynamodb.Billing.on_demand(),
            encryption=dynamodb.TableEncryptionV2.aws_managed_key(),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=contract.DELAY_TTL_ATTRIBUTE,
            # Every write and every TTL deletion, for the safety net (infra/delay_recovery.py).
            dynamo_stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
            removal_policy=RemovalPolicy.RETAIN,
        )
        publish(self, "delay_table", self.table.table_name)
        dispatcher = ServiceFunction(
            self,
            "Scheduler",
            ServiceFunctionProps(
                handler=DISPATCHER_HANDLER,
                timeout_seconds=DISPATCHER_TIMEOUT_SECONDS,
                memory_mb=DISPATCHER_MEMORY_MB if props.settings.dispatch_groups == 1 else FANOUT_MEMORY_MB,
                # It reads every shard, so it needs the table but not the producers' shard count.
                environment={**Resources(
                    delay_table=self.table.table_name, queue_url=props.queue.queue_url,
                    dlq_url=props.dead_letter_queue.queue_url, state_table=props.state_table.table_name,
                ).to_environment(), DISPATCH_GROUPS_VARIABLE: str(props.settings.dispatch_groups)},
                description="Worker Tier: moves due delayed messages from the delay table into SQS",
            ),
        )
        self.function = dispatcher.function
        props.queue.grant_send_messages(self.function)
        # A message the work queue refuses goes to the DLQ with its reason.
        props.dead_letter_queue.grant_send_messages(self.function)
        # Query the minutes, Scan once for the first watermark.
        self.table.grant(self.function, "dynamodb:Query", "dynamodb:Scan")
        # Move an item due after its minute into its due minute (worker_tier.delays.delivery.refile).
        grant_items(self.table, self.function, actions=REFILE_ACTIONS, leading_key_prefixes=[DELAYED_MESSAGE_KEY_PREFIX])
        # Lease (Put, Delete), watermark and cursors (Get, Put), minute records (Put, Update): scheduler# items only.
        grant_items(props.state_table, self.function, actions=DISPATCHER_STATE_ACTIONS, leading_key_prefixes=[DISPATCHER_KEY_PREFIX])
        self.rules = [self._schedule(group) for group in range(props.settings.dispatch_groups)]
        self.rule = self.rules[0]
        self.lag_alarm = cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name=METRIC_DISPATCHER_LAG,
            dimensions_map={"service": SERVICE_NAME},
            statistic="Maximum",
            period=Duration.minutes(1),
        ).create_alarm(
            self,
            "SchedulerLag",
            threshold=LAG_ALARM_SECONDS,
            evaluation_periods=3,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            # No data means no runs: that is lag too.
            treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
            alarm_description="The delay dispatcher's watermark trails now + horizon by minutes: runs fail or do not happen.",
        )
        self.watermark_ahead_alarm = count_alarm(
            self, "WatermarkAhead", METRIC_DISPATCHER_WATERMARK_AHEAD,
            "The delay dispatcher found its watermark further ahead of its clock than it ever moves it, and stopped: "
            "inspect the group's watermark item (scheduler#watermark, or scheduler#<G>.<g>#watermark with several groups; "
            "delete it to restart that group from its minute records). Never delete scheduler#layout (docs/delays.md).")
        self.state_unreadable_alarm = count_alarm(
            self, "StateUnreadable", METRIC_DISPATCHER_STATE_UNREADABLE,
            "The delay dispatcher found a watermark item it cannot read, and restarted from its minute records.")
        # Delivers what the dispatcher could have missed: TTL-expired undispatched items, late writes.
        self.recovery = DelayRecovery(self, "Recovery", DelayRecoveryProps(
            delay_table=self.table, state_table=props.state_table, queue=props.queue, dead_letter_queue=props.dead_letter_queue,
        ))

    def _schedule(self, group: int) -> events.Rule:
        """Group ``group``'s run every minute; group 0's rule is the one of before the fan-out, with no input (group 0)."""
        event = None if group == 0 else events.RuleTargetInput.from_object({DISPATCH_GROUP_FIELD: group})
        return events.Rule(
            self,
            "EveryMinute" if group == 0 else f"EveryMinuteGroup{group}",
            schedule=events.Schedule.rate(Duration.seconds(DISPATCHER_PERIOD_SECONDS)),
            # A missed run is not retried: the next one catches up from the watermark.
            targets=[events_targets.LambdaFunction(self.function, event=event, retry_attempts=0,
                                                   max_event_age=Duration.minutes(1))],
        )

    def producer_environment(self, settings: Settings) -> dict[str, str]:
        """What a producer (any function using Client.from_env) needs to send long delays."""
        return {**Resources(delay_table=self.table.table_name).to_environment(), DELAY_SHARDS_VARIABLE: str(settings.delay_shards)}

    def grant_produce(self, function: iam.IGrantable) -> None:
        """Let ``function`` store delayed messages (plain and deduplicated), and nothing else of the delay table."""
        grant_delay_produce(self.table, function, self._state_table)
