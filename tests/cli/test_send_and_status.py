"""`send` through worker_tier.Client, and `status`: queue counts and the delay dispatcher's watermark."""

from __future__ import annotations

from tests.cli.deployment import NOW, parsed
from worker_tier.core import contract
from worker_tier.delays.dispatch_state import WATERMARK_KEY
from worker_tier.core.errors import NonRetryableError


def test_send_sends_path_body_and_attributes_through_the_client(deployment):
    # WHEN send runs with an attribute and a delay SQS carries itself
    result = deployment.run("send", "/hello", '{"name": "Ada"}', "--attr", "tenant=acme", "--delay", "0", "--json")
    # THEN the message is in the work queue with its path and attribute, under the id printed
    sent = parsed(result)
    [got] = deployment.drain(deployment.queue_url)
    assert got["MessageId"] == sent["message_id"] and got["Body"] == '{"name": "Ada"}'
    assert got["MessageAttributes"][contract.PATH_ATTRIBUTE]["StringValue"] == "/hello"
    assert got["MessageAttributes"]["tenant"] == {"StringValue": "acme", "DataType": "String"}


def test_send_prints_the_id_for_people(deployment):
    result = deployment.run("send", "/hello", "hi")
    assert result.exit_code == 0 and result.stdout.startswith("sent /hello ")


def test_send_refused_by_the_client_prints_its_message_and_exits_2(deployment):
    # WHEN an attribute uses Worker Tier's reserved prefix
    result = deployment.run("send", "/hello", "hi", "--attr", "worker_tier.x=1")
    # THEN the Client's own message is printed, and nothing is sent
    assert result.exit_code == 2
    assert "worker_tier.x" in result.stderr and "reserved" in result.stderr.lower()
    assert deployment.drain(deployment.queue_url) == []


def test_send_at_that_is_no_time_is_a_usage_error(deployment):
    result = deployment.run("send", "/hello", "hi", "--at", "soon")
    assert result.exit_code == 2 and "expected an ISO 8601 time (2026-11-22T09:30:00Z), got 'soon'" in result.stderr


def test_send_attr_without_equals_is_a_usage_error(deployment):
    result = deployment.run("send", "/hello", "hi", "--attr", "tenant")
    assert result.exit_code == 2 and "expected NAME=VALUE, got 'tenant'" in result.stderr


def test_status_shows_queue_counts_dlq_depth_and_the_watermark_lag(deployment):
    # GIVEN two visible and one delayed message, one dead letter, and a watermark 3 minutes behind
    for body in ("a", "b"):
        deployment.sqs.send_message(QueueUrl=deployment.queue_url, MessageBody=body)
    deployment.sqs.send_message(QueueUrl=deployment.queue_url, MessageBody="later", DelaySeconds=600)
    deployment.dead_letter("/poison", NonRetryableError("x"), "{}")
    minute = int(NOW.timestamp()) // 60 - 3
    deployment.dynamodb.put_item(TableName="state", Item={contract.STATE_PARTITION_KEY: {"S": WATERMARK_KEY},
                                                          "bucket": {"N": str(minute)}, "cursors": {"M": {}}})
    # WHEN status runs, as text and as JSON
    text = deployment.run("status")
    shown = parsed(deployment.run("status", "--json"))
    # THEN both show the counts and the lag
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[1].split()[:5] == ["work", "queue", "2", "0", "1"]
    assert lines[2].split()[:4] == ["DLQ", "1", "0", "0"]
    assert "ApproximateAgeOfOldestMessage" in text.stdout
    assert "delay dispatcher: watermark 2026-11-22T11:57:00Z, lag 3 min" in text.stdout
    assert shown["queues"]["work queue"] == {"url": deployment.queue_url, "visible": 2, "in_flight": 0, "delayed": 1,
                                             "oldest_age_seconds": None}
    assert shown["queues"]["DLQ"]["visible"] == 1
    assert shown["delay_dispatcher"]["lag_minutes"] == 3


def test_status_before_the_dispatcher_ran_says_so(deployment):
    result = deployment.run("status")
    assert "delay dispatcher: no watermark yet: the delay dispatcher has not run" in result.stdout


def test_status_without_a_state_table_says_how_to_give_one(deployment):
    result = deployment.run("status", state=False)
    assert result.exit_code == 0 and "delay dispatcher: no state table (pass --state-table or --stack)" in result.stdout
