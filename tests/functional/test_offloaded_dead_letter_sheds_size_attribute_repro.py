"""Repro: a DLQ copy that must shed attributes sheds ``ExtendedPayloadSize``; the pointer then travels as a plain body.

Promise 3/5 (docs/large-payloads.md, Workers): "Every copy carries the pointer, not the body. The DLQ copy ... sends
the record's own pointer and its ExtendedPayloadSize", and the task "never runs with a pointer". When the DLQ copy
(body, attributes, reason) is over the DLQ's MaximumMessageSize, ``dead_letter.fit_reason`` keeps only
``contract.ROUTING_ATTRIBUTES`` (path, task name, scheduled time): ``ExtendedPayloadSize`` is dropped. The DLQ
then holds an ordinary message whose body is the pointer JSON: ``dlq show`` prints the pointer as the body,
``dlq list`` does not count it offloaded, and once redriven the worker runs the task with the pointer as its body
(and never deletes the object). A DLQ smaller than the work queue is a case dead_letter.py itself describes (an
imported EB DLQ of 256 KiB beside a 1 MiB queue); here both are shrunk so the attributes stay small.
"""

from __future__ import annotations

from tests.functional.test_offloaded_bodies import make_worker, world  # noqa: F401
from worker_tier import NonRetryableError, Task
from worker_tier.core import contract
from worker_tier.worker.registry import Registry


def test_the_dlq_copy_of_an_offloaded_message_keeps_its_size_attribute_when_it_sheds_attributes(world):
    aws, s3 = world
    aws.sqs.set_queue_attributes(QueueUrl=aws.dead_letter_queue_url, Attributes={"MaximumMessageSize": "1024"})
    seen: list[str] = []
    tasks = Registry()

    @tasks.task("/ok")
    def ok(task: Task) -> None:
        seen.append(task.body)
        if task.body == "the real body":
            raise NonRetryableError("a bad image")

    from worker_tier.core.payloads import Pointer, size_attribute
    s3._s3.put_object(Bucket="payloads", Key="payloads/k-1", Body=b"the real body")
    pointer = Pointer("payloads", "payloads/k-1", 13)
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=pointer.body(), MessageAttributes={
        **size_attribute(13), contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/ok"},
        "trace": {"DataType": "String", "StringValue": "t" * 700}})
    make_worker(aws, tasks, s3).handle(aws.receive_event(), None)

    [dead] = aws.dead_letters()
    assert dead["Body"] == pointer.body()
    assert contract.PAYLOAD_SIZE_ATTRIBUTE in dead["MessageAttributes"], (
        f"the DLQ copy lost {contract.PAYLOAD_SIZE_ATTRIBUTE}: it now has only {sorted(dead['MessageAttributes'])}")


def test_a_redriven_copy_that_lost_its_size_attribute_runs_its_task_with_the_pointer_as_body(world):
    aws, s3 = world
    aws.sqs.set_queue_attributes(QueueUrl=aws.dead_letter_queue_url, Attributes={"MaximumMessageSize": "1024"})
    seen: list[str] = []
    tasks = Registry()

    @tasks.task("/ok")
    def ok(task: Task) -> None:
        seen.append(task.body)
        if len(seen) == 1:
            raise NonRetryableError("a bad image")

    from worker_tier.core.payloads import Pointer, size_attribute
    s3._s3.put_object(Bucket="payloads", Key="payloads/k-1", Body=b"the real body")
    pointer = Pointer("payloads", "payloads/k-1", 13)
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=pointer.body(), MessageAttributes={
        **size_attribute(13), contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/ok"},
        "trace": {"DataType": "String", "StringValue": "t" * 700}})
    worker = make_worker(aws, tasks, s3)
    worker.handle(aws.receive_event(), None)
    # the operator redrives the dead letter as it is (worker-tier redrive drops only worker_tier.* attributes)
    [dead] = aws.dead_letters()
    kept = {k: v for k, v in dead["MessageAttributes"].items() if not k.startswith("worker_tier.")}
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=dead["Body"], MessageAttributes=kept)
    aws.sqs.delete_message(QueueUrl=aws.dead_letter_queue_url, ReceiptHandle=dead["ReceiptHandle"])
    worker.handle(aws.receive_event(), None)

    assert seen == ["the real body", "the real body"], f"the redriven task ran with body {seen[-1]!r}"


def test_an_offloaded_message_with_eight_attributes_of_its_own_keeps_its_pointer_marker_in_the_dlq(world):
    # The Client allows 8 attributes of the user's beside the path when it offloads (the size attribute is the
    # 10th; docs/large-payloads.md "9 of the user's with the path"). The DLQ copy needs room for worker_tier.failure:
    # envelope.dead_letter_attributes keeps the routing attributes and then the others in order, dropping the last,
    # which is ExtendedPayloadSize (appended last by the Client; and it sorts before lowercase or later names, so the
    # attribute names here, A1..A8, put it last in either order).
    from worker_tier import Client
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
