"""Audit 2: nothing lost (promise 2) and duplicates only from stopped/died runs (promise 4)."""

from __future__ import annotations

import random

import pytest

from tests.fake_dynamodb import client_error
from tests.unit.moment_audit.helpers import DUE_FROM_MS, AuditWorld, TimedSQS, WatermarkWrites, finish, ready
from tests.unit.moment_audit.test_cursors import _check_cursors
from tests.unit.test_dispatcher import DLQ, QUEUE
from worker_tier.delay import CANCELLABLE_SHARD, DelayedMessage, bucket_key, sort_key
from worker_tier.dispatch_state import DispatchGroup
from worker_tier.dispatcher import ROUND_ITEMS, DelayDispatcher


def _busy(world: AuditWorld, count: int, span_ms: int, seed: int, shards: int = 16) -> set[str]:
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
    world = AuditWorld(send_seconds=0.002)
    rng = random.Random(11)
    poison = {f"m{rng.randrange(4_000)}" for _ in range(5)}
    world.sqs = DlqFailingSQS(world, 0.002, poison)
    scheduler = ready(world)
    ids = _busy(world, 4_000, 2_000, seed=11)
    world.now += 200
    report = scheduler.run(lambda: 600_000)
    assert "dead-letter queue" in report.stopped
    _check_cursors(world)
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
    world = AuditWorld(send_seconds=0.001)
    scheduler = ready(world)
    ids = _busy(world, 8_000, 4_000, seed=fail_at)
    world.now += 200
    losing = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=world.sqs,
                             dynamodb=losing_lease(world.dynamodb, fail_at), clock=lambda: world.now, sleep=world.sleep,
                             parallel=False)
    report = losing.run(lambda: 600_000)
    assert "watermark moved" in report.stopped
    _check_cursors(world)
    finish(world, scheduler)
    assert set(world.bodies()) == ids and world.duplicates() <= ROUND_ITEMS and not world.early()


def _junk_and_misplaced(world: AuditWorld, bucket: int) -> set[str]:
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
    world = AuditWorld(send_seconds=0.001)
    scheduler = ready(world)
    ids = _busy(world, 4_000, 2_000, seed=stop_after)
    bucket = DUE_FROM_MS // 60_000
    ids |= _junk_and_misplaced(world, bucket)
    world.now += 200
    scheduler.run(lambda: 60_000 if len(world.sqs.sent) < stop_after else left_ms)
    _check_cursors(world)
    finish(world, scheduler, runs=5)
    assert set(world.bodies()) == ids and not world.early()
    assert world.duplicates() <= ROUND_ITEMS
    assert len(world.sqs.by_queue.get(DLQ, [])) >= 1


def test_an_unreadable_items_dlq_failure_after_a_refile_loses_nothing():
    world = AuditWorld()
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
    world = AuditWorld(send_seconds=0.002)
    world.sqs = BuggySQS(world, 0.002, at)
    scheduler = ready(world)
    ids = _busy(world, 4_000, 2_000, seed=at)
    world.now += 200
    with pytest.raises(TypeError):
        scheduler.run(lambda: 600_000)
    _check_cursors(world)
    finish(world, scheduler)
    assert set(world.bodies()) == ids and world.duplicates() <= ROUND_ITEMS and not world.early()


def test_catch_up_over_several_minutes_in_normal_runs_sends_each_once():
    # GIVEN an outage: 4 minutes of busy traffic (some already overdue), misplaced items, the cancellable shard
    world = AuditWorld(send_seconds=0.001)
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
    world = AuditWorld(send_seconds=0.001)
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
    world = AuditWorld(send_seconds=0.001, fail=lambda call, entry: ("InvalidParameterValue", True)
                       if entry["MessageBody"] in poison and "DelaySeconds" in entry else None)
    scheduler = ready(world)
    ids = _busy(world, 4_000, 2_000, seed=stop_after)
    world.now += 200
    scheduler.run(lambda: 60_000 if len(world.sqs.sent) < stop_after else 5_000)
    _check_cursors(world)
    finish(world, scheduler)
    assert set(world.bodies()) == ids - poison and set(world.bodies(DLQ)) == poison
    assert world.duplicates() <= ROUND_ITEMS and not world.early()
    # dead letters sent past the cursors go again with the round (as the work queue's): bounded by the poison in it
    assert len(world.sqs.by_queue[DLQ]) <= 2 * len(poison), f"{len(world.sqs.by_queue[DLQ]) - len(poison)} DLQ duplicates"
