"""Client.cancel, Client.reschedule and send(cancellable=True) against the in-memory DynamoDB and the delay dispatcher."""

from __future__ import annotations


import pytest

from tests.support import dispatcher as support
from tests.support.dispatcher import DLQ, QUEUE, START, stream_record
from worker_tier import Client
from worker_tier.delays.cancellation import (
    CANCELLABLE_MIN_DELAY_SECONDS,
    DISPATCH_STARTED_CODE,
    DONE,
    NOT_CANCELLABLE,
    NOT_FOUND,
    STARTED,
    not_started_checks,
)
from worker_tier.delays import cancellation
from worker_tier.delays.delay import BUCKET_SECONDS, CANCELLABLE_SHARD, TTL_ATTRIBUTE, bucket_key, new_message_id, parse_bucket_key, read_item
from worker_tier.delays.dispatch_state import LAYOUT_KEY, DispatchGroup, group_of, minute_key
from worker_tier.delays.dedupe import marker_key
from worker_tier.delays.delay_recovery import DelayRecovery
from worker_tier.core.errors import MessageError, SendError

HOUR = 3600


class World(support.World):
    """A producer (the Client), the delay dispatcher, the safety net beside it and one clock, on in-memory DynamoDB and SQS."""

    def __init__(self) -> None:
        super().__init__(state_table="state")
        self.dispatcher = self.scheduler()
        self.recovery = DelayRecovery("state", QUEUE, DLQ, sqs=self.sqs, dynamodb=self.dynamodb,
                                      clock=lambda: self.now, sleep=lambda s: None)

    def run_for(self, seconds: float) -> None:
        """The delay dispatcher every minute for ``seconds``."""
        end = self.now + seconds
        while self.now < end:
            self.dispatcher.run()
            self.now += BUCKET_SECONDS

    def delivered(self) -> list[dict]:
        return list(self.sqs.by_queue.get(QUEUE, []))

    def items(self) -> list[tuple]:
        return sorted(self.dynamodb.tables["delay"])

    def message_items(self) -> list[dict]:
        return [dict(v) for k, v in self.dynamodb.tables["delay"].items() if v["pk"]["S"].startswith("b#")]


@pytest.fixture
def world() -> World:
    return World()


def test_a_cancelled_message_is_never_delivered_and_its_key_is_held_until_its_retention(world):
    # GIVEN a cancellable message due in a day
    world.client.send("/remind", "r1", delay=24 * HOUR, dedupe_key="remind-7", cancellable=True)
    # WHEN it is cancelled
    cancelled = world.client.cancel("remind-7")
    # THEN cancel says True, only the key's marker is left in the table, marked cancelled, and nothing is ever delivered
    assert cancelled is True
    [marker] = world.dynamodb.tables["delay"].values()
    assert marker[cancellation.CANCELLED_ATTRIBUTE] == {"BOOL": True} and cancellation.ITEM_PK_ATTRIBUTE not in marker
    world.run_for(25 * HOUR)
    assert world.delivered() == []
    # AND a send with the key before its marker expires is deduplicated; after it, the key is free again
    world.client.send("/remind", "r2", delay=2 * HOUR, dedupe_key="remind-7", cancellable=True)
    world.run_for(3 * HOUR)
    assert world.delivered() == []
    world.now = int(marker[TTL_ATTRIBUTE]["N"]) + 1
    world.client.send("/remind", "r3", delay=2 * HOUR, dedupe_key="remind-7", cancellable=True)
    assert [read_item(v).body for v in world.dynamodb.tables["delay"].values() if v["pk"]["S"].startswith("b#")] == ["r3"]


def test_a_cancel_after_the_dispatcher_started_the_minute_returns_false_and_it_is_delivered_once(world):
    # GIVEN a cancellable message due in 20 minutes, and the delay dispatcher run until it has started its minute
    world.client.send("/remind", "r1", delay=20 * 60, dedupe_key="k", cancellable=True)
    world.run_for(8 * 60)
    # WHEN it is cancelled
    outcome = world.client.cancellations().cancel("k")
    # THEN the cancel lost the race, says why, and the message is delivered exactly once, on time
    assert outcome.status == STARTED and not outcome.done
    assert "delay dispatcher has started" in outcome.detail
    world.run_for(30 * 60)
    [entry] = world.delivered()
    assert entry["MessageBody"] == "r1" and entry["visible_at"] == START + 20 * 60


def test_the_race_is_decided_by_the_minute_record_not_by_any_clock(world):
    # GIVEN a message due in a day, and a minute record written by a dispatcher whose clock runs a day ahead
    world.client.send("/remind", "r1", delay=24 * HOUR, dedupe_key="k", cancellable=True)
    bucket = int((START + 24 * HOUR) // BUCKET_SECONDS)
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": minute_key(bucket)}, "started_ms": {"N": "1"}})
    # WHEN the client (clock right) cancels
    # THEN the record wins: the message is not cancelled
    assert world.client.cancel("k") is False
    assert len(world.items()) == 2  # the message and its marker


def test_cancel_of_an_unknown_key_or_one_not_sent_cancellable_says_so(world):
    # GIVEN a delayed keyed message sent without cancellable=True
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="plain")
    # WHEN both it and an unknown key are cancelled
    plain, unknown = world.client.cancellations().cancel("plain"), world.client.cancellations().cancel("nobody")
    # THEN neither is cancelled, each with its reason, and the plain one is delivered
    assert (plain.status, unknown.status) == (NOT_CANCELLABLE, NOT_FOUND)
    assert plain.detail == "dedupe_key 'plain' was not sent with cancellable=True; it is delivered as sent"
    assert unknown.detail == "no delayed message has dedupe_key 'nobody' (never sent, cancelled, or expired)"
    world.run_for(3 * HOUR)
    assert [e["MessageBody"] for e in world.delivered()] == ["r1"]


def test_a_short_cancellable_message_goes_through_the_table_and_is_delivered_on_time(world):
    # GIVEN a cancellable message due in 14 min 30 s (SQS could carry it, but then it could not be cancelled)
    world.client.send("/soon", "s", delay=CANCELLABLE_MIN_DELAY_SECONDS + 30, dedupe_key="s", cancellable=True)
    # THEN it waits in the table, on the cancellable shard, and is delivered exactly when due
    [(pk, _), _marker] = world.items()
    assert pk == bucket_key(int((START + CANCELLABLE_MIN_DELAY_SECONDS + 30) // 60), CANCELLABLE_SHARD)
    assert world.delivered() == []
    world.run_for(20 * 60)
    [entry] = world.delivered()
    assert entry["visible_at"] == START + CANCELLABLE_MIN_DELAY_SECONDS + 30


def test_a_cancellable_message_inside_the_dispatch_horizon_is_refused_with_the_rule(world):
    # WHEN a cancellable message is due in 840 s, which the delay dispatcher would send in its next run
    with pytest.raises(MessageError) as refused:
        world.client.send("/soon", "s", delay=CANCELLABLE_MIN_DELAY_SECONDS, dedupe_key="s", cancellable=True)
    # THEN the error names the delay and the rule, and nothing is stored or sent
    assert str(refused.value).endswith(
        "a cancellable message must be due more than 840 s ahead, got 840 s: the delay dispatcher sends each minute 840 s "
        "before it ends, and a message is cancellable only until then; send it later, or without cancellable=True")
    assert world.items() == [] and world.sqs.sent == []


def test_a_cancellable_message_into_a_minute_already_started_is_refused_by_dynamodb(world):
    # GIVEN the delay dispatcher (its clock a minute ahead of the producer's) has started the minute 850 s away
    bucket = int((START + 850) // BUCKET_SECONDS)
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": minute_key(bucket)}, "started_ms": {"N": "1"}})
    # WHEN a cancellable message due then is sent
    with pytest.raises(SendError) as refused:
        world.client.send("/soon", "s", delay=850, dedupe_key="s", cancellable=True)
    # THEN it is refused with its code and reason, and nothing is stored
    assert refused.value.code == DISPATCH_STARTED_CODE
    assert f"the delay dispatcher has already started minute {bucket}" in str(refused.value)
    assert world.items() == []


@pytest.mark.parametrize(("kwargs", "problem"), [
    ({}, "cancellable=True needs a dedupe_key: cancel and reschedule find the message by it"),
    ({"dedupe_key": "k", "cancellable": "yes"}, "cancellable must be True or False, got 'yes'"),
])
def test_cancellable_needs_a_key_and_a_bool(world, kwargs, problem):
    kwargs.setdefault("cancellable", True)
    with pytest.raises(MessageError) as refused:
        world.client.send("/x", "b", delay=2 * HOUR, **kwargs)
    assert str(refused.value).endswith(problem)


def test_cancellable_needs_the_state_table(world):
    # GIVEN a client without the state table
    client = Client(QUEUE, "delay", sqs=world.sqs, dynamodb=world.dynamodb, clock=lambda: world.now)
    # WHEN a cancellable message is sent
    with pytest.raises(MessageError) as refused:
        client.send("/x", "b", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    # THEN the error names what is missing and how to give it
    assert "cancellable=True needs the state table" in str(refused.value) and "WORKER_TIER_STATE_TABLE" in str(refused.value)


def test_reschedule_moves_the_one_message_to_the_new_time(world):
    # GIVEN a cancellable message due in two hours
    first_id = world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    # WHEN it is moved to five hours from now
    moved = world.client.reschedule("k", delay=5 * HOUR)
    # THEN one copy is left, with the same id, delivered once at the new time and never at the old one
    assert moved is True and first_id == new_message_id("k")
    assert len(world.items()) == 2
    world.run_for(6 * HOUR)
    [entry] = world.delivered()
    assert entry["visible_at"] == START + 5 * HOUR and entry["MessageBody"] == "r1"


def test_reschedule_within_the_same_minute_keeps_one_copy(world):
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    assert world.client.reschedule("k", delay=2 * HOUR + 20) is True
    world.run_for(3 * HOUR)
    [entry] = world.delivered()
    assert entry["visible_at"] == START + 2 * HOUR + 20


def test_a_reschedule_that_lost_the_race_leaves_the_message_as_sent(world):
    # GIVEN a cancellable message whose minute the delay dispatcher has started
    world.client.send("/remind", "r1", delay=20 * 60, dedupe_key="k", cancellable=True)
    world.run_for(8 * 60)
    # WHEN it is moved an hour later
    # THEN the move says False, and it is delivered once at its first time
    assert world.client.reschedule("k", delay=2 * HOUR) is False
    world.run_for(3 * HOUR)
    [entry] = world.delivered()
    assert entry["visible_at"] == START + 20 * 60


def test_a_reschedule_into_a_started_minute_is_refused_and_changes_nothing(world):
    # GIVEN a cancellable message due in two hours, and the minute 900 s away already started (a dispatcher clock ahead)
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    before = dict(world.dynamodb.tables["delay"])
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": minute_key(int((START + 900) // 60))}, "started_ms": {"N": "1"}})
    # WHEN it is moved into that minute
    with pytest.raises(MessageError) as refused:
        world.client.reschedule("k", delay=900)
    # THEN the error names the rule, and the table is as it was
    assert "the delay dispatcher has already started minute" in str(refused.value)
    assert world.dynamodb.tables["delay"] == before


def test_reschedule_inside_the_dispatch_horizon_is_a_message_error(world):
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    with pytest.raises(MessageError) as refused:
        world.client.reschedule("k", delay=60)
    assert "a cancellable message must be due more than 840 s ahead, got 60 s" in str(refused.value)


def test_the_marker_records_where_the_message_is(world):
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    marker = world.dynamodb.get_item(TableName="delay", Key=marker_key("k"))["Item"]
    [(pk, sk), _] = world.items()
    assert (marker["item_pk"]["S"], marker["item_sk"]["S"], marker["cancellable"]["BOOL"]) == (pk, sk, True)


def test_the_dispatch_started_checks_name_the_minute_record_of_every_group_count():
    checks = [c["ConditionCheck"] for c in not_started_checks("state", 30_000_000, CANCELLABLE_SHARD)]
    keys = [c["Key"]["pk"]["S"] for c in checks]
    assert keys[0] == minute_key(30_000_000)
    assert keys == [group_of(CANCELLABLE_SHARD, count).minute_key(30_000_000) for count in range(1, 17)]
    assert {c["ConditionExpression"] for c in checks} == {"attribute_not_exists(#pk)"}


def test_a_cancel_after_the_shards_group_of_another_layout_started_the_minute_loses(world):
    # GIVEN a cancellable message, and the minute started by group 3 of 4 (it reads the cancellable shard)
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    [(pk, _), _] = world.items()
    bucket, _ = parse_bucket_key(pk)
    record = group_of(CANCELLABLE_SHARD, 4).minute_key(bucket)
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": record}, "started_ms": {"N": "1"}})
    # WHEN it is cancelled  THEN the cancel loses the race: the message stays, to be delivered as sent
    assert world.client.cancel("k") is False
    assert len(world.items()) == 2


def test_the_cancellable_shard_is_queried_consistently_and_the_others_are_not(world):
    # GIVEN an ordinary and a cancellable message in the same minute, and a log of the dispatcher's Queries
    queries = []
    query = world.dynamodb.query
    world.dynamodb.query = lambda **request: queries.append(request) or query(**request)
    world.client.send("/x", "plain", delay=2 * HOUR)
    world.client.send("/x", "cancellable", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    # WHEN the dispatcher reads their minute
    world.run_for(2 * HOUR)
    # THEN only the cancellable shard's Queries were consistent
    consistent = {q["ExpressionAttributeValues"][":pk"]["S"].rsplit("#", 1)[1] for q in queries if q.get("ConsistentRead")}
    assert consistent == {str(CANCELLABLE_SHARD)}
    assert sorted(e["MessageBody"] for e in world.delivered()) == ["cancellable", "plain"]


def test_outcomes_are_done_only_when_it_took_effect(world):
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    outcome = world.client.cancellations().cancel("k")
    assert (outcome.status, outcome.done) == (DONE, True)
    assert outcome.detail.startswith("cancelled: it was due 2027-01-15T10:00:00.000Z")


def test_a_marker_whose_item_is_gone_is_not_found(world):
    # GIVEN a cancellable message whose item is gone while its marker stays (an operator deleted it)
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    [(pk, sk), _] = world.items()
    world.dynamodb.delete_item(TableName="delay", Key={"pk": {"S": pk}, "sk": {"S": sk}})
    # WHEN it is cancelled
    outcome = world.client.cancellations().cancel("k")
    # THEN it is not found, and says why
    assert (outcome.status, outcome.detail) == (NOT_FOUND, "dedupe_key 'k': its marker names an item that is gone (expired)")


def test_a_cancel_racing_a_reschedule_reads_the_marker_again_and_cancels_the_moved_message(world):
    # GIVEN a cancellable message, and a reschedule that lands between the cancel's marker read and its transaction
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    moved: list[bool] = []

    def reschedule_first(operation, params):
        if operation == "TransactWriteItems" and not moved:
            moved.append(False)  # the reschedule's own transaction passes through
            moved[0] = world.client.reschedule("k", delay=5 * HOUR)
        return None

    world.dynamodb.fault = reschedule_first
    # WHEN it is cancelled
    cancelled = world.client.cancel("k")
    # THEN the reschedule took effect, the cancel then removed the moved message, and nothing is ever delivered
    assert moved == [True] and cancelled is True
    assert world.items() == [(marker_key("k")["pk"]["S"], marker_key("k")["sk"]["S"])]  # only the cancelled key's marker
    world.run_for(6 * HOUR)
    assert world.delivered() == []


def test_a_transaction_conflict_raises_and_changes_nothing(world):
    # GIVEN a cancellable message, and DynamoDB cancelling the next transaction for a conflict, not a condition
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    before = dict(world.dynamodb.tables["delay"])
    world.dynamodb.fault = lambda operation, params: "TransactionCanceledException" if operation == "TransactWriteItems" else None
    # WHEN it is cancelled
    # THEN the error is raised (retrying is safe), never a False that would say it is delivered, and nothing changed
    with pytest.raises(Exception) as raised:
        world.client.cancel("k")
    assert "TransactionCanceledException" in str(raised.value)
    assert world.dynamodb.tables["delay"] == before


# -- the safety net, races with the dispatcher's read, producer retries and bad input --------------------------------


def test_safety_net_resurrects_a_cancelled_message_stored_within_tolerance_of_its_minute_start(world):
    # GIVEN the dispatcher running, and a cancellable message sent 30 s before the dispatcher starts its minute
    world.dispatcher.run()  # first run at START: watermark set
    world.now = START + 30
    world.client.send("/remind", "r1", delay=841, dedupe_key="k", cancellable=True)
    [item] = world.message_items()
    insert = stream_record(1, "INSERT", item, world.now)
    # WHEN it is cancelled at once (before the minute record), cancel says True
    world.now = START + 31
    assert world.client.cancel("k") is True
    # AND the dispatcher starts that minute (its consistent Query does not see it: correct)
    world.now = START + 60
    world.dispatcher.run()
    assert world.delivered() == []
    # AND the delay table's stream (the safety net) then processes the item's INSERT
    world.now = START + 65
    world.recovery.process([insert])
    # THEN the cancelled message is never delivered (a cancel that returns True is never delivered)
    assert [e["MessageBody"] for e in world.delivered()] == []


def test_safety_net_delivers_the_old_copy_of_a_rescheduled_message(world):
    # GIVEN a cancellable message sent 30 s before its minute starts
    world.dispatcher.run()
    world.now = START + 30
    world.client.send("/remind", "r1", delay=841, dedupe_key="k", cancellable=True)
    [item] = world.message_items()
    insert = stream_record(1, "INSERT", item, world.now)
    # WHEN it is rescheduled an hour later (True), the dispatcher runs, and the stream's INSERT is processed
    world.now = START + 31
    assert world.client.reschedule("k", delay=HOUR) is True
    [moved] = world.message_items()
    world.now = START + 60
    world.dispatcher.run()
    world.recovery.process([insert, stream_record(2, "INSERT", moved, START + 31)])
    world.run_for(2 * HOUR)
    # THEN exactly one copy is delivered, at the new time (reschedule never leaves two copies)
    assert [(e["MessageBody"], e["visible_at"]) for e in world.delivered()] == [("r1", START + 31 + HOUR)]



def _cancel_during_the_query_of_the_cancellable_shard(world, bucket):
    """Wraps the fake's Query (not the code under test): right after the dispatcher's Query of the cancellable shard
    of ``bucket`` returns, a producer cancels "k"; returns the list its answer lands in."""
    answers: list[bool] = []
    query = world.dynamodb.query

    def query_then_cancel(**request):
        page = query(**request)
        if request["ExpressionAttributeValues"][":pk"]["S"] == bucket_key(bucket, CANCELLABLE_SHARD) and not answers:
            answers.append(world.client.cancel("k"))
        return page

    world.dynamodb.query = query_then_cancel
    return answers


@pytest.mark.parametrize("change_of_g", [False, True])
def test_a_cancel_after_the_dispatcher_read_the_cancellable_shard_returns_false(world, change_of_g):
    # GIVEN a cancellable message due in two hours, in minute M
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    bucket = int((START + 2 * HOUR) // BUCKET_SECONDS)
    if change_of_g:
        # AND a G = 2 layout whose two groups both stand at M: group 0 stopped part way through M (a cursor on shard 0,
        # its record written), group 1 (which reads the cancellable shard 15) has not started M yet. The operator now
        # deploys G = 1: the new group is seeded at M with group 0's cursors.
        world.dynamodb.put_item(TableName="state", Item={"pk": {"S": LAYOUT_KEY}, "groups": {"N": "2"}, "epoch": {"N": "0"}})
        for index, cursors in ((0, {"0": {"S": "0#x"}}), (1, {})):
            group = DispatchGroup(index, 2)
            world.dynamodb.put_item(TableName="state", Item={"pk": {"S": group.watermark_key}, "bucket": {"N": str(bucket)},
                                                             "cursors": {"M": cursors}})
        world.dynamodb.put_item(TableName="state", Item={"pk": {"S": DispatchGroup(0, 2).minute_key(bucket)},
                                                         "started_ms": {"N": "1"}})
    else:
        world.dynamodb.put_item(TableName="state", Item={"pk": {"S": "scheduler#watermark"}, "bucket": {"N": str(bucket)},
                                                         "cursors": {"M": {}}})
    answers = _cancel_during_the_query_of_the_cancellable_shard(world, bucket)
    # WHEN the (G = 1) dispatcher runs M, and the cancel lands after its Query of shard 15 read the message
    world.now = START + 2 * HOUR - 780
    world.dispatcher.run()
    # THEN either the cancel returned False and the message is delivered, or True and it is not
    delivered = [e["MessageBody"] for e in world.delivered()]
    assert answers, "the dispatcher never queried the cancellable shard"
    assert (answers[0], delivered) in ((False, ["r1"]), (True, [])), (answers, delivered)


def test_a_producer_retry_of_the_same_send_after_cancel_does_not_resurrect_it(world):
    # GIVEN a cancellable send whose response was lost (the producer will retry it, as at-least-once producers do)
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    # WHEN the message is cancelled (True) and the producer's retry of the very same send then arrives
    assert world.client.cancel("k") is True
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    world.run_for(3 * HOUR)
    # THEN the cancelled message is never delivered (the dedupe_key is what made the retry safe before cancel)
    assert [e["MessageBody"] for e in world.delivered()] == []


def test_a_cancellable_message_too_large_for_a_dynamodb_item_is_refused_with_the_rule(world):
    from worker_tier.core.errors import MessageError, SendError
    # WHEN a cancellable message of 500 KB (SQS takes 1 MiB; a DynamoDB item 400 KB) is sent
    with pytest.raises((MessageError, SendError)) as refused:
        world.client.send("/big", "x" * 500_000, delay=2 * HOUR, dedupe_key="big", cancellable=True)
    # THEN the error names the size and the rule
    assert "DynamoDB item, which Worker Tier keeps to 408576 bytes (DynamoDB's 409600 less a 1024-byte margin); this one needs" in str(refused.value)


@pytest.mark.parametrize("call", [
    lambda c: c.cancel(None),
    lambda c: c.cancel(123),
    lambda c: c.reschedule("k", delay=float("nan")),
    lambda c: c.reschedule("k", delay=400 * 24 * HOUR),
    lambda c: c.reschedule("k"),
], ids=["cancel-None", "cancel-int", "reschedule-nan", "reschedule-400-days", "reschedule-no-time"])
def test_bad_input_to_cancel_and_reschedule_is_a_clear_message_error(world, call):
    from worker_tier.core.errors import MessageError
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    with pytest.raises(MessageError):
        call(world.client)


def test_a_cancel_that_keeps_losing_to_reschedules_does_not_say_not_found_for_a_live_message(world):
    from worker_tier.delays.cancellation import CONTENDED, NOT_FOUND
    # GIVEN a cancellable message, and another producer rescheduling it before each of the cancel's transactions
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    state = {"inside": False, "n": 0}

    def reschedule_first(operation, params):
        if operation == "TransactWriteItems" and not state["inside"]:
            state["inside"], state["n"] = True, state["n"] + 1
            world.client.reschedule("k", delay=2 * HOUR + 60 * state["n"])
            state["inside"] = False

    world.dynamodb.fault = reschedule_first
    outcome = world.client.cancellations().cancel("k")
    world.dynamodb.fault = lambda operation, params: None
    world.run_for(3 * HOUR)
    # THEN a NOT_FOUND (the CLI's exit 4, "no such message") is never said of a message that is then delivered
    assert not (outcome.status == NOT_FOUND and world.delivered()), (outcome, world.delivered())
    # AND it says so: contended (the CLI's exit 6), the message still there
    assert outcome.status == CONTENDED and [e["MessageBody"] for e in world.delivered()] == ["r1"], outcome
