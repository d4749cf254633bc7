"""The dispatcher never sends a message early: float edges of due times, retries that cross a second, partial
failures and odd clocks."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from tests.support.dispatcher import DUE_FROM_MS, MomentWorld, finish, ready
from worker_tier.delays.delivery import delay_seconds


def test_delay_seconds_is_never_early_in_exact_arithmetic_beyond_a_microsecond():
    rng = random.Random(1)
    worst = Fraction(0)
    for _ in range(200_000):
        due_ms = 1_800_000_000_000 + rng.randrange(10**9)
        # now: just around due - k s, at float steps of the clock near 1.8e9 s
        now = due_ms / 1000 - rng.randrange(0, 900) + rng.choice([0.0, 1e-7, -1e-7, 2.4e-7, -2.4e-7, 1e-3, -1e-3, rng.random()])
        seconds = delay_seconds(due_ms, now)
        early = Fraction(due_ms, 1000) - (Fraction(now) + seconds)
        worst = max(worst, early)
    assert worst <= Fraction(1, 10**6), f"early by {float(worst)} s"


@pytest.mark.parametrize("pause_moves_s", [0.3, 0.7, 0.999, 1.6])
def test_partial_failures_retried_across_a_second_are_never_early(pause_moves_s):
    # GIVEN every other entry of each first call failing transiently, and each retry pause moving the clock far
    seen: set[str] = set()

    def fail(call, entry):
        if entry["MessageBody"] not in seen and int(entry["Id"]) % 2:
            seen.add(entry["MessageBody"])
            return ("InternalError", False)
        return None

    world = MomentWorld(send_seconds=0.001, fail=fail, sleep_rule=lambda s: s if s <= 0.26 else pause_moves_s)
    world.sleep_rule = lambda s: pause_moves_s if s in (0.05, 0.1) or s > 0.26 else s
    scheduler = ready(world)
    rng = random.Random(4)
    ids = world.put(sorted(DUE_FROM_MS + rng.randrange(3_000) for _ in range(2_000)))
    world.now += 200
    scheduler.run(lambda: 600_000)
    finish(world, scheduler)
    assert set(world.bodies()) == ids and not world.early()


def test_retry_pauses_with_jitter_move_the_clock_and_nothing_shows_early():
    # the retry pauses are whatever BATCH_ENTRIES asks; the clock moves by them (and a random extra up to 0.9 s)
    rng = random.Random(8)
    count = {"n": 0}

    def fail(call, entry):
        count["n"] += 1
        return ("ThrottlingException", False) if count["n"] % 3 == 0 and rng.random() < 0.5 else None

    world = MomentWorld(send_seconds=0.002, fail=fail, sleep_rule=lambda s: s + (rng.random() * 0.9 if s not in (0.0,) else 0))
    scheduler = ready(world)
    ids = world.put(sorted(DUE_FROM_MS + rng.randrange(5_000) for _ in range(3_000)))
    world.now += 200
    for _ in range(5):
        scheduler.run(lambda: 600_000)
        world.now += 60
    assert set(world.bodies()) == ids and not world.early()


@pytest.mark.parametrize("read_noise_s", [0.0005, 0.05])
def test_a_dispatcher_clock_behind_by_a_jittering_amount_is_never_early(read_noise_s):
    # GIVEN a dispatcher clock that reads behind SQS's by a random 0..noise on each read (non-monotonic)
    world = MomentWorld(send_seconds=0.001)
    rng = random.Random(2)
    world.clock_rule = lambda now: now - rng.random() * read_noise_s
    scheduler = ready(world)
    ids = world.put(sorted(DUE_FROM_MS + rng.randrange(4_000) for _ in range(4_000)))
    world.now += 200
    report = scheduler.run(lambda: 600_000)
    finish(world, scheduler)
    assert report.stopped == "" and set(world.bodies()) == ids and not world.early() and world.duplicates() == 0
