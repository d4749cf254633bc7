"""The Client against moto's SQS and DynamoDB, held to SQS's and DynamoDB's rules by the strict stand-ins."""

from __future__ import annotations

from datetime import datetime, timezone

import boto3
import pytest
from moto import mock_aws

from tests.support.strict_dynamodb import StrictDynamoDB
from tests.support.strict_sqs import StrictSQS
from worker_tier import Client, MessageError, SendError
from worker_tier.delays.dedupe import DEDUPE_MARKER_LEASE_SECONDS, DEDUPE_RETENTION_SECONDS
from worker_tier.delays.delay import new_message_id

REGION = "us-east-1"
NOW = 1_800_000_000.0


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def moto():
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        dynamodb = StrictDynamoDB(boto3.client("dynamodb", region_name=REGION))
        dynamodb.create_table(
            TableName="delay",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield sqs, dynamodb


def receive_all(sqs, url: str) -> list[dict]:
    messages = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get("Messages"):
        messages.extend(batch)
    return messages


@pytest.mark.parametrize("content_based", ["true", "false"])
def test_two_fifo_tasks_with_one_body_are_both_delivered(moto, content_based):
    # GIVEN a FIFO queue, with content-based deduplication on (a foreign setting) or off (the stack's)
    sqs, _ = moto
    url = sqs.create_queue(QueueName="work.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": content_based})["QueueUrl"]
    client = Client(url, sqs=StrictSQS(sqs), clock=Clock())
    # WHEN /resize and /thumbnail get the same body in the same group, within 5 minutes
    client.send("/resize", '{"key": "cat.jpg"}', group_id="g")
    client.send("/thumbnail", '{"key": "cat.jpg"}', group_id="g")
    # THEN both are delivered
    paths = [m["MessageAttributes"]["beanstalk.sqsd.path"]["StringValue"] for m in receive_all(sqs, url)]
    assert paths == ["/resize", "/thumbnail"]


def test_fifo_dedupe_key_still_deduplicates(moto):
    # GIVEN a FIFO queue as the stack makes it
    sqs, _ = moto
    url = sqs.create_queue(QueueName="work.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    client = Client(url, sqs=StrictSQS(sqs), clock=Clock())
    # WHEN the same dedupe_key is sent twice
    client.send("/x", "a", group_id="g", dedupe_key="k")
    client.send("/x", "b", group_id="g", dedupe_key="k")
    # THEN SQS delivers one
    assert [m["Body"] for m in receive_all(sqs, url)] == ["a"]


def test_a_delayed_message_is_checked_against_the_queues_own_maximum(moto):
    # GIVEN a standard queue of 4 KiB and a Client that was not told its size
    sqs, dynamodb = moto
    url = sqs.create_queue(QueueName="work", Attributes={"MaximumMessageSize": "4096"})["QueueUrl"]
    client = Client(url, "delay", sqs=sqs, dynamodb=dynamodb, clock=Clock())
    # WHEN a 5,000-byte message is sent for an hour from now
    with pytest.raises(MessageError) as error:
        client.send("/x", "a" * 5000, delay=3600)
    # THEN it is refused at send with the size the queue reported
    assert str(error.value) == (
        "message is 5075 bytes with its attributes with worker_tier.due_at (added at dispatch); "
        "the queue allows at most 4096 (MaximumMessageSize): set WORKER_TIER_PAYLOAD_BUCKET (or pass payload_bucket=) to send larger bodies through S3, or send a smaller body"
    )


def test_a_retried_send_at_with_a_dedupe_key_sends_once_as_the_time_approaches(moto):
    # GIVEN a standard queue, the delay table and a clock the test moves
    sqs, dynamodb = moto
    url = sqs.create_queue(QueueName="work")["QueueUrl"]
    clock = Clock()
    client = Client(url, "delay", sqs=StrictSQS(sqs, clock=clock), dynamodb=dynamodb, clock=clock)
    due = NOW + 3600
    at = datetime.fromtimestamp(due, tz=timezone.utc)
    # WHEN the same send is made 10 min and 10 s before due
    ids = []
    for before in (600, 10):
        clock.now = due - before
        ids.append(client.send("/report", "b", at=at, dedupe_key="report-1"))
    # THEN both return the key's id, one message is in SQS, and the marker says sent
    assert ids == [new_message_id("report-1")] * 2
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])["Attributes"] == {
        "ApproximateNumberOfMessagesDelayed": "1"
    }
    marker = dynamodb.get_item(TableName="delay", Key={"pk": {"S": "dedupe#report-1"}, "sk": {"S": "-"}})["Item"]
    assert marker["sent"] == {"BOOL": True}


class Killed(BaseException):
    """The producer's process dies inside SendMessageBatch."""


class Dying:
    def send_message_batch(self, **kwargs):
        raise Killed("process killed")


def test_a_key_whose_sender_died_is_retried_not_reported_sent(moto):
    # GIVEN a standard queue, and a producer killed after taking the key, before SQS got the message
    sqs, dynamodb = moto
    url = sqs.create_queue(QueueName="work")["QueueUrl"]
    clock = Clock()
    with pytest.raises(Killed):
        Client(url, "delay", sqs=Dying(), dynamodb=dynamodb, clock=clock).send("/x", "a", dedupe_key="k")
    client = Client(url, "delay", sqs=StrictSQS(sqs, clock=clock), dynamodb=dynamodb, clock=clock)
    # WHEN the send is retried 5 s later, then after the lease
    clock.now += 5
    with pytest.raises(SendError) as error:
        client.send("/x", "a", dedupe_key="k")
    clock.now += DEDUPE_MARKER_LEASE_SECONDS
    message_id = client.send("/x", "a", dedupe_key="k")
    # THEN the first retry is told to retry, and the second puts the one message in the queue
    assert error.value.code == "DedupeKeyInFlight"
    assert message_id == new_message_id("k")
    assert [m["Body"] for m in receive_all(sqs, url)] == ["a"]


def test_a_key_reused_after_its_retention_is_stored_when_delayed(moto):
    # GIVEN a key used for a message an hour out, and a clock past the key's retention (the TTL has not run)
    sqs, dynamodb = moto
    url = sqs.create_queue(QueueName="work")["QueueUrl"]
    clock = Clock()
    client = Client(url, "delay", sqs=StrictSQS(sqs, clock=clock), dynamodb=dynamodb, clock=clock)
    client.send("/x", "first", delay=3600, dedupe_key="weekly")
    clock.now += 3600 + DEDUPE_RETENTION_SECONDS + 3600
    # WHEN the key is used again for a message an hour out
    client.send("/x", "second", delay=3600, dedupe_key="weekly")
    # THEN both messages are in the delay table
    items = dynamodb.scan(TableName="delay")["Items"]
    assert sorted(item["body"]["S"] for item in items if item["pk"]["S"].startswith("b#")) == ["first", "second"]
