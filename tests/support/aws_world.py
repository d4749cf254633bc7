"""The functional tests' AWS world: moto's queue, its DLQ, the state table and the payload bucket, as the stack makes them.

The state table's client is moto's behind the strict DynamoDB stand-in (``tests.support.strict_dynamodb``), so what
DynamoDB would refuse (a key over 2,048 bytes, 26 writes in a batch) is refused here too. Call ``make_world`` inside
``moto.mock_aws``; the functional tests' ``aws`` and ``aws_fifo`` fixtures do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import boto3

from tests.support import stacks
from tests.support.strict_dynamodb import StrictDynamoDB
from worker_tier.worker.idempotency import STATE_TABLE_PARTITION_KEY, STATE_TABLE_TTL_ATTRIBUTE
from worker_tier.core.envelope import lambda_record
from worker_tier.core.settings import Settings

REGION = "us-east-1"
# The moto bucket that stands for the stack's payload bucket.
PAYLOAD_BUCKET = "payloads"

@dataclass
class AwsWorld:
    """moto clients plus the resources one test works against."""

    sqs: Any
    dynamodb: Any
    queue_url: str
    queue_arn: str
    dead_letter_queue_url: str
    state_table: str
    calls: list[tuple[str, dict]] = field(default_factory=list)
    s3: Any = None
    payload_bucket: str = PAYLOAD_BUCKET

    def receive_event(self, max_messages: int = 10, visibility: int = 30) -> dict[str, Any]:
        """Receive from the queue and shape the messages as Lambda's SQS event."""
        messages: list[dict] = []
        while len(messages) < max_messages:
            got = self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=min(10, max_messages - len(messages)),
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
                VisibilityTimeout=visibility,
            ).get("Messages", [])
            if not got:
                break
            messages.extend(got)
        return {"Records": [lambda_record(m, self.queue_arn, REGION) for m in messages]}

    def create_delay_table(self, name: str = "delay") -> str:
        """A delay table as the stack makes it (pk, sk), for a worker that re-sends long retries through it."""
        self.dynamodb.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        return name

    def dead_letters(self) -> list[dict[str, Any]]:
        got = self.sqs.receive_message(
            QueueUrl=self.dead_letter_queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        ).get("Messages", [])
        return got

    def count(self, operation: str) -> int:
        return sum(1 for name, _ in self.calls if name == operation)

    def params(self, operation: str) -> list[dict]:
        return [params for name, params in self.calls if name == operation]


def make_world(fifo: bool = False, settings: Settings | None = None) -> AwsWorld:
    settings = settings or Settings(fifo=fifo)
    sqs = boto3.client("sqs", region_name=REGION)
    dynamodb = StrictDynamoDB(boto3.client("dynamodb", region_name=REGION))
    suffix = ".fifo" if fifo else ""
    fifo_attrs = {"FifoQueue": "true"} if fifo else {}
    dlq = sqs.create_queue(QueueName=f"dlq{suffix}", Attributes=fifo_attrs)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": settings.redrive_max_receive_count}
    queue = sqs.create_queue(
        QueueName=f"work{suffix}",
        Attributes={**fifo_attrs, "VisibilityTimeout": "300", "RedrivePolicy": json.dumps(redrive)},
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    dynamodb.create_table(
        TableName="state",
        KeySchema=[{"AttributeName": STATE_TABLE_PARTITION_KEY, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": STATE_TABLE_PARTITION_KEY, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.update_time_to_live(
        TableName="state", TimeToLiveSpecification={"Enabled": True, "AttributeName": STATE_TABLE_TTL_ATTRIBUTE}
    )
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=PAYLOAD_BUCKET)
    world = AwsWorld(sqs, dynamodb, queue, arn, dlq, "state", s3=s3)
    # The tests' own queues for the stack's: the work queue stands for the container worker's queue too (the consumer
    # tests read it), "long" is the long-task queue tests make, "dlq-missing" a dead-letter queue that is not there.
    queues = {"WorkerQueue": f"work{suffix}", "WorkerDeadLetterQueue": (f"dlq{suffix}", "dlq-missing"),
              "LongTasksLongTaskQueue": (f"work{suffix}", f"long{suffix}")}
    stacks.enforce("fifo" if fifo else "container", queues=queues, tables={"StateTable": "state", "DelaysDelayTable": "delay"},
                   buckets={stacks.PAYLOAD_BUCKET: PAYLOAD_BUCKET})
    sqs.meta.events.register("provide-client-params.sqs.*", _recorder(world))
    return world


def _recorder(world: AwsWorld):
    def record(params: dict, model: Any, **_: Any) -> None:
        world.calls.append((model.name, params))

    return record
