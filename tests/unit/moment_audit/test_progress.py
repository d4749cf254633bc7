"""Promise 3: every run ends, no sleep over MAX_WAIT_MS, little waiting per round, margins kept, whatever the clock does."""

from __future__ import annotations

from typing import Any

import math
import random

from hypothesis import given, settings, strategies as st

from tests.unit.moment_audit.helpers import DUE_FROM_MS, AuditWorld, ready
from worker_tier import send_moment
from worker_tier.dispatcher import ALIGNING_STOPS_MS, FLUSH_FLOOR_MS, ROUND_ITEMS, RUN_MARGIN_MS, _MinuteDispatch
from worker_tier.send_moment import MAX_SPREAD_MS, MAX_WAIT_MS, moment, wait_ms

MAX_WAIT_S = MAX_WAIT_MS / 1000
EPS = 1e-9


def _busy(count: int, span_ms: int, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    return sorted(DUE_FROM_MS + rng.randrange(span_ms) for _ in range(count))


def test_a_clock_that_does_not_move_when_slept_waits_little_per_round():
    # GIVEN a clock that sleeping does not move (stuck, or mocked while time.sleep is real), stuck at .900,
    # and a scheduled blast: 10,000 messages all due at 09:00:00.000
    world = AuditWorld(sleep_rule=lambda seconds: 0.0)
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
    world = AuditWorld(sleep_rule=lambda seconds: -0.3)
    scheduler = ready(world)
    ids = world.put(_busy(5_000, 10_000))
    world.now += 200.2
    report = scheduler.run()
    assert report.stopped == "" and world.bodies() == dict.fromkeys(ids, 1) and not world.early()
    assert max(world.slept) <= MAX_WAIT_S + EPS


def test_a_clock_that_runs_backwards_on_every_read_still_ends():
    world = AuditWorld()
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


def _run_with_a_jump(seconds: float) -> tuple[AuditWorld, set, Any, dict]:
    """A busy minute whose run sees the clock jump ``seconds`` once 1,000 have gone: (world, ids, report, {"at": sleeps by then})."""
    world = AuditWorld()
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
    world = AuditWorld(send_seconds=0.003)
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


@settings(max_examples=3_000, deadline=None)
@given(st.lists(st.integers(0, 4_000_000_000_000), min_size=1, max_size=10),
       st.floats(-1e13, 5e12, allow_nan=False, allow_infinity=False))
def test_wait_is_never_over_max_wait_for_any_batch_and_any_clock(dues, now_ms):
    # any due times (wide or close, overdue or far), any clock reading (backwards, far ahead)
    assert 0 <= wait_ms(moment(dues), now_ms) <= MAX_WAIT_MS
