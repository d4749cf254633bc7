"""Repro: a standard queue's duplicate delivery of an offloaded message to an idempotent task is dead-lettered.

SQS standard queues deliver at least once: two copies of one message (one message id, two receipt handles) can be
in flight at once, which is why a task is made idempotent (the default key is the message id). For an ordinary
message the second copy is skipped as a duplicate and counts as a success. For an offloaded one, the first copy's
success deletes the object, and the second copy's body read (done before the idempotency check) fails with
PayloadError: the message that already succeeded is dead-lettered, the DLQ alarm fires, and a redrive of it can only
fail again. Promise 4/7: an object is deleted only when no live copy still needs it; nothing goes to the DLQ that
succeeded.
"""

from __future__ import annotations

from tests.functional.test_offloaded_bodies import make_worker, offload, reason_of, world  # noqa: F401
from tests.support.aws_world import REGION
from worker_tier.core.envelope import lambda_record
from worker_tier.worker.registry import Registry


def _receive(aws):
    [message] = aws.sqs.receive_message(QueueUrl=aws.queue_url, MessageAttributeNames=["All"],
                                        MessageSystemAttributeNames=["All"], VisibilityTimeout=0)["Messages"]
    return {"Records": [lambda_record(message, aws.queue_arn, REGION)]}


def test_the_second_copy_of_a_succeeded_offloaded_message_is_skipped_not_dead_lettered(world):
    aws, s3 = world
    runs: list[str] = []
    tasks = Registry()
    tasks.task("/ok", idempotent=True)(lambda task: runs.append(task.body))
    worker = make_worker(aws, tasks, s3)
    offload(aws, s3, "the real body")
    first, second = _receive(aws), _receive(aws)  # two copies in flight: one message id, two receipt handles
    assert first["Records"][0]["messageId"] == second["Records"][0]["messageId"]

    assert worker.handle(first, None)["batchItemFailures"] == []
    response = worker.handle(second, None)

    assert runs == ["the real body"]
    dead = aws.dead_letters()
    assert dead == [], f"the duplicate of a succeeded message was dead-lettered: {reason_of(dead[0])}"
    assert response["batchItemFailures"] == []
