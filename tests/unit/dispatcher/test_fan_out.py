"""The delay dispatcher fanned out over shard groups: each group its own shards and state; changes of G lose nothing.

Also: stalled runs of an old layout, config drift while a deploy settles, garbled layouts, the safety net during a
change, status with G > 1, and the cost of a steady-state run at G = 1.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.dispatcher import DLQ, QUEUE, TTL_IDENTITY, World, stream_record
from worker_tier.delays.delay import BUCKET_SECONDS, DelayedMessage, MAX_SHARDS, bucket_key
from worker_tier.delays.delay_recovery import DelayRecovery
from worker_tier.delays.dispatch_state import (
    LAYOUT_KEY,
    DispatchGroup,
    Layout,
    parse_watermark,
    shard_positions,
    watermark_epoch,
)
from worker_tier.core.errors import StateError
from worker_tier.delays.dispatcher import DelayDispatcher
from worker_tier.delays.minute import TIME_RUNNING_OUT
from worker_tier.delays.dispatch_state import WATERMARK_KEY
from worker_tier.handlers.dispatcher import DispatchEventError, group_index
from worker_tier.core.contract import PATH_ATTRIBUTE


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


def _run_all(world: GroupWorld, count: int) -> None:
    for index in range(count):
        (world.scheduler() if count == 1 else world.group(index, count)).run()


def _never_early(world: GroupWorld) -> bool:
    return all(entry["visible_at"] >= _due(entry) for entry in world.sqs.sent)


def _read(world: GroupWorld):
    return world.state


# -- the documented remedy for a garbled layout (delete it) resurrects the G = 1 watermark of before the first change --


def test_deleting_a_garbled_layout_as_documented_resends_what_was_dispatched_since_the_first_change(world):
    # GIVEN G = 1 ran (its watermark, epoch 0, stays behind when G changes), then G = 4 ran, then G = 2 ran (epoch 2)
    first = world.store_minute("a", 1)
    for _ in range(20):
        world.scheduler().run()
        world.now += BUCKET_SECONDS
    later = set()
    for minute in range(60):
        later |= world.store_minute(f"b{minute}", 1, 1000)
        _run_all(world, 4 if minute < 10 else 2)
        world.now += BUCKET_SECONDS
    assert world.state(WATERMARK_KEY) is not None  # the epoch-0 watermark of G = 1 is still there
    assert Layout.from_item(world.state(LAYOUT_KEY)).epoch == 2
    # WHEN the layout item gets garbled, the dispatcher stops and says so, and the operator deletes it as documented
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": LAYOUT_KEY}, "groups": {"S": "two"}})
    assert "stops until it is rewritten" in world.group(0, 2).run().stopped
    world.dynamodb.tables["state"].pop((LAYOUT_KEY,))
    # (deleting is no longer the advice; a deleted layout stops the delay dispatcher, which
    # names the remedy: rewrite it with the deployed G and the epoch on the groups' watermarks)
    stopped = world.group(0, 2).run()
    assert "is missing" in stopped.stopped and "epoch 2" in stopped.stopped and world.state(LAYOUT_KEY) is None
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": LAYOUT_KEY}, "groups": {"N": "2"}, "epoch": {"N": "2"}})
    for _ in range(20):
        _run_all(world, 2)
        world.now += BUCKET_SECONDS
    # THEN nothing that was already dispatched goes again (no documented duplicate covers this)
    sent = world.sent_ids()
    assert set(sent) >= first | later and _never_early(world)
    print("layout after the delete:", Layout.from_item(world.state(LAYOUT_KEY)))
    resent = sorted(i for i in later if sent[i] > 1)
    assert resent == [], f"{len(resent)} of {len(later)} already-dispatched messages sent again, e.g. {resent[:3]}"


def test_one_old_group_without_a_watermark_at_a_change_makes_every_new_group_rescan_hours_back(world):
    # GIVEN G = 4 has dispatched an hour of messages; group 3's watermark was deleted (e.g. the WatermarkAhead
    # alarm's advice: "delete it to restart"), and group 3 has not run since
    ids = set()
    for minute in range(60):
        ids |= world.store_minute(f"b{minute}", 1, 1000)
        _run_all(world, 4)
        world.now += BUCKET_SECONDS
    world.dynamodb.tables["state"].pop((DispatchGroup(3, 4).watermark_key,))
    # WHEN G becomes 8 and the groups run
    for _ in range(20):
        _run_all(world, 8)
        world.now += BUCKET_SECONDS
    # THEN only what group 3 had not dispatched may go again; groups 0..2's shards were known to the minute
    sent = world.sent_ids()
    assert set(sent) == ids and _never_early(world)
    print("layout after the change:", Layout.from_item(world.state(LAYOUT_KEY)))
    resent = sorted(i for i in ids if sent[i] > 1 and int(i.split("-")[1]) % 4 != 3)
    assert resent == [], f"{len(resent)} already-dispatched messages of groups 0..2 sent again, e.g. {resent[:3]}"


# -- garbled-but-numeric layouts: a clear error naming the value and the rule, not a crash --------------------------


@pytest.mark.parametrize("groups", ["0", "-2", "17"])
def test_a_layout_with_an_impossible_group_count_stops_with_a_clear_report(world, groups):
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": LAYOUT_KEY}, "groups": {"N": groups}, "epoch": {"N": "3"}})
    try:
        report = world.group(0, 2).run()
    except Exception as error:
        pytest.fail(f"run raised {type(error).__name__}: {error} instead of reporting the layout item as unreadable")
    assert report.state_unreadable and groups in report.state_unreadable and world.sqs.sent == []


@pytest.mark.parametrize("groups", ["0", "17"])
def test_status_with_an_impossible_layout_says_so_instead_of_crashing(world, groups):
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": LAYOUT_KEY}, "groups": {"N": groups}, "epoch": {"N": "3"}})
    with pytest.raises(StateError):
        shard_positions(_read(world))


def test_the_safety_net_with_a_zero_group_layout_raises_a_state_error_not_a_zero_division(world):
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": LAYOUT_KEY}, "groups": {"N": "0"}, "epoch": {"N": "3"}})
    item = DelayedMessage("m-1", int((world.now + 100) * 1000), "x", {PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/x"}},
                          shard=3).to_item()
    recovery = DelayRecovery("state", QUEUE, DLQ, sqs=world.sqs, dynamodb=world.dynamodb, clock=lambda: world.now,
                             sleep=lambda s: None)
    with pytest.raises(StateError):
        recovery.process([stream_record(1, "REMOVE", item, world.now, TTL_IDENTITY)])


# -- config drift: an old G = 1 and a new G = 4 both invoked every minute while a deploy settles -------------------


def test_groups_of_two_layouts_alternating_every_minute_lose_nothing_and_send_nothing_early(world):
    ids = set()
    for minute in range(40):
        if minute < 25:
            ids |= world.store_minute(f"m{minute}", 1, 1000)
        world.scheduler().run()
        _run_all(world, 4)
        world.now += BUCKET_SECONDS
    sent = world.sent_ids()
    assert set(sent) == ids and _never_early(world)
    epoch = Layout.from_item(world.state(LAYOUT_KEY)).epoch
    dups = sum(1 for i in ids if sent[i] > 1)
    print(f"flip-flop: epoch {epoch}, {dups} of {len(ids)} sent more than once")


# -- an old layout's run stalled mid-minute past its lease, new layout runs meanwhile, then it goes on --------------


class StallingSQS:
    """Runs ``action`` once, before the ``at``-th SendMessageBatch (the stalled run's), then lets the call go on."""

    def __init__(self, inner, at: int, action) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.at, self.action, self.calls = inner, at, action, 0

    def send_message_batch(self, **kwargs):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == self.at and self.action is not None:
            action, self.action = self.action, None
            action()
        return self.inner.send_message_batch(**kwargs)

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


@pytest.mark.parametrize("old, new", [(1, 4), (4, 1), (4, 16), (16, 3)])
def test_a_stalled_old_layout_run_that_goes_on_after_the_change_loses_nothing(world, old, new):
    ids = world.store_minute("m", 40)
    later = set()
    # the old layout runs once (records the minute), then its group 0 stalls mid-way in the minute
    _run_all(world, old)
    world.now += 400

    def meanwhile() -> None:
        nonlocal later
        world.now += 200  # past the stalled run's lease
        for minute in range(10):
            later |= world.store_minute(f"n{minute}", 2, 1000)
            _run_all(world, new)
            world.now += BUCKET_SECONDS

    stalled = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=StallingSQS(world.sqs, 3, meanwhile),
                              dynamodb=world.dynamodb, clock=lambda: world.now, sleep=lambda s: None, parallel=False,
                              group=DispatchGroup(0, old))
    stalled.run()
    for _ in range(25):
        _run_all(world, new)
        world.now += BUCKET_SECONDS
    sent = world.sent_ids()
    missing = (ids | later) - set(sent)
    assert not missing, f"{len(missing)} lost, e.g. {sorted(missing)[:3]}"
    assert _never_early(world)
    # duplicates only from the old layout (documented): nothing stored after the change goes twice
    assert [i for i in later if sent[i] > 1] == []


# -- a group far behind at the change: the seed is its watermark, the others' shards are resent, nothing lost --------


def test_sixteen_to_three_with_one_group_lagging_loses_nothing(world):
    ids = set()
    for minute in range(10):
        ids |= world.store_minute(f"a{minute}", 1, 1000)
        for index in range(16):
            if index != 7 or minute < 3:
                world.group(index, 16).run()
        world.now += BUCKET_SECONDS
    for _ in range(25):
        _run_all(world, 3)
        world.now += BUCKET_SECONDS
    sent = world.sent_ids()
    assert set(sent) == ids and _never_early(world)


# -- a stale event after G shrank: handler refuses it with the rule; a group index >= G never constructs ------------


def test_a_group_index_at_or_beyond_the_count_is_refused():
    from worker_tier.handlers.dispatcher import DispatchEventError, group_index

    for event in ({"group": 3}, {"group": "0"}, {"group": True}, {"group": -1}):
        with pytest.raises(DispatchEventError):
            group_index(event, 3)


# -- cost at G = 1: reads per steady-state run ----------------------------------------------------------------------


def test_cost_of_a_steady_run_at_one_group(world):
    world.store_minute("m", 1)
    for _ in range(3):
        world.scheduler().run()
        world.now += BUCKET_SECONDS
    before = Counter(world.dynamodb.calls)
    world.scheduler().run()
    calls = Counter(world.dynamodb.calls) - before
    print(f"one steady run at G = 1: {dict(calls)}")
    # the fan-out added exactly one consistent GetItem (the layout) to every run; nothing else
    assert calls["GetItem"] == 2


def test_cost_of_the_safety_net_at_one_group(world):
    item = DelayedMessage("m-1", int((world.now + 100) * 1000), "x", {PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/x"}},
                          shard=3).to_item()
    recovery = DelayRecovery("state", QUEUE, DLQ, sqs=world.sqs, dynamodb=world.dynamodb, clock=lambda: world.now,
                             sleep=lambda s: None)
    keys = []
    world.dynamodb.fault = lambda operation, params: keys.append((operation, params["Key"]["pk"]["S"])) if operation == "GetItem" else None
    recovery.process([stream_record(1, "INSERT", item, world.now)])
    print(f"one safety-net batch at G = 1: {keys}")
    # before the fan-out: the watermark and the minute record; the layout is read twice more per batch, even at G = 1
    assert len(keys) <= 3, keys


# -- status / pending positions with G > 1 ---------------------------------------------------------------------------


def test_positions_with_four_groups_name_each_groups_minute_and_cursor(world):
    world.store_minute("m", 300)
    _run_all(world, 4)
    world.now += 400
    world.group(1, 4).run(lambda: 60_000 if len(world.sqs.sent) < 100 else 0)
    world.group(2, 4).run()
    positions = shard_positions(_read(world))
    assert set(positions) == set(range(MAX_SHARDS))
    g1 = world.state(DispatchGroup(1, 4).watermark_key)
    for shard in DispatchGroup(1, 4).shards:
        assert positions[shard][0] == int(g1["bucket"]["N"])
        assert positions[shard][1] == g1.get("cursors", {"M": {}})["M"].get(str(shard), {"S": ""})["S"]
    g2 = world.state(DispatchGroup(2, 4).watermark_key)
    assert all(positions[shard] == (int(g2["bucket"]["N"]), "") for shard in DispatchGroup(2, 4).shards)


def test_positions_with_one_garbled_group_watermark_still_show_the_others(world):
    world.store_minute("m", 1)
    _run_all(world, 4)
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": DispatchGroup(3, 4).watermark_key}, "bucket": {"S": "x"},
                                                     "epoch": {"N": "1"}})
    # status/pending get nothing at all (StateError) rather than the three readable groups and a note on the fourth
    positions = shard_positions(_read(world))
    assert set(positions) >= set(DispatchGroup(0, 4).shards)


# -- two new-layout groups racing to write the layout -------------------------------------------------------------


def test_two_new_groups_racing_to_write_the_layout_agree_and_lose_nothing(world):
    ids = world.store_minute("m", 30)
    world.scheduler().run()
    world.now += 400
    world.scheduler().run(lambda: 60_000 if len(world.sqs.sent) < 100 else 9_500)  # G = 1 stops mid-minute, cursors saved
    raced = []

    def fault(operation, params):  # group 1 of 4 runs whole between group 0's layout read and its layout put
        if operation == "PutItem" and params["Item"]["pk"]["S"] == LAYOUT_KEY and not raced:
            raced.append(True)
            world.group(1, 4).run()
        return None

    world.dynamodb.fault = fault
    world.group(0, 4).run()
    world.dynamodb.fault = lambda operation, params: None
    for _ in range(20):
        _run_all(world, 4)
        world.now += BUCKET_SECONDS
    assert raced and set(world.sent_ids()) == ids and _never_early(world)
    assert world.sent_ids() == Counter(ids)  # the loser adopted the winner's seed: no duplicates either
    assert Layout.from_item(world.state(LAYOUT_KEY)).epoch == 1


# -- the safety net deciding TTL expiries during a change, before the new groups ran ---------------------------------


def test_the_safety_net_during_a_change_sends_each_expired_undispatched_item_and_only_those(world):
    ids = world.store_minute("m", 30)
    world.scheduler().run()
    world.now += 400
    world.scheduler().run(lambda: 60_000 if len(world.sqs.sent) < 200 else 9_500)  # G = 1 stops mid-minute
    before = set(world.sent_ids())
    world.group(2, 4).run(lambda: 0)  # group 2 of 4 changes the layout (epoch 1, seeded) and stops at once
    assert Layout.from_item(world.state(LAYOUT_KEY)).groups == 4
    # WHEN the TTL deletes every item of shard 1 (group 1 of the new layout, which has not run) and the net decides
    records = []
    for (pk, _sk), item in list(world.dynamodb.tables["delay"].items()):
        if pk.endswith("#1"):
            world.dynamodb.delete_item(TableName="delay", Key={"pk": item["pk"], "sk": item["sk"]})
            records.append(stream_record(len(records) + 1, "REMOVE", item, world.now, TTL_IDENTITY))
    recovery = DelayRecovery("state", QUEUE, DLQ, sqs=world.sqs, dynamodb=world.dynamodb, clock=lambda: world.now,
                             sleep=lambda s: None)
    report = recovery.process(records)
    world.dynamodb.settle()
    for _ in range(20):
        _run_all(world, 4)
        world.now += BUCKET_SECONDS
    sent = world.sent_ids()
    shard1 = {i for i in ids if i.split("-")[1] == "1"}
    assert set(sent) == ids and _never_early(world)
    assert report.recovered_from_ttl == len(shard1 - before)
    assert all(sent[i] == 1 for i in shard1)


# -- a stalled run of an earlier epoch of the same G clobbers the new epoch's watermark ------------------------------


def test_a_stalled_run_of_an_earlier_epoch_of_the_same_count_does_not_make_the_new_epoch_resend_its_own_work(world):
    ids = world.store_minute("m", 60)
    _run_all(world, 4)
    world.now += 400
    progress = {}

    def meanwhile() -> None:  # a deploy flips G 4 -> 1 -> 4 while group 2's run is stalled past its lease
        world.now += 200
        world.scheduler().run(lambda: 0)  # epoch 2 (G = 1): changes the layout, stops at once
        sent = len(world.sqs.sent)
        world.group(2, 4).run(lambda: 60_000 if len(world.sqs.sent) < sent + 20 else 0)  # epoch 3: part of the minute
        progress["epoch3"] = world.state(DispatchGroup(2, 4).watermark_key)

    stalled = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=StallingSQS(world.sqs, 2, meanwhile),
                              dynamodb=world.dynamodb, clock=lambda: world.now, sleep=lambda s: None, parallel=False,
                              group=DispatchGroup(2, 4))
    stalled.run(lambda: 60_000 if len(world.sqs.sent) < 400 else 0)
    after = world.state(DispatchGroup(2, 4).watermark_key)
    print("epoch-3 watermark before the stalled run went on:", progress["epoch3"], "\nafter:", after)
    for _ in range(20):
        _run_all(world, 4)
        world.now += BUCKET_SECONDS
    sent = world.sent_ids()
    assert set(sent) == ids and _never_early(world)
    thrice = sorted(i for i in ids if sent[i] > 2)
    assert thrice == [], f"{len(thrice)} messages sent 3+ times (old run, new epoch, new epoch again), e.g. {thrice[:3]}"


# -- after a change of G, the TTL expiry of every message the old layout dispatched is sent again ----------------------


@pytest.mark.parametrize("old, new", [(1, 4), (4, 1)])
def test_after_a_change_the_safety_net_does_not_resend_what_the_old_layout_dispatched_when_the_ttl_removes_it(world, old, new):
    # GIVEN the old layout dispatched 20 minutes of messages, then G changed and the new groups ran on
    ids = set()
    for minute in range(20):
        ids |= world.store_minute(f"a{minute}", 1, 1000)
        _run_all(world, old)
        world.now += BUCKET_SECONDS
    for _ in range(30):
        _run_all(world, new)
        world.now += BUCKET_SECONDS
    assert world.sent_ids() == Counter(ids)
    # WHEN, 6 h after each was due, the TTL removes them (what DynamoDB does) and the safety net decides the REMOVEs
    world.now += 6 * 3600
    records = []
    for _key, item in list(world.dynamodb.tables["delay"].items()):
        world.dynamodb.delete_item(TableName="delay", Key={"pk": item["pk"], "sk": item["sk"]})
        records.append(stream_record(len(records) + 1, "REMOVE", item, world.now, TTL_IDENTITY))
    recovery = DelayRecovery("state", QUEUE, DLQ, sqs=world.sqs, dynamodb=world.dynamodb, clock=lambda: world.now,
                             sleep=lambda s: None)
    report = recovery.process(records)
    # THEN none of them goes again: every one was dispatched (once) hours ago
    assert report.recovered_from_ttl == 0, (f"{report.recovered_from_ttl} of {len(records)} dispatched messages sent again "
                                            f"6 h after they were due")


# -- status with G > 1 when one group has no position yet ---------------------------------------------------------------


def test_status_with_three_of_four_groups_running_does_not_say_the_dispatcher_never_ran(world):
    from worker_tier_cli.status import watermark

    world.store_minute("m", 1)
    for _ in range(5):
        for index in range(3):  # group 3's rule not firing yet (or its runs failing)
            world.group(index, 4).run()
        world.now += BUCKET_SECONDS
    shown = watermark(world.dynamodb, "state", world.now)
    assert shown["minute"] is not None, shown


def test_a_group_that_never_runs_shows_in_the_lag_the_running_groups_publish(world):
    # GIVEN G = 4 and group 3's schedule not firing (rule disabled, deleted by drift, or its invocations failing early)
    ids = world.store_minute("m", 1)
    reports = []
    for _ in range(30):
        reports = [world.group(index, 4).run() for index in range(3)]
        world.now += BUCKET_SECONDS
    overdue = {i for i in ids if int(i.split("-")[1]) % 4 == 3} - set(world.sent_ids())
    assert overdue  # shards 3, 7, 11, 15: due 13 minutes ago, not sent (the safety net sends them at the TTL, 6 h late)
    # THEN the lag metric (Maximum over the runs' reports, no group dimension) should show it: it shows < 1 minute
    assert max(r.lag_s for r in reports) > 10 * 60, [r.lag_s for r in reports]


# -- what the fan-out guarantees besides the cases above ---------------------------------------------------------------------


def test_status_names_an_unreadable_group_watermark_and_shows_the_others(world):
    from worker_tier_cli.status import watermark

    # GIVEN four groups that ran, then group 2's watermark garbled
    world.store_minute("m", 1)
    _run_all(world, 4)
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": DispatchGroup(2, 4).watermark_key}, "bucket": {"S": "x"},
                                                     "epoch": {"N": "1"}})
    # WHEN status reads the watermark  THEN it shows the others' minute and names group 2
    shown = watermark(world.dynamodb, "state", world.now)
    assert shown["minute"] is not None and "group 2 of 4" in shown["note"] and "unreadable" in shown["note"]


def test_a_deleted_layout_makes_the_safety_net_retry_rather_than_decide_on_the_g1_watermark_of_before(world):
    from worker_tier.core.errors import LayoutLostError

    # GIVEN G = 1 ran, then G = 2 (the first change stamps the G = 1 watermark with epoch 1), then the layout is deleted
    world.store_minute("m", 1)
    for count in (1, 2):
        _run_all(world, count)
        world.now += BUCKET_SECONDS
    world.dynamodb.tables["state"].pop((LAYOUT_KEY,))
    item = DelayedMessage("m-9", int((world.now - 7200) * 1000), "x", {PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/x"}},
                          shard=3).to_item()
    recovery = DelayRecovery("state", QUEUE, DLQ, sqs=world.sqs, dynamodb=world.dynamodb, clock=lambda: world.now,
                             sleep=lambda s: None)
    # WHEN the safety net decides an expiry  THEN it raises (the batch is retried until the layout is rewritten)
    with pytest.raises(LayoutLostError):
        recovery.process([stream_record(1, "REMOVE", item, world.now, TTL_IDENTITY)])


def test_a_stalled_g1_run_of_before_the_first_change_cannot_write_its_watermark_after_it(world):
    # GIVEN G = 1 mid-minute, its run stalled; meanwhile G becomes 4 (the first change stamps the G = 1 watermark)
    world.store_minute("m", 40)
    world.scheduler().run()
    world.now += 400

    def meanwhile() -> None:
        world.now += 200
        _run_all(world, 4)

    stalled = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=StallingSQS(world.sqs, 2, meanwhile),
                              dynamodb=world.dynamodb, clock=lambda: world.now, sleep=lambda s: None, parallel=False)
    # WHEN the stalled run goes on  THEN its watermark write is refused (the run stops), and the marker stays
    report = stalled.run(lambda: 60_000 if len(world.sqs.sent) < 400 else 0)
    assert "watermark moved by another run" in report.stopped
    assert world.state(WATERMARK_KEY)["epoch"] == {"N": "1"}
