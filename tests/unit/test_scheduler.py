"""The delay scheduler against in-memory DynamoDB and SQS: dispatch, catch-up, lease, watermark, limits."""

from __future__ import annotations

import pytest

from tests.fake_dynamodb import FakeDynamoDB
from tests.fakes import FakeSQS
from worker_tier import Client, OutgoingMessage
from worker_tier.delay import BUCKET_SECONDS, DISPATCH_HORIZON_SECONDS
from worker_tier.scheduler import LEASE_SECONDS, MAX_SEND_ATTEMPTS, DelayScheduler, LeaseLostError

START = 1_800_000_000.0  # a minute boundary
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"


class World:
    def __init__(self) -> None:
        self.now = START
        self.dynamodb = FakeDynamoDB()
        self.dynamodb.create_table("delay", "pk", "sk")
        self.dynamodb.create_table("state", "pk")
        self.sqs = FakeSQS(clock=lambda: self.now)
        self.client = Client(QUEUE, "delay", sqs=self.sqs, dynamodb=self.dynamodb, clock=lambda: self.now, sleep=lambda s: None)

    def scheduler(self, sqs=None) -> DelayScheduler:
        return DelayScheduler(
            "delay", "state", QUEUE, sqs=sqs or self.sqs, dynamodb=self.dynamodb, clock=lambda: self.now,
            sleep=lambda s: None, parallel=False,
        )

    def due_of(self, entry: dict) -> str:
        return entry["MessageAttributes"]["worker_tier.due_at"]["StringValue"]


@pytest.fixture
def world() -> World:
    return World()


def test_each_message_is_sent_once_never_early_with_its_attributes(world):
    # GIVEN messages due over the next hour, and a run every minute
    ids = [world.client.send("/x", f"m{n}", delay=901 + n * 37, attributes={"n": n}) for n in range(90)]
    scheduler = world.scheduler()
    for _ in range(75):
        scheduler.run()
        world.now += BUCKET_SECONDS
    # THEN every message went out once, visible exactly at its due second, with its path and attributes
    assert len(world.sqs.sent) == 90
    for n, entry in enumerate(sorted(world.sqs.sent, key=lambda e: int(e["MessageAttributes"]["n"]["StringValue"]))):
        assert entry["visible_at"] == START + 901 + n * 37
        assert entry["MessageAttributes"]["beanstalk.sqsd.path"]["StringValue"] == "/x"
        assert entry["MessageBody"] == f"m{n}"
        assert 0 <= entry["DelaySeconds"] <= 900
    assert len(set(ids)) == 90


def test_catch_up_after_an_outage_sends_late_messages_at_once(world):
    # GIVEN a scheduler that ran once, then nothing for two hours
    for n in range(20):
        world.client.send("/x", f"m{n}", delay=1000 + n * 60)
    world.scheduler().run()
    world.now += 2 * 3600
    # WHEN it runs again
    report = world.scheduler().run()
    # THEN everything overdue goes out with no delay, and the lateness is recorded
    assert len(world.sqs.sent) == 20
    assert all(e["DelaySeconds"] == 0 for e in world.sqs.sent)
    assert report.max_lateness_s == pytest.approx(2 * 3600 - 1000)
    assert report.lag_s < BUCKET_SECONDS


def test_watermark_advances_only_past_minutes_fully_accepted(world):
    # GIVEN SQS that refuses one message every time
    world.client.send("/x", "stubborn", delay=1000)
    world.client.send("/x", "fine", delay=1001)
    refusing = FakeSQS(fail=lambda call, entry: ("ServiceUnavailable", False) if entry["MessageBody"] == "stubborn" else None, clock=lambda: world.now)
    world.now += 200
    report = world.scheduler(refusing).run()
    # THEN the minute is not passed, and what was sent is marked so it is not sent again
    assert report.stopped == f"minute {int((START + 1000) // 60)}: SQS did not accept 1 messages after {MAX_SEND_ATTEMPTS} attempts"
    assert report.watermark == int((START + 1000) // 60)
    assert [e["MessageBody"] for e in refusing.sent] == ["fine"]
    # WHEN SQS recovers  THEN only the refused one goes out
    world.scheduler().run()
    assert [e["MessageBody"] for e in world.sqs.sent] == ["stubborn"]


def test_a_second_run_while_one_holds_the_lease_does_nothing(world):
    world.client.send("/x", "m", delay=950)
    world.now += 100
    assert world.scheduler()._acquire("someone-else")
    world.now += 50
    assert world.scheduler().run().ran is False
    assert world.sqs.sent == []
    # the lease expires: a crashed holder does not block for ever
    world.now += LEASE_SECONDS + 1
    assert world.scheduler().run().sent == 1


def test_run_stops_taking_minutes_when_time_runs_low(world):
    for n in range(10):
        world.client.send("/x", f"m{n}", delay=1000 + n * 60)
    world.scheduler().run()
    world.now += 3600
    remaining = iter([60_000, 60_000, 60_000, 5_000])
    report = world.scheduler().run(remaining_ms=lambda: next(remaining, 5_000))
    assert report.stopped == "invocation time running out"
    assert report.buckets == 3
    # the rest goes next time; nothing is lost
    world.scheduler().run()
    assert len(world.sqs.sent) == 10


def test_queries_are_paginated_and_throttling_is_retried(world):
    # GIVEN 250 messages due in the same minute, pages of 7 items, and Query throttled on every 3rd call
    world.client.send_batch([OutgoingMessage("/x", str(n), delay=1000) for n in range(250)])
    world.dynamodb.page_size = 7
    queries = [0]

    def throttle(operation, params):
        if operation == "Query":
            queries[0] += 1
            return "ProvisionedThroughputExceededException" if queries[0] % 3 == 0 else None
        return None

    world.dynamodb.fault = throttle
    world.now += 200
    world.scheduler().run()
    assert sorted(int(e["MessageBody"]) for e in world.sqs.sent) == list(range(250))


def test_watermark_moved_by_another_run_stops_this_one(world):
    world.client.send("/x", "m", delay=1000)
    scheduler = world.scheduler()
    scheduler._read_watermark()
    with pytest.raises(LeaseLostError, match=r"watermark moved by another run while dispatching minute 123"):
        world.dynamodb.put_item(TableName="state", Item={"pk": {"S": "scheduler#watermark"}, "bucket": {"N": "5"}})
        scheduler._advance(123)


def test_horizon_leaves_room_for_sqs_delay_and_clock_skew():
    assert DISPATCH_HORIZON_SECONDS == 840
