"""A world with priorities on moto: the work queue (the normal level), a high and a low queue shaped alike and
redriving to the one DLQ, the state and delay tables, checked against the ``priorities`` stack's roles.

Call inside ``moto.mock_aws``, with IAM enforcement installed (the functional tests' conftest does both).
"""

from __future__ import annotations

import json
from typing import Any

import boto3

from tests.support import stacks
from tests.support.strict_dynamodb import StrictDynamoDB
from worker_tier.core import contract
from worker_tier.core.envelope import lambda_record
from worker_tier.core.settings import Settings
from worker_tier.delays import delay

REGION = "us-east-1"
SETTINGS = Settings(priorities=True)
# Queue names by level: the work queue keeps its name, the levels' are the stack's construct ids' stems.
QUEUE_NAMES = {"normal": "work", "high": "work-high", "low": "work-low"}


class PriorityWorld:
    """moto's queues per level, the DLQ, the state and delay tables; ``environment`` is what the stack gives a function."""

    def __init__(self, shape: str = "priorities") -> None:
        self.sqs = boto3.client("sqs", region_name=REGION)
        self.dynamodb = StrictDynamoDB(boto3.client("dynamodb", region_name=REGION))
        self.dlq = self.sqs.create_queue(QueueName="dlq")["QueueUrl"]
        dlq_arn = self.arn(self.dlq)
        redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": SETTINGS.redrive_max_receive_count})
        self.urls = {level: self.sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "300",
                                                                              "RedrivePolicy": redrive})["QueueUrl"]
                     for level, name in QUEUE_NAMES.items()}
        self.dynamodb.create_table(TableName="state", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                                   AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                                   BillingMode="PAY_PER_REQUEST")
        self.dynamodb.create_table(
            TableName="delay", BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": delay.PK, "KeyType": "HASH"}, {"AttributeName": delay.SK, "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": delay.PK, "AttributeType": "S"},
                                  {"AttributeName": delay.SK, "AttributeType": "S"}])
        boto3.client("s3", region_name=REGION).create_bucket(Bucket="payloads")
        stacks.enforce(shape, queues={"WorkerQueue": "work", "WorkerHighQueue": "work-high", "WorkerLowQueue": "work-low",
                                             "WorkerDeadLetterQueue": "dlq", "LongTasksLongTaskQueue": "long"},
                       tables={"StateTable": "state", "DelaysDelayTable": "delay"}, buckets={stacks.PAYLOAD_BUCKET: "payloads"})

    @property
    def levels(self) -> dict[str, str]:
        """The high and low levels' queue URLs, as ``priority_queue_urls`` takes them."""
        return {level: url for level, url in self.urls.items() if level != "normal"}

    @property
    def environment(self) -> dict[str, str]:
        """The resource variables the stack gives the worker function (settings aside)."""
        return contract.Resources(queue_url=self.urls["normal"], dlq_url=self.dlq, state_table="state", delay_table="delay",
                                  high_queue_url=self.urls["high"], low_queue_url=self.urls["low"]).to_environment()

    def arn(self, url: str) -> str:
        return str(self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])

    def receive(self, level: str, visibility: int = 30) -> list[dict[str, Any]]:
        """Up to 10 messages of the level's queue, with their attributes."""
        return self.sqs.receive_message(QueueUrl=self.urls[level], MaxNumberOfMessages=10, VisibilityTimeout=visibility,
                                        MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]).get("Messages", [])

    def event(self, level: str) -> dict[str, Any]:
        """Lambda's SQS event of what the level's event source would receive now."""
        arn = self.arn(self.urls[level])
        return {"Records": [lambda_record(m, arn, REGION) for m in self.receive(level)]}

    def bodies(self, level: str) -> list[str]:
        return sorted(m["Body"] for m in self.receive(level))
