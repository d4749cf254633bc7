"""A hypothesis state machine over cancel and reschedule racing the delay dispatcher, on eventually consistent reads.

Random interleavings of: cancellable sends (keys from a small pool, so keys repeat and
deduplicate) due 841 s to 3 h ahead; cancels and reschedules between runs, and also
*inside* a run, at the delay dispatcher's own calls: just before it writes a minute's
start record (the cancel then commits first) or just before one of its Queries (after
the record); runs at random times with a dispatcher clock up to 30 s behind or 60 s
ahead of the producer's. The in-memory DynamoDB answers every Query without
ConsistentRead from a stale view that still holds every item deleted since the last
``settle`` (DynamoDB bounds that staleness nowhere), so a cancel that relied on an
eventually consistent read would be caught delivering.

Invariants:
- a message whose cancel returned True is never delivered;
- nothing is delivered twice, nor before it is due;
- at the end, after the dispatcher has run past every due time: every message whose
  cancel returned False (or that was never cancelled) is delivered exactly once, due
  at the time its last successful reschedule set (or as sent): a reschedule neither
  duplicates nor loses.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from tests.support.fake_dynamodb import FakeDynamoDB
from tests.support.strict_dynamodb import StrictDynamoDB
from tests.support.fakes import FakeSQS
from worker_tier import Client
from worker_tier.delays.cancellation import CANCELLABLE_MIN_DELAY_SECONDS
from worker_tier.core.contract import DUE_AT_ATTRIBUTE
from worker_tier.delays.delay import BUCKET_SECONDS, CANCELLABLE_SHARD
from worker_tier.delays.dispatcher import DelayDispatcher
from worker_tier.delays.dispatch_state import MINUTE_KEY_PREFIX
from worker_tier.core.errors import MessageError, SendError
from worker_tier.core.message import format_due_at

START = 1_800_000_000.0
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
DLQ = "https://sqs.us-east-1.amazonaws.com/123456789012/work-dlq"
KEYS = ("a", "b", "c", "d")
MAX_SEND_DELAY_SECONDS = 3 * 3600
EXAMPLES = 60
STEPS_PER_EXAMPLE = 60
delays = st.integers(CANCELLABLE_MIN_DELAY_SECONDS + 1, MAX_SEND_DELAY_SECONDS)


class CancelMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = START
        self.skew = 0.0
        self.most_ahead = 0.0  # the furthest the dispatcher's clock has run ahead: it may send that much early
        self.rng = random.Random(0)
        self.dynamodb = StrictDynamoDB(FakeDynamoDB(fault=self._at_dynamodb_call))
        self.dynamodb.create_table("delay", "pk", "sk")
        self.dynamodb.create_table("state", "pk")
        self.dynamodb.stale = lambda key: True  # every Query without ConsistentRead sees every item deleted since settle()
        self.sqs = FakeSQS(clock=lambda: self.now)
        self.client = Client(QUEUE, "delay", sqs=self.sqs, dynamodb=self.dynamodb, clock=lambda: self.now,
                             sleep=lambda s: None, state_table="state")
        self.dispatcher = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=self.sqs, dynamodb=self.dynamodb,
                                          clock=lambda: self.now + self.skew, sleep=lambda s: None, parallel=False)
        self.serial = 0
        self.live: dict[str, str] = {}  # key -> body of its stored, not cancelled message
        self.due_ms: dict[str, int] = {}  # body -> when it must be delivered
        self.cancelled: set[str] = set()  # bodies whose cancel returned True
        self.pending: list[tuple[str, str, int]] = []  # (action, key, delay) to run inside the next run
        self.in_run = False

    # -- the race, inside a run ---------------------------------------------------------------

    def _at_dynamodb_call(self, operation: str, params: dict) -> None:
        """Inside a run, before its minute-record put or a Query of the cancellable shard: maybe do a pending action."""
        if not self.in_run or not self.pending:
            return None
        record = operation == "PutItem" and params["Item"]["pk"]["S"].startswith(MINUTE_KEY_PREFIX)
        query = operation == "Query" and params["ExpressionAttributeValues"][":pk"]["S"].endswith(f"#{CANCELLABLE_SHARD}")
        if (record or query) and self.rng.random() < 0.5:
            self.in_run = False  # the action's own calls are not the dispatcher's
            try:
                self._do(*self.pending.pop(0))
            finally:
                self.in_run = True
        return None

    def _do(self, action: str, key: str, delay: int) -> None:
        if action == "cancel":
            self._cancel(key)
        else:
            self._reschedule(key, delay)

    def _cancel(self, key: str) -> None:
        cancelled = self.client.cancel(key)
        if cancelled:
            assert key in self.live, f"cancel({key!r}) said True with no message stored under it"
            self.cancelled.add(self.live.pop(key))

    def _reschedule(self, key: str, delay: int) -> None:
        due_ms = int((self.now + delay) * 1000)
        try:
            moved = self.client.reschedule(key, delay=delay)
        except MessageError:  # its new minute already started (the dispatcher's clock is ahead): nothing changed
            return
        if moved:
            assert key in self.live, f"reschedule({key!r}) said True with no message stored under it"
            self.due_ms[self.live[key]] = due_ms

    # -- rules ----------------------------------------------------------------------------------

    @rule(skew=st.sampled_from([-30.0, 0.0, 30.0, 60.0]), seed=st.integers(0, 2**32 - 1))
    def set_dispatcher_clock(self, skew: float, seed: int) -> None:
        self.skew = skew
        self.most_ahead = max(self.most_ahead, skew)
        self.rng.seed(seed)

    @rule(key=st.sampled_from(KEYS), delay=delays)
    def send(self, key: str, delay: int) -> None:
        self.serial += 1
        body = f"{key}:{self.serial}"
        try:
            self.client.send("/x", body, delay=delay, dedupe_key=key, cancellable=True)
        except SendError as refused:  # the minute already started (dispatcher clock ahead): nothing stored
            assert refused.code == "DispatchStarted", refused
            return
        if any(item.get("body", {}).get("S") == body for item in self.dynamodb.tables["delay"].values()):
            assert key not in self.live, f"{body} stored while {self.live.get(key)} holds key {key!r}"
            self.live[key], self.due_ms[body] = body, int((self.now + delay) * 1000)

    @rule(key=st.sampled_from(KEYS))
    def cancel(self, key: str) -> None:
        self._cancel(key)

    @rule(key=st.sampled_from(KEYS), delay=delays)
    def reschedule(self, key: str, delay: int) -> None:
        self._reschedule(key, delay)

    @rule(action=st.sampled_from(["cancel", "reschedule"]), key=st.sampled_from(KEYS), delay=delays)
    def race_the_next_run(self, action: str, key: str, delay: int) -> None:
        self.pending.append((action, key, delay))

    @rule(seconds=st.integers(0, 3 * BUCKET_SECONDS))
    def run(self, seconds: int) -> None:
        self.now += seconds
        self.in_run = True
        try:
            self.dispatcher.run()
        finally:
            self.in_run = False

    @rule()
    def settle(self) -> None:
        self.dynamodb.settle()

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def never_a_cancelled_one_never_twice_never_early(self) -> None:
        bodies = Counter(entry["MessageBody"] for entry in self.sqs.by_queue.get(QUEUE, []))
        assert not self.cancelled & set(bodies), f"cancelled yet delivered: {sorted(self.cancelled & set(bodies))}"
        assert all(n == 1 for n in bodies.values()), f"delivered twice: {[b for b, n in bodies.items() if n > 1]}"
        for entry in self.sqs.by_queue.get(QUEUE, []):
            # early by at most the dispatcher's clock lead (the worker holds it back by worker_tier.due_at) and a rounding second
            assert entry["visible_at"] * 1000 >= self.due_ms[entry["MessageBody"]] - 1000 * self.most_ahead - 1000

    def teardown(self) -> None:
        # Every pending race is done, the dispatcher runs past every due time, and then each live message is in the queue
        for action in self.pending:
            self._do(*action)
        end = self.now + MAX_SEND_DELAY_SECONDS + 2 * 3600
        while self.now < end:
            self.run(BUCKET_SECONDS)
        self.never_a_cancelled_one_never_twice_never_early()
        delivered = {entry["MessageBody"]: entry for entry in self.sqs.by_queue.get(QUEUE, [])}
        for body in self.live.values():
            assert body in delivered, f"{body} neither cancelled nor delivered"
            assert delivered[body]["MessageAttributes"][DUE_AT_ATTRIBUTE]["StringValue"] == format_due_at(self.due_ms[body])
        assert set(delivered) <= set(self.live.values()) | (set(self.due_ms) - self.cancelled)


@pytest.mark.slow  # tens of seconds: out of make test-fast
def test_cancel_and_reschedule_hold_over_random_interleavings_with_dispatch():
    run_state_machine_as_test(
        CancelMachine,
        settings=settings(max_examples=EXAMPLES, stateful_step_count=STEPS_PER_EXAMPLE, deadline=None,
                          suppress_health_check=list(HealthCheck)),
    )
