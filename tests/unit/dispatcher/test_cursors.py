"""The dispatcher's per-shard cursors never pass an unsent message, whatever stops the run; refusals, refiles and
unreadable items are handled as without send moments."""

from __future__ import annotations

import json
import random

import pytest

from tests.support.dispatcher import DUE_FROM_MS, MomentWorld, finish, ready, check_cursors
from tests.support.dispatcher import dead_then_ready_round
from tests.support.dispatcher import DLQ, CountingDynamoDB
from worker_tier.delays.delay import bucket_key, sort_key
from worker_tier.delays.minute import ROUND_ITEMS
from worker_tier.core.contract import FAILURE_ATTRIBUTE


def _body_attribute(world: MomentWorld) -> str:
    some = next(iter(world.dynamodb.tables["delay"].values()))
    return "body" if "body" in some else next(k for k, v in some.items() if v.get("S", "").startswith("m"))


@pytest.mark.parametrize("seed", range(6))
def test_cursors_never_pass_an_unsent_message_whatever_stops_the_run(seed):
    rng = random.Random(seed)
    dues = sorted(DUE_FROM_MS + rng.randrange(6_000) for _ in range(6_000))
    dues[100:140] = [dues[100]] * 40  # identical due times across shards
    state = {"failing": True}
    victim = f"m{rng.randrange(6_000)}"
    world = MomentWorld(send_seconds=0.001, fail=lambda call, entry: ("ServiceUnavailable", False)
                       if state["failing"] and entry["MessageBody"] == victim else None)
    scheduler = ready(world)
    ids = world.put(dues)
    world.now += 200 + rng.random()
    stop_after = rng.randrange(500, 5_000)
    scheduler.run(lambda: 60_000 if len(world.sqs.sent) < stop_after else rng.choice([0, 9_500, 12_000]))
    assert _body_attribute(world) == "body"
    check_cursors(world)
    scheduler.run()
    check_cursors(world)
    state["failing"] = False
    finish(world, scheduler)
    assert set(world.bodies()) == ids


def test_a_refusal_in_a_waiting_batch_goes_to_the_dlq_with_its_reason():
    # GIVEN a message SQS refuses for its content, in one of the batches set aside for their moment
    # (the work queue's entries carry DelaySeconds; the DLQ's copies do not)
    world = MomentWorld(fail=lambda call, entry: ("InvalidParameterValue", True)
                       if entry["MessageBody"] == "m5" and "DelaySeconds" in entry else None)
    scheduler = ready(world)
    ids = world.put(dead_then_ready_round())
    world.now += 200
    report = scheduler.run()
    assert report.stopped == "" and report.dead_lettered == 1
    assert set(world.bodies()) == ids - {"m5"} and world.duplicates() == 0
    [dead] = world.sqs.by_queue[DLQ]
    assert dead["MessageBody"] == "m5"
    assert json.loads(dead["MessageAttributes"][FAILURE_ATTRIBUTE]["StringValue"])["error_type"] == "DispatchRefusedError"


def test_refiled_and_unreadable_items_in_a_round_with_waiting_batches():
    world = MomentWorld()
    scheduler = ready(world)
    ids = world.put(dead_then_ready_round())
    bucket = DUE_FROM_MS // 60_000
    # an item due next minute stored in this minute (misplaced), and an item that is not a message
    from worker_tier.delays.delay import DelayedMessage
    late = DelayedMessage("id-misplaced", DUE_FROM_MS + 61_000, "misplaced", {}, 3)
    item = {**late.to_item(), "pk": {"S": bucket_key(bucket, 3)}}
    world.dynamodb.put_item(TableName="delay", Item=item)
    world.dynamodb.put_item(TableName="delay", Item={"pk": {"S": bucket_key(bucket, 4)},
                                                     "sk": {"S": sort_key(DUE_FROM_MS + 150, "junk")}, "x": {"S": "?"}})
    world.now += 200
    report = scheduler.run()
    assert report.refiled == 1 and report.dead_lettered == 1 and report.stopped == ""
    finish(world, scheduler)
    assert world.bodies() == dict.fromkeys(ids | {"misplaced"}, 1) and not world.early()


def test_a_run_holds_at_most_one_round():
    world = MomentWorld(send_seconds=0.001)
    world.dynamodb = CountingDynamoDB(world.sqs)
    world.dynamodb.create_table("delay", "pk", "sk")
    world.dynamodb.create_table("state", "pk")
    scheduler = ready(world)
    rng = random.Random(3)
    world.put(sorted(DUE_FROM_MS + rng.randrange(20_000) for _ in range(20_000)))
    world.now += 200.3
    world.dynamodb.new_run()
    assert scheduler.run().stopped == ""
    assert world.dynamodb.max_outstanding <= ROUND_ITEMS


def test_the_cancellable_shard_is_still_read_consistently():
    from worker_tier.delays.delay import CANCELLABLE_SHARD
    world = MomentWorld()
    scheduler = ready(world)
    world.put([DUE_FROM_MS + 100 + n for n in range(40)], shards=CANCELLABLE_SHARD + 1)
    world.now += 200
    queries = []
    original = world.dynamodb.query

    def query(**kwargs):
        queries.append(kwargs)
        return original(**kwargs)

    world.dynamodb.query = query
    scheduler.run()
    consistent = {q["ExpressionAttributeValues"][":pk"]["S"] for q in queries if q.get("ConsistentRead")}
    assert consistent and all(pk.endswith(f"#{CANCELLABLE_SHARD}") for pk in consistent)
    assert len(world.sqs.sent) == 40
