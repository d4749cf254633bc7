"""Flow control's promise under a hypothesis state machine: several real workers (``Worker`` with its FlowControl) on
in-memory SQS with its redrive policy and an in-memory state table, on one virtual time read through clocks skewed
by up to a few hundred ms, with crashes, failures, time passing and a mix of keys.

The promise: a concurrency key never has more than N at once; no message is dead-lettered or lost for being
throttled; every message runs. "At once", with leases: a run holds its slot from its start until it ends, or, when
its invocation crashed, until its lease ends by the fastest worker's clock (that worker may take the slot, then give
it back to a slower one); the lease was taken as the task started, or, for a task with a rate too, up to the longest
reserved turn before. A rate: over any window of world time, a key's runs number at most rate x window + burst, plus
what the clocks' spread allows (spread x rate + 1). An attempt is a task run, or a receive a crashed invocation took
before the task could run (SQS counts it, and no wait was recorded for it): a dead-letter's reason must count
exactly the attempts its message had when that run failed, at least max_retries.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from tests.support.flow_world import BOTH, CONCURRENT, RATED, FlowWorld, TaskFailure
from worker_tier.core.settings import Settings

MAX_RETRIES = 3
CONCURRENCY = 2
RATE_PER_SECOND, RATE_BURST = 4.0, 2
WORKERS = 3
MAX_SKEW_SECONDS = 0.3
KEYS = ("a", "b", "c")
DRAIN_STEPS = 3000
EXAMPLES, STEPS_PER_EXAMPLE = 60, 30  # invocations and time jumps to empty the queue once crashes stop


class FlowControlMachine(RuleBasedStateMachine):
    """Workers, crashes, clock skew, failures and time passing over two flow-controlled tasks (module docstring)."""

    world: FlowWorld

    @initialize(skews=st.lists(st.floats(-MAX_SKEW_SECONDS, MAX_SKEW_SECONDS), min_size=WORKERS, max_size=WORKERS))
    def start(self, skews: list[float]) -> None:
        settings_ = Settings(max_retries=MAX_RETRIES, visibility_timeout=30, inactivity_timeout=20, heartbeat_interval=20, error_visibility_timeout=1, max_backoff=4,
                             batch_size=3)
        self.world = FlowWorld(settings_, skews, CONCURRENCY, RATE_PER_SECOND, RATE_BURST)
        self.sent = 0

    @rule(path=st.sampled_from([CONCURRENT, RATED, BOTH]), key=st.sampled_from(KEYS), fails=st.integers(0, MAX_RETRIES),
          count=st.integers(1, 4))
    def send(self, path: str, key: str, fails: int, count: int) -> None:
        for _ in range(count):
            self.world.send(self.sent, path, key, fails)
            self.sent += 1

    @rule(worker=st.integers(0, WORKERS - 1), nest=st.booleans())
    def invoke(self, worker: int, nest: bool) -> None:
        """An invocation on what is visible; with ``nest``, another worker's invocation runs while its first task runs."""
        self.world.nest_armed = nest
        self.world.handle(worker)
        self.world.nest_armed = False

    @precondition(lambda self: len(self.world.crashed) < 4)
    @rule(worker=st.integers(0, WORKERS - 1))
    def crash(self, worker: int) -> None:
        self.world.crash(worker)

    @rule(seconds=st.sampled_from([0.1, 0.3, 1.0, 5.0, 31.0, 120.0]))
    def time_passes(self, seconds: float) -> None:
        self.world.sleep(seconds)

    @invariant()
    def a_concurrency_key_never_has_more_than_its_limit_at_once(self) -> None:
        over = [seen for seen in self.world.concurrency_seen if seen[2] > self.world.limit(seen[0])]
        assert not over, f"more than the limit at once (path, key, holders, time): {over}"

    @invariant()
    def a_rate_key_runs_within_its_rate_over_any_window(self) -> None:
        spread = max(self.world.skews) - min(self.world.skews)
        allowance = RATE_BURST + spread * RATE_PER_SECOND + 1
        for key, starts in self.world.rated.items():
            for first, last in itertools.combinations(range(len(starts)), 2):
                runs, window = last - first + 1, starts[last] - starts[first]
                assert runs <= RATE_PER_SECOND * window + allowance + 1e-9, (
                    f"{key}: {runs} runs in {window:.3f} s, over {RATE_PER_SECOND}/s with burst {RATE_BURST} and "
                    f"skew spread {spread:.3f} s")

    @invariant()
    def no_message_is_dead_lettered_short_of_its_attempts(self) -> None:
        for ident, reason in self.world.dead_letters():
            tries = self.world.tries(ident)
            assert tries >= MAX_RETRIES, f"message {ident} dead-lettered after {tries} attempts ({reason})"
            if reason is not None:  # the worker's: a real failure on the last of exactly its attempts
                assert reason["error_type"] == TaskFailure.__name__, reason
                # Exactly its attempts when that run failed: a crash after the DLQ's copy and before the message's
                # delete runs it again (at least once), so a later copy may follow with more.
                assert reason["attempts"] in self.world.failed_tries.get(ident, set()), (
                    ident, reason, self.world.failed_tries.get(ident), self.world.runs.get(ident), self.world.lost.get(ident))
                assert ident not in self.world.succeeded

    def teardown(self) -> None:
        """Crashes stop and time passes: every message runs to success, or is dead-lettered for its real failures."""
        if not hasattr(self, "world"):
            return
        world = self.world
        for step in range(DRAIN_STEPS):
            if not world.pending():
                break
            if not world.handle(step % WORKERS):
                due = world.next_visible_at()
                assert due is not None
                world.now = max(world.now, due)
        assert world.pending() == 0, f"{world.pending()} messages still in the queue after {DRAIN_STEPS} steps"
        self.no_message_is_dead_lettered_short_of_its_attempts()
        self.a_concurrency_key_never_has_more_than_its_limit_at_once()
        self.a_rate_key_runs_within_its_rate_over_any_window()
        dead = {ident for ident, _ in world.dead_letters()}
        for ident in range(self.sent):
            assert ident in dead or world.succeeded.get(ident, 0) >= 1, (
                f"message {ident} neither succeeded nor was dead-lettered: runs {world.runs.get(ident)}, "
                f"lost {world.lost.get(ident)}, fails {world.fails[ident]}")
            crashed = {run.ident for run in world.crashed}
            if ident in dead and world.fails[ident] < MAX_RETRIES:  # it would have succeeded: crashes took its attempts
                assert world.lost.get(ident, 0) or ident in crashed, (ident, world.runs.get(ident), world.fails[ident])


@pytest.mark.slow  # about half a minute: out of make test-fast
def test_flow_control_holds_its_limits_through_workers_crashes_and_skew():
    run_state_machine_as_test(FlowControlMachine, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS_PER_EXAMPLE, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))
