"""Idempotency records: their key prefix and size, keys that are no key, and a crashed container task's retry."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.support.aws_world import AwsWorld
from worker_tier import Client, Task
from worker_tier.worker.heartbeat import Heartbeat
from worker_tier.core.contract import IDEMPOTENCY_KEY_PREFIX
from worker_tier.worker.registry import MAX_IDEMPOTENT_PATH_BYTES
from worker_tier_local.context import LocalContext
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.worker.batch import Worker

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


def test_the_longest_idempotent_path_runs_once_with_a_key_of_any_length(aws):
    # GIVEN an idempotent task on the longest path allowed, keyed by a 100 KB value of the body (the state table is
    # held to DynamoDB's key sizes by the strict stand-in)
    path = "/" + "p" * (MAX_IDEMPOTENT_PATH_BYTES - 1)
    tasks = Registry()
    runs: list[int] = []
    tasks.task(path, idempotent=True, idempotency_key="order")(lambda t: runs.append(1))
    body = json.dumps({"order": "A" * 100_000})
    Client(aws.queue_url, sqs=aws.sqs).send(path, body)
    Client(aws.queue_url, sqs=aws.sqs).send(path, body)
    # WHEN both messages are handled, one invocation each
    worker = worker_for(aws, tasks)
    for record in aws.receive_event()["Records"]:
        assert worker.handle({"Records": [record]}, LocalContext("fn", 300, 128, "us-east-1", "123456789012"))["batchItemFailures"] == []
    # THEN the task ran once, its record's key exactly DynamoDB's 2,048 bytes: the key's hash, not the key, is in it
    [key] = [item["pk"]["S"] for item in aws.dynamodb.scan(TableName=aws.state_table)["Items"]]
    assert runs == [1] and len(key.encode()) == 2048


@pytest.mark.parametrize(("key", "bodies", "problem"), [
    (lambda task: None, ['{"order": "A-1"}', '{"order": "B-2"}'],
     "idempotency_key function '<lambda>' of task '/charge' returned None for message {id}; a key must be a non-empty string "
     "(a None or empty key would be one key shared by every such message, and each after the first skipped as done): return a key for every message"),
    (lambda task: "", ['{"order": "A-1"}', '{"order": "B-2"}'],
     "idempotency_key function '<lambda>' of task '/charge' returned '' for message {id}; a key must be a non-empty string "
     "(a None or empty key would be one key shared by every such message, and each after the first skipped as done): return a key for every message"),
    ("order", ['{"order": "", "n": 1}', '{"order": "", "n": 2}'],
     "idempotency_key 'order' of task '/charge' found an empty string in the body of message {id}; a key must be a non-empty value: "
     "send the key in every body"),
])
def test_a_none_or_empty_idempotency_key_dead_letters_the_message_rather_than_skip_it_as_done(aws, key, bodies, problem):
    # GIVEN an idempotent task whose key is None or empty for two different messages
    tasks = Registry()
    runs: list[str] = []
    tasks.task("/charge", idempotent=True, idempotency_key=key)(lambda t: runs.append(t.body))
    for body in bodies:
        Client(aws.queue_url, sqs=aws.sqs).send("/charge", body)
    # WHEN they are handled
    event = aws.receive_event()
    response = worker_for(aws, tasks).handle(event, LocalContext("fn", 300, 128, "us-east-1", "123456789012"))
    # THEN neither ran nor was skipped as done under one shared key: both are dead-lettered, each with the reason
    assert response["batchItemFailures"] == [] and runs == []
    reasons = {m["MessageId"]: json.loads(m["MessageAttributes"]["worker_tier.failure"]["StringValue"]) for m in aws.dead_letters()}
    assert len(reasons) == 2
    for record in event["Records"]:
        [reason] = [r for r in reasons.values() if record["messageId"] in r["error_message"]]
        assert (reason["error_type"], reason["error_message"]) == ("MalformedBodyError", problem.format(id=record["messageId"]))


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
    started = time.monotonic()
    while not runs:  # bounded: a first run that fails before the task (a denied call) must fail the test, not hang it
        assert first.is_alive() and time.monotonic() - started < 30, "the first run ended or never reached the task"
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
