"""Hostile audit of issue #10's command line: reproductions. Each test asserts the PROMISE; a failing test is a finding."""

from __future__ import annotations

import json
from collections import Counter

import boto3
from botocore.exceptions import ReadTimeoutError

from tests.cli.deployment import parsed
from tests.support.strict_sqs import StrictSQS
from worker_tier import contract
from worker_tier.errors import NonRetryableError


def _bodies(messages):
    return Counter(m["Body"] for m in messages)


def _use(deployment, sqs):
    deployment.runtime.client = lambda service, **kwargs: sqs if service == "sqs" else boto3.client(service, **kwargs)


def test_redrive_moves_every_dead_letter_even_when_bodies_repeat(deployment):
    # GIVEN 30 dead letters that were all in the DLQ before the redrive began, with the same path and body
    # (a poison ping task: body "{}"), 30 distinct SQS messages
    for _ in range(30):
        deployment.dead_letter("/ping", NonRetryableError("bad"), "{}")
    # WHEN redrive --path /ping runs
    report = parsed(deployment.run("redrive", "--path", "/ping", "--json"))
    # THEN all 30 moved (none was dead-lettered after the run began)
    assert (report["moved"], report["arrived"]) == (30, 0)
    assert deployment.depth(deployment.dlq_url) == 0


class LostResponseSQS(StrictSQS):
    """SQS accepts the SendMessageBatch, but its response is lost (a read timeout): the client sees an error."""

    def __init__(self, inner, queue_url) -> None:
        super().__init__(inner)
        self.queue_url, self.calls = queue_url, 0

    def send_message_batch(self, QueueUrl, Entries, **rest):
        response = super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries, **rest)
        if QueueUrl == self.queue_url:
            self.calls += 1
            if self.calls == 1:
                raise ReadTimeoutError(endpoint_url=QueueUrl)
        return response


def test_redrive_send_whose_response_is_lost_does_not_duplicate_silently(deployment):
    # GIVEN 5 dead letters, and SQS whose first SendMessageBatch to the work queue succeeds but the response is lost
    for n in range(5):
        deployment.dead_letter("/a", NonRetryableError("bad"), f"a{n}")
    _use(deployment, LostResponseSQS(boto3.client("sqs", region_name="us-east-1"), deployment.queue_url))
    # WHEN redrive --path /a runs
    result = deployment.run("redrive", "--path", "/a", "--json")
    report = json.loads(result.stdout)
    work, dead = _bodies(deployment.drain(deployment.queue_url)), deployment.drain(deployment.dlq_url)
    # THEN no message is in both queues, or at least the report names them as possibly sent (not merely "failed"),
    # by the message id of the copy left in the DLQ
    both = {m["MessageId"] for m in dead if m["Body"] in work}
    assert both and set(report["possibly_sent"]) >= both and report["failed"] == 0, (report, work, dead)
    assert result.exit_code == 1


def test_redrive_of_a_message_that_had_ten_attributes_brings_them_all_back_or_says_so(deployment):
    # GIVEN a message that carried path + 9 user attributes (SQS's 10): dead-lettering it with the reason drops one
    users = {f"a{n}": f"v{n}" for n in range(9)}
    deployment.dead_letter("/full", NonRetryableError("bad"), "f1", attributes=users)
    # WHEN it is redriven
    result = deployment.run("redrive", "--path", "/full", "--json")
    report = parsed(result)
    [moved] = deployment.drain(deployment.queue_url)
    back = set(moved.get("MessageAttributes", {}))
    # THEN every original attribute is back, or the report names the ones that are gone (the reason that named them is removed)
    missing = set(users) - back
    assert not missing or any(name in json.dumps(report) for name in missing), (missing, report)


def test_delayed_cancel_json_is_valid_and_exit_code_names_the_outcome(deployment):
    deployment.dynamodb.create_table(TableName="delay", BillingMode="PAY_PER_REQUEST",
                                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                                           {"AttributeName": "sk", "AttributeType": "S"}])
    result = deployment.run("delayed", "cancel", "nobody", "--json", options=("--delay-table", "delay"))
    assert result.exit_code == 4, result.output
    assert json.loads(result.stdout)["status"] == "not found"


class DiesDuringRedrive(StrictSQS):
    """A live worker: during the redrive's first send, a message that was sent to the work queue before the redrive
    began reaches maxReceiveCount and SQS itself moves it to the DLQ (keeping its original SentTimestamp)."""

    def __init__(self, inner, deployment) -> None:
        super().__init__(inner)
        self.deployment, self.done = deployment, False

    def send_message_batch(self, QueueUrl, Entries, **rest):
        if QueueUrl == self.deployment.queue_url and not self.done:
            self.done = True
            raw = self.deployment.sqs
            for _ in range(3):  # received, not deleted, again: over maxReceiveCount, SQS dead-letters it
                raw.receive_message(QueueUrl=QueueUrl, MaxNumberOfMessages=10, VisibilityTimeout=0)
        return super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries, **rest)


def test_redrive_never_moves_a_message_dead_lettered_after_it_began(deployment):
    sqs = deployment.sqs
    arn = sqs.get_queue_attributes(QueueUrl=deployment.dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.set_queue_attributes(QueueUrl=deployment.queue_url, Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "1"})})
    # GIVEN a dead letter, and a message in the work queue (sent before the redrive begins) that will die during it
    deployment.dead_letter("/a", NonRetryableError("bad"), "old")
    sqs.send_message(QueueUrl=deployment.queue_url, MessageBody="late",
                     MessageAttributes={contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/a"}})
    _use(deployment, DiesDuringRedrive(boto3.client("sqs", region_name="us-east-1"), deployment))
    # WHEN redrive --path /a runs
    report = json.loads(deployment.run("redrive", "--path", "/a", "--json").stdout)
    dead = _bodies(deployment.drain(deployment.dlq_url))
    # THEN (PROMISE) "late", dead-lettered after the redrive began, was not moved: it is still in the DLQ
    assert dead.get("late") == 1, (report, dead)
