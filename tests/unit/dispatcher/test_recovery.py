"""The delay table's safety net against in-memory DynamoDB and SQS, fed realistic stream records."""

from __future__ import annotations

import json
from typing import Any

import pytest

from botocore.exceptions import ClientError

from tests.support.dispatcher import TTL_IDENTITY, stream_record
from tests.support.fake_dynamodb import FakeDynamoDB
from tests.support.strict_dynamodb import StrictDynamoDB
from tests.support.fakes import FakeSQS
from tests.support.strict_sqs import StrictSQS
from worker_tier.core import contract
from worker_tier.delays import delay
from worker_tier.delays.delay import BUCKET_SECONDS, DelayedMessage
from worker_tier.delays.delay_recovery import (
    CLOCK_TOLERANCE_SECONDS,
    DYNAMODB_STREAM_RETENTION_SECONDS,
    STREAM_TIME_RESOLUTION_SECONDS,
    DelayRecovery,
    StreamRecordError,
    read_record,
)
from worker_tier.core.contract import DUE_AT_ATTRIBUTE, FAILURE_ATTRIBUTE, PATH_ATTRIBUTE
from worker_tier.delays.dispatch_state import (
    FINISHED_MS_ATTRIBUTE,
    MINUTE_RECORD_RETENTION_SECONDS,
    STARTED_MS_ATTRIBUTE,
    WATERMARK_KEY,
    minute_key,
)
from worker_tier.delays.dispatch_state import LAYOUT_KEY, DispatchGroup, Layout

START = 1_800_000_000.0  # a minute boundary
MINUTE = int(START // BUCKET_SECONDS)
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
DLQ = "https://sqs.us-east-1.amazonaws.com/123456789012/work-dlq"


class SingleSendSQS(FakeSQS):
    """FakeSQS plus SendMessage (the DLQ path), refusing bodies over ``max_single_body_chars`` as SQS does."""

    def __init__(self, max_single_body_chars: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_single_body_chars = max_single_body_chars

    def send_message(self, **params: Any) -> dict[str, Any]:
        self.calls.append(("SendMessage", params))
        limit = self.max_single_body_chars
        if limit is not None and len(params["MessageBody"]) > limit:
            raise ClientError({"Error": {"Code": "InvalidParameterValue", "Message": f"over {limit}", "Type": "Sender"}},
                              "SendMessage")
        return {"MessageId": f"dlq-{len(self.calls)}"}

    def dead_letters(self) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == "SendMessage"]


class World:
    """A state table, a work queue and its DLQ, a clock, and a stream of the delay table."""

    def __init__(self, sqs: Any = None) -> None:
        self.now = START
        self.dynamodb = StrictDynamoDB(FakeDynamoDB())
        self.dynamodb.create_table("state", "pk")
        self.sqs = sqs or SingleSendSQS(clock=lambda: self.now)
        self.dead_letters: list[dict[str, Any]] = []
        self.sequence = 0

    def recovery(self) -> DelayRecovery:
        return DelayRecovery("state", QUEUE, DLQ, sqs=self.sqs, dynamodb=self.dynamodb, clock=lambda: self.now, sleep=lambda s: None)

    def watermark(self, bucket: int, cursors: dict[int, str] | None = None) -> None:
        item = {"pk": {"S": WATERMARK_KEY}, "bucket": {"N": str(bucket)}}
        if cursors is not None:
            item["cursors"] = {"M": {str(shard): {"S": sk} for shard, sk in cursors.items()}}
        self.dynamodb.put_item(TableName="state", Item=item)

    def minute(self, bucket: int, started_s: float, finished_s: float | None = None) -> None:
        item = {"pk": {"S": minute_key(bucket)}, STARTED_MS_ATTRIBUTE: {"N": str(int(started_s * 1000))}}
        if finished_s is not None:
            item[FINISHED_MS_ATTRIBUTE] = {"N": str(int(finished_s * 1000))}
        self.dynamodb.put_item(TableName="state", Item=item)

    def record(self, event_name: str, item: dict, at_s: float, identity: dict | None = None) -> dict:
        self.sequence += 1
        return stream_record(self.sequence, event_name, item, at_s, identity)

    def insert(self, item: dict, at_s: float) -> dict:
        return self.record("INSERT", item, at_s)

    def expire(self, item: dict, at_s: float) -> dict:
        return self.record("REMOVE", item, at_s, TTL_IDENTITY)


def item(due_s: float, body: str = "hello", message_id: str = "m-1", attributes: dict | None = None) -> dict:
    attrs = {PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/remind"}, **(attributes or {})}
    return DelayedMessage(message_id, int(due_s * 1000), body, attrs, shard=3).to_item()


@pytest.fixture
def world() -> World:
    return World()


def due_at(entry: dict) -> str:
    return entry["MessageAttributes"][DUE_AT_ATTRIBUTE]["StringValue"]


# -- the TTL never loses an undispatched message ----------------------------------------


def test_an_item_expired_before_dispatch_is_delivered_at_once_and_counted(world):
    # GIVEN a message due at minute M, and a scheduler stuck on M since it started it (watermark still at M)
    due = START + 30
    world.minute(MINUTE, started_s=START - 840)
    world.watermark(MINUTE)
    # WHEN the TTL deletes it, 6 h after it was due, and the stream delivers the REMOVE
    world.now = due + delay.DISPATCHED_RETENTION_SECONDS + 120
    report = world.recovery().process([world.expire(item(due), world.now - 60)])
    # THEN it goes to the work queue with its body, route and due time, visible at once (late, never early)
    assert report.recovered_from_ttl == 1 and report.failed_sequence_number is None
    (sent,) = world.sqs.sent
    assert sent["MessageBody"] == "hello" and sent["DelaySeconds"] == 0
    assert sent["MessageAttributes"][PATH_ATTRIBUTE]["StringValue"] == "/remind"
    assert due_at(sent) == "2027-01-15T08:00:30.000Z"
    assert sent["visible_at"] >= due


def test_an_item_expired_in_a_minute_the_scheduler_never_started_is_delivered(world):
    # GIVEN a scheduler that never ran at all (no watermark)
    # WHEN an item expires
    world.now = START + delay.DISPATCHED_RETENTION_SECONDS + 60
    report = world.recovery().process([world.expire(item(START), world.now)])
    # THEN it is delivered
    assert report.recovered_from_ttl == 1 and len(world.sqs.sent) == 1


def test_in_the_minute_in_progress_an_expiry_is_sent_only_past_its_shards_cursor(world):
    # GIVEN the scheduler stuck in minute M, its shard 3 dispatched up to the second of three items
    due = [START + 10, START + 20, START + 30]
    items = [item(at, f"b{n}", f"m-{n}") for n, at in enumerate(due)]
    world.minute(MINUTE, started_s=START - 840)
    world.watermark(MINUTE, cursors={3: items[1]["sk"]["S"]})
    # WHEN all three expire
    world.now = START + delay.DISPATCHED_RETENTION_SECONDS + 120
    report = world.recovery().process([world.expire(i, world.now) for i in items])
    # THEN only the one past the cursor (never dispatched) is sent
    assert [m["MessageBody"] for m in world.sqs.sent] == ["b2"]
    assert (report.recovered_from_ttl, report.skipped) == (1, 2)


def test_a_dispatched_items_expiry_is_ignored(world):
    # GIVEN minute M dispatched long ago: the scheduler started it 14 minutes before it began, and moved on
    due = START + 30
    world.minute(MINUTE, started_s=START - 840, finished_s=START - 780)
    world.watermark(MINUTE + 500)
    # WHEN its item expires 6 h later
    world.now = due + delay.DISPATCHED_RETENTION_SECONDS + 5
    report = world.recovery().process([world.expire(item(due), world.now)])
    # THEN nothing is sent and nothing counted
    assert world.sqs.sent == []
    assert (report.skipped, report.recovered_from_ttl) == (1, 0)


def test_a_minute_finished_only_after_the_deletion_is_delivered_even_if_started_before(world):
    # GIVEN minute M started before the TTL deleted its item, but finished only after (a frozen watermark that thawed)
    due = START + 30
    deleted_at = due + delay.DISPATCHED_RETENTION_SECONDS + 600
    world.minute(MINUTE, started_s=START - 840, finished_s=deleted_at + 300)
    world.watermark(MINUTE + 1)
    world.now = deleted_at + 400
    # WHEN the REMOVE is processed
    report = world.recovery().process([world.expire(item(due), deleted_at)])
    # THEN the item is delivered: the scheduler's last reads of M came after the item was gone
    assert report.recovered_from_ttl == 1 and len(world.sqs.sent) == 1


def test_a_minute_finished_before_the_deletion_is_not_sent_again(world):
    # GIVEN minute M finished well before its item expired
    due = START + 30
    world.minute(MINUTE, started_s=START - 840, finished_s=START - 800)
    world.watermark(MINUTE + 1)
    world.now = due + delay.DISPATCHED_RETENTION_SECONDS + 60
    # WHEN its item expires
    report = world.recovery().process([world.expire(item(due), world.now)])
    # THEN it is skipped
    assert world.sqs.sent == [] and report.skipped == 1


def test_an_expiry_in_a_minute_without_a_record_behind_the_watermark_errs_on_sending(world):
    # GIVEN a watermark past M but no record of M (written before minute records existed, or expired)
    world.watermark(MINUTE + 10)
    world.now = START + delay.DISPATCHED_RETENTION_SECONDS + 60
    # WHEN its item expires
    report = world.recovery().process([world.expire(item(START + 1), world.now)])
    # THEN it is sent: a doubt costs a duplicate, never a loss
    assert report.recovered_from_ttl == 1


def test_a_users_delete_and_a_dedupe_marker_are_not_recoveries(world):
    # GIVEN a REMOVE made by a user (not the TTL), a MODIFY, and a dedupe marker's TTL REMOVE
    world.watermark(MINUTE)
    marker = {"pk": {"S": delay.DEDUPE_PREFIX + "k"}, "sk": {"S": "-"}, "id": {"S": "m-1"}}
    records = [
        world.record("REMOVE", item(START), START, {"type": "User", "principalId": "AROAEXAMPLE:ops"}),
        world.record("MODIFY", item(START), START),
        world.expire(marker, START),
    ]
    # WHEN processed
    report = world.recovery().process(records)
    # THEN nothing is sent
    assert world.sqs.sent == [] and report.skipped == 3


# -- a late write is delivered late, never lost, and counted --------------------------------


def test_a_late_insert_behind_the_watermark_is_delivered_and_counted(world):
    # GIVEN a scheduler that finished minute M at START - 800 and moved on
    world.minute(MINUTE, started_s=START - 840, finished_s=START - 800)
    world.watermark(MINUTE + 1)
    # WHEN a producer whose clock is 3 minutes behind stores a message due at M + 50 s, at START - 100
    world.now = START - 100
    report = world.recovery().process([world.insert(item(START + 50), START - 100)])
    # THEN it is sent now, delayed to its due time (never early), and counted as a late write
    assert report.late_writes == 1
    (sent,) = world.sqs.sent
    assert sent["DelaySeconds"] == 150 and sent["visible_at"] == START + 50


def test_an_insert_ahead_of_the_watermark_is_left_to_the_scheduler(world):
    # GIVEN the watermark at M
    world.watermark(MINUTE)
    # WHEN a message due in minute M + 20 is stored
    report = world.recovery().process([world.insert(item(START + 20 * 60), START)])
    # THEN nothing is sent, and no minute record is even read (the GetItems: the layout, none, so not again; the watermark)
    assert world.sqs.sent == [] and report.skipped == 1
    assert world.dynamodb.count("GetItem") == 2


def test_an_insert_into_the_current_minute_before_its_first_query_is_left_to_the_scheduler(world):
    # GIVEN the scheduler started minute M well after the insert
    world.minute(MINUTE, started_s=START - 700)
    world.watermark(MINUTE)
    # WHEN the INSERT (made at START - 800) is processed
    report = world.recovery().process([world.insert(item(START + 10), START - 800)])
    # THEN it is skipped: that first query saw it
    assert world.sqs.sent == [] and report.skipped == 1


def test_an_insert_into_the_watermarks_minute_not_yet_started_is_left_to_the_scheduler(world):
    # GIVEN the watermark at M, whose record does not exist: the scheduler writes it before its first Query of M
    world.watermark(MINUTE)
    # WHEN a message due in M is stored
    report = world.recovery().process([world.insert(item(START + 10), START - 840)])
    # THEN it is left to the scheduler
    assert world.sqs.sent == [] and report.skipped == 1


def test_an_insert_behind_the_watermark_in_a_minute_without_a_record_errs_on_sending(world):
    # GIVEN the watermark past M, and no record of M (started before minute records existed, or expired)
    world.watermark(MINUTE + 1)
    # WHEN a message due in M is stored
    report = world.recovery().process([world.insert(item(START + 10), START - 100)])
    # THEN it is sent
    assert report.late_writes == 1


@pytest.mark.parametrize("started_after_insert_s", [0, 1, CLOCK_TOLERANCE_SECONDS])
def test_the_clock_tolerance_window_errs_on_the_side_of_sending(world, started_after_insert_s):
    # GIVEN a minute the scheduler started within the tolerance after the insert (whole-second stream time, skewed clock)
    inserted_at = START - 800.0
    world.minute(MINUTE, started_s=inserted_at + started_after_insert_s)
    world.watermark(MINUTE)
    world.now = inserted_at + 40
    # WHEN the INSERT is processed
    report = world.recovery().process([world.insert(item(START + 10), inserted_at)])
    # THEN it is sent (perhaps a duplicate), never skipped
    assert report.late_writes == 1


def test_minute_records_outlive_the_item_ttl_plus_the_streams_retention():
    # GIVEN an item deleted by the TTL at its margin after due, and its REMOVE processed up to 24 h later
    # THEN the scheduler's record of its minute still exists then, with a day to spare for DynamoDB's TTL lag;
    # a missing record would only cost a duplicate, never a loss
    assert MINUTE_RECORD_RETENTION_SECONDS >= (
        BUCKET_SECONDS + delay.DISPATCHED_RETENTION_SECONDS + DYNAMODB_STREAM_RETENTION_SECONDS + 24 * 3600
    )


def test_the_tolerance_covers_the_schedulers_documented_clock_skew():
    # GIVEN the documented skew budget (producer and scheduler together) and the stream's whole-second timestamps
    # THEN the tolerance covers the scheduler's share of the skew plus the rounding
    assert CLOCK_TOLERANCE_SECONDS >= delay.MAX_CLOCK_SKEW_SECONDS / 2 + 1


# -- failures: DLQ with a reason, or a retry from the first record not done -------------------------


def test_a_message_sqs_refuses_goes_to_the_dlq_with_a_reason(world):
    # GIVEN a strict SQS, and an expired undispatched message whose attribute SQS refuses (a NUL character)
    inner = SingleSendSQS(clock=lambda: START + delay.DISPATCHED_RETENTION_SECONDS + 60)
    world = World(sqs=StrictSQS(inner))
    world.watermark(MINUTE)
    bad = item(START, attributes={"note": {"DataType": "String", "StringValue": "a\x00b"}})
    world.now = START + delay.DISPATCHED_RETENTION_SECONDS + 60
    # WHEN the REMOVE is processed alongside a good one
    report = world.recovery().process([world.expire(bad, world.now), world.expire(item(START, "fine", "m-2"), world.now)])
    # THEN the good one is delivered, the bad one is in the DLQ with its body, route and reason, and the batch succeeds
    assert report.failed_sequence_number is None
    assert (report.recovered_from_ttl, report.dead_lettered) == (1, 1)
    assert [m["MessageBody"] for m in inner.sent] == ["fine"]
    (dead,) = inner.dead_letters()
    assert dead["QueueUrl"] == DLQ and dead["MessageBody"] == "hello"
    reason = json.loads(dead["MessageAttributes"][FAILURE_ATTRIBUTE]["StringValue"])
    assert reason["error_type"] == "SendRefusedError"
    assert reason["error_message"].startswith("the work queue refused delayed message m-1 (due 1800000000000 ms) when the "
                                              "safety net sent it: InvalidParameterValue")
    assert list(reason["refused_attributes"]) == ["note"] and "U+0000" in reason["refused_attributes"]["note"]
    assert reason["path"] == "/remind" and DUE_AT_ATTRIBUTE in dead["MessageAttributes"]


def test_a_transient_sqs_failure_reports_the_first_record_not_done(world):
    # GIVEN SQS that keeps failing the second message transiently
    world.sqs = SingleSendSQS(fail=lambda call, entry: ("ServiceUnavailable", False) if entry["MessageBody"] == "two" else None,
                              clock=lambda: world.now)
    world.watermark(MINUTE)
    world.now = START + delay.DISPATCHED_RETENTION_SECONDS + 60
    records = [world.expire(item(START, body, f"m-{body}"), world.now) for body in ("one", "two", "three")]
    # WHEN the batch is processed
    report = world.recovery().process(records)
    # THEN the batch item failure is the second record: Lambda retries from there, and "one" is not sent again
    assert report.failed_sequence_number == records[1]["dynamodb"]["SequenceNumber"]
    assert sorted(m["MessageBody"] for m in world.sqs.sent) == ["one", "three"]


def test_an_unreadable_record_goes_to_the_dlq_with_a_reason_and_the_rest_go_on(world):
    # GIVEN a TTL REMOVE of a message item whose image lacks its body, then a good one
    world.watermark(MINUTE)
    broken = item(START)
    del broken["body"]
    world.now = START + delay.DISPATCHED_RETENTION_SECONDS + 60
    records = [world.expire(broken, world.now), world.expire(item(START, "fine", "m-2"), world.now)]
    # WHEN processed
    report = world.recovery().process(records)
    # THEN the good one is sent, and the DLQ holds the whole record with a reason naming what is missing
    assert (report.recovered_from_ttl, report.dead_lettered, report.failed_sequence_number) == (1, 1, None)
    (dead,) = world.sqs.dead_letters()
    assert json.loads(dead["MessageBody"])["eventID"] == records[0]["eventID"]
    reason = json.loads(dead["MessageAttributes"][FAILURE_ATTRIBUTE]["StringValue"])
    assert reason["error_type"] == "StreamRecordError"
    assert "is not a readable delay-table message: KeyError: 'body'" in reason["error_message"]


def test_read_record_names_the_record_and_what_a_message_needs():
    # GIVEN an INSERT of a message key without a NewImage
    record = {"eventID": "e-9", "eventName": "INSERT", "dynamodb": {"Keys": {"pk": {"S": "b#1#0"}, "sk": {"S": "x"}}}}
    # WHEN read / THEN the error names the record, the missing field and the rule
    with pytest.raises(StreamRecordError, match=r"stream record 'e-9' is not a readable delay-table message: KeyError: "
                                                r"'NewImage' \(an INSERT needs dynamodb.NewImage"):
        read_record(record)


def test_a_refused_message_too_big_for_the_dlq_leaves_a_pointer_with_its_reason_and_first_kib():
    # GIVEN a work queue that refuses a body and a DLQ whose size limit the body exceeds too
    inner = SingleSendSQS(max_single_body_chars=4000, fail=lambda call, entry: ("InvalidParameterValue", True))
    world = World(sqs=inner)
    world.watermark(MINUTE)
    world.now = START + delay.DISPATCHED_RETENTION_SECONDS + 60
    body = "x" * 5000
    # WHEN its TTL REMOVE is processed
    report = world.recovery().process([world.expire(item(START, body), world.now)])
    # THEN the DLQ holds a small message with the reason and the body's first KiB, and the batch succeeds
    assert (report.dead_lettered, report.failed_sequence_number) == (1, None)
    refused_copy, pointer = inner.dead_letters()
    assert refused_copy["MessageBody"] == body
    content = json.loads(pointer["MessageBody"])
    assert content["body_head"] == "x" * 1024 and content["message_id"] == "m-1"
    assert content["reason"]["error_type"] == "SendRefusedError"
    assert content["reason"]["copy_refused"] == ("the dead-letter queue refused the full copy (InvalidParameterValue: over 4000); "
                                                 "the item is already deleted by the TTL")
    assert json.loads(pointer["MessageAttributes"][FAILURE_ATTRIBUTE]["StringValue"]) == content["reason"]
    assert pointer["MessageAttributes"][PATH_ATTRIBUTE]["StringValue"] == "/remind"


def test_a_dlq_that_fails_transiently_stops_the_batch_at_that_record():
    # GIVEN a work queue refusing every message, and a DLQ that is unavailable
    class UnavailableDLQ(SingleSendSQS):
        def send_message(self, **params: Any) -> dict[str, Any]:
            raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "down", "Type": "Receiver"}}, "SendMessage")

    world = World(sqs=UnavailableDLQ(fail=lambda call, entry: ("InvalidParameterValue", True)))
    world.watermark(MINUTE)
    world.now = START + delay.DISPATCHED_RETENTION_SECONDS + 60
    records = [world.expire(item(START, f"b{n}", f"m-{n}"), world.now) for n in range(3)]
    # WHEN processed
    report = world.recovery().process(records)
    # THEN Lambda is told to retry from the first record: nothing was dead-lettered
    assert report.failed_sequence_number == records[0]["dynamodb"]["SequenceNumber"]
    assert report.dead_lettered == 0


# -- the handler --------------------------------------------------------------------------------------


def test_the_handler_refuses_an_event_that_is_not_a_stream_batch():
    from worker_tier.handlers.recovery import StreamEventError, lambda_handler
    from worker_tier_local.context import LocalContext

    # WHEN the handler gets a list instead of {"Records": [...]} / THEN the error says what a stream event is
    with pytest.raises(StreamEventError, match=r"a DynamoDB stream event is a mapping with a 'Records' list, got list '\[\]'"):
        lambda_handler([], LocalContext("recovery", 90, 256, "us-east-1", "123456789012"))


def test_the_handler_delivers_through_aws_and_publishes_counts_once_per_batch(monkeypatch, capsys):
    import time

    import boto3
    from moto import mock_aws

    from worker_tier.handlers import recovery as handler
    from worker_tier_local.context import LocalContext

    with mock_aws():
        # GIVEN a work queue, its DLQ and a state table on (moto) AWS, a watermark, and the handler's environment
        sqs, dynamodb = boto3.client("sqs"), boto3.client("dynamodb")
        queue, dlq = (sqs.create_queue(QueueName=name)["QueueUrl"] for name in ("work", "dlq"))
        dynamodb.create_table(TableName="state", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                              AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
        now = time.time()
        world = World()
        dynamodb.put_item(TableName="state", Item={"pk": {"S": WATERMARK_KEY}, "bucket": {"N": str(int(now // 60) - 300)}})
        for name, value in {contract.STATE_TABLE_VARIABLE: "state", contract.DELAY_TABLE_VARIABLE: "delay", contract.QUEUE_URL_VARIABLE: queue, contract.DLQ_URL_VARIABLE: dlq,
                            "POWERTOOLS_METRICS_DISABLED": "false"}.items():
            monkeypatch.setenv(name, value)
        handler.recovery.reset()
        due = now - delay.DISPATCHED_RETENTION_SECONDS - 120
        records = [world.expire(item(due, f"b{n}", f"m-{n}"), now - 60) for n in range(3)]
        # WHEN Lambda invokes it with a stream batch of three TTL REMOVEs
        result = handler.lambda_handler({"Records": records}, LocalContext("recovery", 90, 256, "us-east-1", "123456789012"))
        # THEN all three are in the work queue, no failure is reported, and the count is published once, as 3
        assert result == {"batchItemFailures": []}
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
        assert sorted(m["Body"] for m in got) == ["b0", "b1", "b2"]
        emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
        assert [blob["DelayedRecoveredFromTtl"] for blob in emf] == [[3.0]]
        handler.recovery.reset()


# -- end to end: the real Client and DelayDispatcher, DynamoDB's TTL and the stream ------------------


class StreamedDynamoDB(FakeDynamoDB):
    """FakeDynamoDB whose delay table has a stream (INSERT, MODIFY, TTL REMOVE records) and a TTL sweeper."""

    def __init__(self, clock) -> None:
        super().__init__()
        self.clock = clock
        self.stream: list[dict] = []
        self.create_table("delay", "pk", "sk")
        self.create_table("state", "pk")

    def _store(self, table: str, item: dict) -> None:
        if table == "delay":
            event = "MODIFY" if self._key(table, item) in self.tables[table] else "INSERT"
            self.stream.append(stream_record(len(self.stream) + 1, event, self._copy(item), self.clock()))
        super()._store(table, item)

    def sweep_ttl(self) -> None:
        """DynamoDB's TTL: delete every expired item, each with a REMOVE made by the service."""
        for stored in list(self.tables["delay"].values()):
            if int(stored[delay.TTL_ATTRIBUTE]["N"]) <= self.clock():
                self.delete_item(TableName="delay", Key={"pk": stored["pk"], "sk": stored["sk"]})
                self.stream.append(stream_record(len(self.stream) + 1, "REMOVE", stored, self.clock(), TTL_IDENTITY))

    def drain(self) -> list[dict]:
        records, self.stream = self.stream, []
        return records


class Timeline:
    """A clock, the streamed tables, SQS, a producer, the scheduler and the safety net."""

    def __init__(self, producer_clock_offset_s: float = 0.0, fail=None) -> None:
        from worker_tier import Client
        from worker_tier.delays.dispatcher import DelayDispatcher

        self.now = START
        self.dynamodb = StreamedDynamoDB(clock=lambda: self.now)
        self.sqs = SingleSendSQS(clock=lambda: self.now, fail=fail)
        self.client = Client(QUEUE, "delay", sqs=self.sqs, dynamodb=self.dynamodb, clock=lambda: self.now + producer_clock_offset_s,
                             sleep=lambda s: None, maximum_message_size=1024 * 1024)
        self.scheduler = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=self.sqs, dynamodb=self.dynamodb,
                                        clock=lambda: self.now, sleep=lambda s: None, parallel=False)
        self.recovery = DelayRecovery("state", QUEUE, DLQ, sqs=self.sqs, dynamodb=self.dynamodb, clock=lambda: self.now,
                                      sleep=lambda s: None)
        self.totals = {"late_writes": 0, "recovered_from_ttl": 0, "dead_lettered": 0}
        self.unprocessed: list[dict] = []  # what Lambda retries, from the reported batch item failure on

    def minute(self, scheduler_up: bool = True, sweep: bool = False) -> None:
        """One minute: the scheduler's run (a few seconds in), the TTL sweep, and one stream batch."""
        self.now += BUCKET_SECONDS
        if scheduler_up:
            self.scheduler.run()
        if sweep:
            self.dynamodb.sweep_ttl()
        records = self.unprocessed + self.dynamodb.drain()
        report = self.recovery.process(records)
        numbers = [r["dynamodb"]["SequenceNumber"] for r in records]
        self.unprocessed = [] if report.failed_sequence_number is None else records[numbers.index(report.failed_sequence_number):]
        for name in self.totals:
            self.totals[name] += getattr(report, name)

    def visible_by_body(self) -> dict[str, list[float]]:
        delivered: dict[str, list[float]] = {}
        for entry in self.sqs.sent:
            delivered.setdefault(entry["MessageBody"], []).append(entry["visible_at"])
        return delivered


def test_an_outage_longer_than_the_ttl_loses_nothing_and_delivers_nothing_early():
    # GIVEN 120 messages due over the next two hours, a scheduler that runs for 30 minutes and is then down for
    # 8 h (longer than the 6 h TTL margin), DynamoDB's TTL sweeping every 10 minutes, and the safety net
    line = Timeline()
    line.minute()
    due = {f"m{n}": START + 60 + 901 + n * 60 for n in range(120)}
    for body, at in due.items():
        line.client.send("/x", body, delay=at - line.now)
    for minute in range(12 * 60):
        line.minute(scheduler_up=not 30 <= minute < 30 + 8 * 60, sweep=minute % 10 == 0)
    # THEN every message is delivered exactly once, none before it was due
    delivered = line.visible_by_body()
    assert sorted(delivered) == sorted(due)
    assert all(len(times) == 1 and times[0] >= due[body] for body, times in delivered.items())
    # AND those the TTL took from the stopped scheduler were recovered and counted; the dispatched ones were not resent
    assert 60 <= line.totals["recovered_from_ttl"] < 120
    assert line.totals["late_writes"] == 0 and line.unprocessed == []


def test_a_minute_stuck_past_the_ttl_that_thaws_loses_nothing():
    # GIVEN a minute whose one message SQS fails transiently for 8 h (the scheduler's watermark is stuck on it,
    # and the safety net's sends of it fail too), while the TTL deletes that minute's items 6 h after they were due
    thaw = START + 8 * 3600
    line = Timeline(fail=lambda call, entry: ("ServiceUnavailable", False) if entry["MessageBody"] == "stubborn"
                    and line.now < thaw else None)
    line.minute()
    due = {body: START + 60 + 961 + n for n, body in enumerate(["stubborn", *(f"m{n}" for n in range(30))])}
    for body, at in due.items():
        line.client.send("/x", body, delay=at - line.now)
    # WHEN time runs 10 h: the scheduler thaws after the TTL took the items, finishing the minute without them
    for minute in range(10 * 60):
        line.minute(sweep=minute % 10 == 0)
    # THEN every message was delivered, none early, the stubborn one by the safety net once SQS took it again
    delivered = line.visible_by_body()
    assert sorted(delivered) == sorted(due)
    assert all(min(times) >= due[body] for body, times in delivered.items())
    assert min(delivered["stubborn"]) >= thaw
    assert line.unprocessed == []


def test_a_producer_clock_minutes_behind_is_delivered_late_not_never_and_counted():
    # GIVEN a scheduler running every minute, and a producer whose clock is 3 minutes behind
    line = Timeline(producer_clock_offset_s=-180)
    for _ in range(5):
        line.minute()
    # WHEN it stores messages "due in 901 s" by its own clock: 721 s from now, behind the watermark
    due = {f"late{n}": line.now - 180 + 901 for n in range(15)}
    for body in due:
        line.client.send("/x", body, delay=901)
    for _ in range(20):
        line.minute()
    # THEN each is delivered once, not before it was due (held by DelaySeconds), and counted as a late write
    delivered = line.visible_by_body()
    assert {body: times for body, times in delivered.items() if body in due} == {body: [at] for body, at in due.items()}
    assert line.totals["late_writes"] == 15


def test_each_minute_record_a_batch_needs_is_read_once(world):
    # GIVEN two dispatched minutes, and five of their items expiring in one batch
    for offset in (0, 1):
        world.minute(MINUTE + offset, started_s=START - 840 + 60 * offset, finished_s=START - 800 + 60 * offset)
    world.watermark(MINUTE + 2)
    world.now = START + delay.DISPATCHED_RETENTION_SECONDS + 600
    records = [world.expire(item(START + 25 * n, f"b{n}", f"m-{n}"), world.now) for n in range(5)]
    # WHEN processed
    report = world.recovery().process(records)
    # THEN the state table was read four times: the layout (none: not read again), the watermark, each minute once
    assert report.skipped == 5 and world.dynamodb.count("GetItem") == 4


# -- the delay path's edge cases ------------------------------------------------------------


def _with_delay_table(world: World, *items: dict) -> DelayRecovery:
    """The delay table holding ``items``, and a safety net that may refile into it."""
    world.dynamodb.create_table("delay", "pk", "sk")
    for one in items:
        world.dynamodb.put_item(TableName="delay", Item=one)
    return DelayRecovery("state", QUEUE, DLQ, sqs=world.sqs, dynamodb=world.dynamodb, clock=lambda: world.now,
                         sleep=lambda s: None, delay_table="delay")


@pytest.mark.parametrize("pk_shard", [f"{delay.MAX_SHARDS}", "03", f"{delay.MAX_SHARDS * 4 - 1}"])
def test_an_insert_on_a_shard_the_scheduler_does_not_read_is_refiled_onto_one_it_reads(world, pk_shard):
    # GIVEN the watermark at M, and an old producer's item due an hour later on a key the scheduler never queries
    world.watermark(MINUTE)
    odd = {**item(START + 3600), "pk": {"S": f"b#{MINUTE + 60}#{pk_shard}"}}
    recovery = _with_delay_table(world, odd)
    # WHEN its INSERT is processed
    report = recovery.process([world.insert(odd, START)])
    # THEN it is moved, same sort key, onto shard (its shard mod MAX_SHARDS) of its minute, and the odd key is gone
    moved = f"b#{MINUTE + 60}#{int(pk_shard) % delay.MAX_SHARDS}"
    assert report.refiled == 1 and world.sqs.sent == []
    assert set(world.dynamodb.tables["delay"]) == {(moved, odd["sk"]["S"])}


def test_an_insert_on_an_odd_key_in_a_passed_minute_is_sent_as_a_late_write(world):
    # GIVEN a scheduler past minute M, and an item due in M on a key it never queries
    world.minute(MINUTE, started_s=START - 840, finished_s=START - 800)
    world.watermark(MINUTE + 1)
    odd = {**item(START + 50), "pk": {"S": f"b#{MINUTE}#{delay.MAX_SHARDS + 3}"}}
    recovery = _with_delay_table(world, odd)
    world.now = START - 100
    # WHEN its INSERT is processed
    report = recovery.process([world.insert(odd, START - 100)])
    # THEN it is sent now, delayed to its due time
    assert report.late_writes == 1
    (sent,) = world.sqs.sent
    assert sent["visible_at"] == START + 50


def test_a_ttl_removal_on_an_odd_key_is_recovered_whatever_the_minute_records_say(world):
    # GIVEN minute M dispatched long ago, and an item of M on a shard the scheduler never read
    world.minute(MINUTE, started_s=START - 840, finished_s=START - 780)
    world.watermark(MINUTE + 500)
    odd = {**item(START + 30), "pk": {"S": f"b#{MINUTE}#{delay.MAX_SHARDS}"}}
    # WHEN the TTL deletes it
    world.now = START + 30 + delay.DISPATCHED_RETENTION_SECONDS + 5
    report = world.recovery().process([world.expire(odd, world.now)])
    # THEN it is sent
    assert report.recovered_from_ttl == 1 and len(world.sqs.sent) == 1


def test_a_message_key_naming_no_minute_is_dead_lettered_with_the_key_and_the_rule(world):
    # GIVEN an item under a key that starts like a message key but names no minute
    world.watermark(MINUTE)
    odd = {**item(START + 3600), "pk": {"S": "b#x#0"}}
    # WHEN its INSERT is processed
    report = world.recovery().process([world.insert(odd, START)])
    # THEN it is dead-lettered, the reason naming the key and what a key must be
    assert report.dead_lettered == 1 and world.sqs.sent == []
    (dead,) = world.sqs.dead_letters()
    reason = json.loads(dead["MessageAttributes"][FAILURE_ATTRIBUTE]["StringValue"])
    assert "pk 'b#x#0' names no minute and shard (b#<minute>#<shard>, whole numbers)" in reason["error_message"]


def test_a_due_ms_beyond_the_sort_keys_range_is_dead_lettered_and_the_batch_goes_on(world):
    # GIVEN an expired item whose due_ms time.gmtime cannot convert, then a good one
    world.watermark(MINUTE)
    huge = {**item(START), "due_ms": {"N": str(10**17)}}
    world.now = START + delay.DISPATCHED_RETENTION_SECONDS + 60
    records = [world.expire(huge, world.now), world.expire(item(START, "fine", "m-2"), world.now)]
    # WHEN processed
    report = world.recovery().process(records)
    # THEN the good one is sent and the odd one dead-lettered with the value and the rule
    assert (report.recovered_from_ttl, report.dead_lettered, report.failed_sequence_number) == (1, 1, None)
    (dead,) = world.sqs.dead_letters()
    reason = json.loads(dead["MessageAttributes"][FAILURE_ATTRIBUTE]["StringValue"])
    assert f"due_ms {10**17} is out of range: a due time is whole epoch milliseconds 0..9999999999999" in reason["error_message"]


class ParamCheckingSQS(SingleSendSQS):
    """SingleSendSQS whose client refuses, before sending, a batch holding the body ``bad`` (as botocore's checks do)."""

    def send_message_batch(self, QueueUrl, Entries):
        if any(entry["MessageBody"] == "bad" for entry in Entries):
            from botocore.exceptions import ParamValidationError
            raise ParamValidationError(report="Unknown parameter in MessageAttributes.n")
        return super().send_message_batch(QueueUrl, Entries)


def test_a_client_side_parameter_error_dead_letters_that_message_not_the_batch():
    # GIVEN two expired items in one batch, one of which the SQS client refuses before sending
    world = World(ParamCheckingSQS())
    world.watermark(MINUTE)
    world.now = START + delay.DISPATCHED_RETENTION_SECONDS + 60
    records = [world.expire(item(START, "bad", "m-1"), world.now), world.expire(item(START, "good", "m-2"), world.now)]
    # WHEN processed
    report = world.recovery().process(records)
    # THEN the good one is sent, the other dead-lettered with botocore's reason, and nothing is retried
    assert (report.recovered_from_ttl, report.dead_lettered, report.failed_sequence_number) == (1, 1, None)
    assert [e["MessageBody"] for e in world.sqs.sent] == ["good"]
    (dead,) = world.sqs.dead_letters()
    reason = json.loads(dead["MessageAttributes"][FAILURE_ATTRIBUTE]["StringValue"])
    assert "ParamValidationError: Parameter validation failed:\nUnknown parameter in MessageAttributes.n" in reason["error_message"]


def test_a_late_insert_due_long_after_its_pks_minute_is_refiled_into_its_due_minute(world):
    # GIVEN a scheduler past minute M, and an item filed under M but due ten days later
    world.minute(MINUTE, started_s=START - 840, finished_s=START - 800)
    world.watermark(MINUTE + 1)
    far = DelayedMessage("m-far", int((START + 10 * 86400) * 1000), "far", {PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/x"}}, 3)
    odd = {**far.to_item(), "pk": {"S": delay.bucket_key(MINUTE, 3)}}
    recovery = _with_delay_table(world, odd)
    # WHEN its INSERT is processed
    report = recovery.process([world.insert(odd, START - 100)])
    # THEN it is not sent (SQS would show it 10 days early) but moved into its due minute
    assert world.sqs.sent == [] and report.refiled == 1
    assert set(world.dynamodb.tables["delay"]) == {(far.key["pk"]["S"], far.key["sk"]["S"])}


def test_an_insert_behind_a_watermark_days_ahead_is_left_in_place_and_counted(world):
    # GIVEN a watermark ten days ahead of the clock
    world.watermark(MINUTE + 10 * 24 * 60)
    # WHEN a message due in an hour is stored
    report = world.recovery().process([world.insert(item(START + 3600), START)])
    # THEN it is not sent 59 minutes early, but left in place and counted
    assert world.sqs.sent == [] and report.watermark_ahead == 1


def test_an_insert_into_the_watermarks_minute_with_cursors_but_no_record_is_sent(world):
    # GIVEN the watermark at M with cursors (the scheduler has read M) but M's record gone
    world.watermark(MINUTE, {0: f"{int(START * 1000) + 5:013d}#m-0"})
    world.now = START - 700
    # WHEN a message due in M is stored
    report = world.recovery().process([world.insert(item(START + 10), START - 700)])
    # THEN it is sent: the scheduler may have passed its shard
    assert report.late_writes == 1


def test_the_tolerance_covers_a_query_that_does_not_yet_see_a_write_made_a_second_before(world):
    # GIVEN a minute first queried just past the old tolerance (skew and stream rounding) after an insert: an
    # eventually consistent Query may still have missed it
    inserted_at = START - 800.0
    world.minute(MINUTE, started_s=inserted_at + STREAM_TIME_RESOLUTION_SECONDS + delay.MAX_CLOCK_SKEW_SECONDS // 2 + 0.5)
    world.watermark(MINUTE)
    world.now = inserted_at + 40
    # WHEN the INSERT is processed
    report = world.recovery().process([world.insert(item(START + 10), inserted_at)])
    # THEN it is sent
    assert report.late_writes == 1 and CLOCK_TOLERANCE_SECONDS == 32


def test_only_the_watermarks_minute_record_is_read_consistently(world):
    # GIVEN expiries in two passed minutes and a late insert into the watermark's minute
    world.minute(MINUTE, started_s=START - 840, finished_s=START - 780)
    world.minute(MINUTE + 1, started_s=START - 780, finished_s=START - 720)
    world.minute(MINUTE + 2, started_s=START - 720)
    world.watermark(MINUTE + 2)
    world.now = START + delay.DISPATCHED_RETENTION_SECONDS + 200
    reads: list[tuple[str, bool]] = []
    world.dynamodb.fault = lambda op, params: reads.append((params["Key"]["pk"]["S"], params["ConsistentRead"])) if op == "GetItem" else None
    # WHEN a batch needs all three records
    world.recovery().process([world.expire(item(START + 5), world.now), world.expire(item(START + 65, message_id="m-2"), world.now),
                              world.insert(item(START + 130, message_id="m-3"), START - 900)])
    # THEN the watermark and its minute's record are consistent reads, the others eventually consistent
    assert reads == [(LAYOUT_KEY, True), (WATERMARK_KEY, True), (minute_key(MINUTE), False), (minute_key(MINUTE + 1), False),
                     (minute_key(MINUTE + 2), True)]


def test_without_a_watermark_an_insert_into_a_minute_the_scheduler_started_is_sent(world):
    # GIVEN no watermark (deleted: the scheduler restarts after its latest finished minute), and minute M started
    world.minute(MINUTE, started_s=START - 840, finished_s=START - 800)
    world.now = START - 100
    # WHEN a producer whose clock is behind stores a message due in M, and another due in a minute never started
    report = world.recovery().process([world.insert(item(START + 50), START - 100),
                                       world.insert(item(START + 3000, message_id="m-2"), START - 100)])
    # THEN the first is sent as a late write, the second left to the scheduler
    assert (report.late_writes, report.skipped) == (1, 1)
    assert [due_at(e) for e in world.sqs.sent] == ["2027-01-15T08:00:50.000Z"]


def test_a_refile_dynamodb_refuses_for_good_is_dead_lettered_and_the_batch_goes_on(world):
    # GIVEN an odd-key insert whose copy DynamoDB refuses for what it is, and a late write behind it in the batch
    world.watermark(MINUTE)
    odd = {**item(START + 3600), "pk": {"S": f"b#{MINUTE + 60}#{delay.MAX_SHARDS + 1}"}}
    recovery = _with_delay_table(world, odd)
    world.dynamodb.fault = lambda op, params: "ValidationException" if op == "PutItem" and params.get("TableName") == "delay" else None
    # WHEN its INSERT is processed
    report = recovery.process([world.insert(odd, START)])
    # THEN it is in the DLQ with the reason, the item stays where it is, and the batch does not stop there
    assert report.failed_sequence_number is None and report.refiled == 0
    (dead,) = world.sqs.dead_letters()
    assert "DynamoDB refused the copy" in json.dumps(dead)
    assert set(world.dynamodb.tables["delay"]) == {(odd["pk"]["S"], odd["sk"]["S"])}


# -- fanned out: each record is decided on its shard group's state -----------------------------------------------


def _layout(world: World, layout: Layout) -> None:
    world.dynamodb.put_item(TableName="state", Item=layout.item())


def _group_watermark(world: World, group: DispatchGroup, bucket: int, epoch: int) -> None:
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": group.watermark_key}, "bucket": {"N": str(bucket)},
                                                     "epoch": {"N": str(epoch)}})


def test_an_insert_is_decided_on_its_own_groups_watermark(world):
    # GIVEN two groups: group 1 (shard 3's) past minute M + 1, group 0 still at M
    _layout(world, Layout(2, 1, MINUTE - 5))
    _group_watermark(world, DispatchGroup(0, 2), MINUTE, 1)
    _group_watermark(world, DispatchGroup(1, 2), MINUTE + 2, 1)
    # WHEN a late write lands on shard 3 in minute M + 1, and another on shard 2 in the same minute
    on_2 = {**item(START + 70, message_id="m-2"), "pk": {"S": f"b#{MINUTE + 1}#2"}}
    report = world.recovery().process([world.insert(item(START + 70), START + 60), world.insert(on_2, START + 60)])
    # THEN shard 3's (group 1 passed its minute) is sent; shard 2's is left to group 0, which has not read it yet
    assert report.late_writes == 1 and report.skipped == 1
    assert [e["MessageBody"] for e in world.sqs.sent] == ["hello"]


def test_a_group_without_a_watermark_of_this_epoch_is_at_the_layouts_seed(world):
    # GIVEN G changed to 2 (epoch 1, seed M + 3); group 1 has only a watermark of an earlier epoch, far ahead
    _layout(world, Layout(2, 1, MINUTE + 3))
    _group_watermark(world, DispatchGroup(1, 2), MINUTE + 50, 0)
    # WHEN a late write lands on shard 3 in minute M + 1, behind the seed
    report = world.recovery().process([world.insert(item(START + 70), START + 60)])
    # THEN it is sent: the new group starts at the seed and never reads it
    assert report.late_writes == 1


def test_a_recovery_refile_goes_onto_a_shard_of_the_group_that_decided_it(world):
    # GIVEN four groups, all at M; an item due in M + 30 written on an unread shard (99: group 3 decides)
    _layout(world, Layout(4, 1, MINUTE))
    stray = {**item(START + 1800), "pk": {"S": f"b#{MINUTE}#99"}}
    # WHEN its insert is processed
    report = DelayRecovery("state", QUEUE, DLQ, sqs=world.sqs, dynamodb=world.dynamodb, clock=lambda: world.now,
                           sleep=lambda s: None, delay_table="delay")
    world.dynamodb.create_table("delay", "pk", "sk")
    world.dynamodb.put_item(TableName="delay", Item=stray)
    result = report.process([world.insert(stray, START)])
    # THEN it moved into its due minute on shard 3 (the item's shard, in group 3): a shard group 3 reads
    assert result.refiled == 1
    assert set(world.dynamodb.tables["delay"]) == {(f"b#{MINUTE + 30}#3", stray["sk"]["S"])}


def test_a_layout_changing_under_the_batch_is_read_again(world):
    # GIVEN a layout (one group, epoch 1) that changes between the batch's two reads of it, once
    world.watermark(MINUTE + 2)
    _layout(world, Layout(1, 1, MINUTE + 2))
    changes = iter([Layout(2, 2, MINUTE + 2)])

    def change_once(operation, params):
        if operation == "GetItem" and params["Key"]["pk"]["S"] == WATERMARK_KEY:
            layout = next(changes, None)
            if layout is not None:
                _layout(world, layout)
    world.dynamodb.fault = change_once
    # WHEN a late write behind the watermark is processed
    report = world.recovery().process([world.insert(item(START + 70), START + 60)])
    # THEN the state was read again under the new layout (group 1 of 2 at its seed), and the write sent
    assert report.late_writes == 1
    # (the layout, the watermark, minute M + 1's record, the layout; again with group 1 of 2's watermark and record)
    assert world.dynamodb.count("GetItem") == 8
