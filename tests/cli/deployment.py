"""The command line against moto in-process: a work queue, its DLQ, a state table, and dead letters made by the runtime."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import boto3
import pytest
from click.testing import CliRunner, Result
from moto import mock_aws

from tests.support.strict_dynamodb import StrictDynamoDB
from worker_tier.core import contract, envelope, message, payloads
from worker_tier.worker import dead_letter
from worker_tier_cli import cli
from worker_tier_cli.session import Runtime

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


@dataclass
class Deployment:
    """What a deployed stack gives the command line, in moto."""

    sqs: Any
    dynamodb: Any
    queue_url: str
    dlq_url: str
    state_table: str
    runtime: Runtime

    def args(self, *command: str, state: bool = True, options: tuple[str, ...] = ()) -> list[str]:
        """Explicit resources (no stack) and any other ``options`` of the group, then the command."""
        given = ["--region", "us-east-1", "--queue-url", self.queue_url, "--dlq-url", self.dlq_url, *options]
        return given + (["--state-table", self.state_table] if state else []) + list(command)

    def run(self, *command: str, input: str | None = None, **kwargs: Any) -> Result:
        return CliRunner().invoke(cli, self.args(*command, **kwargs), obj=self.runtime, input=input)

    def dead_letter(self, path: str, error: BaseException, body: str, failed_at: datetime = NOW,
                    attributes: dict[str, str] | None = None) -> str:
        """A DLQ message as the worker writes it: body, attributes and ``worker_tier.failure``."""
        original = {contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": path}}
        original.update({k: {"DataType": "String", "StringValue": v} for k, v in (attributes or {}).items()})
        reason = message.failure_reason(error, attempts=3, path=path, failed_at=failed_at)
        sent = self.sqs.send_message(QueueUrl=self.dlq_url, MessageBody=body,
                                     MessageAttributes=envelope.dead_letter_attributes(original, reason))
        return str(sent["MessageId"])

    def offloaded_dead_letter(self, path: str, error: BaseException, body: str, bucket: str = "payloads",
                              upload: bool = True) -> tuple[str, payloads.Pointer]:
        """A dead letter whose body is in S3, as the worker dead-letters an offloaded message: the pointer and its
        ``ExtendedPayloadSize`` (the object put in ``bucket`` unless ``upload`` is False). Returns its id and pointer."""
        s3 = boto3.client("s3", region_name="us-east-1")
        if bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
            s3.create_bucket(Bucket=bucket)
        store = payloads.PayloadStore(bucket, s3)
        pointer = store.put(body) if upload else payloads.Pointer(bucket, "payloads/never-uploaded", len(body.encode()))
        original = {contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": path},
                    **payloads.size_attribute(len(body.encode("utf-8")))}
        reason = message.failure_reason(error, attempts=3, path=path, failed_at=NOW)
        sent = self.sqs.send_message(QueueUrl=self.dlq_url, MessageBody=pointer.body(),
                                     MessageAttributes=envelope.dead_letter_attributes(original, reason))
        return str(sent["MessageId"]), pointer

    def too_large_dead_letter(self, path: str, error: BaseException, body: str, source_message_id: str,
                              attempts: int = 3, reversed_order: bool = False) -> list[dict[str, Any]]:
        """A message too large to carry its reason, dead-lettered by the worker's own code
        (``worker_tier.worker.dead_letter``, with a DLQ limit just over the body): its reason record, then the message.
        ``reversed_order`` sends the message first, as a standard DLQ may hand them out. Returns the two sends."""
        record = {"messageId": source_message_id, "body": body, "attributes": {},
                  "messageAttributes": {contract.PATH_ATTRIBUTE: {"dataType": "String", "stringValue": path}}}
        sends: list[dict[str, Any]] = []

        class Capture:
            def send_message(self, **request: Any) -> dict[str, str]:
                sends.append(request)
                return {"MessageId": "captured"}

        dead_letter.send_to_dead_letter_queue(Capture(), self.dlq_url, record, error, attempts=attempts, path=path,
                                              now=NOW, max_message_bytes=len(body) + 100)
        assert len(sends) == 2, "the body must be too large for its reason"
        for request in reversed(sends) if reversed_order else sends:
            self.sqs.send_message(**request)
        return sends

    def drain(self, queue_url: str) -> list[dict[str, Any]]:
        """Every message of a queue (consumed), with its attributes."""
        got: list[dict[str, Any]] = []
        while True:
            batch = self.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=600,
                                             MessageAttributeNames=["All"]).get("Messages") or []
            if not batch:
                return got
            got.extend(batch)

    def depth(self, queue_url: str) -> int:
        attributes = self.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


@pytest.fixture
def deployment(tmp_path):
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        dynamodb = StrictDynamoDB(boto3.client("dynamodb", region_name="us-east-1"))
        dynamodb.create_table(TableName="state", BillingMode="PAY_PER_REQUEST",
                              KeySchema=[{"AttributeName": contract.STATE_PARTITION_KEY, "KeyType": "HASH"}],
                              AttributeDefinitions=[{"AttributeName": contract.STATE_PARTITION_KEY, "AttributeType": "S"}])
        yield Deployment(
            sqs, dynamodb, sqs.create_queue(QueueName="work")["QueueUrl"], sqs.create_queue(QueueName="dlq")["QueueUrl"],
            "state", Runtime(clock=NOW.timestamp, interactive=lambda: False, wait_seconds=0, state_dir=tmp_path / "state",
                    environ={}),
        )


def hours_ago(hours: float) -> datetime:
    return NOW - timedelta(hours=hours)


def parsed(result: Result) -> Any:
    """The --json output, which must parse."""
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
