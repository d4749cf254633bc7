"""``WorkerTierStack``: the state table and the worker queue, wired from the settings."""

from __future__ import annotations

import os
from typing import Any, Sequence

from aws_cdk import Stack, aws_dynamodb as dynamodb, aws_iam as iam, aws_s3 as s3
from constructs import Construct

from worker_tier.periodic import cron_config
from worker_tier_cdk import defaults
from worker_tier_cdk.code import TaskCode
from worker_tier_cdk.container_worker import ContainerWorker, ContainerWorkerProps
from worker_tier_cdk.dashboard import add_stack_widgets
from worker_tier_cdk.payload_bucket import PayloadBucket, PayloadBucketProps
from worker_tier.periodic.cron_config import CronEntry
from worker_tier_cdk.delay_dispatcher import DelayDispatcher, DelayDispatcherProps
from worker_tier_cdk.periodic_tasks import PeriodicTasks, PeriodicTasksProps
from worker_tier_cdk.settings import Settings, settings_from_context
from worker_tier_cdk.worker_queue import WorkerQueue, WorkerQueueProps
from worker_tier.core.contract import CONTAINER_QUEUE_URL_VARIABLE, JOB_RETENTION_VARIABLE, Resources, setting_variable
from worker_tier.delays.delay import MAX_DELAY_SECONDS


class WorkerTierStack(Stack):
    """Everything Worker Tier deploys.

    Public attributes: ``state_table``, ``payload_bucket`` (None unless the large_payloads
    setting is on; the worker, the container worker and the periodic tasks share it),
    ``worker``, ``delay_dispatcher`` (None on a FIFO queue, which has no per-message
    delay), ``container_worker`` (None unless the container_worker setting is on), and
    ``periodic_tasks`` (None without cron entries).

    ``task_code``: the directories holding the modules of the ``task_modules`` setting
    (``TaskCode.from_directories("myjobs")``); the worker function and the container
    image run them beside the installed runtime; one path (``task_code="tasks"``) is one
    directory. ``cron_file`` or ``cron_entries``: the periodic tasks; a ``cron_file`` that
    does not exist fails synth with a CronConfigError naming the path.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings | None = None,
        task_code: TaskCode | str | os.PathLike[str] | Sequence[str | os.PathLike[str]] = (),
        cron_file: str | os.PathLike[str] | None = None,
        cron_entries: list[CronEntry] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.settings = settings if settings is not None else settings_from_context(self)
        # One per stack: task idempotency, the delay dispatcher's lease and watermark, and tick dedupe share it.
        self.state_table = dynamodb.TableV2(self, "StateTable", **defaults.state_table_props())
        self.task_code = _task_code(task_code)
        self.payload_bucket = self._payload_bucket()
        self.worker = WorkerQueue(self, "Worker", WorkerQueueProps(settings=self.settings, state_table=self.state_table,
                                                                   task_code=self.task_code, payload_bucket=self.payload_bucket))
        self.delay_dispatcher = self._delay_dispatcher()
        self.container_worker = self._container_worker()
        if cron_entries is not None and cron_file is not None:
            raise ValueError("WorkerTierStack: pass cron_file or cron_entries, not both")
        entries = cron_entries if cron_entries is not None else (
            cron_config.load(os.fspath(cron_file), fifo=self.settings.fifo) if cron_file is not None else [])
        cron_config.check_priorities(entries, priorities=self.settings.priorities)
        self.periodic_tasks = (
            PeriodicTasks(
                self,
                "PeriodicTasks",
                PeriodicTasksProps(entries=entries, queue=self.worker.queue, state_table=self.state_table,
                                   payload_bucket=self.payload_bucket),
            )
            if entries
            else None
        )
        self._wire_levels()
        self._outputs()

    def _wire_levels(self) -> None:
        """With priorities: whatever sends to the work queue sends to the levels' queues too (and is told where they
        are): the delay dispatcher and its safety net, the periodic tasks, the container worker's tasks."""
        if not self.worker.level_queues:
            return
        if self.delay_dispatcher is not None:
            self.worker.grant_levels(self.delay_dispatcher.function)
            self.worker.grant_levels(self.delay_dispatcher.recovery.function)
        if self.periodic_tasks is not None:
            self.worker.grant_levels(self.periodic_tasks.function)
        if self.container_worker is not None:
            task_definition = self.container_worker.service.task_definition
            for name, value in self.worker.level_environment().items():
                task_definition.default_container.add_environment(name, value)  # type: ignore[union-attr]  # the pattern's container
            for level_queue in self.worker.level_queues.values():
                level_queue.grant_send_messages(task_definition.task_role)
                if self.container_worker.forwarding:  # it reads the work queue, so every level of it
                    level_queue.grant_consume_messages(task_definition.task_role)

    def grant_produce(self, grantee: iam.IGrantable) -> None:
        """Let ``grantee`` (a web app's role, another function) send work as ``Client.send`` does, and nothing more.

        The work queue and the payload bucket's ``payloads/`` prefix (``WorkerQueue.grant_produce``) and, unless
        the queue is FIFO, the delay table's messages and dedupe markers (delays past 15 minutes, ``dedupe_key=``),
        with ``cancel`` and ``reschedule`` of cancellable sends. Point its ``Client.from_env()`` at them with ``producer_environment()``.

        Examples
        --------
        >>> stack.grant_produce(web_app_role)  # doctest: +SKIP
        """
        self.worker.grant_produce(grantee)
        if self.delay_dispatcher is not None:
            self.delay_dispatcher.grant_produce(grantee)

    def producer_environment(self) -> dict[str, str]:
        """The variables ``Client.from_env()`` reads to send to this stack: the queue, the delay table, the state table,
        the payload bucket, the job_retention setting."""
        environment = Resources(
            queue_url=self.worker.queue.queue_url,
            state_table=self.state_table.table_name,
            payload_bucket=self.payload_bucket.bucket_name if self.payload_bucket is not None else None,
        ).to_environment()
        environment.update(self.worker.level_environment())
        if self.delay_dispatcher is not None:
            environment.update(self.delay_dispatcher.producer_environment(self.settings))
        # Tracked jobs' first records are kept as long as the workers keep their changes (docs/jobs.md)
        environment[JOB_RETENTION_VARIABLE] = str(self.settings.job_retention)
        if self.payload_bucket is not None:  # a producer offloads and refuses by the stack's own limits
            environment.update({name: value for name, value in self.settings.to_environment().items()
                                if name in (setting_variable("payload_threshold"), setting_variable("payload_max_bytes"))})
        return environment

    @property
    def _has_delays(self) -> bool:
        """A FIFO queue has no per-message delay, so its stack has no delay table and no delay dispatcher."""
        return not self.settings.fifo

    def _payload_bucket(self) -> s3.IBucket | None:
        """The one payload bucket (large_payloads setting), its objects kept as long as a delayed message may wait."""
        if not self.settings.large_payloads:
            return None
        longest_delay_seconds = MAX_DELAY_SECONDS if self._has_delays else 0
        return PayloadBucket(self, "PayloadBucket", PayloadBucketProps(settings=self.settings,
                                                                         longest_delay_seconds=longest_delay_seconds)).bucket

    def _delay_dispatcher(self) -> DelayDispatcher | None:
        """The delay table and its delay dispatcher; tasks may send long delays too."""
        if not self._has_delays:
            return None
        dispatcher = DelayDispatcher(
            self,
            "Delays",
            DelayDispatcherProps(
                settings=self.settings,
                queue=self.worker.queue,
                dead_letter_queue=self.worker.dead_letter_queue,
                state_table=self.state_table,
            ),
        )
        for name, value in dispatcher.producer_environment(self.settings).items():
            self.worker.function.add_environment(name, value)
        dispatcher.grant_produce(self.worker.function)
        return dispatcher

    def _container_worker(self) -> ContainerWorker | None:
        """Opt-in (container_worker setting): ECS tasks for @task(container=True) work, or for every message (app_port)."""
        if not self.settings.container_worker:
            return None
        container = ContainerWorker(
            self,
            # The construct id keeps its first name: renaming it would replace the deployed queue and its messages.
            "LongTasks",
            ContainerWorkerProps(
                settings=self.settings,
                dead_letter_queue=self.worker.dead_letter_queue,
                state_table=self.state_table,
                work_queue=self.worker.queue,
                task_code=self.task_code,
                payload_bucket=self.payload_bucket,
                level_queues=self.worker.level_queues,
            ),
        )
        if not container.forwarding:  # forwarding: it reads the work queue itself, so nothing is forwarded to it
            self.worker.function.add_environment(CONTAINER_QUEUE_URL_VARIABLE, container.queue.queue_url)
            container.queue.grant_send_messages(self.worker.function)
        if self.delay_dispatcher is not None:
            self.delay_dispatcher.grant_produce(container.service.task_definition.task_role)
            for name, value in self.delay_dispatcher.producer_environment(self.settings).items():
                container.service.task_definition.default_container.add_environment(name, value)  # type: ignore[union-attr]  # the pattern's container
        return container

    def _outputs(self) -> None:
        """The constructs publish the stack outputs (worker_tier_cdk.outputs); the stack adds its dashboard widgets."""
        add_stack_widgets(self.worker.dashboard, self.worker, self.delay_dispatcher, self.periodic_tasks)


def _task_code(task_code: TaskCode | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> TaskCode:
    """``task_code`` as TaskCode: one path is one directory, not a sequence of characters."""
    if isinstance(task_code, TaskCode):
        return task_code
    if isinstance(task_code, (str, os.PathLike)):
        return TaskCode.from_directories(task_code)
    return TaskCode.from_directories(*task_code)
