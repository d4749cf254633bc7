"""``PeriodicTasks``: one EventBridge Scheduler schedule per cron.yaml expression, and the cron function.

EventBridge Scheduler rather than EventBridge rules: rules run in UTC only, while
Scheduler takes an IANA time zone per schedule and handles DST itself, and it puts
the tick's own time in the target input (``<aws.scheduler.scheduled-time>``), so
the message carries the scheduled time, not the delivery time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from aws_cdk import Acknowledgment, Duration, TimeZone, Validations
from aws_cdk import aws_dynamodb as dynamodb, aws_iam as iam, aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets, aws_sqs as sqs
from constructs import Construct

from infra import defaults
from infra.alarms import queue_not_empty_alarm

from infra.cron_config import CronEntry
from infra.cron_expression import parse
from infra.function import ServiceFunction, ServiceFunctionProps
from infra.settings import Settings

CRON_HANDLER = "worker_tier.handlers.cron.lambda_handler"
CRON_TIMEOUT_SECONDS = 30
CRON_MEMORY_MB = 128
SCHEDULER_RETRY_ATTEMPTS = 5
# https://docs.aws.amazon.com/scheduler/latest/APIReference/API_RetryPolicy.html
SCHEDULER_MIN_EVENT_AGE_SECONDS = 60
SCHEDULER_MAX_EVENT_AGE_SECONDS = 24 * 60 * 60


@dataclass
class PeriodicTasksProps:
    """The cron.yaml entries and the resources their ticks use."""

    entries: Sequence[CronEntry]
    queue: sqs.IQueue
    state_table: dynamodb.ITableV2


class PeriodicTasks(Construct):
    """Public attributes: ``function``, ``schedules`` (in cron.yaml order), ``dead_letter_queue``
    (ticks Scheduler could not deliver) and ``dead_letter_alarm``.
    """

    def __init__(self, scope: Construct, construct_id: str, props: PeriodicTasksProps) -> None:
        super().__init__(scope, construct_id)
        cron = ServiceFunction(
            self,
            "Cron",
            ServiceFunctionProps(
                handler=CRON_HANDLER,
                timeout_seconds=CRON_TIMEOUT_SECONDS,
                memory_mb=CRON_MEMORY_MB,
                environment={
                    "WORKER_TIER_QUEUE_URL": props.queue.queue_url,
                    "WORKER_TIER_STATE_TABLE": props.state_table.table_name,
                },
                description="Worker Tier: enqueues cron.yaml ticks once each",
            ),
        )
        self.function = cron.function
        props.queue.grant_send_messages(self.function)
        props.state_table.grant(self.function, "dynamodb:PutItem", "dynamodb:UpdateItem")
        self._add_dead_letter_queue()
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
            "EventBridge Scheduler could not deliver a cron.yaml tick to the cron function.",
        )

    def _scheduler_role(self, dead_letter_queue: sqs.IQueue) -> iam.IRole:
        """Scheduler's role: invoke this function, and dead-letter undeliverable ticks.

        Built by hand and frozen so the targets do not add ``function:*`` (cdk-nag IAM5).
        """
        role = iam.Role(self, "SchedulerRole", assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com"))
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
            enabled=entry.enabled,
            description=f"cron.yaml {entry.name}: {entry.schedule} ({entry.timezone}) -> {entry.url}"[:512],
        )


def max_event_age_seconds(entry: CronEntry) -> int:
    """How long Scheduler keeps retrying a tick: until the next one is due, within Scheduler's 60 s..24 h."""
    parsed = parse(entry.schedule)
    times = sorted(hour * 60 + minute for hour in parsed.hours for minute in parsed.minutes)
    gaps = [b - a for a, b in zip(times, times[1:])] + [times[0] + 24 * 60 - times[-1]]
    return max(SCHEDULER_MIN_EVENT_AGE_SECONDS, min(min(gaps) * 60, SCHEDULER_MAX_EVENT_AGE_SECONDS))
