"""Helpers for running the container worker's consumer against the functional tests' AWS world."""

from __future__ import annotations

import threading
import time

from tests.support.aws_world import AwsWorld
from worker_tier.container.consumer import Consumer
from worker_tier.container.protection import TaskProtection
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.worker.batch import Worker


def consumer_for(aws: AwsWorld, tasks: Registry, settings: Settings | None = None, sqs=None, middleware=(), **kwargs) -> Consumer:
    sqs = sqs if sqs is not None else aws.sqs
    worker = Worker(settings or Settings(), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                    state_table=aws.state_table, registry=tasks, sqs=sqs, dynamodb=aws.dynamodb, middleware=middleware)
    kwargs.setdefault("protection", TaskProtection(agent_uri=""))
    return Consumer(worker, sqs, aws.queue_url, poll_wait_seconds=1, heartbeat_interval=1, **kwargs)


def run_until(consumer: Consumer, done, timeout: float = 15) -> threading.Thread:
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)
    return thread


def depth(aws: AwsWorld) -> int:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = aws.sqs.get_queue_attributes(QueueUrl=aws.queue_url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[n]) for n in names)
