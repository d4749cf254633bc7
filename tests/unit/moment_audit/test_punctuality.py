"""Promise 4 (punctuality) and promise 1 (nothing early) of the send-moment change, in whole runs."""

from __future__ import annotations

import random

import pytest

from tests.unit.moment_audit.helpers import DUE_FROM_MS, AuditWorld, ready
from worker_tier.send_moment import ALIGNED_ROUNDING_MS, MAX_SPREAD_MS

WINDOW_S = ALIGNED_ROUNDING_MS / 1000
EPS = 1e-6


def _busy(count: int = 15_000, span_ms: int = 15_000, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    return sorted(DUE_FROM_MS + rng.randrange(span_ms) for _ in range(count))


def _run_busy(world: AuditWorld, offset_s: float, dues: list[int] | None = None):
    scheduler = ready(world)
    ids = world.put(dues or _busy())
    world.now += 200 + offset_s
    report = scheduler.run()
    return report, ids


@pytest.mark.parametrize("offset_s", [0.0, 0.1234567, 0.5, 0.777, 0.999])
def test_a_busy_minute_with_instant_sends_and_exact_sleeps_is_within_the_window(offset_s):
    # Sends take no time, sleeps move the clock exactly: every batch should go at its moment: rounding <= 0.8 s
    world = AuditWorld()
    report, ids = _run_busy(world, offset_s)
    assert report.stopped == "" and set(world.bodies()) == ids and world.duplicates() == 0
    late = world.lateness()
    assert late[0] >= 0 and not world.early()
    over = sum(1 for x in late if x > WINDOW_S + EPS)
    assert late[-1] <= WINDOW_S + EPS, f"max rounding {late[-1]:.7f} s; {over} of {len(late)} messages over 0.8 s"


@pytest.mark.parametrize("short_ms", [0.001, 1.0])
def test_a_sleep_that_undersleeps_slightly_still_sends_each_batch_at_its_moment(short_ms):
    # GIVEN a sleep that returns short_ms early (a clock of another source than the sleep's, NTP slewing, coarse timers)
    world = AuditWorld(sleep_rule=lambda seconds: max(0.0, seconds - short_ms / 1000))
    report, ids = _run_busy(world, 0.3)
    assert report.stopped == "" and set(world.bodies()) == ids and not world.early()
    late = world.lateness()
    unaligned = sum(1 for x in late if x > WINDOW_S + EPS)
    # THEN a batch is sent a hair before its moment at worst (rounded up by <= 0.8 s + short_ms), never ~1 s
    assert late[-1] <= WINDOW_S + short_ms / 1000 + EPS, f"max rounding {late[-1]:.7f} s; {unaligned} of {len(late)} messages over 0.8 s"


def test_a_sleep_that_oversleeps_is_never_early_and_never_over_a_second():
    world = AuditWorld(sleep_rule=lambda seconds: seconds + 0.37)
    report, ids = _run_busy(world, 0.6)
    assert report.stopped == "" and set(world.bodies()) == ids and not world.early()
    assert world.lateness()[-1] < 1.0


@pytest.mark.parametrize("clock_phase", [0.0, 0.0005, 0.5, 0.9, 0.95])
def test_a_blast_of_identical_due_times_waits_at_most_once_a_round_and_rounds_up_by_at_most_the_window(clock_phase):
    # GIVEN 10,000 messages all due at 09:00:00.000 (one second), sends of 3 ms
    world = AuditWorld(send_seconds=0.003)
    scheduler = ready(world)
    ids = world.put([DUE_FROM_MS] * 10_000)
    world.now += 200 + clock_phase
    start = world.now
    report = scheduler.run()
    # THEN every message went once, none early, rounded by at most the window plus one wave of sends
    assert report.stopped == "" and world.bodies() == dict.fromkeys(ids, 1) and not world.early()
    assert world.lateness()[-1] <= WINDOW_S + 16 * 0.003 + EPS
    assert max(world.slept, default=0) <= 0.251 + EPS
    rounds = 10_000 / 1_600
    assert sum(world.slept) <= 0.251 * (rounds + 1), f"slept {sum(world.slept):.3f} s over {world.now - start:.2f} s"


def test_overdue_messages_after_an_outage_go_at_once_without_waiting():
    world = AuditWorld()
    scheduler = ready(world)
    ids = world.put(_busy(5_000, 5_000))
    world.now += 960 + 3600 + 0.9  # an hour late, at .900: every batch's moment would be far
    report = scheduler.run()
    assert report.stopped == "" and set(world.bodies()) == ids and not world.slept
    assert all(e["DelaySeconds"] == 0 for e in world.sqs.sent)


def test_a_batch_due_within_a_second_is_not_held_back():
    # GIVEN a batch due in 0.95 s at phase .950, and the clock at .000 (not its moment: it would round it up by 50 ms only if
    # it waited, but then it would be late)
    world = AuditWorld()
    scheduler = ready(world)
    world.put([DUE_FROM_MS + 950] * 10)
    world.now = DUE_FROM_MS / 1000 - 0.0  # now: .000, due .950 ahead
    scheduler.run()
    assert len(world.sqs.sent) == 10 and not world.slept and not world.early()


def test_messages_held_behind_a_full_set_aside_list_are_not_held_past_their_lead():
    # GIVEN 64+ batches waiting (phase .100-.199 while the clock is at .000), then messages due 1.2 s ahead at .150
    world = AuditWorld()
    scheduler = ready(world)
    now_ms = DUE_FROM_MS - 10_000
    dues = [now_ms + 5_000 + 100 + (n * 100) // 700 for n in range(700)]  # 70 batches at .100-.199, 5 s ahead
    world.put(dues)
    world.now = now_ms / 1000
    report = scheduler.run()
    assert report.stopped == "" and len(world.sqs.sent) == 700 and not world.early()
    assert world.lateness()[-1] <= WINDOW_S + EPS


@pytest.mark.parametrize("phases", [(995, 1003), (999, 1000), (990, 1040), (0, 0), (999, 999)])
def test_batches_across_the_whole_second_are_aligned(phases):
    world = AuditWorld()
    scheduler = ready(world)
    a, b = phases
    dues = sorted([DUE_FROM_MS + 2000 * k + a + ((b - a) * j) // 9 for k in range(25) for j in range(10)])
    world.put(dues, shards=1)
    world.now += 200 + 0.42
    report = scheduler.run()
    assert report.stopped == "" and len(world.sqs.sent) == 250 and not world.early()
    assert world.lateness()[-1] <= WINDOW_S + EPS


@pytest.mark.parametrize("spread, aligned", [(MAX_SPREAD_MS, True), (MAX_SPREAD_MS + 1, False)])
def test_the_spread_boundary(spread, aligned):
    world = AuditWorld()
    scheduler = ready(world)
    dues = [DUE_FROM_MS + 3000 * k + 100 + (spread * j) // 9 for k in range(20) for j in range(10)]
    world.put(sorted(dues), shards=1)
    world.now += 200  # .000: a batch at .100-.100+spread would round up by ~900 ms now
    scheduler.run()
    assert len(world.sqs.sent) == 200 and not world.early()
    if aligned:
        assert world.lateness()[-1] <= WINDOW_S + EPS and world.slept
    else:
        assert not world.slept


@pytest.mark.parametrize("clock_phase", [0.0, 0.001, 0.0009999, 0.8, 0.8010001])
def test_due_times_on_whole_seconds_are_never_early_and_within_the_window(clock_phase):
    world = AuditWorld()
    scheduler = ready(world)
    world.put([DUE_FROM_MS + 1000 * k for k in range(50) for _ in range(18)])
    world.now += 200 + clock_phase
    report = scheduler.run()
    assert report.stopped == "" and len(world.sqs.sent) == 900 and not world.early(), world.early()[:3]
    assert world.lateness()[-1] <= WINDOW_S + EPS


def test_a_batch_of_one_message():
    world = AuditWorld()
    scheduler = ready(world)
    world.put([DUE_FROM_MS + 123])
    world.now += 200 + 0.2  # .200: the due .123 would round up by 923 ms now
    scheduler.run()
    assert len(world.sqs.sent) == 1 and not world.early() and world.lateness()[-1] <= WINDOW_S + EPS
