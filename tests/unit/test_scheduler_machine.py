"""A hypothesis state machine over the delay path: producers, scheduler runs, time, crashes and faults.

Random interleavings of: sends with random delays from producers whose clocks are
up to ±30 s off; scheduler runs at random times, duplicated, after missed
minutes, or crashing between its sends and its watermark write; SendMessageBatch
entries failing; Query throttled; BatchWriteItem leaving items unprocessed.

Invariants, after every step:
- no message is visible before its due time;
- the watermark never passes a message that SQS has not accepted;
- a message is sent twice only if a run died or failed while it was in flight.
And at the end, once faults stop and time moves on: every stored message was delivered.
"""

from __future__ import annotations

import math
import random
from collections import Counter

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from tests.fake_dynamodb import FakeDynamoDB
from tests.fakes import FakeSQS
from worker_tier import Client, SendError
from worker_tier.delay import BUCKET_SECONDS, DelayedMessage
from worker_tier.scheduler import WATERMARK_KEY, DelayScheduler

START = 1_800_000_000.0
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
SHARDS = 4
EXAMPLES = 75
STEPS_PER_EXAMPLE = 200
MIN_TOTAL_STEPS = 10_000
steps_taken = [0]  # invariant checks: one after each initialisation and one after each rule
examples_run = [0]


class SimulatedCrash(BaseException):
    """The invocation died: nothing after this point of the run happens, not even its finally blocks' calls."""


class DelayMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.real = START
        self.rng = random.Random(0)
        self.p_sqs_fail = self.p_throttle = self.p_unprocessed = 0.0
        self.crash_armed = self.crashed = False
        self.dynamodb = FakeDynamoDB(fault=self._dynamodb_fault)
        self.dynamodb.create_table("delay", "pk", "sk")
        self.dynamodb.create_table("state", "pk")
        self.dynamodb.unprocessed = self._unprocessed
        self.dynamodb.page_size = 5
        self.sqs = FakeSQS(fail=self._sqs_fault, clock=lambda: self.real)
        self.due_ms: dict[str, int] = {}
        self.exposed: set[str] = set()
        self.counter = 0
        # incremental views, so each invariant looks only at what changed
        self.checked = 0
        self.delivered: Counter[str] = Counter()
        self.by_bucket: dict[int, set[str]] = {}
        self.verified_below = -1

    # -- faults -------------------------------------------------------------------------

    def _dynamodb_fault(self, operation: str, params: dict) -> str | None:
        if self.crashed:
            raise SimulatedCrash()
        if self.crash_armed and operation == "PutItem" and params["Item"]["pk"]["S"] == WATERMARK_KEY:
            self.crashed = True
            raise SimulatedCrash()
        if operation == "Query" and self.rng.random() < self.p_throttle:
            return "ProvisionedThroughputExceededException"
        return None

    def _unprocessed(self, requests: list[dict]) -> list[dict]:
        return [r for r in requests if self.rng.random() < self.p_unprocessed]

    def _sqs_fault(self, call: int, entry: dict) -> tuple[str, bool] | None:
        return ("ServiceUnavailable", False) if self.rng.random() < self.p_sqs_fail else None

    # -- rules --------------------------------------------------------------------------

    @initialize(seed=st.integers(0, 2**32 - 1))
    def seed(self, seed: int) -> None:
        self.rng.seed(seed)
        examples_run[0] += 1

    @rule(delay=st.integers(901, 4 * 3600), skew=st.floats(-30, 30), count=st.integers(1, 30))
    def send(self, delay: int, skew: float, count: int) -> None:
        producer_clock = self.real + skew
        client = Client(QUEUE, "delay", sqs=self.sqs, dynamodb=self.dynamodb, clock=lambda: producer_clock,
                        sleep=lambda s: None, delay_shards=SHARDS)
        bodies = [f"m{self.counter + n}" for n in range(count)]
        self.counter += count
        from worker_tier import OutgoingMessage

        results = client.send_batch([OutgoingMessage("/x", body, delay=delay + n) for n, body in enumerate(bodies)])
        for n, (body, result) in enumerate(zip(bodies, results)):
            if result.ok:
                due = math.ceil((producer_clock + delay + n) * 1000)
                self.due_ms[body] = due
                self.by_bucket.setdefault(due // 1000 // BUCKET_SECONDS, set()).add(body)

    @rule(seconds=st.integers(1, 150))
    def tick(self, seconds: int) -> None:
        self.real += seconds

    @rule(minutes=st.integers(2, 120))
    def outage(self, minutes: int) -> None:
        self.real += minutes * 60

    @rule(sqs_fail=st.sampled_from([0.0, 0.1, 0.5]), throttle=st.sampled_from([0.0, 0.2, 0.5]),
          unprocessed=st.sampled_from([0.0, 0.3]))
    def faults(self, sqs_fail: float, throttle: float, unprocessed: float) -> None:
        self.p_sqs_fail, self.p_throttle, self.p_unprocessed = sqs_fail, throttle, unprocessed

    @rule()
    def run(self) -> None:
        self._run()

    @rule()
    def duplicate_run(self) -> None:
        self._run()
        self._run()

    @rule()
    def crash_between_send_and_watermark(self) -> None:
        self.crash_armed = True
        self._run()

    def _run(self) -> None:
        before = len(self.sqs.sent)
        scheduler = DelayScheduler("delay", "state", QUEUE, dead_letter_queue_url=QUEUE + "-dlq", sqs=self.sqs, dynamodb=self.dynamodb,
                                   clock=lambda: self.real, sleep=lambda s: None, parallel=False)
        try:
            scheduler.run()
        except (SimulatedCrash, Exception):
            # A run that died or failed mid-way: what it sent may be sent again.
            self.exposed.update(entry["MessageBody"] for entry in self.sqs.sent[before:])
        finally:
            self.crash_armed = self.crashed = False

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def count_step(self) -> None:
        steps_taken[0] += 1

    @invariant()
    def never_early_and_duplicates_only_from_crash_windows(self) -> None:
        for entry in self.sqs.sent[self.checked :]:
            body = entry["MessageBody"]
            assert entry["visible_at"] * 1000 >= self.due_ms[body], entry
            self.delivered[body] += 1
            assert self.delivered[body] == 1 or body in self.exposed, (body, self.delivered[body])
        self.checked = len(self.sqs.sent)

    @invariant()
    def watermark_never_passes_an_undelivered_message(self) -> None:
        item = self.dynamodb.tables["state"].get((WATERMARK_KEY,))
        if item is None:
            return
        watermark = int(item["bucket"]["N"])
        for bucket in [b for b in self.by_bucket if self.verified_below <= b < watermark]:
            missing = self.by_bucket[bucket] - set(self.delivered)
            assert not missing, (sorted(missing)[:3], bucket, watermark)
        self.verified_below = max(self.verified_below, watermark)

    def teardown(self) -> None:
        # Faults stop, time moves past every due time: every stored message is delivered.
        self.p_sqs_fail = self.p_throttle = self.p_unprocessed = 0.0
        self.real += 5 * 3600
        self._run()
        self.never_early_and_duplicates_only_from_crash_windows()
        delivered = set(self.delivered)
        assert set(self.due_ms) <= delivered, sorted(set(self.due_ms) - delivered)[:5]
        stored = {DelayedMessage.from_item(v).body for k, v in self.dynamodb.tables["delay"].items()}
        assert set(self.due_ms) <= stored


def test_delay_path_invariants_hold_over_random_interleavings():
    steps_taken[0] = examples_run[0] = 0
    run_state_machine_as_test(
        DelayMachine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS_PER_EXAMPLE,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        ),
    )
    rules_run = steps_taken[0] - examples_run[0]
    assert rules_run >= MIN_TOTAL_STEPS, rules_run
