"""Delayed sends: the key layout, dedupe, UnprocessedItems, and every bad input."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.fake_dynamodb import FakeDynamoDB
from tests.fakes import FakeSQS
from worker_tier import Client, MessageError, OutgoingMessage
from worker_tier.delay import (
    BUCKET_SECONDS,
    DISPATCH_HORIZON_SECONDS,
    LONG_DELAY_THRESHOLD_SECONDS,
    MAX_CLOCK_SKEW_SECONDS,
    DelayedMessage,
    bucket_key,
    shard_of,
    sort_key,
)

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC, on a minute boundary
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"


@pytest.fixture
def dynamodb() -> FakeDynamoDB:
    fake = FakeDynamoDB()
    fake.create_table("delay", "pk", "sk")
    return fake


def client(dynamodb, sqs=None, queue=QUEUE, shards=8) -> Client:
    return Client(queue, "delay", sqs=sqs or FakeSQS(), dynamodb=dynamodb, clock=lambda: NOW, sleep=lambda s: None, delay_shards=shards)


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
    assert str(error.value).startswith(f"message 0 for '/x': {message}")


def test_delayed_body_over_dynamodbs_item_limit_is_refused(dynamodb):
    with pytest.raises(MessageError, match=r"stored as a DynamoDB item of at most 409600 bytes; this one needs 500\d\d\d$"):
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
