"""Audit 2: _next_wave in isolation (promise 3): every wave sends >= 1 batch, at most MOMENT_SLEEPS sleeps of <= MAX_WAIT_MS,
no batch lost or doubled between pending, set-aside and the wave, whatever the clock does."""

from __future__ import annotations

import random
from collections import deque

import pytest

from worker_tier import send_moment
from worker_tier.dispatcher import DISPATCH_THREADS, MOMENT_SLEEPS, POSTPONED_BATCHES, _MinuteDispatch

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
            rng.choice([0, 250, 500, 750, rng.randrange(1000)])  # (draws kept: the trials' seeds stay as audited)
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
