"""Offloaded bodies (AWS's Extended Client format) through the worker and the container worker, on moto.

A message carrying ``ExtendedPayloadSize`` has its body in the payload bucket: its task gets the real body, its
object goes only after its message was deleted, and whatever keeps the message (the DLQ, a retry, a forward, the
delay table) keeps the pointer and the object with it. S3's faults come from a wrapper around moto's client.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.support import extended_client
from tests.support.aws_world import REGION, AwsWorld, make_world
from tests.support.container import run_until
from worker_tier import Client, NonRetryableError, RetryLater, Task
from worker_tier.app import target_from_settings
from worker_tier.app.forwarding import HttpTarget
from worker_tier.container.consumer import Consumer
from worker_tier.container.protection import TaskProtection
from worker_tier.core import contract, observability
from worker_tier.core.payloads import PayloadStore, Pointer, size_attribute
from worker_tier.core.envelope import lambda_record
from worker_tier.core.settings import Settings
from worker_tier.delays.delay import DelayedMessage
from worker_tier.worker.batch import Worker
from worker_tier.worker.registry import Registry

BUCKET = "payloads"  # the name tests/support/aws_world.py's make_world gives the payload bucket
TWO_MEGABYTES = 2 * 1024 * 1024
APP_SERVER = Path(__file__).with_name("app_server.py")


class RecordingS3:
    """Moto's S3 client; records each call in the world's call list (in order with SQS's), and may fail some.

    ``fail(name, kwargs)`` returns an error code to raise for that call, or None to let it through.
    """

    def __init__(self, s3: Any, calls: list[tuple[str, dict]], fail: Callable[[str, dict], str | None] | None = None):
        self._s3 = s3
        self._calls = calls
        self.fail = fail

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._s3, name)

        def call(**kwargs: Any) -> Any:
            operation = "".join(part.title() for part in name.split("_"))
            self._calls.append((operation, kwargs))
            code = self.fail(name, kwargs) if self.fail is not None else None
            if code is not None:
                raise ClientError({"Error": {"Code": code, "Message": f"{code} (injected)"},
                                   "ResponseMetadata": {"HTTPStatusCode": 503}}, operation)
            return method(**kwargs)

        return call


@pytest.fixture
def world():
    """The functional world, with the payload bucket (created here when make_world does not make it yet)."""
    with mock_aws():
        aws = make_world()
        yield aws, with_bucket(aws)


@pytest.fixture
def fifo_world():
    with mock_aws():
        aws = make_world(fifo=True)
        yield aws, with_bucket(aws)


def with_bucket(aws: AwsWorld) -> RecordingS3:
    s3 = boto3.client("s3", region_name=REGION)
    if BUCKET not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=BUCKET)
    return RecordingS3(s3, aws.calls)


def offload(aws: AwsWorld, s3: RecordingS3, body: str | bytes, path: str = "/ok", *, bucket: str = BUCKET,
            key: str = "payloads/k-1", pointer_body: str | None = None, **send: Any) -> Pointer:
    """Put ``body`` at bucket/key and send its pointer as AWS's Extended Client does (the test's own calls)."""
    data = body.encode() if isinstance(body, str) else body
    s3._s3.put_object(Bucket=bucket, Key=key, Body=data)
    pointer = Pointer(bucket, key, len(data))
    attributes = {**size_attribute(len(data)), contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": path}}
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=pointer_body or pointer.body(),
                         MessageAttributes=attributes, **send)
    return pointer


def exists(s3: RecordingS3, pointer: Pointer) -> bool:
    try:
        s3._s3.head_object(Bucket=pointer.bucket, Key=pointer.key)
    except ClientError:
        return False
    return True


def make_worker(aws: AwsWorld, registry: Registry, s3: Any, *, max_bytes: int | None = None, payloads: bool = True,
                **options: Any) -> Worker:
    store = PayloadStore(BUCKET, s3, max_bytes=max_bytes, sleep=lambda seconds: None) if payloads else None
    settings = options.pop("settings", Settings())
    return Worker(settings, queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                  state_table=aws.state_table, registry=registry, sqs=aws.sqs, dynamodb=aws.dynamodb,
                  random=lambda: 0.5, payloads=store, **options)


def recording_tasks(seen: list[str]) -> Registry:
    tasks = Registry()
    tasks.task("/ok")(lambda task: seen.append(task.body))
    return tasks


def operations(aws: AwsWorld, *names: str) -> list[str]:
    return [name for name, _ in aws.calls if name in names]


def reason_of(dead: dict) -> dict:
    return json.loads(dead["MessageAttributes"][contract.FAILURE_ATTRIBUTE]["StringValue"])


def queue_depth(aws: AwsWorld, queue_url: str) -> int:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = aws.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[n]) for n in names)


def test_a_two_megabyte_body_reaches_its_task_whole_and_its_object_goes_after_its_message(world, published):
    # GIVEN a 2 MB body offloaded to the payload bucket
    aws, s3 = world
    body = json.dumps({"blob": "x" * TWO_MEGABYTES})
    pointer = offload(aws, s3, body)
    seen: list[str] = []
    # WHEN the worker handles it
    response = make_worker(aws, recording_tasks(seen), s3).handle(aws.receive_event(), None)
    # THEN the task got the whole body; the message was deleted, and only then its object
    assert response["batchItemFailures"] == []
    assert seen == [body]
    assert operations(aws, "GetObject", "DeleteMessageBatch", "DeleteObject") == [
        "GetObject", "DeleteMessageBatch", "DeleteObject"]
    assert not exists(s3, pointer)
    assert queue_depth(aws, aws.queue_url) == 0
    counts = published()
    assert counts[contract.METRIC_PAYLOADS_OFFLOADED] == 1
    assert counts[contract.METRIC_PAYLOADS_DELETED] == 1


def test_an_ordinary_message_beside_an_offloaded_one_is_not_deleted_by_the_worker(world):
    # GIVEN an ordinary message and an offloaded one in one batch
    aws, s3 = world
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody="small",
                         MessageAttributes={contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/ok"}})
    offload(aws, s3, "large")
    seen: list[str] = []
    event = aws.receive_event()
    # WHEN handled
    make_worker(aws, recording_tasks(seen), s3).handle(event, None)
    # THEN both ran, and the worker's own delete named only the offloaded one (Lambda deletes the rest)
    assert sorted(seen) == ["large", "small"]
    [delete] = aws.params("DeleteMessageBatch")
    offloaded = [r["receiptHandle"] for r in event["Records"] if r["body"] != "small"]
    assert [e["ReceiptHandle"] for e in delete["Entries"]] == offloaded


def _missing(aws: AwsWorld, s3: RecordingS3) -> tuple[Pointer, str]:
    pointer = Pointer(BUCKET, "payloads/gone", 5)
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=pointer.body(), MessageAttributes={
        **size_attribute(5), contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/ok"}})
    return pointer, "no object s3://payloads/payloads/gone"


def _other_bucket(aws: AwsWorld, s3: RecordingS3) -> tuple[Pointer, str]:
    s3._s3.create_bucket(Bucket="elsewhere")
    return offload(aws, s3, "body", bucket="elsewhere"), "points at s3://elsewhere/payloads/k-1, outside this deployment"


def _malformed(aws: AwsWorld, s3: RecordingS3) -> tuple[Pointer, str]:
    pointer = offload(aws, s3, "body", pointer_body='["not.a.Pointer", {"s3BucketName": "payloads"}]')
    return pointer, "its body must be an S3 pointer"


def _not_utf8(aws: AwsWorld, s3: RecordingS3) -> tuple[Pointer, str]:
    return offload(aws, s3, b"\xff\xfe body"), "s3://payloads/payloads/k-1 is not UTF-8 text"


def _too_large(aws: AwsWorld, s3: RecordingS3) -> tuple[Pointer, str]:
    return offload(aws, s3, "y" * 2048), "s3://payloads/payloads/k-1 is 2048 bytes, over payload_max_bytes 1024"


@pytest.mark.parametrize("case", [_missing, _other_bucket, _malformed, _not_utf8, _too_large],
                         ids=["missing", "other-bucket", "malformed-pointer", "not-utf8", "over-max-bytes"])
def test_a_body_that_cannot_be_read_is_dead_lettered_at_once_keeping_its_pointer_and_object(world, case, published):
    # GIVEN an offloaded message whose pointer cannot be honoured, on its first receive
    aws, s3 = world
    pointer, reason_text = case(aws, s3)
    event = aws.receive_event()
    [record] = event["Records"]
    seen: list[str] = []
    # WHEN the worker handles it
    response = make_worker(aws, recording_tasks(seen), s3, max_bytes=1024).handle(event, None)
    # THEN it is dead-lettered at once with a reason naming the bucket and key; the task never ran
    assert response["batchItemFailures"] == [] and seen == []
    [dead] = aws.dead_letters()
    reason = reason_of(dead)
    assert reason["error_type"] in {"PayloadError", "PayloadMissingError"} and reason_text in reason["error_message"]
    # AND the DLQ copy carries the pointer and its ExtendedPayloadSize, never a resolved body
    assert dead["Body"] == record["body"]
    assert contract.PAYLOAD_SIZE_ATTRIBUTE in dead["MessageAttributes"]
    # AND no object was deleted (it stays with the DLQ copy)
    assert operations(aws, "DeleteObject", "DeleteMessageBatch") == []
    if case is not _missing:
        assert exists(s3, pointer)
    assert contract.METRIC_PAYLOADS_OFFLOADED not in published()


def test_without_a_payload_bucket_an_offloaded_message_is_dead_lettered_naming_the_fix(world):
    # GIVEN a worker with no payload bucket (large_payloads off, or the variable unset) and an offloaded message
    aws, s3 = world
    pointer = offload(aws, s3, "body")
    # WHEN handled
    response = make_worker(aws, recording_tasks([]), s3, payloads=False).handle(aws.receive_event(), None)
    # THEN it is dead-lettered at once, the reason naming the object, the variable and the setting
    assert response["batchItemFailures"] == []
    [dead] = aws.dead_letters()
    message = reason_of(dead)["error_message"]
    assert message == (
        "the message's body is offloaded to s3://payloads/payloads/k-1, but this worker has no payload bucket: "
        "WORKER_TIER_PAYLOAD_BUCKET is unset; deploy with large_payloads on (it sets the variable), or set it to "
        "the bucket's name")
    assert exists(s3, pointer)


def test_s3_throttling_twice_then_an_answer_runs_the_task(world):
    # GIVEN S3 answering SlowDown to the first two reads
    aws, s3 = world
    offload(aws, s3, "body")
    reads = []
    s3.fail = lambda name, kwargs: "SlowDown" if name == "get_object" and len(reads.append(1) or reads) <= 2 else None
    seen: list[str] = []
    # WHEN handled
    response = make_worker(aws, recording_tasks(seen), s3).handle(aws.receive_event(), None)
    # THEN the third read got the body and the task ran
    assert response["batchItemFailures"] == [] and seen == ["body"]
    assert operations(aws, "GetObject").count("GetObject") == 3


def test_s3_failing_throughout_retries_the_message_keeping_its_object(world):
    # GIVEN S3 failing every read with a 5xx
    aws, s3 = world
    pointer = offload(aws, s3, "body")
    s3.fail = lambda name, kwargs: "InternalError" if name == "get_object" else None
    event = aws.receive_event()
    # WHEN handled
    response = make_worker(aws, recording_tasks([]), s3).handle(event, None)
    # THEN the message is reported failed and backed off, not dead-lettered; its object stays
    assert [item["itemIdentifier"] for item in response["batchItemFailures"]] == [event["Records"][0]["messageId"]]
    assert aws.dead_letters() == []
    assert aws.params("ChangeMessageVisibilityBatch")[0]["Entries"][0]["VisibilityTimeout"] > 0
    assert exists(s3, pointer)


def test_s3_failing_on_the_last_receive_dead_letters_with_that_reason(world):
    # GIVEN S3 failing every read, and the message on its max_retries-th receive
    aws, s3 = world
    offload(aws, s3, "body")
    s3.fail = lambda name, kwargs: "ServiceUnavailable" if name == "get_object" else None
    event = aws.receive_event()
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = "3"
    # WHEN handled with max_retries 3
    make_worker(aws, recording_tasks([]), s3, settings=Settings(max_retries=3)).handle(event, None)
    # THEN it goes to the DLQ with S3's failure as its reason
    [dead] = aws.dead_letters()
    reason = reason_of(dead)
    assert reason["error_type"] == "PayloadUnavailableError"
    assert "S3 could not get the payload s3://payloads/payloads/k-1 (ServiceUnavailable" in reason["error_message"]


def test_a_failed_task_keeps_its_object_for_its_retry(world):
    # GIVEN an offloaded message whose task fails
    aws, s3 = world
    pointer = offload(aws, s3, "body", path="/boom")
    tasks = Registry()

    @tasks.task("/boom")
    def boom(task: Task) -> None:
        raise RuntimeError("boom")

    # WHEN handled
    response = make_worker(aws, tasks, s3).handle(aws.receive_event(), None)
    # THEN it is retried and neither it nor its object is deleted
    assert len(response["batchItemFailures"]) == 1
    assert operations(aws, "DeleteMessageBatch", "DeleteObject") == []
    assert exists(s3, pointer)


def test_a_message_whose_delete_failed_keeps_its_object_and_is_still_reported_done(world):
    # GIVEN SQS refusing the worker's delete of a succeeded offloaded message
    aws, s3 = world
    pointer = offload(aws, s3, "body")
    event = aws.receive_event()
    event["Records"][0]["receiptHandle"] = "not-a-receipt-handle"
    # WHEN handled
    response = make_worker(aws, recording_tasks([]), s3).handle(event, None)
    # THEN it is reported done (it succeeded) and its object stays for the run its return brings
    assert response["batchItemFailures"] == []
    assert len(aws.params("DeleteMessageBatch")) == 1
    assert operations(aws, "DeleteObject") == []
    assert exists(s3, pointer)


def test_an_idempotency_skipped_duplicate_counts_as_succeeded(world):
    # GIVEN an idempotent task that already ran for this message's key
    aws, s3 = world
    runs: list[str] = []
    tasks = Registry()
    tasks.task("/ok", idempotent=True, idempotency_key=lambda task: "the-key")(lambda task: runs.append(task.body))
    worker = make_worker(aws, tasks, s3)
    offload(aws, s3, "first", key="payloads/first")
    worker.handle(aws.receive_event(), None)
    second = offload(aws, s3, "second", key="payloads/second")
    # WHEN its duplicate is handled
    response = worker.handle(aws.receive_event(), None)
    # THEN it is skipped, and deleted with its object as a success
    assert response["batchItemFailures"] == [] and runs == ["first"]
    assert not exists(s3, second)


def test_a_forwarded_long_task_carries_its_pointer_and_keeps_its_object(world):
    # GIVEN a long task forwarded to the container worker's queue
    aws, s3 = world
    long_queue = aws.sqs.create_queue(QueueName="long")["QueueUrl"]
    tasks = Registry()
    tasks.task("/long", container=True)(lambda task: None)
    pointer = offload(aws, s3, "x" * 300_000, path="/long")
    [record] = (event := aws.receive_event())["Records"]
    # WHEN the Lambda worker handles it
    make_worker(aws, tasks, s3, container_queue_url=long_queue).handle(event, None)
    # THEN the forward carries the pointer and ExtendedPayloadSize; the object stays for the container worker
    [forward] = aws.params("SendMessage")[-1:]
    assert forward["QueueUrl"] == long_queue
    assert forward["MessageBody"] == record["body"]
    assert forward["MessageAttributes"][contract.PAYLOAD_SIZE_ATTRIBUTE]["StringValue"] == "300000"
    assert operations(aws, "DeleteObject", "DeleteMessageBatch") == []
    assert exists(s3, pointer)


def test_a_retry_rescheduled_through_the_delay_table_carries_the_pointer(world):
    # GIVEN a delay table and an offloaded message whose task asks to be retried in two days
    aws, s3 = world
    aws.create_delay_table()
    tasks = Registry()

    @tasks.task("/later")
    def later(task: Task) -> None:
        raise RetryLater(2 * 86400)

    pointer = offload(aws, s3, "the real body", path="/later")
    [record] = (event := aws.receive_event())["Records"]
    # WHEN handled
    response = make_worker(aws, tasks, s3, delay_table="delay", clock=time.time).handle(event, None)
    # THEN the copy in the delay table is the pointer with its ExtendedPayloadSize; the object stays for it
    assert response["batchItemFailures"] == []
    [item] = aws.dynamodb.scan(TableName="delay")["Items"]
    copy = DelayedMessage.from_item(item)
    assert copy.body == record["body"]
    assert copy.attributes[contract.PAYLOAD_SIZE_ATTRIBUTE]["StringValue"] == str(len("the real body"))
    assert operations(aws, "DeleteObject", "PutObject") == []
    assert exists(s3, pointer)
    # AND the object's lifecycle clock restarted (a copy onto itself): a message delayed 366 days and then retried 30
    # more is not due after the rule (366 days + 2 retentions + the DLQ's 14 + 1) removed its body
    assert _kept_at(s3) is not None


def test_an_in_process_app_gets_the_real_body(world):
    # GIVEN a WSGI app (the app setting) and an offloaded job for it
    aws, s3 = world
    from tests.apps import flask_worker

    flask_worker.received.clear()
    body = json.dumps({"task": "send_email", "arguments": {"to": "a@example.com", "blob": "z" * 400_000}})
    offload(aws, s3, body, path="/")
    settings = Settings(app="tests.apps.flask_worker:app")
    worker = make_worker(aws, Registry(), s3, settings=settings, app_target=target_from_settings(settings))
    # WHEN handled
    response = worker.handle(aws.receive_event(), None)
    # THEN the app's POST carried the body read from S3, and no header describing the pointer it no longer sees
    assert response["batchItemFailures"] == []
    [request] = flask_worker.received
    assert request["body"] == body
    assert not [name for name in request["headers"] if "payloadsize" in name.lower()]


def test_http_forwarding_posts_the_real_body(world):
    # GIVEN an app server process and an offloaded message for it
    aws, s3 = world
    process = subprocess.Popen([sys.executable, str(APP_SERVER)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(process.stdout.readline())
        body = "w" * 300_000
        offload(aws, s3, body, path="/ok")
        target = HttpTarget(Settings(container_worker=True, app_port=port))
        # WHEN the worker forwards it over HTTP
        response = make_worker(aws, Registry(), s3, app_target=target).handle(aws.receive_event(), None)
        # THEN the app got the body read from S3
        assert response["batchItemFailures"] == []
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_requests", timeout=5) as answer:
            [seen] = [r for r in json.loads(answer.read()) if r["method"] == "POST"]
        assert seen["body"] == body
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_the_container_worker_deletes_the_object_once_after_its_own_delete_of_the_message(request, fifo):
    # GIVEN the container worker and an offloaded message
    aws, s3 = request.getfixturevalue("fifo_world" if fifo else "world")
    send = {"MessageGroupId": "g", "MessageDeduplicationId": "d"} if fifo else {}
    pointer = offload(aws, s3, "container body", **send)
    seen: list[str] = []
    worker = make_worker(aws, recording_tasks(seen), s3, settings=Settings(fifo=fifo))
    consumer = Consumer(worker, aws.sqs, aws.queue_url, poll_wait_seconds=1, heartbeat_interval=1,
                        protection=TaskProtection(agent_uri=""), delete_linger_seconds=0.01)
    # WHEN it runs the message
    thread = run_until(consumer, lambda: operations(aws, "DeleteObject") != [])
    consumer.stopping.set()
    thread.join(10)
    # THEN the task got the body; the message was deleted once, by the consumer, and then the object, once
    assert seen == ["container body"]
    assert operations(aws, "DeleteMessageBatch", "DeleteObject") == ["DeleteMessageBatch", "DeleteObject"]
    assert not exists(s3, pointer)
    assert queue_depth(aws, aws.queue_url) == 0


class RefusingDeletes:
    """Moto's SQS, but every DeleteMessageBatch entry fails (as when the receipt handle expired)."""

    def __init__(self, sqs: Any) -> None:
        self._sqs = sqs
        self.deletes = 0

    def __getattr__(self, name: str) -> Any:
        if name != "delete_message_batch":
            return getattr(self._sqs, name)

        def refuse(**kwargs: Any) -> dict:
            self.deletes += 1
            return {"Successful": [], "Failed": [{"Id": e["Id"], "Code": "ReceiptHandleIsInvalid", "SenderFault": True}
                                                 for e in kwargs["Entries"]]}

        return refuse


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_the_container_worker_keeps_the_object_when_its_delete_of_the_message_fails(request, fifo):
    # GIVEN the container worker, whose deletes SQS refuses, and an offloaded message
    aws, s3 = request.getfixturevalue("fifo_world" if fifo else "world")
    send = {"MessageGroupId": "g", "MessageDeduplicationId": "d"} if fifo else {}
    pointer = offload(aws, s3, "container body", **send)
    seen: list[str] = []
    refusing = RefusingDeletes(aws.sqs)
    worker = make_worker(aws, recording_tasks(seen), s3, settings=Settings(fifo=fifo))
    consumer = Consumer(worker, aws.sqs, aws.queue_url, poll_wait_seconds=1, heartbeat_interval=1,
                        protection=TaskProtection(agent_uri=""), delete_linger_seconds=0.01, delete_sqs=refusing)
    # WHEN the task succeeds and its delete is refused
    thread = run_until(consumer, lambda: refusing.deletes >= 1)
    consumer.stopping.set()
    thread.join(10)
    # THEN the object stays for the message's next run
    assert seen == ["container body"]
    assert operations(aws, "DeleteObject") == []
    assert exists(s3, pointer)


def test_a_message_from_aws_extended_client_runs_with_its_real_body(world, extended_session):
    # GIVEN a message sent by AWS's own Extended Client (amazon-sqs-extended-client), over its 256 KiB threshold
    aws, s3 = world
    sqs = extended_session.client("sqs", region_name=REGION)
    sqs.large_payload_support = BUCKET
    sqs.s3_client = s3._s3
    body = "e" * 300_000
    sqs.send_message(QueueUrl=aws.queue_url, MessageBody=body,
                     MessageAttributes={contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/ok"}})
    event = aws.receive_event()
    assert contract.PAYLOAD_SIZE_ATTRIBUTE in event["Records"][0]["messageAttributes"]  # it did offload
    seen: list[str] = []
    # WHEN the worker handles it
    response = make_worker(aws, recording_tasks(seen), s3).handle(event, None)
    # THEN the task ran with the real body and the object is gone
    assert response["batchItemFailures"] == [] and seen == [body]
    assert s3._s3.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


@pytest.fixture
def extended_session():
    """A session of AWS's Extended Client; importing it replaces boto3's Session, so boto3 is put back as it was."""
    return extended_client.session(region_name=REGION)


def test_the_published_metrics_count_reads_and_deletes_per_batch(world, published):
    # GIVEN three offloaded messages in one batch
    aws, s3 = world
    for n in range(3):
        offload(aws, s3, f"body {n}", key=f"payloads/{n}")
    # WHEN handled as one batch
    make_worker(aws, recording_tasks([]), s3).handle(aws.receive_event(), None)
    # THEN each count is published once for the batch, summed
    assert observability.metrics.metric_set[contract.METRIC_PAYLOADS_OFFLOADED]["Value"] == [3.0]
    assert observability.metrics.metric_set[contract.METRIC_PAYLOADS_DELETED]["Value"] == [3.0]
    assert published()[contract.METRIC_PAYLOADS_DELETED] == 3


def test_a_dlq_copy_that_sheds_attributes_keeps_its_pointer_marker_so_its_redrive_runs_with_the_real_body(world):
    # GIVEN an offloaded message with a long attribute, and a DLQ smaller than the queue, so its DLQ copy sheds some
    aws, s3 = world
    aws.sqs.set_queue_attributes(QueueUrl=aws.dead_letter_queue_url, Attributes={"MaximumMessageSize": "1024"})
    seen: list[str] = []
    tasks = Registry()

    @tasks.task("/ok")
    def ok(task: Task) -> None:
        seen.append(task.body)
        if len(seen) == 1:
            raise NonRetryableError("a bad image")

    s3._s3.put_object(Bucket="payloads", Key="payloads/k-1", Body=b"the real body")
    pointer = Pointer("payloads", "payloads/k-1", 13)
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=pointer.body(), MessageAttributes={
        **size_attribute(13), contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/ok"},
        "trace": {"DataType": "String", "StringValue": "t" * 700}})
    worker = make_worker(aws, tasks, s3)
    # WHEN its task fails for good
    worker.handle(aws.receive_event(), None)
    # THEN the DLQ copy is the pointer, still marked as one (ExtendedPayloadSize is kept like the routing attributes)
    [dead] = aws.dead_letters()
    assert dead["Body"] == pointer.body() and contract.PAYLOAD_SIZE_ATTRIBUTE in dead["MessageAttributes"]
    assert "trace" not in dead["MessageAttributes"]
    # AND once the operator redrives it as it is (worker-tier redrive drops only worker_tier.* attributes)
    kept = {k: v for k, v in dead["MessageAttributes"].items() if not k.startswith("worker_tier.")}
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=dead["Body"], MessageAttributes=kept)
    aws.sqs.delete_message(QueueUrl=aws.dead_letter_queue_url, ReceiptHandle=dead["ReceiptHandle"])
    worker.handle(aws.receive_event(), None)

    # THEN the task runs with the real body again, never the pointer
    assert seen == ["the real body", "the real body"], f"the redriven task ran with body {seen[-1]!r}"


def test_an_offloaded_message_with_eight_attributes_of_its_own_keeps_its_pointer_marker_in_the_dlq(world):
    # The Client allows 8 attributes of the user's beside the path when it offloads (the size attribute is the
    # 10th; docs/large-payloads.md "9 of the user's with the path"). The DLQ copy needs room for worker_tier.failure:
    # envelope.dead_letter_attributes keeps the routing attributes and then the others in order, dropping the last,
    # which is ExtendedPayloadSize (appended last by the Client; and it sorts before lowercase or later names, so the
    # attribute names here, A1..A8, put it last in either order).
    # GIVEN an offloaded message whose DLQ copy cannot keep every attribute  WHEN its task fails for good
    aws, s3 = world
    tasks = Registry()

    @tasks.task("/ok")
    def ok(task: Task) -> None:
        raise NonRetryableError("a bad image")

    client = Client(aws.queue_url, sqs=aws.sqs, payload_bucket="payloads", s3=s3._s3)
    client.send("/ok", "b" * 2_000_000, attributes={f"A{i}": f"v{i}" for i in range(1, 9)})
    make_worker(aws, tasks, s3).handle(aws.receive_event(), None)

    [dead] = aws.dead_letters()
    assert dead["Body"].startswith('["software.amazon.payloadoffloading.PayloadS3Pointer"')
    assert contract.PAYLOAD_SIZE_ATTRIBUTE in dead["MessageAttributes"], (
        f"the DLQ copy lost {contract.PAYLOAD_SIZE_ATTRIBUTE}: {sorted(dead['MessageAttributes'])}; "
        f"dlq show will print the pointer as the body and a redrive will run the task with it")


@pytest.mark.parametrize("pointer_body", ["[]", "{}", "5", "true", '{"s3BucketName": "payloads", "s3Key": "k"}'])
def test_a_pointer_body_of_valid_json_of_the_wrong_shape_is_dead_lettered_at_once(world, pointer_body):
    # GIVEN an offloaded message whose body is JSON but not a pointer  WHEN handled  THEN dead-lettered at once
    aws, s3 = world
    offload(aws, s3, "real body", pointer_body=pointer_body)
    seen: list[str] = []
    worker = make_worker(aws, recording_tasks(seen), s3)
    response = worker.handle(aws.receive_event(), None)
    assert seen == []
    # promised: dead-lettered at once with a PayloadError reason (reported done)
    dead = aws.dead_letters()
    assert len(dead) == 1, f"not dead-lettered; batch response {response}, visibility calls {aws.params('ChangeMessageVisibilityBatch')}"
    assert reason_of(dead[0])["error_type"] == "PayloadError" and "S3 pointer" in reason_of(dead[0])["error_message"]
    assert response["batchItemFailures"] == []


def _kept_at(s3: RecordingS3, key: str = "payloads/k-1") -> str | None:
    """When a worker last restarted the object's lifecycle clock (its copy onto itself), or None."""
    return s3._s3.head_object(Bucket=BUCKET, Key=key)["Metadata"].get("worker-tier-kept-at")


def test_a_dead_lettered_offloaded_message_restarts_its_objects_lifecycle_clock(world):
    # GIVEN an offloaded message whose task fails for good
    aws, s3 = world
    tasks = Registry()
    tasks.task("/ok")(lambda task: (_ for _ in ()).throw(NonRetryableError("a bad image")))
    offload(aws, s3, "the real body")
    assert _kept_at(s3) is None
    # WHEN it is dead-lettered
    make_worker(aws, tasks, s3).handle(aws.receive_event(), None)
    # THEN its DLQ copy begins a new life, and so does its object: the bucket's rule counts its days from now, so a
    # message the DLQ keeps 14 days, redriven and run again, finds its body (a copy onto itself, which S3 dates now)
    assert len(aws.dead_letters()) == 1
    assert _kept_at(s3) is not None
    assert s3._s3.get_object(Bucket=BUCKET, Key="payloads/k-1")["Body"].read() == b"the real body"


def _receive_one(aws: AwsWorld) -> dict:
    [message] = aws.sqs.receive_message(QueueUrl=aws.queue_url, MessageAttributeNames=["All"],
                                        MessageSystemAttributeNames=["All"], VisibilityTimeout=0)["Messages"]
    return {"Records": [lambda_record(message, aws.queue_arn, REGION)]}


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_duplicate_of_a_succeeded_offloaded_message_is_skipped_by_an_idempotent_task_not_dead_lettered(world, idempotent):
    # GIVEN two copies of one offloaded message in flight (a standard queue delivers at least once): one id, two handles
    aws, s3 = world
    runs: list[str] = []
    tasks = Registry()
    tasks.task("/ok", idempotent=idempotent)(lambda task: runs.append(task.body))
    worker = make_worker(aws, tasks, s3)
    offload(aws, s3, "the real body")
    first, second = _receive_one(aws), _receive_one(aws)
    assert first["Records"][0]["messageId"] == second["Records"][0]["messageId"]
    # WHEN the first succeeds (its object deleted after it) and then the second arrives
    assert worker.handle(first, None)["batchItemFailures"] == []
    response = worker.handle(second, None)
    # THEN an idempotent task skips the duplicate, as it would an ordinary message's; a task that is not idempotent
    # cannot tell a duplicate from a lost body, and the second copy is dead-lettered saying the object is missing
    assert response["batchItemFailures"] == [] and runs == ["the real body"]
    if idempotent:
        assert aws.dead_letters() == []
    else:
        [dead] = aws.dead_letters()
        assert reason_of(dead)["error_type"] == "PayloadMissingError"
        assert "deleted after an earlier copy of this message succeeded" in reason_of(dead)["error_message"]
