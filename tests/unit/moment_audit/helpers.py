"""Shared worlds for the audit of the send-moment change (commit d0015c1)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any, Callable
from fractions import Fraction

from tests.support.fakes import FakeSQS
from tests.unit.test_dispatcher import DLQ, QUEUE, START, World
from worker_tier.delay import DelayedMessage, DelayStore
from worker_tier.dispatcher import DelayDispatcher

DUE_FROM_MS = int((START + 960) * 1000)  # a minute in the horizon once the clock is at START + 200


class TimedSQS(FakeSQS):
    """Each SendMessageBatch takes ``seconds`` of the world clock (before SQS takes it); optional failure rule."""

    def __init__(self, world: "AuditWorld", seconds: float = 0.0, fail=None) -> None:
        super().__init__(fail=fail, clock=lambda: world.now)
        self.world, self.seconds = world, seconds
        self.call_times: list[float] = []

    def send_message_batch(self, QueueUrl, Entries):
        self.call_times.append(self.world.now)
        self.world.now += self.seconds
        return super().send_message_batch(QueueUrl, Entries)


class AuditWorld(World):
    """A world whose dispatcher's sleep is recorded and (by default) moves the clock by what was asked."""

    def __init__(self, send_seconds: float = 0.0, fail=None, sleep_rule=None) -> None:
        super().__init__()
        self.sqs = TimedSQS(self, send_seconds, fail)
        self.slept: list[float] = []
        self.sleep_rule = sleep_rule or (lambda seconds: seconds)  # how far the clock moves when asked to sleep seconds
        self.clock_rule = lambda now: now  # what the dispatcher reads given the world's time

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += self.sleep_rule(seconds)

    def scheduler(self, sqs=None) -> DelayDispatcher:
        return DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=sqs or self.sqs, dynamodb=self.dynamodb,
                               clock=lambda: self.clock_rule(self.now), sleep=self.sleep, parallel=False)

    def put(self, dues_ms: list[int], shards: int = 16, prefix: str = "m") -> set[str]:
        """Messages due at ``dues_ms`` (n-th on shard n % shards), bodies prefix+n."""
        DelayStore("delay", self.dynamodb).put_many(
            DelayedMessage(f"id-{prefix}{n:06d}", due, f"{prefix}{n}", {}, n % shards) for n, due in enumerate(dues_ms))
        return {f"{prefix}{n}" for n in range(len(dues_ms))}

    def due_ms_of(self, entry: dict) -> int:
        text = self.due_of(entry).replace("Z", "+00:00")
        return round(datetime.fromisoformat(text).timestamp() * 1000)

    def lateness(self, queue: str = QUEUE) -> list[float]:
        return sorted(entry["visible_at"] - self.due_ms_of(entry) / 1000 for entry in self.sqs.by_queue.get(queue, []))

    def early(self, queue: str = QUEUE, slack_s: float = 1e-6) -> list[tuple[str, float]]:
        """Entries visible before due by more than ``slack_s`` (exact Fractions; a float time of day near 1.8e9 s
        cannot hold a millisecond exactly, so 1e-6 s absorbs only representation error, not a real early show)."""
        return [(e["MessageBody"], float(Fraction(e["visible_at"]) - Fraction(self.due_ms_of(e), 1000)))
                for e in self.sqs.by_queue.get(queue, [])
                if Fraction(e["visible_at"]) < Fraction(self.due_ms_of(e), 1000) - Fraction(slack_s)]

    def bodies(self, queue: str = QUEUE) -> Counter:
        return Counter(entry["MessageBody"] for entry in self.sqs.by_queue.get(queue, []))

    def duplicates(self) -> int:
        return sum(count - 1 for count in self.bodies().values())


def ready(world: AuditWorld) -> DelayDispatcher:
    scheduler = world.scheduler()
    scheduler.run()  # the first run: the watermark
    return scheduler


def finish(world: AuditWorld, scheduler: DelayDispatcher, runs: int = 4) -> None:
    for _ in range(runs):
        world.now += 60
        scheduler.run()


class WatermarkWrites:
    """A DynamoDB client whose state-table watermark PutItems first go through ``before`` (which may raise or move the clock)."""

    def __init__(self, inner: Any, before: Callable[[], None]) -> None:
        self.inner, self.before = inner, before

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name != "put_item":
            return attr

        def put_item(**kwargs: Any) -> Any:
            if kwargs["TableName"] == "state" and kwargs["Item"]["pk"]["S"].endswith("watermark"):
                self.before()
            return attr(**kwargs)
        return put_item
