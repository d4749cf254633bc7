"""Hostile audit of issue #10 (cancellation): reproductions. Each test asserts the PROMISE; a failing test is a finding."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit import test_cancel
from worker_tier.delay import BUCKET_SECONDS
from worker_tier.delay_recovery import DelayRecovery

START, QUEUE, DLQ = test_cancel.START, test_cancel.QUEUE, test_cancel.DLQ
STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/delay/stream/2026-11-22T00:00:00.000"
HOUR = 3600


def stream_record(sequence: int, event_name: str, item: dict, at_s: float) -> dict:
    change: dict[str, Any] = {
        "ApproximateCreationDateTime": float(int(at_s)),
        "Keys": {"pk": item["pk"], "sk": item["sk"]},
        "SequenceNumber": f"{sequence:021d}",
        "SizeBytes": 300,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
        ("OldImage" if event_name == "REMOVE" else "NewImage"): item,
    }
    return {"eventID": f"event-{sequence}", "eventName": event_name, "eventVersion": "1.1",
            "eventSource": "aws:dynamodb", "awsRegion": "us-east-1", "dynamodb": change, "eventSourceARN": STREAM_ARN}


class World(test_cancel.World):
    """test_cancel's world, with the safety net beside the dispatcher."""

    def __init__(self) -> None:
        super().__init__()
        self.recovery = DelayRecovery("state", QUEUE, DLQ, sqs=self.sqs, dynamodb=self.dynamodb,
                                      clock=lambda: self.now, sleep=lambda s: None)

    def message_items(self) -> list[dict]:
        return [dict(v) for k, v in self.dynamodb.tables["delay"].items() if v["pk"]["S"].startswith("b#")]


@pytest.fixture
def world() -> World:
    return World()


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
    # THEN the cancelled message is never delivered (PROMISE: a cancel that returns True is never delivered)
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
    # THEN exactly one copy is delivered, at the new time (PROMISE: reschedule never leaves two copies)
    assert [(e["MessageBody"], e["visible_at"]) for e in world.delivered()] == [("r1", START + 31 + HOUR)]


from worker_tier.delay import CANCELLABLE_SHARD, bucket_key  # noqa: E402
from worker_tier.dispatch_state import LAYOUT_KEY, DispatchGroup  # noqa: E402


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
    # THEN (PROMISE) either the cancel returned False and the message is delivered, or True and it is not
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
    from worker_tier.errors import MessageError, SendError
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
    from worker_tier.errors import MessageError
    world.client.send("/remind", "r1", delay=2 * HOUR, dedupe_key="k", cancellable=True)
    with pytest.raises(MessageError):
        call(world.client)


def test_a_cancel_that_keeps_losing_to_reschedules_does_not_say_not_found_for_a_live_message(world):
    from worker_tier.cancellation import CONTENDED, NOT_FOUND
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
