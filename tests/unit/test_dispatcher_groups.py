"""The delay dispatcher fanned out over shard groups: each group its own shards and state; changes of G lose nothing."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.unit.test_dispatcher import DLQ, QUEUE, World
from worker_tier.delay import BUCKET_SECONDS, MAX_SHARDS, bucket_key
from worker_tier.dispatch_state import LAYOUT_KEY, DispatchGroup, Layout, parse_watermark, watermark_epoch
from worker_tier.dispatcher import TIME_RUNNING_OUT, DelayDispatcher
from worker_tier.dispatch_state import WATERMARK_KEY
from worker_tier.handlers.dispatcher import DispatchEventError, group_index


class GroupWorld(World):
    def group(self, index: int, count: int) -> DelayDispatcher:
        return DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=self.sqs, dynamodb=self.dynamodb,
                               clock=lambda: self.now, sleep=lambda s: None, parallel=False, group=DispatchGroup(index, count))

    def store_minute(self, prefix: str, per_shard: int, delay_s: float = 1000) -> set[str]:
        """``per_shard`` messages on every shard, due within one minute ``delay_s`` from now."""
        ids = set()
        for shard in range(MAX_SHARDS):
            for n in range(per_shard):
                ids.add(self.store(f"{prefix}-{shard}-{n}", f"{prefix}-{shard}-{n}", delay_s + n * 0.1, shard=shard).message_id)
        return ids

    def sent_ids(self) -> Counter:
        return Counter(entry["MessageBody"] for entry in self.sqs.sent)

    def state(self, key: str) -> dict | None:
        return self.dynamodb.tables["state"].get((key,))


@pytest.fixture
def world() -> GroupWorld:
    return GroupWorld()


def test_each_group_reads_only_its_shards_under_its_own_keys(world):
    # GIVEN messages on every shard, and group 1 of 4
    ids = world.store_minute("m", 2)
    world.group(1, 4).run()
    world.now += 200
    # WHEN only group 1 runs once the minute is in reach
    world.group(1, 4).run()
    # THEN it sent exactly the messages of shards 1, 5, 9, 13, under its own watermark, and wrote a layout of 4
    assert set(world.sent_ids()) == {i for i in ids if int(i.split("-")[1]) % 4 == 1}
    assert world.state(DispatchGroup(1, 4).watermark_key) is not None
    assert world.state(WATERMARK_KEY) == {"pk": {"S": WATERMARK_KEY}, "epoch": {"N": "1"}}  # the first layout's marker only
    assert Layout.from_item(world.state(LAYOUT_KEY)).groups == 4


def test_all_groups_together_send_every_message_once_never_early(world):
    # GIVEN messages over three minutes on every shard, and 3 groups (16 shards do not divide evenly)
    ids = world.store_minute("a", 3) | world.store_minute("b", 3, 1060) | world.store_minute("c", 3, 1120)
    # WHEN each group runs every minute, in a different order each minute
    for minute in range(25):
        for index in ([0, 1, 2], [2, 0, 1], [1, 2, 0])[minute % 3]:
            world.group(index, 3).run()
        world.now += BUCKET_SECONDS
    # THEN each message went out once, none visible before its due time
    assert world.sent_ids() == Counter(ids)
    assert all(entry["visible_at"] >= _due(entry) for entry in world.sqs.sent)


def test_one_group_writes_no_layout_and_the_keys_of_before(world):
    # GIVEN the default dispatcher (one group)  WHEN it runs over a stored minute
    ids = world.store_minute("m", 1)
    for _ in range(20):
        world.scheduler().run()
        world.now += BUCKET_SECONDS
    # THEN everything went out, with no layout item and only the keys it always wrote
    assert world.sent_ids() == Counter(ids) and world.state(LAYOUT_KEY) is None
    assert all(not key.startswith("scheduler#1.") for (key,) in world.dynamodb.tables["state"])


def test_from_one_group_to_four_mid_minute_the_cursors_carry_over(world):
    # GIVEN one group that stopped for time in the middle of a large minute (cursors saved)
    ids = world.store_minute("m", 300)
    world.scheduler().run()
    world.now += 400
    report = world.scheduler().run(lambda: 60_000 if len(world.sqs.sent) < 1000 else 9_500)  # below the margin
    assert report.stopped == TIME_RUNNING_OUT and 0 < len(world.sqs.sent) < len(ids)
    old = parse_watermark(world.watermark())
    # WHEN G becomes 4 and each group runs
    for index in range(4):
        world.group(index, 4).run()
    # THEN every message went out, and none twice: each group started at the old watermark with its shards' cursors
    assert world.sent_ids() == Counter(ids)
    assert Layout.from_item(world.state(LAYOUT_KEY)) == Layout(4, 1, *old, changed_ms=int(world.now * 1000))


def test_from_two_groups_to_one_starts_at_the_slower_group_duplicates_but_loses_nothing(world):
    # GIVEN two groups, group 0 a few minutes behind group 1 (it missed its runs)
    first = world.store_minute("a", 2)
    world.group(0, 2).run()
    world.group(1, 2).run()
    world.now += 200
    world.group(0, 2).run()
    later = world.store_minute("b", 2, 1000)
    for _ in range(4):
        world.now += BUCKET_SECONDS
        world.group(1, 2).run()
    # WHEN G becomes 1 and the one group runs every minute
    for _ in range(20):
        world.now += BUCKET_SECONDS
        world.scheduler().run()
    # THEN every message went out; only group 1's minutes after group 0's watermark went twice
    sent = world.sent_ids()
    assert set(sent) == first | later and all(sent[i] == 1 for i in first)
    assert {i for i in later if sent[i] == 2} <= {i for i in later if int(i.split("-")[1]) % 2 == 1}
    assert all(entry["visible_at"] >= _due(entry) for entry in world.sqs.sent)


def test_back_to_a_group_count_used_before_ignores_that_epochs_watermark(world):
    # GIVEN G = 2 ran ahead, then G = 1 ran for a while, with new messages
    world.group(0, 2).run()
    world.group(1, 2).run()
    world.now += 30 * BUCKET_SECONDS
    world.scheduler().run()
    ids = world.store_minute("m", 1, 1000)
    # WHEN G goes back to 2 before the messages' minute, and both groups run
    for _ in range(20):
        world.now += BUCKET_SECONDS
        world.group(0, 2).run()
        world.group(1, 2).run()
    # THEN the stale watermarks of the first G = 2 epoch were replaced, and everything went out once
    assert world.sent_ids() == Counter(ids)
    assert Layout.from_item(world.state(LAYOUT_KEY)).epoch == 3  # 1 -> 2 -> 1 -> 2 groups (epochs 1, 2, 3)
    assert all(watermark_epoch(world.state(DispatchGroup(g, 2).watermark_key)) == 3 for g in (0, 1))


def test_an_unreadable_layout_stops_every_group_and_says_so(world):
    # GIVEN a layout item that is not one
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": LAYOUT_KEY}, "groups": {"S": "two"}})
    # WHEN a group runs  THEN it stops, naming the item, and sends nothing
    report = world.group(0, 2).run()
    assert report.state_unreadable.startswith("layout item") and "stops until it is rewritten" in report.stopped
    assert world.sqs.sent == []


def test_a_refile_goes_onto_a_shard_of_the_refiling_group(world):
    # GIVEN an item due in a later minute than its pk's, moved onto shard 1, read by group 1 of 2
    message = world.store("late", "late", 3000, shard=3)
    item = dict(world.dynamodb.tables["delay"].pop((message.key["pk"]["S"], message.key["sk"]["S"])))
    early_pk = bucket_key(int((world.now + 1000) // BUCKET_SECONDS), 1)
    world.dynamodb.put_item(TableName="delay", Item={**item, "pk": {"S": early_pk}})
    world.group(1, 2).run()
    world.now += 200
    # WHEN group 1 reads the earlier minute
    report = world.group(1, 2).run()
    # THEN the item moved into its due minute on shard 1 (group 1's, not the producer's 3 of group 0), not sent
    assert report.refiled == 1 and world.sqs.sent == []
    assert set(world.dynamodb.tables["delay"]) == {(bucket_key(message.bucket, 1), message.key["sk"]["S"])}


@pytest.mark.parametrize("shard, group, count, moved", [(3, 1, 2, 3), (3, 0, 2, 2), (15, 1, 3, 1), (7, 0, 1, 7), (63, 0, 1, 15)])
def test_shard_for_keeps_a_shard_near_and_in_the_group(shard, group, count, moved):
    assert DispatchGroup(group, count).shard_for(shard) == moved and moved % count == group


def test_a_group_outside_the_count_is_refused_with_the_rule():
    with pytest.raises(ValueError) as error:
        DispatchGroup(4, 4)
    assert str(error.value) == "dispatch group 4 of 4 is not one: groups are 1..16 (one shard each at most), and the group 0..groups-1"


def test_the_handler_reads_the_group_from_the_event():
    # GIVEN events as the schedules send them  THEN the group, 0 without one, and a clear error outside the count
    assert group_index({"group": 2}, 4) == 2 and group_index({}, 4) == 0 and group_index(None, 1) == 0
    with pytest.raises(DispatchEventError) as error:
        group_index({"group": 4}, 4)
    assert str(error.value) == "event field 'group' must be a whole number 0..3 (WORKER_TIER_DISPATCH_GROUPS is 4), got 4"


def _due(entry: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(entry["MessageAttributes"]["worker_tier.due_at"]["StringValue"].replace("Z", "+00:00")).timestamp()
