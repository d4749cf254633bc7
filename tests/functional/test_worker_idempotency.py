"""Idempotency records: their key prefix, and a crashed container task's retry (issue #8, item 13)."""

from __future__ import annotations

import threading
import time

from tests.functional.conftest import AwsWorld
from worker_tier import Client, Task
from worker_tier.heartbeat import Heartbeat
from worker_tier.idempotency import IDEMPOTENCY_KEY_PREFIX
from worker_tier_local.context import LocalContext
from worker_tier.registry import Registry
from worker_tier.settings import Settings
from worker_tier.worker import Worker

INTERVAL_SECONDS = 1
MARGIN_SECONDS = 1  # the lease: interval + margin = 2 s


def worker_for(aws: AwsWorld, tasks: Registry) -> Worker:
    return Worker(Settings(), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                  state_table=aws.state_table, registry=tasks, sqs=aws.sqs, dynamodb=aws.dynamodb, random=lambda: 0.999)


def test_every_idempotency_record_key_starts_with_the_prefix_and_the_path(aws):
    # GIVEN an idempotent task
    tasks = Registry()
    tasks.task("/charge", idempotent=True, idempotency_key="order")(lambda t: None)
    Client(aws.queue_url, sqs=aws.sqs).send("/charge", '{"order": "A-1"}')
    # WHEN it runs
    context = LocalContext("fn", 300, 128, "us-east-1", "123456789012")
    assert worker_for(aws, tasks).handle(aws.receive_event(), context)["batchItemFailures"] == []
    # THEN its record's key starts with the prefix the worker role is limited to, then the task's path
    keys = [item["pk"]["S"] for item in aws.dynamodb.scan(TableName=aws.state_table)["Items"]]
    assert len(keys) == 1 and keys[0].startswith(f"{IDEMPOTENCY_KEY_PREFIX}/charge#")


def test_a_crashed_container_task_runs_again_once_its_lease_is_gone(aws):
    # GIVEN an idempotent long task whose first run hangs forever (its container crashed mid-task)
    tasks = Registry()
    runs: list[int] = []
    crashed = threading.Event()

    @tasks.task("/render", idempotent=True)
    def render(task: Task) -> None:
        runs.append(task.receive_count)
        if len(runs) == 1:
            crashed.wait(30)  # never returns while the test runs: its INPROGRESS record stays

    Client(aws.queue_url, sqs=aws.sqs).send("/render", "{}")
    [record] = aws.receive_event()["Records"]
    worker = worker_for(aws, tasks)
    heartbeat = Heartbeat(aws.sqs, aws.queue_url, interval_seconds=INTERVAL_SECONDS, margin_seconds=MARGIN_SECONDS)
    heartbeat.hold(record["messageId"], record["receiptHandle"])
    first = threading.Thread(target=worker.handle, args=({"Records": [record]}, None), kwargs={"heartbeat": heartbeat}, daemon=True)
    first.start()
    while not runs:
        time.sleep(0.01)
    # WHEN its message returns after the lease (interval + margin) and another container worker takes it
    time.sleep(INTERVAL_SECONDS + MARGIN_SECONDS + 0.5)
    retry = {**record, "attributes": {**record["attributes"], "ApproximateReceiveCount": "2"}}
    other = Heartbeat(aws.sqs, aws.queue_url, interval_seconds=INTERVAL_SECONDS, margin_seconds=MARGIN_SECONDS)
    other.hold(record["messageId"], record["receiptHandle"])
    try:
        response = worker.handle({"Records": [retry]}, None, heartbeat=other)
    finally:
        crashed.set()
        first.join(5)
    # THEN the retry runs: the INPROGRESS record expired with the lease, not after Powertools' hour
    assert response["batchItemFailures"] == []
    assert runs == [1, 2]
