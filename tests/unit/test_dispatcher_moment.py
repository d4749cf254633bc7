"""The dispatcher sends each batch at its moment in the second (worker_tier.send_moment): less lateness, nothing early, lost or doubled."""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime

import pytest

from tests.unit.test_dispatcher import DLQ, QUEUE, START, SlowSQS, World
from worker_tier.delay import DelayedMessage, DelayStore
from worker_tier.dispatcher import ALIGNING_STOPS_MS, DISPATCH_THREADS, POSTPONED_BATCHES, RUN_MARGIN_MS, TIME_RUNNING_OUT, DelayDispatcher
from worker_tier.send_moment import ALIGNED_ROUNDING_MS

SEND_SECONDS = 0.003  # each SendMessageBatch: the world's clock moves this much before SQS takes it
DUE_FROM = START + 960  # a minute in the horizon once the clock is at START + 200


class MovingWorld(World):
    """Sends take time and sleeps pass it, as in a real run; the dispatcher's sleeps are counted."""

    def __init__(self, sleep_moves_clock: bool = True) -> None:
        super().__init__()
        self.sqs = SlowSQS(self, SEND_SECONDS)
        self.slept: list[float] = []
        self.sleep_moves_clock = sleep_moves_clock

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self.sleep_moves_clock:
            self.now += seconds

    def scheduler(self, sqs=None) -> DelayDispatcher:
        return DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=sqs or self.sqs, dynamodb=self.dynamodb,
                               clock=lambda: self.now, sleep=self.sleep, parallel=False)

    def store_dense(self, count: int, shards: int = 16, span_ms: int = 60_000) -> set[str]:
        """``count`` messages due at random milliseconds of ``span_ms`` from a minute's start (busy: neighbours share a fraction of a second)."""
        rng = random.Random(count)
        DelayStore("delay", self.dynamodb).put_many(
            DelayedMessage(f"id-{n}", int(DUE_FROM * 1000) + rng.randrange(span_ms), f"m{n}", {}, n % shards) for n in range(count))
        return {f"m{n}" for n in range(count)}

    def due_s(self, entry: dict) -> float:
        return datetime.fromisoformat(self.due_of(entry).replace("Z", "+00:00")).timestamp()

    def lateness(self) -> list[float]:
        return sorted(entry["visible_at"] - self.due_s(entry) for entry in self.sqs.sent)

    def bodies(self) -> Counter:
        return Counter(entry["MessageBody"] for entry in self.sqs.sent)


def _ready(world: MovingWorld) -> DelayDispatcher:
    scheduler = world.scheduler()
    scheduler.run()  # the first run: the watermark
    return scheduler


def test_a_busy_minute_is_sent_at_its_moments_every_message_once_none_early_none_a_second_late():
    # GIVEN 15,000 messages due over 7.5 s (2,000 a second, as a minute of 120,000: ten neighbours within ~5 ms, every
    # batch close enough to have a moment), each send taking 3 ms
    world = MovingWorld()
    scheduler = _ready(world)
    ids = world.store_dense(15_000, span_ms=7_500)
    world.now += 200
    # WHEN one run dispatches the minute
    report = scheduler.run()
    # THEN each went out once, none visible before its due time, and 99 % rounded up by no more than the window plus
    # what a wave of sends one after another takes (the rest: batches at the tail of a round, where some shards' pages
    # have ended, spread too wide to have a moment)
    lateness = world.lateness()
    assert report.stopped == "" and world.bodies() == Counter(ids)
    assert lateness[0] >= 0 and lateness[-1] <= 1 + DISPATCH_THREADS * SEND_SECONDS
    assert lateness[int(0.99 * len(lateness))] <= ALIGNED_ROUNDING_MS / 1000 + DISPATCH_THREADS * SEND_SECONDS
    assert world.slept and max(world.slept) <= 0.25  # it waited, and never long


def test_without_moments_the_same_minute_would_be_up_to_a_second_late(monkeypatch):
    # The control for the test above: the lateness it rules out is there when batches go at once.
    monkeypatch.setattr("worker_tier.send_moment.MAX_SPREAD_MS", -1)
    world = MovingWorld()
    scheduler = _ready(world)
    world.store_dense(15_000, span_ms=7_500)
    world.now += 200
    scheduler.run()
    lateness = world.lateness()
    assert lateness[int(0.99 * len(lateness))] > ALIGNED_ROUNDING_MS / 1000 + DISPATCH_THREADS * SEND_SECONDS and not world.slept


def test_a_clock_that_does_not_move_when_slept_still_sends_everything_once_and_ends():
    # GIVEN a clock that sleeping does not move (a stuck or mocked clock)
    world = MovingWorld(sleep_moves_clock=False)
    scheduler = _ready(world)
    ids = world.store_dense(3_000)
    world.now += 200
    # WHEN the run finds batches waiting for a moment the clock never brings  THEN each wave still sends one
    report = scheduler.run()
    assert report.stopped == "" and world.bodies() == Counter(ids)
    assert all(entry["visible_at"] >= world.due_s(entry) for entry in world.sqs.sent)


def test_a_run_stopping_for_time_sends_the_waiting_batches_first_and_nothing_goes_twice():
    # GIVEN a run whose time falls below its margin (but above the flush floor) in the middle of a busy minute
    world = MovingWorld()
    scheduler = _ready(world)
    ids = world.store_dense(6_000)
    world.now += 200
    report = scheduler.run(lambda: 60_000 if len(world.sqs.sent) < 2_000 else RUN_MARGIN_MS - 500)
    assert report.stopped == TIME_RUNNING_OUT and 2_000 <= len(world.sqs.sent) < len(ids)
    # WHEN the next runs go on from its cursors
    for _ in range(3):
        world.now += 60
        scheduler.run()
    # THEN every message went out exactly once
    assert world.bodies() == Counter(ids)


def test_from_the_aligning_stop_no_batch_waits():
    # GIVEN a run with less than the margin plus ALIGNING_STOPS_MS left throughout
    world = MovingWorld()
    scheduler = _ready(world)
    ids = world.store_dense(2_000)
    world.now += 200
    report = scheduler.run(lambda: RUN_MARGIN_MS + ALIGNING_STOPS_MS - 1)
    # THEN it sent everything without waiting for any moment
    assert report.stopped == "" and world.bodies() == Counter(ids) and not world.slept


def test_a_run_whose_time_vanishes_mid_round_loses_nothing_and_sends_again_at_most_the_waiting_batches_worth():
    # GIVEN a wave that overran the margin: the time left drops from plenty to none between two waves
    world = MovingWorld()
    scheduler = _ready(world)
    ids = world.store_dense(6_000)
    world.now += 200
    scheduler.run(lambda: 60_000 if len(world.sqs.sent) < 2_000 else 0)
    # WHEN the next runs go on from the cursors (each shard's handled prefix)
    for _ in range(3):
        world.now += 60
        scheduler.run()
    # THEN nothing was lost, and what went twice is bounded by the batches that may wait at once
    sent = world.bodies()
    assert set(sent) == ids
    assert sum(count - 1 for count in sent.values()) <= POSTPONED_BATCHES * 10


@pytest.mark.parametrize("offset_s", [-30.0, 45.0])
def test_a_dispatcher_clock_off_by_seconds_still_never_shows_a_message_early(offset_s):
    # GIVEN a dispatcher whose clock is off from SQS's (skew): DelaySeconds counts from its own reads, SQS from its receipt
    world = MovingWorld()
    skewed = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=world.sqs, dynamodb=world.dynamodb,
                             clock=lambda: world.now + offset_s, sleep=world.sleep, parallel=False)
    skewed.run()
    ids = world.store_dense(2_000)
    world.now += 200
    for _ in range(3):
        skewed.run()
        world.now += 60
    # THEN each went once; a clock behind shows them late, never early by more than it is ahead (SQS cannot know)
    assert world.bodies() == Counter(ids)
    assert min(world.lateness()) >= -max(0.0, offset_s) - 1e-6
