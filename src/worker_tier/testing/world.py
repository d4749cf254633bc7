"""``TaskWorld``: the real worker, delay dispatcher and periodic ticks, in-process, on a clock the test moves."""

from __future__ import annotations

import json
import math
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from worker_tier.core import contract
from worker_tier.core.envelope import lambda_record
from worker_tier.core.settings import Settings
from worker_tier.core.message import format_due_at
from worker_tier.delays.delay import BUCKET_SECONDS, DISPATCH_HORIZON_SECONDS
from worker_tier.delays.delay_recovery import DelayRecovery
from worker_tier.delays.dispatcher import DelayDispatcher
from worker_tier.periodic.ticks import TickEnqueuer, tick_from_event
from worker_tier.producer.client import Client
from worker_tier.core.payloads import PayloadStore
from worker_tier.testing.objects import MemoryObjects
from worker_tier.testing.queues import MAX_RECEIVE_MESSAGES, REGION, MemoryQueues, Stored
from worker_tier.testing.routing import Routing
from worker_tier.testing.tables import MemoryTables
from worker_tier.worker import Outcome, Worker, add_outcome_listener, remove_outcome_listener
from worker_tier.worker.registry import DEFAULT_REGISTRY, Registry

# A world starts at a whole minute, so the delay dispatcher's minutes line up with the test's arithmetic.
DEFAULT_START = datetime(2030, 1, 1, tzinfo=timezone.utc)
QUEUE_NAME, DEAD_LETTER_QUEUE_NAME = "worker-tier-testing-queue", "worker-tier-testing-dlq"
STATE_TABLE, DELAY_TABLE = "worker-tier-testing-state", "worker-tier-testing-delays"
# The payload bucket (in memory), when the large_payloads setting is on (the default): bodies too large for the queue.
PAYLOAD_BUCKET = "worker-tier-testing-payloads"
# SQS's DelaySeconds are whole seconds, so a delayed message shows up to a second after it is due
# (worker_tier.delays.send_moment): advance(days=3) runs a message due in exactly three days.
DUE_SLACK_SECONDS = 1.0
# Powertools' metrics print one EMF line per flush otherwise: https://docs.powertools.aws.dev/lambda/python/latest/core/metrics/
METRICS_DISABLED_VARIABLE = "POWERTOOLS_METRICS_DISABLED"
# The outcome listener is the process's; the world whose worker is handling a batch is the one that hears it.
_handling: ContextVar[TaskWorld | None] = ContextVar("worker_tier_testing_handling", default=None)


@dataclass(frozen=True)
class DeadLetter:
    """One message in the dead-letter queue: its body, its attributes and the worker's reason (``worker_tier.failure``)."""

    body: str
    attributes: dict[str, Any]
    reason: dict[str, Any] | None

    @property
    def path(self) -> str | None:
        """The task path the message was sent to."""
        value: str | None = self.attributes.get(contract.PATH_ATTRIBUTE, {}).get("StringValue")
        return value


@dataclass
class RunResult:
    """What the worker decided during one ``run`` or ``advance``: every outcome, in order."""

    outcomes: list[Outcome] = field(default_factory=list)

    def outcome(self, message_id: str) -> Outcome:
        """The last outcome of ``message_id`` in this run; KeyError naming it when it had none."""
        for outcome in reversed(self.outcomes):
            if outcome.message_id == message_id:
                return outcome
        raise KeyError(f"message {message_id} had no outcome in this run (outcomes: {len(self.outcomes)})")

    def statuses(self) -> list[str]:
        """Each outcome's status, in order (``succeeded``, ``retrying``, ``dead_lettered``, ``released``...)."""
        return [outcome.status for outcome in self.outcomes]


class TaskWorld:
    """Worker Tier in one process, on in-memory SQS, DynamoDB and S3 and a clock that moves only when told.

    Messages sent with ``client`` (or any ``Client.from_env()`` in the process, tasks' follow-ups
    included) go through the real ``Worker`` with its middleware, retries, backoff and dead-letter
    reasons; sends longer than SQS's 15 minutes go through the real delay table and delay dispatcher;
    ``cron`` entries tick through the real tick enqueuer. With ``large_payloads`` (the default), a payload bucket
    ``PAYLOAD_BUCKET`` in memory (``objects``) holds the bodies too large for the queue. No AWS account and no moto.

    Parameters
    ----------
    task_modules
        The modules whose ``@task`` functions run, as the ``task_modules`` setting names them.
    settings
        The settings the worker runs with; default ``Settings()``. Standard queues only.
    cron
        A ``cron.yaml`` path, or parsed ``CronEntry`` objects; reading a file needs PyYAML and croniter
        (the ``cli`` extra). None: no periodic tasks.
    start
        The clock's first reading, an aware datetime; default ``DEFAULT_START``.
    random
        The backoff's jitter source; default ``lambda: 1.0``, so each retry waits its backoff's ceiling.
    registry
        The task registry; default the one ``@task`` fills.

    Examples
    --------
    >>> with TaskWorld(task_modules="tasks.examples") as world:  # doctest: +SKIP
    ...     message_id = world.client.send("/flaky", {"report": "monthly"})
    ...     world.run().outcome(message_id).status
    'retrying'
    """

    def __init__(
        self,
        task_modules: str | Sequence[str] = "tasks",
        *,
        settings: Settings | None = None,
        cron: str | Path | Sequence[Any] | None = None,
        start: datetime = DEFAULT_START,
        random: Callable[[], float] = lambda: 1.0,
        registry: Registry = DEFAULT_REGISTRY,
    ) -> None:
        self.settings = settings or Settings()
        if self.settings.fifo:
            raise ValueError("TaskWorld models standard queues only, got Settings(fifo=True)")
        self._now = start.timestamp()
        self.queues = MemoryQueues(self.clock)
        self.tables = MemoryTables()
        self.objects = MemoryObjects()
        self._create_resources()
        self.outcomes: list[Outcome] = []
        self._sent_as: dict[str, str] = {}  # a delay-table message's id -> the id SQS gave it at dispatch
        self._routing = Routing({"sqs": self.queues, "dynamodb": self.tables, "s3": self.objects}, self._environment(),
                                self.clock)
        self._listening = False  # whether its outcome listener is added
        self._open()
        try:  # a task module may make its Client at import: the world's variables, routing and clock are in place
            registry.import_modules(task_modules.split(",") if isinstance(task_modules, str) else task_modules)
        except BaseException:
            self.close()
            raise
        self.worker = Worker(
            self.settings, queue_url=self.queue_url, dead_letter_queue_url=self.dead_letter_queue_url,
            state_table=STATE_TABLE, delay_table=DELAY_TABLE, registry=registry, sqs=self.queues,
            dynamodb=self.tables, clock=self.clock, random=random,
            payloads=None if self.payload_bucket is None else PayloadStore(
                self.payload_bucket, self.objects, max_bytes=self.settings.payload_max_bytes, sleep=self.sleep),
        )
        self.worker.flow_control.sleep = self.sleep  # a reserved turn of a rate limit is time passing in the world
        self.client = Client(self.queue_url, DELAY_TABLE, sqs=self.queues, dynamodb=self.tables, clock=self.clock,
                             sleep=self.sleep, state_table=STATE_TABLE, delay_shards=self.settings.delay_shards,
                             payload_bucket=self.payload_bucket, s3=self.objects,
                             payload_max_bytes=self.settings.payload_max_bytes)
        self._dispatcher = DelayDispatcher(
            DELAY_TABLE, STATE_TABLE, self.queue_url, dead_letter_queue_url=self.dead_letter_queue_url,
            sqs=self.queues, dynamodb=self.tables, clock=self.clock, sleep=self.sleep, parallel=False,
        )
        # The safety net, fed each new delay-table item as the table's stream would: an item stored in a minute the
        # dispatcher has passed (a producer on another clock) is sent, as in a deployed stack, never silently kept.
        self._recovery = DelayRecovery(STATE_TABLE, self.queue_url, self.dead_letter_queue_url, sqs=self.queues,
                                       dynamodb=self.tables, clock=self.clock, sleep=self.sleep, delay_table=DELAY_TABLE)
        self._streamed: set[tuple[str, str]] = set()  # the delay-table items the safety net has heard of
        self._ticks = _Ticks(cron, self.settings, TickEnqueuer(self.queue_url, STATE_TABLE, sqs=self.queues,
                                                              dynamodb=self.tables, clock=self.clock, sleep=self.sleep))
        self._ticks.start(self.now)

    # -- time -------------------------------------------------------------------------------

    def clock(self) -> float:
        """The world's time in seconds since the epoch: what every part of it reads."""
        return self._now

    def sleep(self, seconds: float) -> None:
        """What the code under test's sleeps do here: the clock moves on."""
        self._now += max(seconds, 0.0)

    @property
    def now(self) -> datetime:
        """The world's time, an aware UTC datetime."""
        return datetime.fromtimestamp(self._now, tz=timezone.utc)

    # -- running ----------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Run what is due now, until nothing is: ticks, a delay dispatcher run, then the worker on every visible message.

        Returns the outcomes decided; the clock does not move (but for the dispatcher's waits within a second).
        """
        result, start = RunResult(), len(self.outcomes)
        self._ticks.fire_due(self.now)
        self._dispatcher.run()
        self._stream_new_items()
        self._link_dispatched()
        while self._handle_batch():
            self._stream_new_items()
        result.outcomes = self.outcomes[start:]
        return result

    def advance(self, delta: timedelta | None = None, **parts: float) -> RunResult:
        """Move the clock by ``delta`` (or ``timedelta(**parts)``: ``days=3``, ``seconds=30``), running what falls due.

        The clock stops at each moment something is due (a message's visibility, a delayed message's
        dispatch, a tick), runs it there, and ends on the target with a ``run()``. A message that shows
        due by the target (``worker_tier.due_at``) that shows within ``DUE_SLACK_SECONDS`` after it runs too,
        the clock stopping there.
        """
        target = self._now + (delta or timedelta(**parts)).total_seconds()
        result, start = RunResult(), len(self.outcomes)
        while (next_moment := self._next_moment()) is not None and next_moment[1] <= target:
            self._now = max(self._now, next_moment[0])
            self.run()
        self._now = max(self._now, target)
        self.run()
        result.outcomes = self.outcomes[start:]
        return result

    # -- what happened ----------------------------------------------------------------------

    def fate(self, message_id: str) -> str | None:
        """The status of the last outcome of ``message_id`` (``succeeded``, ``retrying``, ``dead_lettered``, ``released``...)."""
        history = self.history(message_id)
        return history[-1].status if history else None

    def history(self, message_id: str) -> list[Outcome]:
        """Every outcome of ``message_id`` so far, in order; a delayed message's id is the one ``send`` returned."""
        sent_as = self._sent_as.get(message_id, message_id)
        return [outcome for outcome in self.outcomes if outcome.message_id == sent_as]

    @property
    def dead_letters(self) -> list[DeadLetter]:
        """The dead-letter queue's messages, oldest first, each with its parsed reason."""
        queue = self.queues.queues[self.dead_letter_queue_url]
        return [_dead_letter(stored) for stored in sorted(queue.messages.values(), key=lambda stored: stored.sent_at)]

    def pending(self) -> int:
        """Messages still in the work queue, visible or not (delayed-table messages not counted)."""
        return len(self.queues.queues[self.queue_url].messages)

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop hearing outcomes, and let go of the process: boto3, the environment and the wall clock.

        Another world still open holds them then; with none, they are as before the first world opened.
        Closing twice is closing once.
        """
        if self._listening:
            self._listening = False
            remove_outcome_listener(self._hear)
        self._routing.stop()

    def __enter__(self) -> TaskWorld:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- helpers ----------------------------------------------------------------------------

    def _open(self) -> None:
        """Hear this world's worker's outcomes; route boto3, the variables ``Client.from_env()`` reads and the wall clock here."""
        self._listening = True
        add_outcome_listener(self._hear)
        self._routing.start()

    def _environment(self) -> dict[str, str | None]:
        """The variables ``Client.from_env()`` and ``Worker.from_environment()`` read, naming this world's resources."""
        resources = contract.Resources(queue_url=self.queue_url, dlq_url=self.dead_letter_queue_url,
                                       state_table=STATE_TABLE, delay_table=DELAY_TABLE, payload_bucket=self.payload_bucket)
        return {**resources.to_environment(), contract.DELAY_SHARDS_VARIABLE: str(self.settings.delay_shards),
                METRICS_DISABLED_VARIABLE: "true"}

    def _hear(self, outcome: Outcome) -> None:
        """Keep an outcome this world's worker decided; another open world's are not this one's."""
        if _handling.get() is self:
            self.outcomes.append(outcome)

    def _create_resources(self) -> None:
        attributes = contract.queue_attributes(self.settings)
        dead_letter_queue = self.queues.create(DEAD_LETTER_QUEUE_NAME, int(attributes["VisibilityTimeout"]))
        queue = self.queues.create(QUEUE_NAME, int(attributes["VisibilityTimeout"]), dead_letter_queue,
                                   self.settings.redrive_max_receive_count)
        self.queue_url, self.queue_arn, self.dead_letter_queue_url = queue.url, queue.arn, dead_letter_queue.url
        self.payload_bucket = PAYLOAD_BUCKET if self.settings.large_payloads else None
        if self.payload_bucket is not None:
            self.objects.create_bucket(Bucket=self.payload_bucket)
        self.tables.create_table(STATE_TABLE, contract.STATE_PARTITION_KEY)
        self.tables.create_table(DELAY_TABLE, contract.DELAY_PARTITION_KEY, contract.DELAY_SORT_KEY)

    def _handle_batch(self) -> bool:
        """One Lambda invocation on the visible messages, as the event source makes it; False when none was visible."""
        messages = self._receive_batch()
        if not messages:
            return False
        event = {"Records": [lambda_record(message, self.queue_arn, REGION) for message in messages]}
        handling = _handling.set(self)
        try:
            failed = {item["itemIdentifier"] for item in self.worker.handle(event, None)["batchItemFailures"]}
        finally:
            _handling.reset(handling)
        for message in messages:  # the event source deletes what the batch did not report failed
            if message["MessageId"] not in failed:
                self.queues.delete_message(self.queue_url, message["ReceiptHandle"])
        return True

    def _receive_batch(self) -> list[dict[str, Any]]:
        """Up to ``batch_size`` visible messages, ten a receive as the event source's pollers take them."""
        messages: list[dict[str, Any]] = []
        while len(messages) < self.settings.batch_size:
            wanted = min(self.settings.batch_size - len(messages), MAX_RECEIVE_MESSAGES)
            received = self.queues.receive_message(self.queue_url, MaxNumberOfMessages=wanted, AttributeNames=["All"],
                                                   MessageAttributeNames=["All"]).get("Messages", [])
            messages += received
            if len(received) < wanted:
                break
        return messages

    def _next_moment(self) -> tuple[float, float] | None:
        """The earliest time after now that something happens (a message shows, a dispatch, a tick), and when it was due."""
        queue = self.queues.queues[self.queue_url]
        moments = [(stored.visible_at, _due(stored)) for stored in queue.messages.values() if stored.visible_at > self._now]
        moments += [(moment, moment) for moment in (_dispatch_moment(due, self._now) for due in self._delayed_dues() if due > self._now)]
        tick = self._ticks.next_due()
        if tick is not None:
            moments.append((tick.timestamp(), tick.timestamp()))
        return min(moments, default=None)

    def _link_dispatched(self) -> None:
        """Know each dispatched message by the id ``send`` returned: its body and ``worker_tier.due_at`` match its item."""
        linked = set(self._sent_as.values())
        items = [item for item in self.tables.tables[DELAY_TABLE].values() if "due_ms" in item and item["id"]["S"] not in self._sent_as]
        for stored in self.queues.queues[self.queue_url].messages.values():
            due_at = stored.attributes.get(contract.DUE_AT_ATTRIBUTE, {}).get("StringValue")
            if due_at is None or stored.message_id in linked:
                continue
            for item in items:
                if item["id"]["S"] not in self._sent_as and item["body"]["S"] == stored.body and format_due_at(int(item["due_ms"]["N"])) == due_at:
                    self._sent_as[item["id"]["S"]] = stored.message_id
                    break

    def _stream_new_items(self) -> None:
        """Give the safety net an INSERT stream record of each delay-table message item it has not heard of, made now."""
        records = []
        for item in self.tables.tables[DELAY_TABLE].values():
            key = (item[contract.DELAY_PARTITION_KEY]["S"], item[contract.DELAY_SORT_KEY]["S"])
            if key in self._streamed or "due_ms" not in item:
                continue
            self._streamed.add(key)
            keys = {contract.DELAY_PARTITION_KEY: item[contract.DELAY_PARTITION_KEY], contract.DELAY_SORT_KEY: item[contract.DELAY_SORT_KEY]}
            records.append({"eventID": str(len(self._streamed)), "eventName": "INSERT", "dynamodb": {
                "Keys": keys, "NewImage": dict(item), "ApproximateCreationDateTime": math.floor(self._now),
                "SequenceNumber": str(len(self._streamed))}})
        if records:
            self._recovery.process(records)

    def _delayed_dues(self) -> list[float]:
        """When each message in the delay table is due (seconds): dispatched ones stay there until their TTL."""
        items = self.tables.tables[DELAY_TABLE].values()
        return [int(item["due_ms"]["N"]) / 1000 for item in items if "due_ms" in item]


def _dispatch_moment(due: float, now: float) -> float:
    """The first minute's start at which the delay dispatcher's horizon reaches ``due``, after ``now``."""
    reach = math.floor((due - DISPATCH_HORIZON_SECONDS) / BUCKET_SECONDS + 1) * BUCKET_SECONDS
    return max(reach, (math.floor(now / BUCKET_SECONDS) + 1) * BUCKET_SECONDS)


def _due(stored: Stored) -> float:
    """When a message was due: its ``worker_tier.due_at`` when it shows within DUE_SLACK_SECONDS of it, else when it shows."""
    due_at = stored.attributes.get(contract.DUE_AT_ATTRIBUTE, {}).get("StringValue")
    if due_at is None:
        return stored.visible_at
    due = datetime.fromisoformat(due_at.replace("Z", "+00:00")).timestamp()
    return due if 0 <= stored.visible_at - due <= DUE_SLACK_SECONDS else stored.visible_at


def _dead_letter(stored: Stored) -> DeadLetter:
    failure = stored.attributes.get(contract.FAILURE_ATTRIBUTE, {}).get("StringValue")
    return DeadLetter(stored.body, dict(stored.attributes), json.loads(failure) if failure else None)


class _Ticks:
    """cron.yaml's entries fired at their times through the tick enqueuer, as EventBridge Scheduler fires them."""

    def __init__(self, cron: str | Path | Sequence[Any] | None, settings: Settings, enqueuer: TickEnqueuer) -> None:
        if isinstance(cron, (str, Path)):
            from worker_tier.periodic.cron_config import load

            entries: Sequence[Any] = load(cron, fifo=settings.fifo)
        else:
            entries = cron or ()
        self._entries = [entry for entry in entries if entry.enabled]
        self._enqueuer = enqueuer
        self._due: list[datetime] = []

    def start(self, now: datetime) -> None:
        self._due = [self._after(entry, now) for entry in self._entries]

    def next_due(self) -> datetime | None:
        return min(self._due, default=None)

    def fire_due(self, now: datetime) -> None:
        """Enqueue every tick due by ``now``, each once, in time order."""
        for index, entry in enumerate(self._entries):
            while self._due[index] <= now:
                scheduled = self._due[index].astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                self._enqueuer.enqueue(tick_from_event({"name": entry.name, "url": entry.url, "body": entry.body,
                                                         "scheduled_time": scheduled}))
                self._due[index] = self._after(entry, self._due[index])

    @staticmethod
    def _after(entry: Any, moment: datetime) -> datetime:
        from worker_tier.periodic.cron_preview import next_runs

        [due] = next_runs(entry, moment, 1)
        return due
