"""Delayed sends: the key layout, dedupe, the item size, what is reported stored, and every bad input."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.support.fake_dynamodb import FakeDynamoDB
from tests.support.fakes import FakeSQS
from tests.support.strict_dynamodb import ITEM_TOO_LARGE, StrictDynamoDB
from tests.support.strict_sqs import StrictSQS
from worker_tier import Client, MessageError, OutgoingMessage, SendError
from worker_tier.delays import delay
from worker_tier.delays.dedupe import DEDUPE_MARKER_LEASE_SECONDS, DEDUPE_RETENTION_SECONDS
from worker_tier.delays.delay import (
    BUCKET_SECONDS,
    DISPATCH_HORIZON_SECONDS,
    LONG_DELAY_THRESHOLD_SECONDS,
    MAX_CLOCK_SKEW_SECONDS,
    DelayedMessage,
    DelayStore,
    DelayStoreError,
    bucket_key,
    item_bytes,
    new_message_id,
    shard_of,
    sort_key,
)
from worker_tier.core.limits import DYNAMODB_MAX_ITEM_BYTES
from worker_tier.core.retry import BATCH_ENTRIES

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC, on a minute boundary
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"


@pytest.fixture
def dynamodb() -> FakeDynamoDB:
    fake = FakeDynamoDB()
    fake.create_table("delay", "pk", "sk")
    return fake


def client(dynamodb, sqs=None, queue=QUEUE, shards=8) -> Client:
    """A Client on the fake table, held to DynamoDB's limits by the strict stand-in."""
    return Client(queue, "delay", sqs=sqs or FakeSQS(), dynamodb=StrictDynamoDB(dynamodb), clock=lambda: NOW, sleep=lambda s: None, delay_shards=shards)


def items(dynamodb) -> list[dict]:
    return [v for k, v in dynamodb.tables["delay"].items() if not k[0].startswith("dedupe#")]


def test_key_layout_buckets_by_minute_with_shards_and_due_order():
    message = DelayedMessage("id-1", 1_800_003_661_250, "b", {}, shard=5)
    assert message.bucket == 30_000_061
    assert message.key == {"pk": {"S": "b#30000061#5"}, "sk": {"S": "1800003661250#id-1"}}
    assert bucket_key(7, 0) == "b#7#0"
    # zero-padded due times sort as text in time order
    assert sort_key(999_999_999_999, "z") < sort_key(1_000_000_000_000, "a")


def test_shards_spread_a_busy_minute_evenly():
    counts = [0] * 8
    for n in range(8000):
        counts[shard_of(f"message-{n}", 8)] += 1
    assert min(counts) > 900 and max(counts) < 1100


def test_long_delay_goes_to_the_table_short_one_to_sqs(dynamodb):
    sqs = FakeSQS()
    c = client(dynamodb, sqs)
    c.send("/x", "short", delay=900)
    message_id = c.send("/x", "long", delay=timedelta(days=3), attributes={"tenant": "acme"})
    assert [e["MessageBody"] for e in sqs.sent] == ["short"]
    [item] = items(dynamodb)
    stored = DelayedMessage.from_item(item)
    assert (stored.message_id, stored.body, stored.due_ms) == (message_id, "long", int((NOW + 3 * 86400) * 1000))
    assert stored.attributes == {
        "beanstalk.sqsd.path": {"DataType": "String", "StringValue": "/x"},
        "tenant": {"DataType": "String", "StringValue": "acme"},
    }
    # TTL: kept for troubleshooting some hours after due, deleted by DynamoDB for free
    assert int(item["expiration"]["N"]) == int(NOW) + 3 * 86400 + 6 * 3600


def test_at_in_the_past_is_sent_now(dynamodb):
    sqs = FakeSQS()
    client(dynamodb, sqs).send("/x", "b", at=datetime.fromtimestamp(NOW - 3600, tz=timezone.utc))
    assert "DelaySeconds" not in sqs.sent[0] and items(dynamodb) == []


def test_same_dedupe_key_twice_stores_one_message(dynamodb):
    c = client(dynamodb)
    first = c.send("/x", "b", delay=3600, dedupe_key="reminder-42")
    second = c.send("/x", "b", delay=3700, dedupe_key="reminder-42")
    assert first == second
    assert len(items(dynamodb)) == 1


def test_unprocessed_items_are_retried_until_written(dynamodb):
    # GIVEN DynamoDB leaves the first 3 requests of each of the first two calls unprocessed
    calls = [0]

    def unprocessed(requests):
        calls[0] += 1
        return requests[:3] if calls[0] <= 2 else []

    dynamodb.unprocessed = unprocessed
    results = client(dynamodb).send_batch([OutgoingMessage("/x", str(n), delay=2000) for n in range(30)])
    # THEN everything is stored and reported sent
    assert all(r.ok for r in results) and len(items(dynamodb)) == 30
    assert dynamodb.count("BatchWriteItem") == 4  # 25 + 5, then two retries of the held 3


def test_table_that_keeps_refusing_is_reported_per_message(dynamodb):
    dynamodb.unprocessed = lambda requests: requests[:1]
    results = client(dynamodb).send_batch([OutgoingMessage("/x", "a", delay=2000), OutgoingMessage("/x", "b", delay=10)])
    assert [r.ok for r in results] == [False, True]
    assert results[0].error == "delay table delay left 1 items unprocessed after 8 attempts"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"delay": 367 * 86400}, "a delay of 31708800 s is beyond the 31622400 s (366 days) maximum"),
        ({"delay": -5}, "delay must be a non-negative number of seconds or a timedelta, got -5"),
        ({"at": datetime(2030, 1, 1)}, "at must be a timezone-aware datetime"),
        ({"delay": 3600, "attributes": {f"a{i}": "v" for i in range(9)}}, "a delayed message may carry at most 8 attributes of its own (the path and worker_tier.due_at take two of SQS's 10), got 9"),
    ],
)
def test_bad_delayed_input(dynamodb, kwargs, message):
    with pytest.raises(MessageError) as error:
        client(dynamodb).send("/x", "b", **kwargs)
    assert str(error.value).startswith(f"{message}")


def test_delayed_body_over_dynamodbs_item_limit_is_refused(dynamodb):
    with pytest.raises(MessageError, match=r"this one needs 500\d\d\d: shorten its body or attributes by 91\d\d\d bytes"):
        client(dynamodb).send("/x", "a" * 500_000, delay=3600)


def test_long_delay_without_a_table_is_refused():
    with pytest.raises(MessageError, match=r"a delay of 3600 s is over SQS's 900 s maximum and needs the delay table"):
        Client(QUEUE, clock=lambda: NOW).send("/x", "b", delay=3600)


def test_fifo_long_delay_is_refused_not_sent_early(dynamodb):
    with pytest.raises(MessageError, match=r"a delay of 3600 s needs the delay table, which does not serve FIFO queues yet"):
        client(dynamodb, queue=QUEUE + ".fifo").send("/x", "b", delay=3600, group_id="g")


@pytest.mark.parametrize("skew", [-30, -15, 0, 15, 30])
@pytest.mark.parametrize("offset", [0.0, 0.001, 17.5, 59.999])
def test_producer_cannot_write_into_a_minute_the_scheduler_may_have_dispatched(skew, offset):
    # The invariant: the scheduler dispatches minute b once b has ended by now + horizon (its clock);
    # the producer stores only messages due more than 900 s after its clock. Clocks differ by at most
    # MAX_CLOCK_SKEW_SECONDS in total (producer +/-30 s, scheduler +/-30 s).
    real = NOW + offset
    scheduler_clock = real - skew
    producer_clock = real + skew
    last_dispatchable = (scheduler_clock + DISPATCH_HORIZON_SECONDS) // BUCKET_SECONDS - 1
    earliest_stored_due = producer_clock + LONG_DELAY_THRESHOLD_SECONDS + 0.001
    assert earliest_stored_due // BUCKET_SECONDS > last_dispatchable
    assert 2 * abs(skew) <= MAX_CLOCK_SKEW_SECONDS


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def moving_client(dynamodb, clock, sqs=None) -> Client:
    return Client(QUEUE, "delay", sqs=sqs or StrictSQS(FakeSQS()), dynamodb=dynamodb, clock=clock, sleep=lambda s: None)


class Killed(BaseException):
    """The producer's process dies inside SendMessageBatch."""


class DyingSQS(FakeSQS):
    def send_message_batch(self, **kwargs):
        raise Killed("process killed")


# -- a delayed send with a dedupe key follows the one claim rule -----------------------------------------


def test_a_key_reused_after_its_retention_is_stored_again_when_delayed(dynamodb):
    # GIVEN a key used for a message an hour out, and a clock past that key's retention (DynamoDB's TTL has not run)
    clock = Clock()
    c = moving_client(dynamodb, clock)
    c.send("/x", "first", delay=3600, dedupe_key="weekly-report")
    clock.now += 3600 + DEDUPE_RETENTION_SECONDS + 3600
    # WHEN the key is used again for a message an hour out
    message_id = c.send("/x", "second", delay=3600, dedupe_key="weekly-report")
    # THEN the second message is stored, under the key's id, and the marker is renewed
    assert sorted(item["body"]["S"] for item in items(dynamodb)) == ["first", "second"]
    assert message_id == new_message_id("weekly-report")
    marker = dynamodb.tables["delay"][("dedupe#weekly-report", "-")]
    assert marker["expiration"] == {"N": str(int(clock.now) + 3600 + DEDUPE_RETENTION_SECONDS)}


def test_a_key_whose_short_delay_sender_died_is_stored_by_a_long_delay_retry_after_the_lease(dynamodb):
    # GIVEN a producer killed after taking the key for a 10 s delay
    clock = Clock()
    with pytest.raises(Killed):
        moving_client(dynamodb, clock, sqs=DyingSQS()).send("/x", "m", delay=10, dedupe_key="k")
    # WHEN the key is sent with a one-hour delay within the lease, then after it
    clock.now += 5
    with pytest.raises(SendError) as within:
        moving_client(dynamodb, clock).send("/x", "m", delay=3600, dedupe_key="k")
    stored_within = len(items(dynamodb))
    clock.now += DEDUPE_MARKER_LEASE_SECONDS
    message_id = moving_client(dynamodb, clock).send("/x", "m", delay=3600, dedupe_key="k")
    # THEN the first is told to retry and stores nothing; the second is stored
    assert within.value.code == "DedupeKeyInFlight" and stored_within == 0
    assert message_id == new_message_id("k") and len(items(dynamodb)) == 1


def test_a_direct_send_after_a_delayed_one_with_the_key_is_deduplicated(dynamodb):
    # GIVEN a key stored with a message an hour out
    sqs = StrictSQS(FakeSQS())
    c = moving_client(dynamodb, Clock(), sqs=sqs)
    first = c.send("/x", "b", delay=3600, dedupe_key="k")
    # WHEN it is sent again now, straight to SQS
    again = c.send("/x", "b", dedupe_key="k")
    # THEN nothing more is sent or stored, and both sends have the key's id
    assert first == again == new_message_id("k")
    assert sqs.sent == [] and len(items(dynamodb)) == 1


# -- the item size is what DynamoDB counts ---------------------------------------------------------------


def test_item_bytes_counts_as_dynamodb_does():
    # GIVEN an item of each value type the delay table uses
    item = {"pk": {"S": "中a"}, "n": {"N": "-0012.500"}, "blob": {"B": b"\x00\x01\x02"}, "sent": {"BOOL": True}}
    # WHEN it is measured
    size = item_bytes(item)
    # THEN names and strings count UTF-8 bytes, binary its length; the number 12.5 is 1 byte, its digit pairs 12 and 5-,
    # and 1 for the sign
    assert size == (2 + 4) + (1 + 4) + (4 + 3) + (4 + 1)


@pytest.mark.parametrize(("number", "size"), [
    ("1800003600000", 6),  # 13 integer digits: 01 80 00 03 6- (trailing zeros trimmed)
    ("180000360000", 5),  # 12: 18 00 00 36
    ("7", 2), ("10", 2), ("100", 2), ("0.05", 2), ("0.5", 2), ("123.45", 4), ("-1", 3), ("0", 1),
])
def test_a_number_counts_its_digits_in_pairs_aligned_on_the_decimal_point(number, size):
    # GIVEN a number attribute (named "n")
    # WHEN it is measured
    # THEN its value is 1 byte plus one per pair of digits, pairs aligned on the decimal point, plus 1 if negative
    assert item_bytes({"n": {"N": number}}) == 1 + size


def test_a_delayed_body_dynamodb_stores_is_not_refused(dynamodb):
    # GIVEN 120,000 CJK characters: 360,000 bytes of UTF-8, 720,000 as ASCII-escaped JSON
    body = "中" * 120_000
    # WHEN it is sent for an hour from now
    client(dynamodb).send("/x", body, delay=3600)
    # THEN it is stored
    assert [item["body"]["S"] for item in items(dynamodb)] == [body]


def test_a_delayed_item_one_byte_over_worker_tiers_item_limit_is_refused(dynamodb):
    # GIVEN the largest body whose item fits DynamoDB's 400 KB less Worker Tier's margin
    empty = DelayedMessage("0" * 36, int((NOW + 3600) * 1000), "", {"beanstalk.sqsd.path": {"DataType": "String", "StringValue": "/x"}}, 0)
    fits = delay.MAX_ITEM_BYTES - item_bytes(empty.to_item())
    c = client(dynamodb)
    # WHEN it is sent, and one a byte longer
    c.send("/x", "a" * fits, delay=3600)
    with pytest.raises(MessageError) as error:
        c.send("/x", "a" * (fits + 1), delay=3600)
    # THEN the first is stored and the second refused with its size, the rule and the fix
    assert len(items(dynamodb)) == 1
    assert delay.MAX_ITEM_BYTES == DYNAMODB_MAX_ITEM_BYTES - delay.ITEM_SIZE_MARGIN_BYTES
    assert str(error.value) == (
        f"a delayed message is stored as one DynamoDB item, which Worker Tier keeps to {delay.MAX_ITEM_BYTES} "
        f"bytes (DynamoDB's {DYNAMODB_MAX_ITEM_BYTES} less a {delay.ITEM_SIZE_MARGIN_BYTES}-byte margin); this one needs "
        f"{delay.MAX_ITEM_BYTES + 1}: shorten its body or attributes by 1 bytes, or set WORKER_TIER_PAYLOAD_BUCKET (or pass payload_bucket=) to send larger bodies through S3"
    )


def test_a_delayed_message_at_dynamodbs_exact_limit_fails_at_send_alone_not_with_its_24_batch_mates(dynamodb):
    # GIVEN 24 small delayed messages and one whose item is 409,601 bytes, one byte over DynamoDB's limit,
    # which a count of "half the significant digits plus one" called exactly 400 KB (due_ms has 13 integer digits)
    empty = DelayedMessage("0" * 36, int((NOW + 3600) * 1000), "", {"beanstalk.sqsd.path": {"DataType": "String", "StringValue": "/x"}}, 0)
    edge = "a" * (DYNAMODB_MAX_ITEM_BYTES + 1 - item_bytes(empty.to_item()))
    batch = [OutgoingMessage("/x", f"m{i}", delay=3600) for i in range(24)] + [OutgoingMessage("/x", edge, delay=3600)]
    # WHEN the 25 are sent in one batch
    results = client(dynamodb).send_batch(batch)
    # THEN the one fails before it is written, by its check; DynamoDB never refuses the 24 with it
    assert all(r.ok for r in results[:24]) and not results[24].ok
    assert results[24].error.startswith(f"a delayed message is stored as one DynamoDB item, which Worker Tier keeps to "
                                        f"{delay.MAX_ITEM_BYTES} bytes")
    assert len(items(dynamodb)) == 24


def test_an_item_dynamodb_refuses_fails_only_itself_not_its_batch_mates(dynamodb):
    # GIVEN three plain delayed messages, the middle one over DynamoDB's 400 KB (written by a store that did not check it)
    due = int((NOW + 3600) * 1000)
    messages = [DelayedMessage(f"id-{i}", due, "a" * (500_000 if i == 1 else 1), {}, 0) for i in range(3)]
    strict = StrictDynamoDB(dynamodb)
    # WHEN they are stored together
    with pytest.raises(DelayStoreError) as error:
        DelayStore("delay", strict, sleep=lambda s: None).put_many(messages)
    # THEN DynamoDB's refusal names only the big one, and the other two are stored
    assert error.value.failures == {"id-1": ("ValidationException", f"delay table delay did not store it: An error occurred "
                                             f"(ValidationException) when calling the BatchWriteItem operation: {ITEM_TOO_LARGE}")}
    assert sorted(item["id"]["S"] for item in items(dynamodb)) == ["id-0", "id-2"]


# -- each delayed message is reported as it truly went -----------------------------------------------------


def test_a_failed_transaction_fails_only_its_own_message(dynamodb):
    # GIVEN DynamoDB throttles the second TransactWriteItems call
    transactions = [0]

    def throttle_second(operation, params):
        if operation == "TransactWriteItems":
            transactions[0] += 1
            return "ThrottlingException" if transactions[0] == 2 else None
        return None

    dynamodb.fault = throttle_second
    # WHEN two keyed delayed messages and a plain one are sent in one batch
    results = client(dynamodb).send_batch(
        [OutgoingMessage("/x", "a", delay=3600, dedupe_key="k1"), OutgoingMessage("/x", "b", delay=3600, dedupe_key="k2"), OutgoingMessage("/x", "c", delay=3600)]
    )
    # THEN the stored ones are ok and only the throttled one is an error
    assert [(r.ok, r.code) for r in results] == [(True, None), (False, "ThrottlingException"), (True, None)]
    assert results[1].error.startswith("delay table delay did not store it: An error occurred (ThrottlingException)")
    assert sorted(item["body"]["S"] for item in items(dynamodb)) == ["a", "c"]


def test_a_batch_write_that_fails_after_a_partial_write_reports_only_what_was_not_stored(dynamodb):
    # GIVEN BatchWriteItem leaves 5 of 25 unprocessed, then its retry is throttled
    writes = [0]

    def throttle_retry(operation, params):
        if operation == "BatchWriteItem":
            writes[0] += 1
            return "ProvisionedThroughputExceededException" if writes[0] == 2 else None
        return None

    dynamodb.fault = throttle_retry
    dynamodb.unprocessed = lambda requests: requests[:5] if writes[0] == 1 else []
    batch = [OutgoingMessage("/x", f"m{i}", delay=3600) for i in range(25)]
    # WHEN the 25 are sent, and the caller re-sends those reported as errors
    results = client(dynamodb).send_batch(batch)
    failed = [batch[r.index] for r in results if not r.ok]
    dynamodb.fault = lambda operation, params: None
    client(dynamodb).send_batch(failed)
    # THEN 20 are reported ok and 5 not, and after the caller's retry each message is stored exactly once
    assert [r.code for r in results].count("ProvisionedThroughputExceededException") == 5 and sum(r.ok for r in results) == 20
    assert sorted(item["body"]["S"] for item in items(dynamodb)) == sorted(f"m{i}" for i in range(25))


def test_put_many_names_only_the_messages_it_did_not_store(dynamodb):
    # GIVEN a table that keeps one request of every call unprocessed
    dynamodb.unprocessed = lambda requests: requests[:1]
    messages = [DelayedMessage(f"id-{i}", int((NOW + 3600) * 1000), "b", {}, 0) for i in range(3)]
    waits: list[float] = []
    # WHEN three messages are stored
    with pytest.raises(DelayStoreError) as error:
        DelayStore("delay", dynamodb, sleep=waits.append).put_many(messages)
    # THEN the error names the one left unprocessed, with its code and reason
    reason = f"delay table delay left 1 items unprocessed after {BATCH_ENTRIES.attempts} attempts"
    assert error.value.failures == {"id-0": ("UnprocessedItems", reason)}
    assert str(error.value) == "delay table delay did not store 1 of 3 messages"
    assert len(items(dynamodb)) == 2
    # AND the writes backed off by the batch budget, pausing only between attempts
    assert waits == [BATCH_ENTRIES.pause(n) for n in range(BATCH_ENTRIES.attempts - 1)]


def test_put_many_writes_at_most_25_items_per_batch_call(dynamodb):
    # GIVEN 60 plain delayed messages
    messages = [DelayedMessage(f"id-{i}", int((NOW + 3600) * 1000), "b", {}, 0) for i in range(60)]
    sizes: list[int] = []
    dynamodb.fault = lambda operation, params: sizes.append(len(params["RequestItems"]["delay"])) if operation == "BatchWriteItem" else None
    # WHEN they are stored
    DelayStore("delay", dynamodb, sleep=lambda s: None).put_many(messages)
    # THEN they went in BatchWriteItem calls of 25, 25 and 10, and all are stored
    assert sizes == [25, 25, 10]
    assert len(items(dynamodb)) == 60


def test_a_keyed_message_without_a_keyed_write_is_refused_before_anything_is_stored(dynamodb):
    # GIVEN a plain message and a keyed one, and a store without keyed_write
    messages = [DelayedMessage("id-0", int((NOW + 3600) * 1000), "b", {}), DelayedMessage("id-1", int((NOW + 3600) * 1000), "b", {}, dedupe_key="k")]
    # WHEN they are stored
    with pytest.raises(ValueError) as error:
        DelayStore("delay", dynamodb).put_many(messages)
    # THEN the error names the message and what the store needs, and nothing was written
    assert str(error.value) == (
        "message id-1 has dedupe_key 'k', which needs its marker written with it; "
        "give the DelayStore keyed_write (worker_tier.delays.dedupe.DedupeMarkers.store_delayed)"
    )
    assert dynamodb.tables["delay"] == {}


# -- the item reader shared by the scheduler and the safety net ----------


@pytest.mark.parametrize("pk, parsed, scheduled", [
    ("b#30000016#3", (30000016, 3), True),
    ("b#30000016#03", (30000016, 3), False),
    (f"b#30000016#{delay.MAX_SHARDS}", (30000016, delay.MAX_SHARDS), False),
    ("b#30000016#-1", (30000016, -1), False),
    ("b#x#0", None, False),
    ("b#1#2#3", None, False),
])
def test_only_exact_keys_of_readable_shards_are_the_schedulers(pk, parsed, scheduled):
    # WHEN a pk is parsed  THEN it names its minute and shard however spelled, but the scheduler reads only exact ones
    assert (delay.parse_bucket_key(pk), delay.is_scheduled_key(pk)) == (parsed, scheduled)


@pytest.mark.parametrize("change, problem", [
    ({"due_ms": {"N": "-1"}}, "due_ms -1 is out of range: a due time is whole epoch milliseconds 0..9999999999999"),
    ({"due_ms": {"N": str(10**13)}}, f"due_ms {10**13} is out of range"),
    ({"attributes": {"S": '{"n": {"DataType": "String", "StringValue": 5}}'}},
     "attribute 'n' is {'DataType': 'String', 'StringValue': 5}; an SQS message attribute has exactly DataType"),
    ({"attributes": {"S": '{"n": {"DataType": "String"}}'}}, "attribute 'n' is {'DataType': 'String'}; an SQS"),
    ({"attributes": {"S": "[]"}}, "AttributeError: 'list' object has no attribute 'items' (a message item has id, due_ms"),
])
def test_an_item_not_in_the_shape_sqs_takes_is_unreadable_with_the_value_and_the_rule(change, problem):
    # GIVEN a stored message changed by hand
    item = {**delay.DelayedMessage("m-1", 1_800_000_900_000, "hi", {}).to_item(), **change}
    # WHEN it is read  THEN UnreadableItemError names the value and the rule
    with pytest.raises(delay.UnreadableItemError) as raised:
        delay.read_item(item)
    assert str(raised.value).startswith(problem)
