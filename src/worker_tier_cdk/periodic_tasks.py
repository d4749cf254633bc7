"""``PeriodicTasks``: one EventBridge Scheduler schedule per cron.yaml expression, and the cron function.

EventBridge Scheduler rather than EventBridge rules: rules run in UTC only, while
Scheduler takes an IANA time zone per schedule and handles DST itself, and it puts
the tick's own time in the target input (``<aws.scheduler.scheduled-time>``), so
the message carries the scheduled time, not the delivery time.

A tick is retried at two levels, and one that fails them all lands in the tick
dead-letter queue, whose alarm fires:

- Scheduler retries an invocation it could not deliver (``SCHEDULER_RETRY_ATTEMPTS``,
  until the next tick is due), then dead-letters it.
- Lambda retries an invocation that raised (``CRON_ASYNC_RETRY_ATTEMPTS``), then sends
  it to the same queue through the function's on-failure destination.
  ``worker_tier.periodic.ticks`` raises whenever a tick is not surely enqueued.

A tick sent whose claim could not be marked sent is counted (``TickMarkFailed``) and
alarmed, as a retry may send it twice. Every alarm takes the ``alarm_actions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Sequence

from aws_cdk import Acknowledgment, Annotations, Duration, RemovalPolicy, Stack, TimeZone, Token, Validations
from aws_cdk import aws_cloudwatch as cloudwatch, aws_dynamodb as dynamodb, aws_iam as iam
from aws_cdk import aws_lambda_destinations as destinations, aws_scheduler as scheduler
from aws_cdk import aws_s3 as s3, aws_scheduler_targets as targets, aws_sqs as sqs
from constructs import Construct

from worker_tier_cdk import defaults
from worker_tier_cdk.alarms import count_alarm, queue_not_empty_alarm
from worker_tier.periodic.cron_config import CronEntry, check_sendable
from worker_tier.periodic.cron_expression import parse
from worker_tier_cdk.outputs import publish
from worker_tier_cdk.function import ServiceFunction, ServiceFunctionProps
from worker_tier_cdk.grants import TICK_ACTIONS, grant_items, grant_payload_put
from worker_tier_cdk.settings import Settings
from worker_tier.core import limits
from worker_tier.core.contract import DEFAULT_PRIORITY, METRIC_TICK_MARK_FAILED, Resources
from worker_tier.core.contract import TICK_KEY_PREFIX

PERIODIC_HANDLER = "worker_tier.handlers.periodic.lambda_handler"
# Longer than a duplicate's wait for the holder (periodic.TICK_PENDING_POLLS), shorter than the claim's lease.
CRON_TIMEOUT_SECONDS = 30
CRON_MEMORY_MB = 128
SCHEDULER_RETRY_ATTEMPTS = 5
# https://docs.aws.amazon.com/scheduler/latest/APIReference/API_RetryPolicy.html
SCHEDULER_MIN_EVENT_AGE_SECONDS = 60
SCHEDULER_MAX_EVENT_AGE_SECONDS = 24 * 60 * 60
# https://docs.aws.amazon.com/lambda/latest/api/API_PutFunctionEventInvokeConfig.html
# Every retry Lambda allows (1 min, then 2 min after a failure), and the longest age, so a
# throttled tick arrives late rather than never; past that it goes to the tick DLQ.
CRON_ASYNC_RETRY_ATTEMPTS = limits.LAMBDA_ASYNC_MAX_RETRY_ATTEMPTS
CRON_ASYNC_MAX_EVENT_AGE_SECONDS = limits.LAMBDA_ASYNC_MAX_EVENT_AGE_SECONDS
CRON_ERRORS_ALARM_PERIOD_SECONDS = 60
# The id of the synth warnings where a cron.yaml entry deploys with EB's meaning (CronEntry.warnings).
CRON_ENTRY_WARNING_ID = "worker-tier:cron-entry-as-eb-reads-it"


@dataclass
class PeriodicTasksProps:
    """The cron.yaml entries and the resources their ticks use.

    The entries are checked against the queue (``cron_config.check_sendable``), so a synth
    fails rather than every tick: on a FIFO queue each name must be a valid MessageGroupId,
    and each tick must fit the queue's MaximumMessageSize. That size is read from a queue
    created in the app (SQS's 1 MiB when unset); for an imported queue it is
    ``maximum_message_size_bytes``, by default SQS's former default of 256 KiB, the
    smallest in common use. ``alarm_actions`` are added to every alarm. ``payload_bucket``:
    where the function offloads a tick too large for the queue (the WorkerQueue's).
    """

    entries: Sequence[CronEntry]
    queue: sqs.IQueue
    state_table: dynamodb.ITableV2
    maximum_message_size_bytes: int | None = None
    alarm_actions: Sequence[cloudwatch.IAlarmAction] = field(default_factory=list)
    payload_bucket: s3.IBucket | None = None


class PeriodicTasks(Construct):
    """Public attributes: ``function``, ``errors_alarm``, ``schedule_group``, ``schedules`` (in
    cron.yaml order), ``dead_letter_queue`` (ticks not delivered or not enqueued after every
    retry), ``dead_letter_alarm``, ``mark_failed_alarm`` and ``payload_bucket`` (None unless given).
    """

    def __init__(self, scope: Construct, construct_id: str, props: PeriodicTasksProps) -> None:
        super().__init__(scope, construct_id)
        self.payload_bucket = props.payload_bucket
        check_sendable(
            props.entries,
            fifo=props.queue.fifo,
            maximum_message_size=queue_maximum_message_size(props.queue, props.maximum_message_size_bytes),
            large_payloads=props.payload_bucket is not None,
        )
        for entry in props.entries:
            for warning in entry.warnings:
                Annotations.of(self).add_warning_v2(CRON_ENTRY_WARNING_ID, f"{entry.where}: {warning}")
        cron = ServiceFunction(
            self,
            "Cron",
            ServiceFunctionProps(
                handler=PERIODIC_HANDLER,
                timeout_seconds=CRON_TIMEOUT_SECONDS,
                memory_mb=CRON_MEMORY_MB,
                environment=Resources(
                    queue_url=props.queue.queue_url,
                    state_table=props.state_table.table_name,
                    payload_bucket=self.payload_bucket.bucket_name if self.payload_bucket is not None else None,
                ).to_environment(),
                description="Worker Tier: enqueues cron.yaml ticks once each",
            ),
        )
        self.function = cron.function
        props.queue.grant_send_messages(self.function)
        grant_items(props.state_table, self.function, actions=TICK_ACTIONS, leading_key_prefixes=[TICK_KEY_PREFIX])
        if self.payload_bucket is not None:
            grant_payload_put(self.payload_bucket, self.function)
        self._add_dead_letter_queue()
        self._add_retries()
        self.mark_failed_alarm = count_alarm(
            self,
            "TickMarkFailed",
            METRIC_TICK_MARK_FAILED,
            "A tick was sent but its claim could not be marked sent: a retry or duplicate may send it twice.",
        )
        for alarm in (self.dead_letter_alarm, self.errors_alarm, self.mark_failed_alarm):
            alarm.add_alarm_action(*props.alarm_actions)
        self.schedule_group = scheduler.ScheduleGroup(self, "Group", removal_policy=RemovalPolicy.DESTROY)
        publish(self, "schedule_group", self.schedule_group.schedule_group_name)  # worker-tier status: the ticks
        role = self._scheduler_role(self.dead_letter_queue)
        self.schedules = [
            self._schedule(index, position, entry, expression, role, self.dead_letter_queue)
            for index, entry in enumerate(props.entries)
            for position, expression in enumerate(entry.expressions)
        ]

    def _add_dead_letter_queue(self) -> None:
        """A standard queue for undeliverable ticks: Scheduler's DLQ cannot be FIFO, and its
        messages (Scheduler's own error attributes) are not work-queue messages."""
        self.dead_letter_queue = sqs.Queue(self, "TickDeadLetterQueue", **defaults.dead_letter_queue_props(Settings()))
        Validations.of(self.dead_letter_queue).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-SQS3",
                reason="This queue is itself a dead-letter queue: EventBridge Scheduler's, for ticks it could not deliver.",
            )
        )
        self.dead_letter_alarm = queue_not_empty_alarm(
            self,
            "TickDeadLetterQueueNotEmpty",
            self.dead_letter_queue,
            "A cron.yaml tick was not enqueued: EventBridge Scheduler could not deliver it to the cron "
            "function, or the function failed it on every attempt.",
        )

    def _add_retries(self) -> None:
        """Lambda's asynchronous retries of a failed tick, then the tick DLQ; an alarm on any failure."""
        self.function.configure_async_invoke(
            retry_attempts=CRON_ASYNC_RETRY_ATTEMPTS,
            max_event_age=Duration.seconds(CRON_ASYNC_MAX_EVENT_AGE_SECONDS),
            on_failure=destinations.SqsDestination(self.dead_letter_queue),
        )
        self.errors_alarm = self.function.metric_errors(
            period=Duration.seconds(CRON_ERRORS_ALARM_PERIOD_SECONDS), statistic="Sum"
        ).create_alarm(
            self,
            "CronErrors",
            threshold=0,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description="The cron function failed a tick; Lambda retries it, then sends it to the tick DLQ.",
        )

    def _scheduler_role(self, dead_letter_queue: sqs.IQueue) -> iam.IRole:
        """Scheduler's role: invoke this function, and dead-letter undeliverable ticks.

        Built by hand and frozen so the targets do not add ``function:*`` (cdk-nag IAM5).
        Only this account's schedules in this construct's group may assume it: Scheduler
        sets ``aws:SourceArn`` to the schedule group's ARN, never a schedule's
        (https://docs.aws.amazon.com/scheduler/latest/UserGuide/cross-service-confused-deputy-prevention.html).
        """
        principal = iam.ServicePrincipal(
            "scheduler.amazonaws.com",
            conditions={
                "StringEquals": {
                    "aws:SourceAccount": Stack.of(self).account,
                    "aws:SourceArn": self.schedule_group.schedule_group_arn,
                }
            },
        )
        role = iam.Role(self, "SchedulerRole", assumed_by=principal)
        role.add_to_policy(iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[self.function.function_arn]))
        dead_letter_queue.grant_send_messages(role)
        return role.without_policy_updates()

    def _schedule(
        self,
        index: int,
        position: int,
        entry: CronEntry,
        expression: str,
        role: iam.IRole,
        dead_letter_queue: sqs.IQueue,
    ) -> scheduler.Schedule:
        """One schedule of one entry; a both-day-fields entry has two."""
        target = targets.LambdaInvoke(
            self.function,
            input=scheduler.ScheduleTargetInput.from_object(
                {
                    "name": entry.name,
                    "url": entry.url,
                    "body": entry.body,
                    "scheduled_time": scheduler.ContextAttribute.scheduled_time,
                    **({} if entry.priority == DEFAULT_PRIORITY else {"priority": entry.priority}),
                }
            ),
            role=role,
            retry_attempts=SCHEDULER_RETRY_ATTEMPTS,
            max_event_age=Duration.seconds(max_event_age_seconds(entry)),
            dead_letter_queue=dead_letter_queue,
        )
        return scheduler.Schedule(
            self,
            f"Entry{index}Schedule{position}",
            schedule=scheduler.ScheduleExpression.expression(expression, TimeZone.of(entry.timezone)),
            target=target,
            schedule_group=self.schedule_group,
            enabled=entry.enabled,
            description=entry.description,
        )


def queue_maximum_message_size(queue: sqs.IQueue, imported_maximum_bytes: int | None) -> int:
    """The queue's MaximumMessageSize: its own when created in the app, else ``imported_maximum_bytes``.

    A queue created in the app with no MaximumMessageSize gets SQS's 1 MiB; an imported one
    (or one whose size is a token) SQS's former default of 256 KiB unless the prop says otherwise.
    """
    resource = queue.node.default_child
    if isinstance(resource, sqs.CfnQueue) and not Token.is_unresolved(resource.maximum_message_size):
        if imported_maximum_bytes is not None:
            raise ValueError(
                f"maximum_message_size_bytes is for an imported queue, got {imported_maximum_bytes} for a queue "
                "created in the app, whose own MaximumMessageSize is used; remove the prop"
            )
        own = resource.maximum_message_size
        return limits.SQS_MAX_MESSAGE_BYTES if own is None else int(own)
    if imported_maximum_bytes is None:
        return limits.SQS_FORMER_DEFAULT_MAXIMUM_MESSAGE_SIZE_BYTES
    if not limits.SQS_MIN_MAXIMUM_MESSAGE_SIZE_BYTES <= imported_maximum_bytes <= limits.SQS_MAX_MESSAGE_BYTES:
        raise ValueError(
            f"maximum_message_size_bytes must be {limits.SQS_MIN_MAXIMUM_MESSAGE_SIZE_BYTES}.."
            f"{limits.SQS_MAX_MESSAGE_BYTES} (SQS MaximumMessageSize), got {imported_maximum_bytes}"
        )
    return imported_maximum_bytes


def max_event_age_seconds(entry: CronEntry) -> int:
    """How long Scheduler keeps retrying a tick: until the next one is due, within Scheduler's 60 s..24 h."""
    parsed = parse(entry.schedule)
    times = sorted(hour * 60 + minute for hour in parsed.hours for minute in parsed.minutes)
    gaps = [b - a for a, b in pairwise(times)] + [times[0] + 24 * 60 - times[-1]]
    return max(SCHEDULER_MIN_EVENT_AGE_SECONDS, min(min(gaps) * 60, SCHEDULER_MAX_EVENT_AGE_SECONDS))
