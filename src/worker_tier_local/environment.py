"""``LocalEnvironment``: an embedded moto server, the stack's queues and table, and the event-source emulator."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
import time
import urllib.request
from typing import Any, Callable, Sequence

from worker_tier.core import contract, limits
from worker_tier.producer.client import Client
from worker_tier.worker.task_imports import import_task_modules
from worker_tier_local.context import LocalContext
from worker_tier_local.cron import CronEmulator
from worker_tier_local.event_source import EventSourceEmulator
from worker_tier_local.pending import Pending, queue_backlog, undispatched
from worker_tier_local.server import LocalServer
from worker_tier.core.settings import Settings

LOCAL_REGION = "us-east-1"
# moto accepts any credentials; these are the values its docs use.
EXAMPLE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
LOCAL_ACCOUNT = "123456789012"  # moto's default account
LOCAL_HOST = "127.0.0.1"
LOCAL_PREFIX = "worker-tier-local"
# The payload bucket, created when the large_payloads setting is on (the default), as the stack deploys one.
LOCAL_PAYLOAD_BUCKET = f"{LOCAL_PREFIX}-payloads"
# `make run`'s port: fixed, so the endpoint and the lines it prints stay the same between runs. Not LocalStack's
# 4566, so the two can run side by side. Taken, the environment falls back to a free port (port 0: any).
LOCAL_DEFAULT_PORT = 4577
# Locally the producer and the delay dispatcher share one clock (no skew margin), and a lower threshold lets a
# person watch a delayed message go through the delay table within a few minutes. The horizon must cover
# one minute's bucket plus one minute between runs to stay punctual.
LOCAL_LONG_DELAY_THRESHOLD_SECONDS = 120
LOCAL_DELAY_HORIZON_SECONDS = 120
DISPATCHER_PERIOD_SECONDS = 60


class LocalEnvironment:
    """Worker Tier on one machine: moto on 127.0.0.1, queues and table made from ``settings``.

    ``port`` 0 takes any free port; another port is tried first, and a free one taken when it is in use
    (``unavailable_port`` then names it).

    Examples
    --------
    >>> with LocalEnvironment(Settings()) as env:  # doctest: +SKIP
    ...     env.client.send("/hello", '{"name": "Ada"}')
    ...     env.poll_until(lambda: env.queue_depth() == 0, timeout_seconds=10)
    """

    def __init__(
        self,
        settings: Settings,
        *,
        handler: Callable[[dict, Any], dict] | None = None,
        cron_entries: Sequence[Any] = (),
        on_tick: Callable[[Any], None] | None = None,
        on_dispatcher_run: Callable[[Any], None] | None = None,
        cron_clock: Callable[[], float] = time.time,
        container: bool = False,
        port: int = 0,
    ) -> None:
        self.settings = settings
        self._handler = handler
        self._cron_entries = list(cron_entries)
        self._on_tick = on_tick or (lambda result: None)
        self._on_dispatcher_run = on_dispatcher_run or (lambda result: None)
        self._cron_clock = cron_clock
        self._port = port
        self.unavailable_port: int | None = None  # the port asked for, when it was in use and another was taken
        self.cron: CronEmulator | None = None
        self._next_dispatcher_run = 0.0
        self._container = container
        self.level_queue_urls: dict[str, str] = {}  # with priorities: the high and low levels' queues (set by start)
        self.consumer: Any = None
        self._consumer_thread: threading.Thread | None = None
        self._server: Any = None
        self.schedule_group = ""  # cron.yaml's schedules in moto's Scheduler, for `worker-tier status` (set by start)
        self._saved_environment: dict[str, str | None] = {}
        self.endpoint_url = ""

    def __enter__(self) -> LocalEnvironment:
        try:
            self.start()
        except BaseException:
            self.stop()  # moto's server and the variables set so far
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def start(self) -> None:
        """Start moto, create the resources, point this process's AWS clients at them, and import the task modules.

        TaskImportError says in one line which task module cannot be imported, and why, before any message is sent.
        """
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per API call otherwise
        port = self._port
        if port and not _port_free(port):  # moto's server thread would fail to bind, and start() wait forever
            self.unavailable_port, port = port, 0
        self._server = LocalServer(LOCAL_HOST, port, LOCAL_REGION)  # moto, and the move tasks it lacks
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        # moto's state lives in this process: start from empty, whatever ran before.
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")).close()
        self._set_environment(
            {
                "AWS_ENDPOINT_URL": self.endpoint_url,
                "AWS_ACCESS_KEY_ID": "local",
                "AWS_SECRET_ACCESS_KEY": "local",
                "AWS_SESSION_TOKEN": "local",
                "AWS_DEFAULT_REGION": LOCAL_REGION,
                "AWS_REGION": LOCAL_REGION,
            }
        )
        import boto3

        self.sqs = boto3.client("sqs")
        self.dynamodb = boto3.client("dynamodb")
        self.s3 = boto3.client("s3")
        self._create_resources()
        self.schedule_group = self._create_schedules()
        # Every resource variable is this environment's: one it lacks (no container queue) is unset, not left
        # as an earlier run's export line set it in this shell.
        unset = {field.metadata["variable"]: None for field in dataclasses.fields(contract.Resources)}
        self._set_environment({**unset, **self.settings.to_environment(), **self.resources().to_environment()})
        if self._handler is None:  # the real worker imports them on its first batch; a failure would stop every one
            import_task_modules(self.settings.task_modules.split(","))
        self.client = self.new_client()
        self._dispatcher_handler = _real_dispatcher_handler()
        self.event_source = EventSourceEmulator(
            self.sqs,
            self.queue_url,
            self.queue_arn,
            self._handler or _real_lambda_handler(),
            self._new_context,
            self.settings.batch_size,
            LOCAL_REGION,
            [(url, self._queue_arn(url)) for url in self._poll_order()],
        )
        if self._cron_entries:
            self.cron = CronEmulator(self._cron_entries, _real_periodic_handler(), self._new_context, self._cron_clock)
        if self._container:
            self._start_container_worker()

    def stop(self) -> None:
        """Stop the container worker and moto, and restore the environment variables this environment set."""
        if self.consumer is not None and self._consumer_thread is not None:  # started together
            self.consumer.stopping.set()
            self._consumer_thread.join()
            self.consumer = None
        if self._server is not None:
            self._server.stop()
            self._server = None
        for name, value in self._saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_environment.clear()

    def new_client(self, clock: Callable[[], float] | None = None) -> Client:
        """A producer for this environment (delays over LOCAL_LONG_DELAY_THRESHOLD_SECONDS use the delay table).

        It reads the variables ``start`` set, as ``Client.from_env()`` does anywhere: the queue, the tables, the
        delay shards and, with large_payloads, the payload bucket a body too large for the queue goes to.
        """
        return Client.from_env(os.environ, sqs=self.sqs, dynamodb=self.dynamodb, clock=clock,
                               long_delay_threshold=LOCAL_LONG_DELAY_THRESHOLD_SECONDS)

    def shell_environment(self) -> dict[str, str]:
        """What another shell needs to reach this environment: with it, ``Client.from_env()``, every
        ``worker-tier`` command, boto3 and the AWS CLI find the endpoint, the region, the queues and the tables.

        The deployment's variables are the ones the stack gives a producer (``worker_tier.core.contract``),
        without the dispatch horizon, which only the local dispatcher reads.
        """
        deployment = dataclasses.replace(self.resources(), delay_horizon_seconds=None).to_environment()
        schedules = {contract.SCHEDULE_GROUP_VARIABLE: self.schedule_group} if self.schedule_group else {}
        return {"AWS_DEFAULT_REGION": LOCAL_REGION, "AWS_REGION": LOCAL_REGION, **EXAMPLE_CREDENTIALS,
                "AWS_ENDPOINT_URL": self.endpoint_url, **deployment,
                contract.DELAY_SHARDS_VARIABLE: str(self.settings.delay_shards), **schedules}

    def resources(self) -> contract.Resources:
        """The resources the stack names to the Lambda functions, plus the local dispatch horizon.

        With a container worker, the Lambda worker forwards to its queue (``container_queue_url``).
        """
        return contract.Resources(
            queue_url=self.queue_url,
            dlq_url=self.dead_letter_queue_url,
            state_table=self.state_table,
            delay_table=self.delay_table,
            container_queue_url=self.container_queue_url,
            delay_horizon_seconds=LOCAL_DELAY_HORIZON_SECONDS,
            payload_bucket=self.payload_bucket,
            **{field: self.level_queue_urls.get(level) for level, field in contract.PRIORITY_QUEUE_FIELDS.items()},
        )

    def _poll_order(self) -> list[str]:
        """With priorities, the levels' queues highest first; otherwise none (the work queue alone)."""
        if not self.level_queue_urls:
            return []
        urls = {**self.level_queue_urls, contract.DEFAULT_PRIORITY: self.queue_url}
        return [urls[level] for level in contract.PRIORITY_LEVELS]

    def _start_container_worker(self) -> None:
        """The container worker on its own long-task queue, beside the Lambda emulator that forwards to it."""
        from worker_tier.container.consumer import Consumer
        from worker_tier.core.payloads import PayloadStore
        from worker_tier.core.errors import WorkerTierError
        from worker_tier.container.protection import TaskProtection
        from worker_tier.worker.batch import Worker

        if self.container_queue_url is None:  # _create_resources creates it when container=True
            raise WorkerTierError("the container worker has no queue: container_queue_url was not created (LocalEnvironment(container=True) creates it)")
        core = Worker(
            self.settings,
            queue_url=self.container_queue_url,
            dead_letter_queue_url=self.dead_letter_queue_url,
            state_table=self.state_table,
            sqs=self.sqs,
            dynamodb=self.dynamodb,
            delay_table=self.delay_table,
            payloads=None if self.payload_bucket is None else PayloadStore(
                self.payload_bucket, max_bytes=self.settings.payload_max_bytes),
        )
        self.consumer = Consumer(
            core, self.sqs, self.container_queue_url, concurrency=self.settings.container_concurrency,
            poll_wait_seconds=1, protection=TaskProtection(agent_uri=""),
            # In-process here: a task still running after the grace period keeps its message (heartbeat)
            # and dies with this process, rather than ending the whole local environment at once.
            exit_process=lambda code: None,
        )
        self._consumer_thread = threading.Thread(target=self.consumer.run, name="container-worker", daemon=True)
        self._consumer_thread.start()

    def run_dispatcher(self) -> dict[str, Any]:
        """One delay dispatcher run through its real handler."""
        return self._dispatcher_handler({}, self._new_context())

    def poll_once(self, wait_seconds: int = 1) -> int:
        """Run the delay dispatcher each minute and fire due cron ticks, then one event-source poll.

        Returns how many messages the worker handler was given.
        """
        if time.monotonic() >= self._next_dispatcher_run:
            self._next_dispatcher_run = time.monotonic() + DISPATCHER_PERIOD_SECONDS
            self._on_dispatcher_run(self.run_dispatcher())
        if self.cron is not None:
            for result in self.cron.fire_due():
                self._on_tick(result)
        return self.event_source.poll_once(wait_seconds)

    def poll_until(self, done: Callable[[], bool], timeout_seconds: float, wait_seconds: int = 1) -> bool:
        """Poll until ``done()`` holds or the timeout passes; return whether it held."""
        deadline = time.monotonic() + timeout_seconds
        while not done():
            if time.monotonic() >= deadline:
                return False
            self.poll_once(wait_seconds)
        return True

    def queue_depth(self, queue_url: str | None = None) -> int:
        """Visible plus in-flight plus delayed messages in a queue (the work queue by default)."""
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        attributes = self.sqs.get_queue_attributes(QueueUrl=queue_url or self.queue_url, AttributeNames=names)
        return sum(int(attributes["Attributes"].get(name, 0)) for name in names)

    def pending(self) -> Pending:
        """What is not processed yet: each queue's messages by state, and delayed messages not yet dispatched."""
        queues = [("queue", self.queue_url), *((f"{level} queue", url) for level, url in self.level_queue_urls.items())]
        if self.container_queue_url is not None:
            queues.append(("container queue", self.container_queue_url))
        count, next_due_ms = undispatched(self.dynamodb, self.delay_table, self.state_table)
        return Pending(tuple(queue_backlog(self.sqs, name, url) for name, url in queues), count, self.delay_table, next_due_ms)

    def dead_letters(self) -> list[dict[str, Any]]:
        """Read (without deleting) what is in the DLQ: body, attributes and the parsed failure reason."""
        response = self.sqs.receive_message(
            QueueUrl=self.dead_letter_queue_url,
            MaxNumberOfMessages=limits.SQS_MAX_BATCH_ENTRIES,
            MessageAttributeNames=["All"],
            VisibilityTimeout=0,
        )
        return [_dead_letter_view(m) for m in response.get("Messages") or []]

    def _create_resources(self) -> None:
        """Queues and tables, shaped as WorkerTierStack shapes them (``contract.queue_attributes``, the key layouts)."""
        self.dead_letter_queue_url = self._create_queue("dlq", contract.queue_attributes(self.settings, dead_letter=True))
        dead_letter_arn = self._queue_arn(self.dead_letter_queue_url)
        redrive = {"deadLetterTargetArn": dead_letter_arn, "maxReceiveCount": self.settings.redrive_max_receive_count}
        work_queue = {**contract.queue_attributes(self.settings), "RedrivePolicy": json.dumps(redrive)}
        self.queue_url = self._create_queue("queue", work_queue)
        self.queue_arn = self._queue_arn(self.queue_url)
        self.container_queue_url = self._create_queue("container", work_queue) if self._container else None
        # With priorities, the high and low levels' queues, shaped as the work queue (the normal level).
        self.level_queue_urls = {level: self._create_queue(f"queue-{level}", work_queue)
                                 for level in contract.PRIORITY_QUEUE_FIELDS if self.settings.priorities}
        self.state_table = f"{LOCAL_PREFIX}-state"
        self._create_table(self.state_table, [contract.STATE_PARTITION_KEY], contract.STATE_TTL_ATTRIBUTE)
        self.delay_table = f"{LOCAL_PREFIX}-delays"
        self._create_table(self.delay_table, [contract.DELAY_PARTITION_KEY, contract.DELAY_SORT_KEY], contract.DELAY_TTL_ATTRIBUTE)
        self.payload_bucket = LOCAL_PAYLOAD_BUCKET if self.settings.large_payloads else None
        if self.payload_bucket is not None:  # us-east-1: CreateBucket takes no location constraint there
            self.s3.create_bucket(Bucket=self.payload_bucket)

    def _create_schedules(self) -> str:
        """cron.yaml's schedules in moto's EventBridge Scheduler, as ``PeriodicTasks`` deploys them (one per expression,
        its description naming the entry), so ``worker-tier status --schedule-group`` reads them; the ticks themselves
        are fired by ``CronEmulator``, not by moto. Returns the schedule group's name."""
        import boto3

        scheduler, group = boto3.client("scheduler"), f"{LOCAL_PREFIX}-periodic"
        scheduler.create_schedule_group(Name=group)
        target = {"Arn": f"arn:aws:lambda:{LOCAL_REGION}:{LOCAL_ACCOUNT}:function:{LOCAL_PREFIX}-periodic",
                  "RoleArn": f"arn:aws:iam::{LOCAL_ACCOUNT}:role/{LOCAL_PREFIX}-scheduler"}
        for index, entry in enumerate(self._cron_entries):
            for position, expression in enumerate(entry.expressions):
                scheduler.create_schedule(
                    Name=f"{LOCAL_PREFIX}-entry{index}-{position}", GroupName=group, ScheduleExpression=expression,
                    ScheduleExpressionTimezone=entry.timezone, Description=entry.description,
                    State="ENABLED" if entry.enabled else "DISABLED", FlexibleTimeWindow={"Mode": "OFF"},
                    Target={**target, "Input": json.dumps({"name": entry.name, "url": entry.url, "body": entry.body})})
        return group

    def _create_queue(self, name: str, attributes: dict[str, str]) -> str:
        suffix = contract.FIFO_QUEUE_SUFFIX if self.settings.fifo else ""
        return self.sqs.create_queue(QueueName=f"{LOCAL_PREFIX}-{name}{suffix}", Attributes=attributes)["QueueUrl"]

    def _create_table(self, name: str, keys: list[str], ttl_attribute: str) -> None:
        """An on-demand table keyed by ``keys`` (partition key, then sort key) of strings, with its TTL."""
        key_types = ("HASH", "RANGE")[: len(keys)]  # a partition key, and a sort key when there are two
        self.dynamodb.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": key, "KeyType": kind} for key, kind in zip(keys, key_types, strict=True)],
            AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"} for key in keys],
            BillingMode="PAY_PER_REQUEST",
        )
        self.dynamodb.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl_attribute}
        )

    def _queue_arn(self, queue_url: str) -> str:
        return self.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

    def _new_context(self) -> LocalContext:
        return LocalContext(
            f"{LOCAL_PREFIX}-worker",
            self.settings.inactivity_timeout,
            self.settings.memory_size,
            LOCAL_REGION,
            LOCAL_ACCOUNT,
        )

    def _set_environment(self, values: dict[str, str | None]) -> None:
        """Set each variable (None: unset it), keeping its value before for ``stop``."""
        for name, value in values.items():
            self._saved_environment.setdefault(name, os.environ.get(name))
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _port_free(port: int) -> bool:
    """Whether ``port`` can be bound on LOCAL_HOST as moto's server binds it (SO_REUSEADDR, as HTTPServer sets)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOCAL_HOST, port))
        except OSError:
            return False
    return True


def _real_lambda_handler() -> Callable[[dict, Any], dict]:
    """The deployed handler, rebuilt so it reads this environment's variables."""
    from worker_tier.handlers import worker

    worker.worker.reset()
    return worker.lambda_handler


def _real_dispatcher_handler() -> Callable[[dict, Any], dict]:
    """The deployed delay dispatcher handler, rebuilt so it reads this environment's variables."""
    from worker_tier.handlers import dispatcher

    dispatcher.dispatcher.reset()
    return dispatcher.lambda_handler


def _real_periodic_handler() -> Callable[[dict, Any], dict]:
    """The deployed periodic-task handler, rebuilt so it reads this environment's variables."""
    from worker_tier.handlers import periodic

    periodic.enqueuer.reset()
    return periodic.lambda_handler


def _dead_letter_view(received: dict[str, Any]) -> dict[str, Any]:
    """A DLQ message as body, String attributes and the parsed ``worker_tier.failure``."""
    from worker_tier.core.contract import FAILURE_ATTRIBUTE
    from worker_tier.core.envelope import Envelope

    envelope = Envelope.from_received(received)
    attributes = {k: v.get("StringValue") for k, v in envelope.attributes.items()}
    failure = attributes.get(FAILURE_ATTRIBUTE)
    return {"body": envelope.body, "attributes": attributes, "failure": json.loads(failure) if failure else None}
