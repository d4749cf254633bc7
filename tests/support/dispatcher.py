"""The delay dispatcher's test worlds: a producer, the dispatcher and one clock on in-memory DynamoDB and SQS.

``World`` is the plain one; ``MomentWorld`` adds the send-moment checks (timed sends, duplicates, watermark writes);
``stream_record`` shapes a DynamoDB stream record as Lambda delivers it to the safety net.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime
from fractions import Fraction
from typing import Any, Callable

from tests.support.fake_dynamodb import FakeDynamoDB
from tests.support.fakes import FakeSQS
from tests.support.strict_dynamodb import StrictDynamoDB
from worker_tier import Client
from worker_tier.delays.delay import DelayedMessage, DelayStore, bucket_key
from worker_tier.delays.dispatcher import DelayDispatcher
from worker_tier.delays.dispatch_state import WATERMARK_KEY
from worker_tier.core.message import PATH_ATTRIBUTE

START = 1_800_000_000.0  # a minute boundary
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
DLQ = "https://sqs.us-east-1.amazonaws.com/123456789012/work-dlq"
STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/delay/stream/2026-11-22T00:00:00.000"
TTL_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}


class World:
    """The delay table and the state table on in-memory DynamoDB, SQS, a producer and one clock.

    ``state_table``: the producer's, for cancellable sends (None: it sends none).
    """

    def __init__(self, state_table: str | None = None) -> None:
        self.now = START
        self.dynamodb = StrictDynamoDB(FakeDynamoDB())
        self.dynamodb.create_table("delay", "pk", "sk")
        self.dynamodb.create_table("state", "pk")
        self.sqs = FakeSQS(clock=lambda: self.now)
        self.client = Client(QUEUE, "delay", sqs=self.sqs, dynamodb=self.dynamodb, clock=lambda: self.now, sleep=lambda s: None,
                             state_table=state_table)

    def scheduler(self, sqs=None) -> DelayDispatcher:
        return DelayDispatcher(
            "delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=sqs or self.sqs, dynamodb=self.dynamodb,
            clock=lambda: self.now, sleep=lambda s: None, parallel=False,
        )

    def producer(self, shards: int) -> Client:
        return Client(QUEUE, "delay", sqs=self.sqs, dynamodb=self.dynamodb, clock=lambda: self.now, sleep=lambda s: None,
                      delay_shards=shards)

    def store(self, message_id: str, body: str, delay: float, attributes: dict | None = None, shard: int = 0) -> DelayedMessage:
        """Put an item in the delay table as any producer version may have stored it (no send-time checks)."""
        message = DelayedMessage(message_id, math.ceil((self.now + delay) * 1000), body,
                                 {PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/x"}, **(attributes or {})}, shard)
        DelayStore("delay", self.dynamodb).put_many([message])
        return message

    def watermark(self) -> dict:
        return self.dynamodb.tables["state"][(WATERMARK_KEY,)]

    def due_of(self, entry: dict) -> str:
        return entry["MessageAttributes"]["worker_tier.due_at"]["StringValue"]


class SlowSQS(FakeSQS):
    """Each SendMessageBatch takes ``seconds`` of the world's clock."""

    def __init__(self, world: World, seconds: float) -> None:
        super().__init__(clock=lambda: world.now)
        self.world, self.seconds = world, seconds

    def send_message_batch(self, QueueUrl, Entries):
        self.world.now += self.seconds
        return super().send_message_batch(QueueUrl, Entries)


class CountingDynamoDB(FakeDynamoDB):
    """Counts delay-table items handed out by Query, to see how many a run holds at once."""

    def __init__(self, sqs: FakeSQS) -> None:
        super().__init__()
        self.copy_items = False
        self.sqs, self.read, self.sent_before, self.max_outstanding = sqs, 0, 0, 0

    def new_run(self) -> None:
        """What a run read and did not send dies with it: count from here."""
        self.read, self.sent_before = 0, len(self.sqs.sent)

    def query(self, **kwargs):
        page = super().query(**kwargs)
        self.read += len(page["Items"])
        self.max_outstanding = max(self.max_outstanding, self.read - (len(self.sqs.sent) - self.sent_before))
        return page


def stream_record(sequence: int, event_name: str, item: dict, at_s: float, identity: dict | None = None) -> dict:
    """A Lambda DynamoDB stream record, as Lambda delivers it (DynamoDB JSON images)."""
    change: dict[str, Any] = {
        "ApproximateCreationDateTime": float(int(at_s)),  # whole seconds, rounded down
        "Keys": {"pk": item["pk"], "sk": item["sk"]},
        "SequenceNumber": f"{sequence:021d}",
        "SizeBytes": 300,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
        ("OldImage" if event_name == "REMOVE" else "NewImage"): item,
    }
    record = {"eventID": f"event-{sequence}", "eventName": event_name, "eventVersion": "1.1",
              "eventSource": "aws:dynamodb", "awsRegion": "us-east-1", "dynamodb": change, "eventSourceARN": STREAM_ARN}
    if identity is not None:
        record["userIdentity"] = identity
    return record


DUE_FROM_MS = int((START + 960) * 1000)  # a minute in the horizon once the clock is at START + 200


class TimedSQS(FakeSQS):
    """Each SendMessageBatch takes ``seconds`` of the world clock (before SQS takes it); optional failure rule."""

    def __init__(self, world: "MomentWorld", seconds: float = 0.0, fail=None) -> None:
        super().__init__(fail=fail, clock=lambda: world.now)
        self.world, self.seconds = world, seconds
        self.call_times: list[float] = []

    def send_message_batch(self, QueueUrl, Entries):
        self.call_times.append(self.world.now)
        self.world.now += self.seconds
        return super().send_message_batch(QueueUrl, Entries)


class MomentWorld(World):
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


def ready(world: MomentWorld) -> DelayDispatcher:
    scheduler = world.scheduler()
    scheduler.run()  # the first run: the watermark
    return scheduler


def finish(world: MomentWorld, scheduler: DelayDispatcher, runs: int = 4) -> None:
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


def dead_then_ready_round() -> list[int]:
    """One round (16 shards x 100) whose first 20 batches fall at phases .100-.199 (not their moment while the
    clock reads .000) and whose other 140 batches fall at .300-.799 (their moment at .000)."""
    head = [DUE_FROM_MS + 100 + n // 2 for n in range(200)]
    tail = [DUE_FROM_MS + 1000 * (1 + j // 500) + 300 + j % 500 for j in range(1400)]
    return head + tail


def check_cursors(world: MomentWorld) -> None:
    """Every item at or before its shard's cursor (in the watermark's minute) was taken by SQS or the DLQ."""
    item = world.dynamodb.tables["state"].get((WATERMARK_KEY,))
    if item is None or "cursors" not in item:
        return
    bucket = int(item["bucket"]["N"])
    taken = set(world.bodies()) | set(world.bodies(DLQ))
    for shard, cursor in item["cursors"]["M"].items():
        pk = bucket_key(bucket, int(shard))
        for (key_pk, key_sk), stored in world.dynamodb.tables["delay"].items():
            if key_pk == pk and key_sk <= cursor["S"] and "body" in stored:
                assert stored["body"]["S"] in taken, f"cursor of shard {shard} passed unsent {key_sk}"
