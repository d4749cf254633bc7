"""Every dispatcher run ends within its time: no sleep over MAX_WAIT_MS, little waiting per round, the run's margins
kept, and every wave sends at least one batch, whatever the clock or the due pattern does."""

from __future__ import annotations

import math
import random
from collections import deque
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings, strategies as st

from tests.support.dispatcher import DLQ, DUE_FROM_MS, QUEUE, MomentWorld, TimedSQS, WatermarkWrites, ready
from tests.support.fake_dynamodb import client_error
from worker_tier.delays import send_moment
from worker_tier.delays.delay import DelayedMessage, bucket_key, sort_key
from worker_tier.delays.dispatcher import DelayDispatcher
from worker_tier.delays.minute import DISPATCH_THREADS, _MinuteDispatch
from worker_tier.delays.minute import ALIGNING_STOPS_MS, FLUSH_FLOOR_MS, MOMENT_SLEEPS, POSTPONED_BATCHES, ROUND_ITEMS, RUN_MARGIN_MS
from worker_tier.delays.send_moment import MAX_SPREAD_MS, MAX_WAIT_MS, moment, wait_ms

MAX_WAIT_S = MAX_WAIT_MS / 1000
EPS = 1e-9


def _busy(count: int, span_ms: int, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    return sorted(DUE_FROM_MS + rng.randrange(span_ms) for _ in range(count))


def test_a_clock_that_does_not_move_when_slept_waits_little_per_round():
    # GIVEN a clock that sleeping does not move (stuck, or mocked while time.sleep is real), stuck at .900,
    # and a scheduled blast: 10,000 messages all due at 09:00:00.000
    world = MomentWorld(sleep_rule=lambda seconds: 0.0)
    scheduler = ready(world)
    ids = world.put([DUE_FROM_MS] * 10_000)
    world.now += 200.9
    report = scheduler.run()
    assert report.stopped == "" and world.bodies() == dict.fromkeys(ids, 1)
    rounds = math.ceil(10_000 / ROUND_ITEMS)
    # THEN it asked to sleep little per round (a real time.sleep would really pass it), each sleep within MAX_WAIT_MS
    assert max(world.slept) <= MAX_WAIT_S + EPS
    assert sum(world.slept) <= MAX_WAIT_S * rounds * 2, (
        f"{len(world.slept)} sleeps, {sum(world.slept):.1f} s in all for {rounds} rounds")


def test_a_clock_that_goes_back_when_slept_still_ends_with_every_message_once():
    world = MomentWorld(sleep_rule=lambda seconds: -0.3)
    scheduler = ready(world)
    ids = world.put(_busy(5_000, 10_000))
    world.now += 200.2
    report = scheduler.run()
    assert report.stopped == "" and world.bodies() == dict.fromkeys(ids, 1) and not world.early()
    assert max(world.slept) <= MAX_WAIT_S + EPS


def test_a_clock_that_runs_backwards_on_every_read_still_ends():
    world = MomentWorld()
    scheduler = ready(world)
    ids = world.put(_busy(3_000, 10_000))
    world.now += 200.2
    reads = {"n": 0}

    def clock(now: float) -> float:
        reads["n"] += 1
        return now - reads["n"] * 1e-4

    world.clock_rule = clock
    report = scheduler.run()
    assert report.stopped == "" and world.bodies() == dict.fromkeys(ids, 1) and not world.early()
    assert max(world.slept, default=0) <= MAX_WAIT_S + EPS


def _run_with_a_jump(seconds: float) -> tuple[MomentWorld, set, Any, dict]:
    """A busy minute whose run sees the clock jump ``seconds`` once 1,000 have gone: (world, ids, report, {"at": sleeps by then})."""
    world = MomentWorld()
    scheduler = ready(world)
    ids = world.put(_busy(5_000, 10_000))
    world.now += 200.2
    jumped: dict = {}

    def clock(now: float) -> float:
        if len(world.sqs.sent) >= 1_000 and not jumped:
            jumped["at"] = len(world.slept)
            world.now += seconds
        return world.now

    world.clock_rule = clock
    return world, ids, scheduler.run(), jumped


def test_a_clock_that_jumps_an_hour_ahead_mid_run_sends_the_rest_at_once():
    world, ids, report, jumped = _run_with_a_jump(3600)
    assert report.stopped == "" and world.bodies() == dict.fromkeys(ids, 1)
    assert len(world.slept) == jumped["at"], "slept after every message was overdue"


def test_a_clock_that_jumps_back_within_the_skew_budget_mid_run_shows_nothing_early():
    world, ids, report, _ = _run_with_a_jump(-25)
    assert report.stopped == "" and world.bodies() == dict.fromkeys(ids, 1) and not world.early()
    assert max(world.slept) <= MAX_WAIT_S + EPS


def test_no_wave_starts_below_the_margin_and_no_sleep_inside_the_aligning_stop(monkeypatch):
    # GIVEN a busy minute too big for the run's 30 s, sends of 3 ms, the time left following the world's clock
    world = MomentWorld(send_seconds=0.003)
    scheduler = ready(world)
    world.put(_busy(30_000, 30_000))
    world.now += 200.4
    deadline = world.now + 25
    def remaining() -> int:
        return int((deadline - world.now) * 1000)

    waves, sleeps = [], []
    original_send_wave = _MinuteDispatch._send_wave

    def send_wave(self, messages, attributes, wave):
        waves.append(remaining())
        return original_send_wave(self, messages, attributes, wave)

    def sleep_rule(seconds):
        sleeps.append(remaining())
        return seconds

    monkeypatch.setattr(_MinuteDispatch, "_send_wave", send_wave)
    world.sleep_rule = sleep_rule
    scheduler.run(remaining)
    assert min(waves) >= FLUSH_FLOOR_MS  # main-loop waves >= RUN_MARGIN_MS; flush waves >= FLUSH_FLOOR_MS
    assert sum(1 for r in waves if r < RUN_MARGIN_MS) <= 4
    assert min(sleeps, default=RUN_MARGIN_MS + ALIGNING_STOPS_MS) >= RUN_MARGIN_MS + ALIGNING_STOPS_MS - MAX_WAIT_MS - 1
    assert waves and sleeps, (len(waves), len(sleeps))


close = st.builds(lambda first, offsets: [first + o for o in offsets], st.integers(1_700_000_000_000, 1_900_000_000_000),
                  st.lists(st.integers(0, MAX_SPREAD_MS), min_size=1, max_size=10))


@pytest.mark.slow  # 2,000 examples: out of make test-fast
@settings(max_examples=2_000, deadline=None)
@given(close, st.floats(1_001, 899_000, allow_nan=False), st.integers(0, 999_999))
def test_after_waiting_exactly_its_wait_a_batch_is_at_its_moment(dues, ahead_ms, micro):
    # The dispatcher sleeps wait_ms/1000 s and then reads a clock in seconds: a float near 1.8e9 s
    now_s = (min(dues) - ahead_ms) / 1000 + micro * 1e-9
    now_ms = now_s * 1000
    batch = moment(dues)
    wait = wait_ms(batch, now_ms)
    assert 0 <= wait <= MAX_WAIT_MS
    after_ms = (now_s + wait / 1000) * 1000
    if min(dues) - after_ms > send_moment.LEAD_MS:
        assert wait_ms(batch, after_ms) == 0, f"still {wait_ms(batch, after_ms)} ms to wait after sleeping {wait} ms"


@pytest.mark.slow  # 3,000 examples: out of make test-fast
@settings(max_examples=3_000, deadline=None)
@given(st.lists(st.integers(0, 4_000_000_000_000), min_size=1, max_size=10),
       st.floats(-1e13, 5e12, allow_nan=False, allow_infinity=False))
def test_wait_is_never_over_max_wait_for_any_batch_and_any_clock(dues, now_ms):
    # any due times (wide or close, overdue or far), any clock reading (backwards, far ahead)
    assert 0 <= wait_ms(moment(dues), now_ms) <= MAX_WAIT_MS


class SlowDynamo:
    """Wraps the fake DynamoDB: each put_item/delete_item on the delay table takes ``seconds`` of world time."""

    def __init__(self, world, inner, seconds):
        self.world, self.inner, self.seconds = world, inner, seconds

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name in ("put_item", "delete_item"):
            def slow(**kwargs):
                if kwargs.get("TableName") == "delay":
                    self.world.now += self.seconds
                return attr(**kwargs)
            return slow
        return attr


def _misplaced(world: MomentWorld, count: int, bucket: int) -> None:
    """``count`` items stored under minute ``bucket``'s pk but due in the next minute (a producer's bug or an old version)."""
    for n in range(count):
        due = (bucket + 1) * 60_000 + 500 + n
        message = DelayedMessage(f"id-x{n:05d}", due, f"x{n}", {}, n % 16)
        item = message.to_item()
        item["pk"] = {"S": bucket_key(bucket, n % 16)}
        world.dynamodb.put_item(TableName="delay", Item=item)


def test_refiles_of_a_round_respect_the_run_margin():
    # GIVEN a round of 1,600 misplaced items (due in the next minute), each refile taking 10 ms of DynamoDB per call
    world = MomentWorld()
    ready(world)
    bucket = DUE_FROM_MS // 60_000
    _misplaced(world, 1_600, bucket)
    world.now += 200
    from worker_tier.delays.dispatcher import DelayDispatcher
    slow = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=world.sqs,
                           dynamodb=SlowDynamo(world, world.dynamodb, 0.010), clock=lambda: world.now, sleep=world.sleep,
                           parallel=False)
    deadline = world.now + 12.0  # the run starts with 12 s left: above the margin
    report = slow.run(lambda: int((deadline - world.now) * 1000))
    # THEN the run ends before its deadline, with at least a cursor write's time left (3 s)
    left_s = deadline - world.now
    assert left_s >= 3.0, f"run ended {-left_s:.1f} s past its deadline ({left_s:.1f} s left), refiled {report.refiled}, stopped {report.stopped!r}"


def _phase_world(phase_of_batch, batches: int, send_seconds: float = 0.0) -> tuple[MomentWorld, object]:
    world = MomentWorld(send_seconds=send_seconds)
    scheduler = ready(world)
    dues = []
    for b in range(batches):
        base = DUE_FROM_MS + 1_000 * (b // 4) + phase_of_batch(b)  # due order = batch order when phases rise within each second group
        dues += [base] * 10
    dues.sort()
    world.put(dues, shards=1)
    world.now += 200
    return world, scheduler


@pytest.mark.parametrize("name,phase", [
    ("quarter_seconds", lambda b: 250 * (b % 4)),
    ("every_batch_a_different_phase", lambda b: (b * 37) % 250 + 250 * (b % 4)),
    ("two_families", lambda b: 0 if b % 2 == 0 else 500),
    ("near_window_edge", lambda b: [0, 200, 201, 203][b % 4]),
])
def test_sleep_per_batch_is_bounded_for_adversarial_phases(name, phase):
    # GIVEN 160 batches (a round) of 10 identical due times each, with the phase pattern; sends instant
    world, scheduler = _phase_world(phase, 160)
    report = scheduler.run(lambda: 600_000)
    total = sum(world.slept)
    assert report.stopped == "" and len(world.sqs.sent) == 1_600
    # THEN the sleeps of the round total at most a few moments' worth (each wave sends up to 16 batches)
    assert total <= 160 / 16 * 0.252 + 0.252 * 3, f"{name}: slept {total:.2f} s in {len(world.slept)} sleeps for 160 batches"


class SlowFailingDlq(TimedSQS):
    """Every DLQ call takes 3 s (the dispatcher's call bound) and fails transiently."""

    def send_message_batch(self, QueueUrl, Entries):
        if QueueUrl == DLQ:
            self.calls.append(("SendMessageBatch", {}))
            self.world.now += 3.0
            raise client_error("ServiceUnavailable", "SendMessageBatch")
        return super().send_message_batch(QueueUrl, Entries)


def test_an_unreadable_items_dlq_pointer_respects_the_send_floor():
    # GIVEN one unreadable item in the minute, and a DLQ that answers every call after 3 s with a transient error
    world = MomentWorld()
    world.sqs = SlowFailingDlq(world)
    scheduler = ready(world)
    bucket = DUE_FROM_MS // 60_000
    world.put([DUE_FROM_MS + 100 + n for n in range(20)])
    world.dynamodb.put_item(TableName="delay", Item={"pk": {"S": bucket_key(bucket, 4)},
                                                     "sk": {"S": sort_key(DUE_FROM_MS + 150, "junk")}, "x": {"S": "?"}})
    world.now += 200
    deadline = world.now + 20.0  # 20 s left: a round may start
    report = scheduler.run(lambda: int((deadline - world.now) * 1000))
    left_s = deadline - world.now
    dlq_calls = sum(1 for name, _ in world.sqs.calls if name == "SendMessageBatch") - len(world.sqs.sent)
    # THEN no DLQ send started with less than SEND_FLOOR_MS (6 s) left, so the run ends with >= 3 s left
    assert left_s >= 3.0, f"{dlq_calls} DLQ calls; run ended with {left_s:.1f} s left ({report.stopped[:80]!r})"


def slow_throttled_state(world, inner, failures):
    """State-table watermark writes take 3 s each and the first ``failures`` are throttled."""
    left = {"n": failures}

    def before():
        world.now += 3.0
        if left["n"] > 0:
            left["n"] -= 1
            raise client_error("ProvisionedThroughputExceededException", "PutItem")

    return WatermarkWrites(inner, before)


def test_a_throttled_cursor_write_after_the_last_wave_stays_within_the_invocation():
    world = MomentWorld()
    ready(world)
    world.put([DUE_FROM_MS + 100 + n for n in range(20)])
    world.now += 200
    slow = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=world.sqs,
                           dynamodb=slow_throttled_state(world, world.dynamodb, 4), clock=lambda: world.now, sleep=world.sleep,
                           parallel=False)
    deadline = world.now + 11.0
    # WHEN the throttling outlasts the time left  THEN the run gives up retrying (the error ends it) within its invocation
    with pytest.raises(ClientError, match="ProvisionedThroughputExceeded"):
        slow.run(lambda: int((deadline - world.now) * 1000))
    left_s = deadline - world.now
    assert left_s >= 0.0, f"run ended {-left_s:.1f} s past its invocation's end"


def test_a_clock_that_runs_slow_against_sleep_keeps_the_margins_and_sends_everything():
    # GIVEN a dispatcher clock that moves 1 ms per second slept (not stuck: it moves), and the invocation's real time
    world = MomentWorld(send_seconds=0.002, sleep_rule=lambda s: s * 0.001)
    real = {"slept": 0.0}
    inner = world.sleep

    def sleep(seconds):
        real["slept"] += seconds * 0.999
        inner(seconds)

    world.sleep = sleep
    scheduler = ready(world)
    rng = random.Random(5)
    ids = world.put(sorted(DUE_FROM_MS + rng.randrange(3_000) for _ in range(3_000)))
    world.now += 200
    deadline = world.now + 60.0
    def remaining():
        return int((deadline - world.now - real["slept"]) * 1000)
    report = scheduler.run(remaining)
    assert remaining() >= 3_000, f"ended with {remaining()} ms left"
    for _ in range(4):
        world.now += 60
        deadline = world.now + 60.0
        real["slept"] = 0.0
        scheduler.run(remaining)
    assert set(world.bodies()) == ids, f"first run: {report.stopped!r}, slept {sum(world.slept):.1f} s"
    print(f"slow clock: first run sent {report.sent}, slept {len(world.slept)} times, {sum(world.slept):.1f} s")


BASE_MS = 1_800_000_960_000


def _clock_kinds(rng):
    return {
        "exact": lambda now, slept: now + slept,
        "stuck": lambda now, slept: now,
        "backwards": lambda now, slept: now - rng.random() * 0.5,
        "tiny_steps": lambda now, slept: now + 1e-6,
        "random_jumps": lambda now, slept: now + rng.uniform(-2, 2),
        "undersleep": lambda now, slept: now + slept * 0.5,
    }


@pytest.mark.parametrize("kind", ["exact", "stuck", "backwards", "tiny_steps", "random_jumps", "undersleep"])
def test_every_wave_sends_and_nothing_is_lost_or_doubled(kind):
    rng = random.Random(kind)
    clocks = _clock_kinds(rng)
    for _trial in range(300):
        t = {"now": BASE_MS / 1000 - 800 + rng.random() * 5}
        slept = []

        def sleep(seconds, t=t, slept=slept):
            assert seconds >= 0
            slept.append(seconds)
            t["now"] = clocks[kind](t["now"], seconds)

        run = object.__new__(_MinuteDispatch)
        run.clock, run.sleep = lambda t=t: t["now"], sleep
        run.clock_stuck = False
        batches = []
        for b in range(rng.randrange(1, 200)):
            rng.choice([0, 250, 500, 750, rng.randrange(1000)])  # (draws kept: the trials' seeds stay as they were)
            batches.append([b])
        pending = deque(batches)
        moments = {id(batch): send_moment.moment([BASE_MS + rng.randrange(60) * 1000 + rng.choice([0, 250, 500, 750, rng.randrange(1000)])
                                                  + rng.randrange(3) for _ in range(rng.randrange(1, 11))]) for batch in batches}
        postponed: list[list[int]] = []
        sent: list[int] = []
        waves = 0
        while pending or postponed:
            before = len(slept)
            wave = run._next_wave(pending, postponed, moments if not run.clock_stuck else {})
            waves += 1
            assert 1 <= len(wave) <= DISPATCH_THREADS
            assert len(postponed) <= POSTPONED_BATCHES
            assert len(slept) - before <= MOMENT_SLEEPS
            assert all(s <= send_moment.MAX_WAIT_MS / 1000 + 1e-9 for s in slept[before:])
            sent += [b[0] for b in wave]
            assert waves <= len(batches)
        assert sorted(sent) == list(range(len(batches)))
