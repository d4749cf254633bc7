"""The container worker's runtime against the hostile audit of issue #8 (items 2-7, 11): forwards, protection,
heartbeat retries, drain on SIGTERM, receive errors, FIFO order, the first lease."""

from __future__ import annotations

import threading

from tests.functional.conftest import AwsWorld
from tests.functional.test_consumer import run_until
from tests.strict_sqs import StrictSQS
from worker_tier import Client, Task
from worker_tier.consumer import Consumer, TaskProtection
from worker_tier.registry import Registry
from worker_tier.settings import Settings
from worker_tier.worker import Worker


def worker_on(aws: AwsWorld, tasks: Registry, queue_url: str, sqs=None, long_queue_url: str | None = None) -> Worker:
    return Worker(Settings(), queue_url=queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                  state_table=aws.state_table, registry=tasks, sqs=sqs or aws.sqs, dynamodb=aws.dynamodb,
                  long_queue_url=long_queue_url)


def container_on(aws: AwsWorld, tasks: Registry, queue_url: str, sqs=None, **kwargs) -> Consumer:
    sqs = sqs or aws.sqs
    kwargs.setdefault("protection", TaskProtection(agent_uri=""))
    kwargs.setdefault("poll_wait_seconds", 1)
    kwargs.setdefault("heartbeat_interval", 1)
    return Consumer(worker_on(aws, tasks, queue_url, sqs), sqs, queue_url, exit_process=lambda code: None, **kwargs)


# -- item 2: an idempotent container task runs once per source message ------------------------------------------------


def test_a_source_message_delivered_twice_runs_its_idempotent_container_task_once(aws):
    # GIVEN an idempotent container task (default key) and one source message the Lambda worker receives twice
    long_queue = aws.sqs.create_queue(QueueName="long")["QueueUrl"]
    runs: list[str] = []
    tasks = Registry()
    tasks.task("/render", idempotent=True, container=True)(lambda t: runs.append(t.message_id))
    Client(aws.queue_url, sqs=aws.sqs).send("/render", '{"video": 1}')
    event = aws.receive_event()
    lambda_worker = worker_on(aws, tasks, aws.queue_url, StrictSQS(aws.sqs), long_queue_url=long_queue)
    # WHEN both deliveries are forwarded and the container worker consumes the long queue
    for _ in range(2):
        assert lambda_worker.handle(event, None) == {"batchItemFailures": []}
    consumer = container_on(aws, tasks, long_queue, concurrency=1)
    thread = run_until(consumer, lambda: aws.sqs.get_queue_attributes(
        QueueUrl=long_queue, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"] == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"})
    consumer.stopping.set()
    thread.join(10)
    # THEN the task ran once: both forwards carry the source message id, the container's idempotency key
    assert len(runs) == 1
