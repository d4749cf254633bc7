"""Audit 2: progress and the run's time margins (promise 3), and sleeps for adversarial due patterns."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.unit.moment_audit.helpers import DUE_FROM_MS, AuditWorld, WatermarkWrites, ready
from worker_tier.delay import DelayedMessage, bucket_key, sort_key


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


def _misplaced(world: AuditWorld, count: int, bucket: int) -> None:
    """``count`` items stored under minute ``bucket``'s pk but due in the next minute (a producer's bug or an old version)."""
    for n in range(count):
        due = (bucket + 1) * 60_000 + 500 + n
        message = DelayedMessage(f"id-x{n:05d}", due, f"x{n}", {}, n % 16)
        item = message.to_item()
        item["pk"] = {"S": bucket_key(bucket, n % 16)}
        world.dynamodb.put_item(TableName="delay", Item=item)


def test_refiles_of_a_round_respect_the_run_margin():
    # GIVEN a round of 1,600 misplaced items (due in the next minute), each refile taking 10 ms of DynamoDB per call
    world = AuditWorld()
    ready(world)
    bucket = DUE_FROM_MS // 60_000
    _misplaced(world, 1_600, bucket)
    world.now += 200
    from worker_tier.dispatcher import DelayDispatcher
    from tests.unit.test_dispatcher import DLQ, QUEUE
    slow = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=world.sqs,
                           dynamodb=SlowDynamo(world, world.dynamodb, 0.010), clock=lambda: world.now, sleep=world.sleep,
                           parallel=False)
    deadline = world.now + 12.0  # the run starts with 12 s left: above the margin
    report = slow.run(lambda: int((deadline - world.now) * 1000))
    # THEN the run ends before its deadline, with at least a cursor write's time left (3 s)
    left_s = deadline - world.now
    assert left_s >= 3.0, f"run ended {-left_s:.1f} s past its deadline ({left_s:.1f} s left), refiled {report.refiled}, stopped {report.stopped!r}"


def _phase_world(phase_of_batch, batches: int, send_seconds: float = 0.0) -> tuple[AuditWorld, object]:
    world = AuditWorld(send_seconds=send_seconds)
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


from tests.support.fake_dynamodb import client_error  # noqa: E402
from tests.unit.moment_audit.helpers import TimedSQS  # noqa: E402
from tests.unit.test_dispatcher import DLQ, QUEUE  # noqa: E402
from worker_tier.dispatcher import DelayDispatcher  # noqa: E402


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
    world = AuditWorld()
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
    world = AuditWorld()
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
    world = AuditWorld(send_seconds=0.002, sleep_rule=lambda s: s * 0.001)
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


import random  # noqa: E402
