"""Helpers for driving the Lambda worker in-process against the functional tests' AWS world (``tests.support.aws_world``)."""

from __future__ import annotations

import json

from tests.support.aws_world import AwsWorld
from tests.support.strict_sqs import StrictSQS
from worker_tier import Task
from worker_tier.core.message import FAILURE_ATTRIBUTE
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.worker.batch import Worker

EB_QUEUE_BYTES = 256 * 1024  # an EB environment's queues: SQS's default MaximumMessageSize until August 2025
START = 1_800_000_000.0  # the tests' wall clock at the receive


class Clock:
    """A settable wall clock, shared by the worker and the strict stand-in."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def worker_for(aws: AwsWorld, tasks: Registry, clock: Clock | None = None, **options) -> Worker:
    settings = options.pop("settings", None) or Settings(**options.pop("settings_values", {}))
    return Worker(
        settings,
        queue_url=aws.queue_url,
        dead_letter_queue_url=aws.dead_letter_queue_url,
        state_table=aws.state_table,
        registry=tasks,
        sqs=aws.sqs,
        dynamodb=aws.dynamodb,
        clock=clock or Clock(),
        random=lambda: 0.999,
        **options,
    )


def send(aws: AwsWorld, path: str, body: str = "{}", **attributes: dict) -> None:
    aws.sqs.send_message(
        QueueUrl=aws.queue_url,
        MessageBody=body,
        MessageAttributes={"beanstalk.sqsd.path": {"DataType": "String", "StringValue": path}, **attributes},
    )


def strict(aws: AwsWorld, clock: Clock) -> StrictSQS:
    """Route the world's SQS calls through the strict stand-in (it refuses what SQS refuses and moto accepts)."""
    aws.sqs = StrictSQS(aws.sqs, clock=clock)
    return aws.sqs


def entries(aws: AwsWorld) -> list[dict]:
    return [entry for params in aws.params("ChangeMessageVisibilityBatch") for entry in params["Entries"]]


def failure_ids(response: dict) -> set[str]:
    return {item["itemIdentifier"] for item in response["batchItemFailures"]}


def dead_letter_sends(aws: AwsWorld) -> list[dict]:
    return [params for params in aws.params("SendMessage") if params["QueueUrl"] == aws.dead_letter_queue_url]


def reason_of(dead: dict) -> dict:
    return json.loads(dead["MessageAttributes"][FAILURE_ATTRIBUTE]["StringValue"])


def one_task(path: str, handler) -> Registry:
    tasks = Registry()
    tasks.task(path)(handler)
    return tasks


def raise_(error: BaseException):
    def handler(task: Task) -> None:
        raise error

    return handler
