"""The dispatcher loses nothing, and sends twice only what a run stopped or died mid-round had in hand: at most its
round (ROUND_ITEMS), whatever stops it (time, failing sends, a crash)."""

from __future__ import annotations

import random

import pytest

from tests.support.dispatcher import (
    DLQ,
    DUE_FROM_MS,
    MomentWorld,
    QUEUE,
    TimedSQS,
    WatermarkWrites,
    check_cursors,
    dead_then_ready_round,
    finish,
    ready,
)
from tests.support.fake_dynamodb import client_error
from worker_tier.delays.delay import CANCELLABLE_SHARD, DelayedMessage, bucket_key, sort_key
from worker_tier.delays.dispatch_state import DispatchGroup
from worker_tier.delays.dispatcher import DelayDispatcher
from worker_tier.delays.minute import ROUND_ITEMS, TIME_RUNNING_OUT

BOUND = ROUND_ITEMS  # what went past the waiting batches is within their round, as for a run that dies


def test_a_stop_for_time_mid_round_resends_no_more_than_the_postponed_bound():
    # GIVEN the clock at .000 of a second and one round whose first 20 batches wait for their moment
    world = MomentWorld()
    scheduler = ready(world)
    ids = world.put(dead_then_ready_round())
    world.now += 200
    # WHEN the run's time vanishes (a wave overran the margin) once 1,400 have gone
    report = scheduler.run(lambda: 60_000 if len(world.sqs.sent) < 1_400 else 0)
    assert report.stopped == TIME_RUNNING_OUT
    finish(world, scheduler)
    # THEN nothing is lost, and what goes twice is within the bound
    assert set(world.bodies()) == ids
    assert world.duplicates() <= BOUND, f"{world.duplicates()} duplicates > {BOUND}"


def test_a_failing_send_mid_round_resends_no_more_than_the_postponed_bound():
    # GIVEN the same round and SQS failing one late message transiently for the whole first run
    state = {"failing": True}
    last = f"m{1599}"
    world = MomentWorld(fail=lambda call, entry: ("ServiceUnavailable", False)
                       if state["failing"] and entry["MessageBody"] == last else None)
    scheduler = ready(world)
    ids = world.put(dead_then_ready_round())
    world.now += 200
    report = scheduler.run()
    assert "did not accept 1 messages" in report.stopped
    state["failing"] = False
    finish(world, scheduler)
    assert set(world.bodies()) == ids
    assert world.duplicates() <= BOUND, f"{world.duplicates()} duplicates > {BOUND}"


def test_control_before_the_change_a_failing_send_resent_at_most_its_wave(monkeypatch):
    # The control: with no moments (the dispatcher without send moments) the same failure resends at most one wave's worth
    monkeypatch.setattr("worker_tier.delays.send_moment.MAX_SPREAD_MS", -1)
    state = {"failing": True}
    world = MomentWorld(fail=lambda call, entry: ("ServiceUnavailable", False)
                       if state["failing"] and entry["MessageBody"] == "m1599" else None)
    scheduler = ready(world)
    ids = world.put(dead_then_ready_round())
    world.now += 200
    scheduler.run()
    state["failing"] = False
    finish(world, scheduler)
    assert set(world.bodies()) == ids
    assert world.duplicates() <= 160


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_busy_minute_with_a_failing_send_resends_no_more_than_the_bound(seed):
    # (PASSES: the failing batch's 8 attempts sleep 5 s, long enough for every waiting batch's moment to come)
    # GIVEN a realistic busy minute (1,000 a second, random milliseconds), 3 ms per send, and one transient failure late in round 1
    rng = random.Random(seed)
    dues = sorted(DUE_FROM_MS + rng.randrange(16_000) for _ in range(16_000))
    victim = f"m{1_500}"
    state = {"failing": True}
    world = MomentWorld(send_seconds=0.003, fail=lambda call, entry: ("ServiceUnavailable", False)
                       if state["failing"] and entry["MessageBody"] == victim else None)
    scheduler = ready(world)
    ids = world.put(dues)
    world.now += 200.5
    report = scheduler.run()
    assert "did not accept" in report.stopped
    state["failing"] = False
    finish(world, scheduler, runs=6)
    assert set(world.bodies()) == ids
    assert world.duplicates() <= BOUND, f"{world.duplicates()} duplicates > {BOUND}"


def _stop_with_9_5_s_left(send_seconds: float) -> tuple[MomentWorld, set]:
    """A run of dead_then_ready_round whose time falls to 9.5 s left once 1,400 went (batches waiting), each send from
    then on taking ``send_seconds``; then the next runs. The world after, and the ids stored."""
    world = MomentWorld()
    scheduler = ready(world)
    ids = world.put(dead_then_ready_round())
    world.now += 200
    stop = {}

    def remaining() -> int:
        if len(world.sqs.sent) < 1_400:
            return 60_000
        if not stop:
            stop["at"] = world.now
            world.sqs.seconds = send_seconds
        return int(9_500 - (world.now - stop["at"]) * 1000)

    assert scheduler.run(remaining).stopped == TIME_RUNNING_OUT
    world.sqs.seconds = 0.0
    finish(world, scheduler)
    return world, ids


def test_a_stop_with_the_flush_floor_left_and_very_slow_answers_resends_within_the_round():
    # GIVEN a run whose wave overran to 9.5 s left with batches waiting, and sends taking 100 ms each (a slow SQS)
    world, ids = _stop_with_9_5_s_left(0.1)
    # THEN the first wave of waiting batches went, and took 1.6 s; the second would start under FLUSH_FLOOR_MS, so it
    # did not, and the next run sent again what went past them, within the round
    assert set(world.bodies()) == ids
    assert 0 < world.duplicates() <= BOUND, f"{world.duplicates()} duplicates after a stop with 9.5 s left"


def test_a_stop_with_the_flush_floor_left_and_answers_in_time_sends_the_waiting_batches_and_no_duplicates():
    # GIVEN the same stop with 9.5 s left, SQS answering each call in 10 ms
    world, ids = _stop_with_9_5_s_left(0.01)
    # THEN the waiting batches went before the run stopped: nothing twice
    assert set(world.bodies()) == ids and world.duplicates() == 0


def test_a_clean_run_of_a_busy_minute_sends_each_once():
    rng = random.Random(7)
    dues = sorted(DUE_FROM_MS + rng.randrange(30_000) for _ in range(30_000))
    world = MomentWorld(send_seconds=0.003)
    scheduler = ready(world)
    ids = world.put(dues)
    world.now += 200.3
    report = scheduler.run()
    assert report.stopped == ""
    assert world.bodies() == dict.fromkeys(ids, 1)


@pytest.mark.parametrize("seed, stop_at", [(1, 1_100), (2, 1_500), (3, 1_500)])
def test_a_busy_minute_stopping_for_time_resends_no_more_than_the_bound(seed, stop_at):
    # GIVEN a realistic busy minute (16,000 messages over 16 s, random milliseconds) and 1 ms per batch (16 threads,
    # a wave in ~16 ms), and a run whose time vanishes after stop_at sends (a wave overran the margin)
    rng = random.Random(seed)
    dues = sorted(DUE_FROM_MS + rng.randrange(16_000) for _ in range(16_000))
    world = MomentWorld(send_seconds=0.001)
    scheduler = ready(world)
    ids = world.put(dues)
    world.now += 200 + seed / 7
    assert scheduler.run(lambda: 60_000 if len(world.sqs.sent) < stop_at else 0).stopped == TIME_RUNNING_OUT
    finish(world, scheduler, runs=6)
    assert set(world.bodies()) == ids
    assert world.duplicates() <= BOUND, f"{world.duplicates()} duplicates > {BOUND}"


def test_control_before_the_change_a_stop_for_time_resent_nothing(monkeypatch):
    # The control: with no moments (the dispatcher without send moments) the same stop for time resends nothing
    monkeypatch.setattr("worker_tier.delays.send_moment.MAX_SPREAD_MS", -1)
    world = MomentWorld()
    scheduler = ready(world)
    ids = world.put(dead_then_ready_round())
    world.now += 200
    assert scheduler.run(lambda: 60_000 if len(world.sqs.sent) < 1_400 else 0).stopped == TIME_RUNNING_OUT
    finish(world, scheduler)
    assert world.bodies() == dict.fromkeys(ids, 1)


def test_waves_as_slow_as_the_call_budget_allows_leave_at_most_the_bound_to_send_again():
    # GIVEN 64 batches waiting for their moment (phases .100-.199 while the clock reads .000) behind which 96 ready ones
    # went, the time left following the world's clock, and SQS slowing down so that a wave of 16 calls takes 2.08 s (a
    # parallel wave waits for its slowest call; DISPATCHER_CALL_SECONDS allows 3 s per call)
    head = [DUE_FROM_MS + 100 + n * 100 // 640 for n in range(640)]
    tail = [DUE_FROM_MS + 1000 + 300 + j // 2 for j in range(960)]
    world = MomentWorld()
    scheduler = ready(world)
    ids = world.put(head + tail)
    world.now += 200
    deadline = world.now + 15.05

    def remaining() -> int:
        left = int((deadline - world.now) * 1000)
        if left < 15_000:
            world.sqs.seconds = 0.13
        return left

    report = scheduler.run(remaining)
    assert report.stopped == TIME_RUNNING_OUT
    world.sqs.seconds = 0.0
    finish(world, scheduler)
    # THEN with AWS this slow the aligning stop (5 s before the margin: 4 waves within 1.25 s each) could not send every
    # waiting batch, nor the stop for time (each wave must end above the send floor): nothing is lost, and what goes
    # twice stays within the bound (docs/delays.md)
    assert set(world.bodies()) == ids
    assert world.duplicates() <= BOUND, f"{world.duplicates()} duplicates"


def _busy(world: MomentWorld, count: int, span_ms: int, seed: int, shards: int = 16) -> set[str]:
    rng = random.Random(seed)
    return world.put(sorted(DUE_FROM_MS + rng.randrange(span_ms) for _ in range(count)), shards=shards)


class DlqFailingSQS(TimedSQS):
    """The DLQ fails every call transiently while ``dlq_down``; the work queue refuses bodies in ``poison`` for content."""

    def __init__(self, world, seconds, poison):
        super().__init__(world, seconds, fail=lambda call, entry: ("InvalidParameterValue", True)
                         if entry["MessageBody"] in poison and "DelaySeconds" in entry else None)
        self.dlq_down = True

    def send_message_batch(self, QueueUrl, Entries):
        if QueueUrl == DLQ and self.dlq_down:
            self.calls.append(("SendMessageBatch", {"QueueUrl": QueueUrl, "Entries": Entries}))
            raise client_error("ServiceUnavailable", "SendMessageBatch")
        return super().send_message_batch(QueueUrl, Entries)


def test_a_dlq_failure_mid_round_with_waiting_batches_loses_nothing():
    world = MomentWorld(send_seconds=0.002)
    rng = random.Random(11)
    poison = {f"m{rng.randrange(4_000)}" for _ in range(5)}
    world.sqs = DlqFailingSQS(world, 0.002, poison)
    scheduler = ready(world)
    ids = _busy(world, 4_000, 2_000, seed=11)
    world.now += 200
    report = scheduler.run(lambda: 600_000)
    assert "dead-letter queue" in report.stopped
    check_cursors(world)
    world.sqs.dlq_down = False
    finish(world, scheduler)
    assert set(world.bodies()) == ids - poison and set(world.bodies(DLQ)) == poison
    assert world.duplicates() <= ROUND_ITEMS
    assert not world.early()


def losing_lease(inner, fail_at):
    """The fail_at-th watermark write (a mid-minute cursor save) fails its condition: another run took over."""
    writes = {"n": 0}

    def before():
        writes["n"] += 1
        if writes["n"] == fail_at:
            raise client_error("ConditionalCheckFailedException", "PutItem")

    return WatermarkWrites(inner, before)


@pytest.mark.parametrize("fail_at", [2, 3, 5])
def test_a_lease_lost_at_a_cursor_save_loses_nothing_and_resends_at_most_a_round(fail_at):
    world = MomentWorld(send_seconds=0.001)
    scheduler = ready(world)
    ids = _busy(world, 8_000, 4_000, seed=fail_at)
    world.now += 200
    losing = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=world.sqs,
                             dynamodb=losing_lease(world.dynamodb, fail_at), clock=lambda: world.now, sleep=world.sleep,
                             parallel=False)
    report = losing.run(lambda: 600_000)
    assert "watermark moved" in report.stopped
    check_cursors(world)
    finish(world, scheduler)
    assert set(world.bodies()) == ids and world.duplicates() <= ROUND_ITEMS and not world.early()


def _junk_and_misplaced(world: MomentWorld, bucket: int) -> set[str]:
    """On the cancellable shard: a misplaced message (due next minute) and an unreadable item; one misplaced on shard 2."""
    bodies = set()
    for n, shard in enumerate([CANCELLABLE_SHARD, 2]):
        message = DelayedMessage(f"id-mis{n}", DUE_FROM_MS + 61_000 + n, f"mis{n}", {}, shard)
        world.dynamodb.put_item(TableName="delay", Item={**message.to_item(), "pk": {"S": bucket_key(bucket, shard)}})
        bodies.add(f"mis{n}")
    world.dynamodb.put_item(TableName="delay", Item={"pk": {"S": bucket_key(bucket, CANCELLABLE_SHARD)},
                                                     "sk": {"S": sort_key(DUE_FROM_MS + 1_000, "junk")}, "x": {"S": "?"}})
    return bodies


@pytest.mark.parametrize("stop_after,left_ms", [(300, 0), (900, 9_500), (1_500, 12_000), (2_500, 0)])
def test_cancellable_shard_refiles_unreadable_and_a_stop_mid_round_lose_nothing(stop_after, left_ms):
    world = MomentWorld(send_seconds=0.001)
    scheduler = ready(world)
    ids = _busy(world, 4_000, 2_000, seed=stop_after)
    bucket = DUE_FROM_MS // 60_000
    ids |= _junk_and_misplaced(world, bucket)
    world.now += 200
    scheduler.run(lambda: 60_000 if len(world.sqs.sent) < stop_after else left_ms)
    check_cursors(world)
    finish(world, scheduler, runs=5)
    assert set(world.bodies()) == ids and not world.early()
    assert world.duplicates() <= ROUND_ITEMS
    assert len(world.sqs.by_queue.get(DLQ, [])) >= 1


def test_an_unreadable_items_dlq_failure_after_a_refile_loses_nothing():
    world = MomentWorld()
    world.sqs = DlqFailingSQS(world, 0.0, set())
    scheduler = ready(world)
    ids = _busy(world, 500, 500, seed=5)
    bucket = DUE_FROM_MS // 60_000
    ids |= _junk_and_misplaced(world, bucket)
    world.now += 200
    report = scheduler.run(lambda: 600_000)
    assert "unreadable" in report.stopped
    world.sqs.dlq_down = False
    finish(world, scheduler)
    assert set(world.bodies()) == ids and world.duplicates() == 0 and not world.early()
    assert len(world.sqs.by_queue[DLQ]) == 1


class BuggySQS(TimedSQS):
    """A non-AWS error (a bug) raised by the n-th call: not retried, it ends the run."""

    def __init__(self, world, seconds, at):
        super().__init__(world, seconds)
        self.at = at

    def send_message_batch(self, QueueUrl, Entries):
        if len(self.calls) + 1 == self.at:
            self.calls.append(("SendMessageBatch", {}))
            raise TypeError("a bug")
        return super().send_message_batch(QueueUrl, Entries)


@pytest.mark.parametrize("at", [3, 40, 120])
def test_a_bug_raised_in_a_wave_with_waiting_batches_loses_nothing(at):
    world = MomentWorld(send_seconds=0.002)
    world.sqs = BuggySQS(world, 0.002, at)
    scheduler = ready(world)
    ids = _busy(world, 4_000, 2_000, seed=at)
    world.now += 200
    with pytest.raises(TypeError):
        scheduler.run(lambda: 600_000)
    check_cursors(world)
    finish(world, scheduler)
    assert set(world.bodies()) == ids and world.duplicates() <= ROUND_ITEMS and not world.early()


def test_catch_up_over_several_minutes_in_normal_runs_sends_each_once():
    # GIVEN an outage: 4 minutes of busy traffic (some already overdue), misplaced items, the cancellable shard
    world = MomentWorld(send_seconds=0.001)
    scheduler = ready(world)
    rng = random.Random(9)
    dues = sorted(DUE_FROM_MS + rng.randrange(240_000) for _ in range(8_000))
    ids = world.put(dues)
    ids |= _junk_and_misplaced(world, DUE_FROM_MS // 60_000)
    world.now += 200 + 300  # the dispatcher was down for 5 minutes
    for _ in range(6):
        report = scheduler.run(lambda: 600_000)
        assert report.stopped == ""
        world.now += 60
    assert set(world.bodies()) == ids and world.duplicates() == 0 and not world.early()


@pytest.mark.parametrize("groups", [2, 3, 16])
def test_dispatch_groups_in_normal_runs_send_each_once(groups):
    world = MomentWorld(send_seconds=0.001)
    dispatchers = [DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=world.sqs, dynamodb=world.dynamodb,
                                   clock=lambda: world.now, sleep=world.sleep, parallel=False, group=DispatchGroup(i, groups))
                   for i in range(groups)]
    for d in dispatchers:
        d.run()
    rng = random.Random(groups)
    ids = world.put(sorted(DUE_FROM_MS + rng.randrange(120_000) for _ in range(6_000)))
    ids |= _junk_and_misplaced(world, DUE_FROM_MS // 60_000)
    world.now += 200
    for _ in range(5):
        for d in dispatchers:
            report = d.run(lambda: 600_000)
            assert report.stopped == "", report.stopped
        world.now += 60
    assert set(world.bodies()) == ids and world.duplicates() == 0 and not world.early()


@pytest.mark.parametrize("stop_after", [200, 1_000, 2_600])
def test_refusals_met_below_the_send_floor_are_not_passed_by_the_cursors(stop_after):
    # GIVEN poison messages throughout a busy round, and the time falling below the send floor (6 s) mid-round:
    # refusals seen then are not dead-lettered (_take_in), so the cursors must stop before them
    rng = random.Random(stop_after)
    poison = {f"m{rng.randrange(4_000)}" for _ in range(40)}
    world = MomentWorld(send_seconds=0.001, fail=lambda call, entry: ("InvalidParameterValue", True)
                       if entry["MessageBody"] in poison and "DelaySeconds" in entry else None)
    scheduler = ready(world)
    ids = _busy(world, 4_000, 2_000, seed=stop_after)
    world.now += 200
    scheduler.run(lambda: 60_000 if len(world.sqs.sent) < stop_after else 5_000)
    check_cursors(world)
    finish(world, scheduler)
    assert set(world.bodies()) == ids - poison and set(world.bodies(DLQ)) == poison
    assert world.duplicates() <= ROUND_ITEMS and not world.early()
    # dead letters sent past the cursors go again with the round (as the work queue's): bounded by the poison in it
    assert len(world.sqs.by_queue[DLQ]) <= 2 * len(poison), f"{len(world.sqs.by_queue[DLQ]) - len(poison)} DLQ duplicates"
