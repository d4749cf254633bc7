"""The same cases through the Lambda handler path and the container worker: one core, one behaviour."""

from __future__ import annotations

import json

import pytest

from tests.support.aws_world import AwsWorld
from tests.support.container import consumer_for, depth, run_until
from worker_tier import Client, NonRetryableError, Task
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.worker.batch import Worker


def tasks() -> Registry:
    registry = Registry()
    registry.task("/ok")(lambda t: None)
    registry.task("/typed", parser=json.loads)(lambda t: None)

    @registry.task("/refuse")
    def refuse(task: Task) -> None:
        raise NonRetryableError(f"refused {task.body}")

    @registry.task("/boom")
    def boom(task: Task) -> None:
        raise RuntimeError("boom")

    return registry


def run_lambda(aws: AwsWorld, registry: Registry) -> None:
    worker = Worker(Settings(max_retries=1), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                    registry=registry, sqs=aws.sqs)
    event = aws.receive_event()
    failed = {f["itemIdentifier"] for f in worker.handle(event, None)["batchItemFailures"]}
    for record in event["Records"]:
        if record["messageId"] not in failed:
            aws.sqs.delete_message(QueueUrl=aws.queue_url, ReceiptHandle=record["receiptHandle"])


def run_container(aws: AwsWorld, registry: Registry) -> None:
    consumer = consumer_for(aws, registry, Settings(max_retries=1))
    thread = run_until(consumer, lambda: depth(aws) == 0)
    consumer.stopping.set()
    thread.join(10)


@pytest.mark.parametrize("run", [run_lambda, run_container], ids=["lambda", "container"])
def test_every_fate_is_the_same_on_both_paths(aws, run):
    # GIVEN one message for each fate
    client = Client(aws.queue_url, sqs=aws.sqs)
    for path, body in [("/ok", "1"), ("/refuse", "2"), ("/nobody", "3"), ("/typed", "not json"), ("/boom", "5")]:
        client.send(path, body)
    # WHEN processed
    run(aws, tasks())
    # THEN the queue is empty and the DLQ holds the four failures, each with its reason
    assert depth(aws) == 0
    reasons = {}
    for _ in range(3):
        for dead in aws.dead_letters():
            reasons[dead["Body"]] = json.loads(dead["MessageAttributes"]["worker_tier.failure"]["StringValue"])
    assert {body: (r["error_type"], r["attempts"]) for body, r in reasons.items()} == {
        "2": ("NonRetryableError", 1),
        "3": ("UnknownPathError", 1),
        "not json": ("MalformedBodyError", 1),
        "5": ("RuntimeError", 1),
    }
    assert reasons["2"]["error_message"] == "refused 2"


@pytest.mark.parametrize("run", [run_lambda, run_container], ids=["lambda", "container"])
def test_a_task_raising_system_exit_fails_only_its_message_on_both_paths(aws, run):
    # GIVEN a task that calls sys.exit, beside a good one
    registry = tasks()

    @registry.task("/exit")
    def leave(task: Task) -> None:
        raise SystemExit(f"exit {task.body}")

    client = Client(aws.queue_url, sqs=aws.sqs)
    client.send("/ok", "1")
    client.send("/exit", "2")
    # WHEN processed (max_retries 1)
    run(aws, registry)
    # THEN the worker survives, the good one is done, and the exiting one is in the DLQ with its reason
    assert depth(aws) == 0
    [dead] = aws.dead_letters()
    reason = json.loads(dead["MessageAttributes"]["worker_tier.failure"]["StringValue"])
    assert (dead["Body"], reason["error_type"], reason["error_message"]) == ("2", "SystemExit", "exit 2")
