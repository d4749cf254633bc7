"""``WorkerQueue``: the work queue, its dead-letter queue, the worker function and its alarms."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from aws_cdk import Annotations, Duration, aws_cloudwatch as cloudwatch, aws_dynamodb as dynamodb, aws_iam as iam, aws_s3 as s3
from aws_cdk import aws_lambda as lambda_, aws_sqs as sqs
from aws_cdk.aws_lambda_event_sources import SqsEventSource
from constructs import Construct

from worker_tier_cdk import defaults
from worker_tier_cdk.code import TaskCode
from worker_tier_cdk.alarms import count_alarm, count_metric, queue_not_empty_alarm
from worker_tier_cdk.function import ServiceFunction, ServiceFunctionProps
from worker_tier_cdk.grants import (
    FLOW_ACTIONS,
    IDEMPOTENCY_ACTIONS,
    JOB_PRODUCE_ACTIONS,
    JOB_WORKER_ACTIONS,
    grant_items,
    grant_job_results_read,
    grant_payload_consume,
    grant_payload_put,
)
from worker_tier_cdk.payload_bucket import PayloadBucket, PayloadBucketProps
from worker_tier_cdk.outputs import publish
from worker_tier_cdk.task_imports import check_imports
from worker_tier_cdk.settings import Settings
from worker_tier.core import contract, priority
from worker_tier.core.contract import FLOW_KEY_PREFIX, IDEMPOTENCY_KEY_PREFIX, JOB_KEY_PREFIX, PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL
from worker_tier.core.errors import ConfigurationError

WORKER_HANDLER = "worker_tier.handlers.worker.lambda_handler"
# The high queue's oldest-message alarm fires at the oldest_message_alarm setting divided by this (at least 60 s).
HIGH_AGE_ALARM_DIVISOR = 4
# The id of the synth warnings for settings AWS accepts but advises against (Settings.advisories).
SETTINGS_ADVICE_WARNING_ID = "worker-tier:settings-advice"


class WorkerQueuePropsError(ConfigurationError):
    """WorkerQueueProps combine options that cannot go together."""


@dataclass
class WorkerQueueProps:
    """Props for WorkerQueue.

    For each queue, pass an existing one *or* props overriding the defaults for a
    new one, never both. An existing queue keeps its own redrive policy, so it
    needs its existing dead-letter queue alongside. The same for the payload bucket
    (``large_payloads`` setting): an existing ``payload_bucket`` (shared with other
    workers) *or* ``payload_bucket_props`` overriding a new one's defaults.
    """

    settings: Settings
    state_table: dynamodb.ITableV2 | None = None
    queue: sqs.IQueue | None = None
    queue_props: Mapping[str, Any] | None = None
    dead_letter_queue: sqs.IQueue | None = None
    dead_letter_queue_props: Mapping[str, Any] | None = None
    payload_bucket: s3.IBucket | None = None
    payload_bucket_props: Mapping[str, Any] | None = None
    alarm_actions: Sequence[cloudwatch.IAlarmAction] = field(default_factory=list)
    # The team's task code, deployed beside the installed runtime; its names are the task_modules setting's roots.
    task_code: TaskCode = field(default_factory=TaskCode)

    def __post_init__(self) -> None:
        if self.queue is not None and self.queue_props is not None:
            raise WorkerQueuePropsError("WorkerQueueProps: pass queue or queue_props, not both")
        if self.dead_letter_queue is not None and self.dead_letter_queue_props is not None:
            raise WorkerQueuePropsError("WorkerQueueProps: pass dead_letter_queue or dead_letter_queue_props, not both")
        if self.payload_bucket is not None and self.payload_bucket_props is not None:
            raise WorkerQueuePropsError("WorkerQueueProps: pass payload_bucket or payload_bucket_props, not both")
        if not self.settings.large_payloads and (self.payload_bucket is not None or self.payload_bucket_props is not None):
            raise WorkerQueuePropsError(
                "WorkerQueueProps: the large_payloads setting is off, so there is no payload bucket: turn it on, or "
                "drop payload_bucket and payload_bucket_props"
            )
        if self.queue is not None and self.dead_letter_queue is None:
            raise WorkerQueuePropsError(
                "WorkerQueueProps: an existing queue needs its existing dead_letter_queue too "
                "(its redrive policy is not ours to change)"
            )


class WorkerQueue(Construct):
    """Queue + DLQ + worker function + event source + alarms.

    With the ``app_port`` setting (HTTP forwarding) the function gets no event source: the
    container worker reads the queue, and the function only carries the stack's producer grants.

    With the ``large_payloads`` setting (the default) the function reads offloaded bodies from the payload
    bucket, a new one unless ``payload_bucket`` is given; its producers put bodies there (``grant_produce``).

    With the ``priorities`` setting it makes a high and a low queue beside the work queue (the normal level),
    shaped alike (the same options, DLQ and redrive policy), each with its own event source on the function and its
    concurrency share (``worker_tier.core.priority.concurrency_shares``); the rest of the stack sends to them
    through ``grant_levels``.

    Public attributes: ``queue``, ``level_queues`` (level -> queue, empty while priorities are off),
    ``dead_letter_queue``, ``function``, ``payload_bucket`` (None when ``large_payloads`` is off),
    ``dead_letter_alarm``, ``oldest_message_alarm`` and ``high_oldest_message_alarm`` (None while priorities are off).
    """

    def __init__(self, scope: Construct, construct_id: str, props: WorkerQueueProps) -> None:
        super().__init__(scope, construct_id)
        settings = props.settings
        props.task_code.check_modules(settings.task_modules)
        props.task_code.check_app(settings.app)
        props.task_code.check_middleware(settings.middleware)
        self.dead_letter_queue = props.dead_letter_queue or sqs.Queue(
            self, "DeadLetterQueue", **{**defaults.dead_letter_queue_props(settings), **(props.dead_letter_queue_props or {})}
        )
        self.queue = props.queue or self._new_queue(settings, props.queue_props or {})
        self.level_queues: dict[str, sqs.IQueue] = {
            level: self._new_queue(settings, props.queue_props or {}, f"{level.capitalize()}Queue")
            for level in (PRIORITY_HIGH, PRIORITY_LOW) if settings.priorities
        }
        self.payload_bucket = props.payload_bucket or self._new_payload_bucket(settings, props.payload_bucket_props)
        worker = ServiceFunction(
            self,
            "Worker",
            ServiceFunctionProps(
                handler=WORKER_HANDLER,
                timeout_seconds=settings.inactivity_timeout,
                memory_mb=settings.memory_size,
                environment=self._environment(settings, props.state_table),
                description="Worker Tier: runs tasks from the work queue",
                task_code=props.task_code,
            ),
        )
        check_imports(worker.code_directory, props.task_code, settings.task_modules, fifo=settings.fifo)
        self.function = worker.function
        self.log_group = worker.log_group
        self.dead_letter_queue.grant_send_messages(self.function)
        self.queue.grant_send_messages(self.function)  # tasks send follow-ups (Client.from_env)
        for level_queue in self.level_queues.values():
            level_queue.grant_send_messages(self.function)
        self._state_table = props.state_table  # tracked jobs' producers are granted its job# items (grant_produce)
        if props.state_table is not None:
            grant_items(props.state_table, self.function, actions=IDEMPOTENCY_ACTIONS,
                        leading_key_prefixes=[IDEMPOTENCY_KEY_PREFIX])
            grant_items(props.state_table, self.function, actions=FLOW_ACTIONS, leading_key_prefixes=[FLOW_KEY_PREFIX])
            grant_items(props.state_table, self.function, actions=JOB_WORKER_ACTIONS, leading_key_prefixes=[JOB_KEY_PREFIX])
        if self.payload_bucket is not None:
            grant_payload_consume(self.payload_bucket, self.function)
        if not settings.app_port:  # HTTP forwarding: the container worker reads the queue; two readers would split it
            shares = priority.concurrency_shares(settings.http_connections) if settings.priorities else {}
            self.function.add_event_source(self._event_source(settings, self.queue, shares.get(PRIORITY_NORMAL)))
            for level, level_queue in self.level_queues.items():
                self.function.add_event_source(self._event_source(settings, level_queue, shares[level]))
        for advice in settings.advisories():
            Annotations.of(self).add_warning_v2(SETTINGS_ADVICE_WARNING_ID, advice)
        self._add_alarms(settings, props.alarm_actions)
        self._publish(props.state_table)

    def _publish(self, state_table: dynamodb.ITableV2 | None) -> None:
        """The stack outputs ``worker-tier --stack`` reads: the queues, the function and its logs, the state table."""
        publish(self, "queue_url", self.queue.queue_url)
        publish(self, "dlq_url", self.dead_letter_queue.queue_url)
        for level, level_queue in self.level_queues.items():
            publish(self, contract.PRIORITY_QUEUE_FIELDS[level], level_queue.queue_url)
        publish(self, "worker_function", self.function.function_name)
        publish(self, "worker_log_group", self.log_group.log_group_name)  # worker-tier tail
        if state_table is not None:
            publish(self, "state_table", state_table.table_name)
        if self.payload_bucket is not None:
            publish(self, "payload_bucket", self.payload_bucket.bucket_name)

    def grant_produce(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` (a web app's role, another function) send to the work queue, now or up to 15 minutes ahead.

        It gets what ``Client.send`` calls on the queue: SendMessage (batches too), GetQueueAttributes and
        GetQueueUrl; and PutObject under ``payloads/`` of the payload bucket, for bodies too large for the queue
        (none when the ``large_payloads`` setting is off). With the state table, what tracked jobs call
        (docs/jobs.md): ``JOB_PRODUCE_ACTIONS`` on its ``job#`` items, and GetObject under ``results/`` of the bucket. Longer delays, dedupe keys and cancellable sends also
        write the delay table: ``WorkerTierStack.grant_produce`` grants both.

        Examples
        --------
        >>> worker_queue.grant_produce(web_app_role)  # doctest: +SKIP
        """
        grant = self.queue.grant_send_messages(grantee)
        for level_queue in self.level_queues.values():
            level_queue.grant_send_messages(grantee)
        if self.payload_bucket is not None:
            grant_payload_put(self.payload_bucket, grantee)
        if self._state_table is not None:
            grant_items(self._state_table, grantee, actions=JOB_PRODUCE_ACTIONS, leading_key_prefixes=[JOB_KEY_PREFIX])
            if self.payload_bucket is not None:
                grant_job_results_read(self.payload_bucket, grantee)
        return grant

    def level_environment(self) -> dict[str, str]:
        """The variables naming the levels' queues (``contract.PRIORITY_QUEUE_FIELDS``); empty while priorities are off."""
        return {contract.Resources.variable(contract.PRIORITY_QUEUE_FIELDS[level]): queue.queue_url
                for level, queue in self.level_queues.items()}

    def grant_levels(self, function: lambda_.Function) -> None:
        """Let ``function`` (the delay dispatcher, the safety net, the periodic tasks) send to the levels' queues, and
        tell it where they are; nothing while priorities are off."""
        for name, value in self.level_environment().items():
            function.add_environment(name, value)
        for level_queue in self.level_queues.values():
            level_queue.grant_send_messages(function)

    def _new_payload_bucket(self, settings: Settings, overrides: Mapping[str, Any] | None) -> s3.IBucket | None:
        """A payload bucket of this worker's own (no delay table waits before its queue); None without large_payloads."""
        if not settings.large_payloads:
            return None
        return PayloadBucket(self, "PayloadBucket", PayloadBucketProps(settings=settings, bucket_props=overrides)).bucket

    def _new_queue(self, settings: Settings, overrides: Mapping[str, Any], construct_id: str = "Queue") -> sqs.Queue:
        """The work queue (or a level's), its redrive policy the backstop behind the worker's own dead-lettering."""
        return sqs.Queue(
            self,
            construct_id,
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter_queue,
                # Above max_retries on purpose: see Settings.redrive_max_receive_count.
                max_receive_count=settings.redrive_max_receive_count,
            ),
            **{**defaults.queue_props(settings), **overrides},
        )

    def _environment(self, settings: Settings, state_table: dynamodb.ITableV2 | None) -> dict[str, str]:
        """Settings and resource names, the contract's variables (worker_tier.core.contract; docs/design.md, "Environment variables")."""
        resources = contract.Resources(
            queue_url=self.queue.queue_url,
            dlq_url=self.dead_letter_queue.queue_url,
            state_table=state_table.table_name if state_table is not None else None,
            payload_bucket=self.payload_bucket.bucket_name if self.payload_bucket is not None else None,
        )
        return {**settings.to_environment(), **resources.to_environment(), **self.level_environment()}

    def _event_source(self, settings: Settings, queue: sqs.IQueue, share: int | None = None) -> SqsEventSource:
        """Batches with partial-failure reporting; concurrency capped at http_connections, or the level's share."""
        window = settings.max_batching_window
        return SqsEventSource(
            queue,
            batch_size=settings.batch_size,
            max_batching_window=Duration.seconds(window) if window else None,
            report_batch_item_failures=True,
            max_concurrency=settings.http_connections if share is None else share,
        )

    def _add_alarms(self, settings: Settings, actions: Sequence[cloudwatch.IAlarmAction]) -> None:
        """DLQ not empty; oldest message older than the oldest_message_alarm setting."""
        self.dead_letter_alarm = queue_not_empty_alarm(
            self,
            "DeadLetterQueueNotEmpty",
            self.dead_letter_queue,
            "Messages were dead-lettered; each carries its reason in the worker_tier.failure attribute.",
        )
        self.oldest_message_alarm = self.queue.metric_approximate_age_of_oldest_message(
            period=Duration.minutes(1), statistic="Maximum"
        ).create_alarm(
            self,
            "OldestMessageAge",
            threshold=settings.oldest_message_alarm,
            evaluation_periods=5,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"The oldest message has waited over {settings.oldest_message_alarm} s: workers are behind or failing.",
        )
        # HTTP forwarding: the container worker scales on this backlog itself, and no Lambda execution reads it.
        self.backlog_per_worker = None if settings.app_port else cloudwatch.MathExpression(
            expression="visible / IF(workers > 0, workers, 1)",
            using_metrics={
                "visible": self.queue.metric_approximate_number_of_messages_visible(period=Duration.minutes(1), statistic="Maximum"),
                "workers": self.function.metric("ConcurrentExecutions", period=Duration.minutes(1), statistic="Maximum"),
            },
            label="Backlog per worker (visible messages / concurrent executions)",
            period=Duration.minutes(1),
        )
        self.backlog_alarm = None if self.backlog_per_worker is None else self.backlog_per_worker.create_alarm(
            self,
            "BacklogPerWorker",
            threshold=settings.backlog_per_task_target,
            evaluation_periods=5,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=(
                f"Each worker has more than {settings.backlog_per_task_target:g} messages waiting "
                "(target_latency_seconds / avg_processing_seconds): raise http_connections or speed up tasks."
            ),
        )
        self.failure_path_alarms = [
            count_alarm(self, construct_id, metric_name, description)
            for construct_id, metric_name, description in _FAILURE_PATH_ALARMS
        ]
        high = self.level_queues.get(PRIORITY_HIGH)
        # High work waits least: its own alarm, at a quarter of the threshold (at least a minute).
        self.high_oldest_message_alarm = None if high is None else high.metric_approximate_age_of_oldest_message(
            period=Duration.minutes(1), statistic="Maximum"
        ).create_alarm(
            self,
            "HighOldestMessageAge",
            threshold=max(60, settings.oldest_message_alarm // HIGH_AGE_ALARM_DIVISOR),
            evaluation_periods=3,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=(f"The oldest high-priority message has waited over "
                               f"{max(60, settings.oldest_message_alarm // HIGH_AGE_ALARM_DIVISOR)} s: its share of "
                               "concurrency is used up or its tasks fail."),
        )
        for alarm in (self.dead_letter_alarm, self.oldest_message_alarm, self.high_oldest_message_alarm,
                      self.backlog_alarm, *self.failure_path_alarms):
            if alarm is not None:
                alarm.add_alarm_action(*actions)
        self._add_dashboard()

    def _add_dashboard(self) -> None:
        """Queue depth, backlog per worker, dead letters, age, and the worker's own counts."""
        counts = [count_metric(name) for name in _DASHBOARD_OUTCOMES]
        trouble = [count_metric(metric_name) for _, metric_name, _ in _FAILURE_PATH_ALARMS]
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard")
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(title="Queue", left=[
                self.queue.metric_approximate_number_of_messages_visible(),
                self.queue.metric_approximate_number_of_messages_not_visible(),
            ]),
            *([cloudwatch.GraphWidget(title="Backlog per worker", left=[self.backlog_per_worker])]
              if self.backlog_per_worker is not None else []),
            cloudwatch.GraphWidget(title="Outcomes", left=counts),
            cloudwatch.GraphWidget(title="Failure paths (each has an alarm)", left=trouble),
            cloudwatch.GraphWidget(title="Dead letters and age", left=[
                self.dead_letter_queue.metric_approximate_number_of_messages_visible()
            ], right=[self.queue.metric_approximate_age_of_oldest_message()]),
        )
        if self.level_queues:
            levels = {PRIORITY_NORMAL: self.queue, **self.level_queues}
            self.dashboard.add_widgets(
                cloudwatch.GraphWidget(title="Priorities: visible messages and oldest age per level", left=[
                    queue.metric_approximate_number_of_messages_visible(label=f"{level} visible")
                    for level, queue in levels.items()
                ], right=[queue.metric_approximate_age_of_oldest_message(label=f"{level} oldest age")
                          for level, queue in levels.items()]),
            )


# The worker's outcome counts, one line each on the dashboard.
_DASHBOARD_OUTCOMES = (
    contract.METRIC_SUCCEEDED,
    contract.METRIC_RETRIED,
    contract.METRIC_DEAD_LETTERED,
    contract.METRIC_RELEASED,
    contract.METRIC_HELD_BACK,
    contract.METRIC_RESCHEDULED,
)

# Counts that mean a failure path was taken: any one raises its alarm.
_FAILURE_PATH_ALARMS = (
    ("DeadLetterFailed", contract.METRIC_DEAD_LETTER_FAILED,
     "The worker could not dead-letter a message (the DLQ refused it or the dead-letter path raised); it backs off and retries."),
    ("VisibilityChangesRefused", contract.METRIC_VISIBILITY_REFUSED,
     "SQS refused visibility changes: those messages return after their current timeout instead of their backoff."),
    ("MalformedRecords", contract.METRIC_MALFORMED_RECORDS,
     "The worker received records it could not read (no messageId); they were logged and backed off."),
    ("RetryDelayShortened", contract.METRIC_RETRY_DELAY_SHORTENED,
     "A retry delay was longer than SQS allows and could not go through the delay table: it was shortened."),
)
