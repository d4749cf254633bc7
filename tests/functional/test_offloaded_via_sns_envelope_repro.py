"""Repro: with ``via_sns``, a pointer marked in the SNS envelope (AWS's SNS Extended Client, raw delivery off) reaches
the task as its body.

docs/large-payloads.md: "With via_sns, the SNS envelope is unwrapped after the read" and "The task never runs with a
pointer or an empty body". AWS's SNS Extended Client marks an offloaded message with ``ExtendedPayloadSize`` on the
SNS message; without raw message delivery SNS puts it in the envelope's ``MessageAttributes``, not in SQS's, so the
worker (which looks at SQS's attributes only, ``Worker._process_record``) unwraps the envelope and runs the task with
the Extended Client pointer as its body.
"""

from __future__ import annotations

import json

from worker_tier.core.settings import Settings
from worker_tier.testing import TaskWorld
from worker_tier.worker.registry import Registry

POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"


def test_a_via_sns_message_whose_envelope_marks_an_offloaded_body_runs_with_the_real_body():
    settings, seen, tasks = Settings(via_sns=True), [], Registry()
    tasks.task(settings.http_path)(lambda task: seen.append(task.body))
    with TaskWorld((), registry=tasks, settings=settings) as world:
        # GIVEN a body in the payload bucket, published through SNS by AWS's SNS Extended Client (raw delivery off)
        world.objects.put_object(Bucket=world.payload_bucket, Key="payloads/x", Body=b"the real body")
        pointer = json.dumps([POINTER_CLASS, {"s3BucketName": world.payload_bucket, "s3Key": "payloads/x"}])
        envelope = {"Type": "Notification", "MessageId": "m-1", "TopicArn": "arn:aws:sns:us-east-1:123456789012:t",
                    "Message": pointer, "Timestamp": "2026-01-01T00:00:00.000Z", "SignatureVersion": "1",
                    "Signature": "x", "SigningCertURL": "https://x", "UnsubscribeURL": "https://x",
                    "MessageAttributes": {"ExtendedPayloadSize": {"Type": "Number", "Value": "13"}}}
        world.queues.send_message(QueueUrl=world.queue_url, MessageBody=json.dumps(envelope))
        # WHEN the worker runs it
        world.run()
    # THEN the task never sees the pointer
    assert seen == ["the real body"]
