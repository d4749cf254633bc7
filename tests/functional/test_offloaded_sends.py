"""Producers offload large bodies to the payload bucket in AWS's SQS Extended Client format (docs/large-payloads.md).

Sends straight to SQS run on moto in the stack's world (``aws``, enforced IAM) with the payload bucket ``payloads``;
delayed sends run the delay dispatcher as its own tests do (``tests.support.dispatcher``), with S3 on moto.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from moto import mock_aws

from tests.support import extended_client
from tests.support import dispatcher as support
from tests.support.dispatcher import QUEUE
from worker_tier import Client, MessageError, OutgoingMessage
from worker_tier.core import contract, observability
from worker_tier.delays.delay import BUCKET_SECONDS
from worker_tier.periodic.ticks import Tick, TickEnqueuer, TickNotEnqueuedError
from worker_tier.producer.client import OUTCOME_UNKNOWN_CODE

BUCKET = "payloads"
REGION = "us-east-1"
MB = 1_000_000
DAY = 24 * 3600
POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"


class S3Calls:
    """A moto S3 client whose calls are counted by operation name."""

    def __init__(self) -> None:
        self.client = boto3.client("s3", region_name=REGION)
        self.calls: list[str] = []
        self.client.meta.events.register("provide-client-params.s3.*", self._record)

    def _record(self, params, model, **_):
        self.calls.append(model.name)

    def keys(self, prefix: str = "") -> list[str]:
        listed = self.client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
        return sorted(o["Key"] for o in listed)

    def body(self, key: str) -> str:
        return self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode("utf-8")


@pytest.fixture
def s3(aws):
    """The payload bucket beside the stack's world."""
    calls = S3Calls()
    calls.client.create_bucket(Bucket=BUCKET)
    calls.calls.clear()
    return calls


def delay_table(dynamodb) -> str:
    dynamodb.create_table(
        TableName="delay",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return "delay"


def received(aws) -> list[dict]:
    messages = []
    while batch := aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get("Messages"):
        messages.extend(batch)
    return messages


def pointer_key(body: str) -> str:
    kind, details = json.loads(body)
    assert kind == POINTER_CLASS and details["s3BucketName"] == BUCKET
    return details["s3Key"]


def size_of(attributes: dict) -> int:
    value = attributes[contract.PAYLOAD_SIZE_ATTRIBUTE]
    assert value["DataType"] == "Number"
    return int(value["StringValue"])


def test_a_5_mb_body_is_sent_as_a_pointer_whose_object_holds_it(aws, s3):
    # GIVEN a Client with the payload bucket, on a queue of SQS's 1 MiB
    client = Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client)
    body = "é" + "a" * (5 * MB)
    # WHEN a 5 MB body is sent
    client.send("/big", body)
    # THEN the queue holds the Extended Client's pointer and the body's UTF-8 size; the object under payloads/ holds it
    [message] = received(aws)
    key = pointer_key(message["Body"])
    assert key.startswith("payloads/") and not key.startswith("payloads/delayed/")
    assert size_of(message["MessageAttributes"]) == len(body.encode("utf-8"))
    assert message["MessageAttributes"]["beanstalk.sqsd.path"]["StringValue"] == "/big"
    assert s3.body(key) == body


def test_payload_threshold_offloads_smaller_messages_and_a_message_that_fits_makes_no_s3_call(aws, s3):
    # GIVEN a Client that offloads anything over 2,000 bytes, and one with no threshold
    low = Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client, payload_threshold=2000)
    plain = Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client)
    # WHEN each sends a 3,000-byte body
    low.send("/x", "a" * 3000)
    plain.send("/x", "b" * 3000)
    # THEN the first goes to S3, the second travels in SQS as it is, with one PutObject call in all
    assert s3.calls == ["PutObject"]
    bodies = sorted(m["Body"] for m in received(aws))
    assert bodies[1] == "b" * 3000 and s3.body(pointer_key(bodies[0])) == "a" * 3000


def test_a_body_over_payload_max_bytes_is_refused_with_no_upload(aws, s3):
    # GIVEN a Client whose payload_max_bytes is 2 MB
    client = Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client, payload_max_bytes=2 * MB)
    # WHEN a 3 MB body is sent
    with pytest.raises(MessageError) as error:
        client.send("/x", "a" * (3 * MB))
    # THEN it is refused naming its size, the setting and the fix; nothing reached S3 or SQS
    assert str(error.value) == (
        "body is 3000000 bytes, over payload_max_bytes 2000000 (the largest body offloaded to S3, which a worker holds "
        "in memory); send a smaller body, or raise payload_max_bytes (WORKER_TIER_PAYLOAD_MAX_BYTES) with the worker's memory"
    )
    assert s3.calls == [] and received(aws) == []


def test_a_batch_of_mixed_sizes_offloads_only_the_large_ones(aws, s3):
    # GIVEN a batch of two small and two large bodies
    client = Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client)
    bodies = ["small-1", "x" * (2 * MB), "small-2", "y" * (3 * MB)]
    # WHEN it is sent
    results = client.send_batch([OutgoingMessage(f"/m{i}", b) for i, b in enumerate(bodies)])
    # THEN all four are sent; the large two as pointers to objects holding them, the small two as they are
    assert all(r.ok for r in results)
    by_path = {m["MessageAttributes"]["beanstalk.sqsd.path"]["StringValue"]: m for m in received(aws)}
    assert by_path["/m0"]["Body"] == "small-1" and by_path["/m2"]["Body"] == "small-2"
    assert contract.PAYLOAD_SIZE_ATTRIBUTE not in by_path["/m0"]["MessageAttributes"]
    assert s3.body(pointer_key(by_path["/m1"]["Body"])) == bodies[1]
    assert s3.body(pointer_key(by_path["/m3"]["Body"])) == bodies[3]
    assert len(s3.keys("payloads/")) == 2


class RefusingSQS:
    """moto's SQS, but SendMessageBatch refuses every entry as the sender's fault, or raises ``error``."""

    def __init__(self, sqs, error: BaseException | None = None) -> None:
        self._sqs, self._error = sqs, error

    def __getattr__(self, name):
        return getattr(self._sqs, name)

    def send_message_batch(self, QueueUrl, Entries):
        if self._error is not None:
            raise self._error
        return {"Failed": [{"Id": e["Id"], "Code": "InvalidParameterValue", "SenderFault": True,
                            "Message": "refused"} for e in Entries]}


def test_an_object_whose_message_sqs_refused_is_deleted_and_counted_as_an_orphan(aws, s3, caplog):
    # GIVEN a queue that refuses the entry
    client = Client(aws.queue_url, sqs=RefusingSQS(aws.sqs), payload_bucket=BUCKET, s3=s3.client)
    # WHEN a 2 MB body is sent
    with caplog.at_level(logging.WARNING):
        [result] = client.send_batch([OutgoingMessage("/x", "a" * (2 * MB))])
    # THEN the send failed, its uploaded object is gone, and the orphan is counted and logged by its key
    assert (result.ok, result.code) == (False, "InvalidParameterValue")
    assert s3.calls == ["PutObject", "DeleteObject"] and s3.keys() == []
    assert client.payload_orphans == 1
    assert "deleting the payload s3://payloads/payloads/" in caplog.text and "InvalidParameterValue" in caplog.text


def test_an_object_whose_sends_outcome_is_unknown_is_kept(aws, s3):
    # GIVEN a queue whose answer is lost (SQS may have the message)
    lost = ReadTimeoutError(endpoint_url=aws.queue_url)
    client = Client(aws.queue_url, sqs=RefusingSQS(aws.sqs, lost), payload_bucket=BUCKET, s3=s3.client)
    # WHEN a 2 MB body is sent
    [result] = client.send_batch([OutgoingMessage("/x", "a" * (2 * MB))])
    # THEN the outcome is unknown and the object stays for the message SQS may hold
    assert result.code == OUTCOME_UNKNOWN_CODE
    assert len(s3.keys("payloads/")) == 1 and client.payload_orphans == 0


def test_a_resend_deduplicated_by_an_earlier_send_deletes_its_own_upload(aws, s3):
    # GIVEN a standard queue with the delay table keeping dedupe keys
    client = Client(aws.queue_url, delay_table(aws.dynamodb), sqs=aws.sqs, dynamodb=aws.dynamodb, payload_bucket=BUCKET,
                    s3=s3.client)
    # WHEN one 2 MB body is sent twice with one dedupe_key
    first = client.send("/x", "a" * (2 * MB), dedupe_key="report-1")
    second = client.send("/x", "a" * (2 * MB), dedupe_key="report-1")
    # THEN one message is sent, the second send returns its id, and only the first's object is left
    [message] = received(aws)
    assert first == second
    assert s3.keys() == [pointer_key(message["Body"])]
    assert client.payload_orphans == 1


def test_a_crash_between_upload_and_send_leaves_one_object_and_no_message(aws, s3):
    # GIVEN a process that dies inside SendMessageBatch (a BaseException: no handler runs)
    class Crash(BaseException):
        pass

    client = Client(aws.queue_url, sqs=RefusingSQS(aws.sqs, Crash()), payload_bucket=BUCKET, s3=s3.client)
    # WHEN a 2 MB body is sent
    with pytest.raises(Crash):
        client.send("/x", "a" * (2 * MB))
    # THEN exactly one object is left under payloads/ for the lifecycle rule, and no message
    assert len(s3.keys("payloads/")) == 1 and received(aws) == []
    assert client.payload_orphans == 0


def test_users_may_not_set_the_size_attribute(aws, s3):
    # GIVEN a Client  WHEN a message names the Extended Client's size attribute, new or legacy
    client = Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client)
    for name in ("ExtendedPayloadSize", "SQSLargePayloadSize"):
        with pytest.raises(MessageError) as error:
            client.send("/x", "small", attributes={name: 5})
        # THEN it is refused naming the rule
        assert str(error.value) == (
            f"attribute name {name!r} is reserved: it marks the body as an S3 pointer (AWS's SQS Extended Client "
            "format), and the Client sets it when it offloads a large body (payload_bucket); rename it"
        )
    assert s3.calls == [] and received(aws) == []


def test_a_pointer_passed_on_by_the_worker_is_never_offloaded_again(aws, s3):
    # GIVEN the pointer of a body already in the bucket, as a worker re-sends a retry (threshold 0 would not matter)
    client = Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client, payload_threshold=100)
    pointer_body = json.dumps([POINTER_CLASS, {"s3BucketName": BUCKET, "s3Key": "payloads/already-there"}])
    # WHEN it is sent with its size attribute as an internal attribute
    [result] = client.send_batch([OutgoingMessage("/x", pointer_body)],
                                 _internal_attributes={0: {contract.PAYLOAD_SIZE_ATTRIBUTE: "5000000"}})
    # THEN it goes out as it is, the size a Number, with no S3 call
    [message] = received(aws)
    assert result.ok and message["Body"] == pointer_body
    assert size_of(message["MessageAttributes"]) == 5 * MB
    assert s3.calls == []


def test_offloading_needs_an_attribute_for_the_size(aws, s3):
    # GIVEN a message with 9 attributes of its own (the path makes 10, SQS's most)
    client = Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client)
    attributes = {f"a{i}": "v" for i in range(9)}
    # WHEN its body is too large for the queue
    with pytest.raises(MessageError) as error:
        client.send("/x", "a" * (2 * MB), attributes=attributes)
    # THEN it is refused before any upload, naming the attribute it would need
    assert str(error.value) == (
        "the body goes to S3 and the message carries ExtendedPayloadSize, one of SQS's 10 attributes, but it already "
        "has 10 (its own, the path); drop one of its attributes"
    )
    assert s3.calls == []




def test_a_message_our_client_offloads_is_read_by_aws_extended_client(aws, s3):
    # GIVEN AWS's Python Extended Client on the same queue and bucket, deleting objects with their messages
    reader = extended_client.session(region_name=REGION).client("sqs")
    reader.large_payload_support = BUCKET
    reader.s3_client = s3.client
    reader.delete_payload_from_s3 = True
    body = "z" * (3 * MB)
    # WHEN our Client sends a 3 MB body and the Extended Client receives it
    Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client).send("/x", body)
    [message] = reader.receive_message(QueueUrl=aws.queue_url, MessageAttributeNames=["All"])["Messages"]
    # THEN it gets the real body, with our path attribute; deleting the message deletes its object too
    assert message["Body"] == body
    assert message["MessageAttributes"]["beanstalk.sqsd.path"]["StringValue"] == "/x"
    reader.delete_message(QueueUrl=aws.queue_url, ReceiptHandle=message["ReceiptHandle"])
    assert s3.keys() == [] and received(aws) == []


def test_a_message_aws_extended_client_offloads_is_never_offloaded_again_when_passed_on(aws, s3):
    # GIVEN a message AWS's Extended Client sent through the bucket (the worker gets such messages and may re-send them)
    writer = extended_client.session(region_name=REGION).client("sqs")
    writer.large_payload_support = BUCKET
    writer.s3_client = s3.client
    writer.send_message(QueueUrl=aws.queue_url, MessageBody="w" * 300_000,
                        MessageAttributes={"beanstalk.sqsd.path": {"DataType": "String", "StringValue": "/x"}})
    [message] = received(aws)
    assert message["MessageAttributes"][contract.PAYLOAD_SIZE_ATTRIBUTE]["StringValue"] == "300000"
    # THEN its pointer is one our reading and our Client take: passed on as it is, with no upload
    s3.calls.clear()
    client = Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client)
    [result] = client.send_batch([OutgoingMessage("/x", message["Body"])],
                                 _internal_attributes={0: {contract.PAYLOAD_SIZE_ATTRIBUTE: "300000"}})
    assert result.ok and s3.calls == []
    [again] = received(aws)
    assert s3.body(pointer_key(again["Body"])) == "w" * 300_000


# ------------------------------------------------------------------------------------------ delayed, on the dispatcher


@pytest.fixture
def delayed():
    """The delay dispatcher's world (in-memory DynamoDB and SQS) with the payload bucket on moto, and a Client using it."""
    with mock_aws():
        s3 = S3Calls()
        s3.client.create_bucket(Bucket=BUCKET)
        world = support.World(state_table="state")
        world.client = Client(QUEUE, "delay", sqs=world.sqs, dynamodb=world.dynamodb, clock=lambda: world.now,
                              sleep=lambda s: None, state_table="state", payload_bucket=BUCKET, s3=s3.client)
        yield world, s3


def run_until(world, seconds: float) -> None:
    end = world.now + seconds
    while world.now < end:
        world.scheduler().run()
        world.now += BUCKET_SECONDS


def stored_messages(world) -> list[dict]:
    return [v for v in world.dynamodb.tables["delay"].values() if v["pk"]["S"].startswith("b#")]


def test_a_5_mb_body_delayed_3_days_is_stored_and_dispatched_as_its_pointer(delayed):
    # GIVEN a 5 MB body sent for three days from now
    world, s3 = delayed
    body = "d" * (5 * MB)
    world.client.send("/later", body, delay=timedelta(days=3))
    # WHEN the delay table is read, and the dispatcher runs past its due time
    [item] = stored_messages(world)
    key = pointer_key(item["body"]["S"])
    world.now += 3 * DAY - 120
    run_until(world, 600)
    # THEN the item held the pointer (its object under payloads/delayed/), and the queue gets it with its size and due_at
    assert key.startswith("payloads/delayed/") and s3.body(key) == body
    [entry] = world.sqs.by_queue[QUEUE]
    assert entry["MessageBody"] == item["body"]["S"]
    attributes = entry["MessageAttributes"]
    assert size_of(attributes) == 5 * MB
    assert set(attributes) == {"beanstalk.sqsd.path", contract.PAYLOAD_SIZE_ATTRIBUTE, contract.DUE_AT_ATTRIBUTE}


def test_a_delayed_body_over_the_item_limit_but_within_the_queues_is_offloaded(delayed):
    # GIVEN a 600 KB body: it fits SQS's 1 MiB but not a DynamoDB item
    world, s3 = delayed
    # WHEN it is sent for an hour from now
    world.client.send("/later", "e" * 600_000, delay=3600)
    # THEN the item holds its pointer
    [item] = stored_messages(world)
    assert s3.body(pointer_key(item["body"]["S"])) == "e" * 600_000


def test_cancelling_deletes_the_object_and_rescheduling_keeps_it(delayed):
    # GIVEN two cancellable 2 MB messages due in a day
    world, s3 = delayed
    world.client.send("/a", "a" * (2 * MB), delay=DAY, dedupe_key="a", cancellable=True)
    world.client.send("/b", "b" * (2 * MB), delay=DAY, dedupe_key="b", cancellable=True)
    keys = {item["body"]["S"]: pointer_key(item["body"]["S"]) for item in stored_messages(world)}
    assert len(s3.keys("payloads/delayed/")) == 2
    # WHEN one is cancelled and the other moved a day later
    assert world.client.cancel("a") is True
    assert world.client.reschedule("b", delay=2 * DAY) is True
    # THEN the cancelled one's object is gone; the moved one's stays, and it is delivered with it
    [left] = s3.keys()
    assert s3.body(left) == "b" * (2 * MB) and left in keys.values()
    world.now += 2 * DAY - 120
    run_until(world, 600)
    [entry] = world.sqs.by_queue[QUEUE]
    assert pointer_key(entry["MessageBody"]) == left


def test_a_delayed_resend_deduplicated_by_an_earlier_send_deletes_its_own_upload(delayed):
    # GIVEN a delayed 2 MB message with a dedupe key
    world, s3 = delayed
    world.client.send("/x", "a" * (2 * MB), delay=DAY, dedupe_key="k")
    # WHEN it is sent again with the key
    world.client.send("/x", "a" * (2 * MB), delay=DAY, dedupe_key="k")
    # THEN one item, one object: the second upload was deleted and counted
    [item] = stored_messages(world)
    assert s3.keys() == [pointer_key(item["body"]["S"])]
    assert world.client.payload_orphans == 1


# ------------------------------------------------------------------------------------------------------ periodic ticks


def test_a_tick_too_large_for_its_queue_goes_to_the_payload_bucket(aws, s3):
    # GIVEN a queue of 1 KiB and a cron.yaml body of 3,000 bytes
    aws.sqs.set_queue_attributes(QueueUrl=aws.queue_url, Attributes={"MaximumMessageSize": "1024"})
    url = aws.queue_url
    enqueuer = TickEnqueuer(url, aws.state_table, sqs=aws.sqs, dynamodb=aws.dynamodb, payload_bucket=BUCKET, s3=s3.client)
    tick = Tick("report", "/report", datetime(2026, 11, 22, 12, tzinfo=timezone.utc), "r" * 3000)
    # WHEN the tick is enqueued
    assert enqueuer.enqueue(tick) is True
    # THEN the queue gets the pointer with sqsd's attributes and the size; the object holds the body
    [message] = aws.sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    assert s3.body(pointer_key(message["Body"])) == "r" * 3000
    assert size_of(message["MessageAttributes"]) == 3000
    assert message["MessageAttributes"]["beanstalk.sqsd.task_name"]["StringValue"] == "report"


def test_a_tick_sqs_refuses_deletes_its_object_and_counts_an_orphan(aws, s3, published):
    # GIVEN a 1 KiB queue that refuses the tick's message
    aws.sqs.set_queue_attributes(QueueUrl=aws.queue_url, Attributes={"MaximumMessageSize": "1024"})

    class Refusing(RefusingSQS):
        def send_message(self, **request):
            raise ClientError({"Error": {"Code": "InvalidParameterValue", "Message": "refused"}}, "SendMessage")

    enqueuer = TickEnqueuer(aws.queue_url, aws.state_table, sqs=Refusing(aws.sqs), dynamodb=aws.dynamodb,
                            payload_bucket=BUCKET, s3=s3.client)
    tick = Tick("report", "/report", datetime(2026, 11, 22, 12, tzinfo=timezone.utc), "r" * 3000)
    # WHEN the tick is enqueued
    with pytest.raises(TickNotEnqueuedError) as error:
        enqueuer.enqueue(tick)
    # THEN it is not, its object is gone and counted, and the claim is given back for Lambda's retry
    assert "SendMessage failed with InvalidParameterValue" in str(error.value)
    assert s3.keys() == []
    assert published()[contract.METRIC_PAYLOAD_ORPHANS] == 1


# ---------------------------------------------------------------------------------- the queue's limit, read or unknown


class UnreadableSQS(RefusingSQS):
    """moto's SQS whose GetQueueAttributes is refused; sends go through."""

    def __init__(self, sqs) -> None:
        super().__init__(sqs)
        self.reads = 0

    def get_queue_attributes(self, **request):
        self.reads += 1
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetQueueAttributes")

    def send_message_batch(self, QueueUrl, Entries):
        return self._sqs.send_message_batch(QueueUrl=QueueUrl, Entries=Entries)


def test_with_a_bucket_a_direct_send_reads_the_queues_limit_once_and_offloads_what_it_cannot_hold(aws, s3):
    # GIVEN a queue of 64 KiB and a Client with the bucket that was not told the queue's size
    aws.sqs.set_queue_attributes(QueueUrl=aws.queue_url, Attributes={"MaximumMessageSize": str(64 * 1024)})
    client = Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client)
    # WHEN a 100 KB body, a 10 KB one and a 500-byte one are sent, in two calls
    client.send_batch([OutgoingMessage("/big", "a" * 100_000), OutgoingMessage("/mid", "b" * 10_000)])
    client.send("/small", "c" * 500)
    # THEN only the 100 KB one is offloaded, and the queue's limit was read once
    bodies = {m["MessageAttributes"]["beanstalk.sqsd.path"]["StringValue"]: m["Body"] for m in received(aws)}
    assert s3.body(pointer_key(bodies["/big"])) == "a" * 100_000
    assert (bodies["/mid"], bodies["/small"]) == ("b" * 10_000, "c" * 500)
    assert aws.count("GetQueueAttributes") == 1


def test_while_the_queues_limit_cannot_be_read_a_direct_send_over_256_kib_is_offloaded(aws, s3):
    # GIVEN a Client with the bucket whose queue's limit cannot be read
    sqs = UnreadableSQS(aws.sqs)
    client = Client(aws.queue_url, sqs=sqs, payload_bucket=BUCKET, s3=s3.client)
    # WHEN a body just over 256 KiB and one well under are sent
    results = client.send_batch([OutgoingMessage("/over", "a" * (256 * 1024)), OutgoingMessage("/under", "b" * 200_000)])
    # THEN both are sent: the first as a pointer (any queue may be that small), the second as it is; the read was tried
    assert all(r.ok for r in results)
    bodies = {m["MessageAttributes"]["beanstalk.sqsd.path"]["StringValue"]: m["Body"] for m in received(aws)}
    assert s3.body(pointer_key(bodies["/over"])) == "a" * (256 * 1024) and bodies["/under"] == "b" * 200_000
    assert sqs.reads == 1


def test_while_the_queues_limit_cannot_be_read_a_large_delayed_message_is_offloaded_not_refused(aws, s3):
    # GIVEN a Client with the bucket and the delay table whose queue's limit cannot be read
    client = Client(aws.queue_url, delay_table(aws.dynamodb), sqs=UnreadableSQS(aws.sqs), dynamodb=aws.dynamodb,
                    payload_bucket=BUCKET, s3=s3.client)
    # WHEN a 300 KB body is sent for an hour from now (without a bucket: QueueLimitUnknown, retry)
    [result] = client.send_batch([OutgoingMessage("/x", "a" * 300_000, delay=3600)])
    # THEN it is stored, its body under payloads/delayed/
    assert result.ok
    [key] = s3.keys()
    assert key.startswith("payloads/delayed/")


def test_an_orphan_in_a_workers_task_is_published_as_a_metric(aws, s3, published):
    # GIVEN a Client in a worker's task (the worker names the running record), on a queue that refuses the entry
    client = Client(aws.queue_url, sqs=RefusingSQS(aws.sqs), payload_bucket=BUCKET, s3=s3.client)
    running = type("Record", (), {"message_id": "m-1", "path": "/task"})()
    observability.running_record.set(running)
    try:
        # WHEN its 2 MB follow-up is refused
        client.send_batch([OutgoingMessage("/follow-up", "a" * (2 * MB))])
    finally:
        observability.running_record.set(None)
    # THEN the upload and the orphan are among the worker's metrics
    assert published()[contract.METRIC_PAYLOADS_OFFLOADED] == 1
    assert published()[contract.METRIC_PAYLOAD_ORPHANS] == 1


@pytest.fixture
def fifo_s3(aws_fifo):
    calls = S3Calls()
    calls.client.create_bucket(Bucket=BUCKET)
    return aws_fifo, calls


def test_a_large_fifo_message_keeps_its_group_and_dedupe_key_and_travels_as_a_pointer(fifo_s3):
    # GIVEN a FIFO queue and a Client with the bucket
    aws, s3 = fifo_s3
    client = Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client)
    # WHEN a 2 MB body is sent in a group with a dedupe key
    client.send("/x", "f" * (2 * MB), group_id="tenant-1", dedupe_key="order-9")
    # THEN SQS has the pointer with the group and the key as given
    [entry] = aws.params("SendMessageBatch")[0]["Entries"]
    assert (entry["MessageGroupId"], entry["MessageDeduplicationId"]) == ("tenant-1", "order-9")
    assert s3.body(pointer_key(entry["MessageBody"])) == "f" * (2 * MB)


def test_a_reschedule_past_an_offloaded_bodys_life_is_refused_and_one_within_it_moves_the_message(delayed):
    # GIVEN a cancellable 2 MB message sent for 300 days from now: its object is uploaded now, and the bucket's rule
    # keeps it 366 days (the longest delay) plus a message's life in the queues from now
    world, s3 = delayed
    uploaded_at = world.now
    world.client.send("/later", "r" * (2 * MB), delay=timedelta(days=300), dedupe_key="r", cancellable=True)
    [key] = s3.keys()
    world.now += 299 * DAY
    # WHEN, 299 days later, it is rescheduled to 366 days from then
    with pytest.raises(MessageError) as refused:
        world.client.reschedule("r", delay=timedelta(days=366))
    # THEN it is refused, naming the latest time its body allows and the fix; it stays as it was
    latest = datetime.fromtimestamp(uploaded_at + 366 * DAY, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"reschedule it to {latest} at the latest, or cancel it and send it again" in str(refused.value)
    [item] = stored_messages(world)
    assert int(item["due_ms"]["N"]) == (uploaded_at + 300 * DAY) * 1000
    # AND a reschedule within it moves the message, keeping its object
    assert world.client.reschedule("r", delay=timedelta(days=60)) is True
    assert s3.keys() == [key]


def test_sqss_character_rule_applies_to_what_sqs_carries_and_s3_carries_an_offloaded_body_whole(aws, s3):
    # GIVEN a Client with a bucket, and a body holding U+FFFE, which SQS refuses in a body but S3 stores as bytes
    client = Client(aws.queue_url, sqs=aws.sqs, payload_bucket=BUCKET, s3=s3.client, payload_threshold=2000)
    # WHEN it is sent small (SQS would carry it) and large (S3 carries it)
    with pytest.raises(MessageError) as refused:
        client.send("/x", "a\ufffeb")
    client.send("/x", "a\ufffe" + "b" * 3000)
    # THEN the small one is refused naming the character and its offset, nothing uploaded for it; the large one's
    # object holds it whole, and the queue carries only the pointer
    assert "has character '\\ufffe' (U+FFFE) at offset 1, which SQS does not allow" in str(refused.value)
    # AND a body no UTF-8 can encode (a lone surrogate) is refused either way, before any upload
    with pytest.raises(MessageError) as surrogate:
        client.send("/x", "a\ud800" + "b" * 3000)
    assert "(U+D800) at offset 1" in str(surrogate.value)
    assert s3.calls == ["PutObject"]
    [message] = received(aws)
    assert s3.body(pointer_key(message["Body"])) == "a\ufffe" + "b" * 3000
