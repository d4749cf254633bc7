"""The local environment's own StartMessageMoveTask/List/Cancel (worker_tier_local.move_tasks), attacked
through moto's real server as the local environment runs it: two redrives, cancel mid-move, out-of-range rates."""

from __future__ import annotations

import json
import time
import urllib.request

import boto3
import pytest
from click.testing import CliRunner

from worker_tier_cli import cli
from worker_tier_cli.session import Runtime
from worker_tier_local.server import LocalServer

MESSAGES = 20


@pytest.fixture
def server():
    local = LocalServer("127.0.0.1", 0, "us-east-1")
    local.start()
    host, port = local.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")).close()  # moto's state is per process
    sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="local", aws_secret_access_key="local")
    dlq_url = sqs.create_queue(QueueName="audit-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue_url = sqs.create_queue(QueueName="audit-queue", Attributes={"RedrivePolicy": json.dumps(
        {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3})})["QueueUrl"]
    for index in range(MESSAGES):
        sqs.send_message(QueueUrl=dlq_url, MessageBody=f"dead {index}")
    try:
        yield endpoint, sqs, queue_url, dlq_url, dlq_arn
    finally:
        local.stop()


def _bodies(sqs, queue_url):
    got = []
    while batch := sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=600).get("Messages"):
        got += [m["Body"] for m in batch]
    return got


def _wait_done(sqs, dlq_arn, seconds=60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        [task] = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]
        if task["Status"] not in ("RUNNING", "CANCELLING"):
            return task
        time.sleep(0.2)
    raise AssertionError("move task never ended")


def test_a_second_redrive_while_a_move_task_runs_is_refused_not_run_as_a_batch_move_beside_it(server, tmp_path):
    # GIVEN a slow move task running on the DLQ (1 message a second), as a first `worker-tier redrive --rate 1` starts
    endpoint, sqs, queue_url, dlq_url, dlq_arn = server
    sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=1)
    # WHEN a second operator runs `worker-tier redrive --yes`
    runtime = Runtime(interactive=lambda: False, state_dir=tmp_path, environ={}, wait_seconds=0)
    result = CliRunner().invoke(cli, ["--endpoint-url", endpoint, "--region", "us-east-1", "--queue-url", queue_url,
                                      "--dlq-url", dlq_url, "redrive", "--yes"], obj=runtime)
    # THEN it says a move task is already running (and does not pretend the endpoint has no move tasks,
    # then move the same DLQ batch by batch beside the running task)
    assert "not available at this endpoint" not in result.output, result.output
    assert "already running" in result.output, result.output
    assert result.exit_code != 0


def test_a_move_task_cancelled_mid_move_loses_and_duplicates_nothing(server):
    # GIVEN a slow move task that has moved a few messages
    _, sqs, queue_url, dlq_url, dlq_arn = server
    handle = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=2)["TaskHandle"]
    time.sleep(2.5)
    # WHEN it is cancelled
    sqs.cancel_message_move_task(TaskHandle=handle)
    task = _wait_done(sqs, dlq_arn)
    # THEN it ends CANCELLED, and every message is in exactly one of the two queues
    assert task["Status"] == "CANCELLED"
    moved, left = _bodies(sqs, queue_url), _bodies(sqs, dlq_url)
    assert sorted(moved + left) == sorted(f"dead {i}" for i in range(MESSAGES))
    assert task["ApproximateNumberOfMessagesMoved"] == len(moved)


@pytest.mark.parametrize("rate", [0, -1, 501])
def test_a_move_task_rate_outside_sqss_range_is_refused_naming_it(server, rate):
    # GIVEN SQS's range for MaxNumberOfMessagesPerSecond: 1 to 500 (API_StartMessageMoveTask)
    _, sqs, _, _, dlq_arn = server
    # WHEN a move task asks for a rate outside it THEN the request is refused with InvalidParameterValue, as SQS does
    with pytest.raises(sqs.exceptions.ClientError) as refused:
        sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=rate)
    assert "MaxNumberOfMessagesPerSecond" in str(refused.value)
