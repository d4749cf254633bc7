"""Tracked jobs benchmark: what a tracked message costs in DynamoDB, and that an untracked one costs nothing (issue #22).

Run with `make bench ARGS=jobs` (or `python -m bench jobs`); about ten seconds.

**What runs.** moto's SQS and DynamoDB in-process (``mock_aws``), a producer ``Client`` and the Lambda worker
(``Worker.handle`` on batches of 10, the records reported done deleted as the event source would), both on a
``CountingDynamoDB`` that records every call they make. Four scenarios, ``MESSAGES`` messages each:

- ``success``: tracked sends (``send_batch``, 25 first records per BatchWriteItem) of a task returning a small dict,
  then one ``Client.status`` per job;
- ``retry``: tracked messages whose task fails on its first receive and succeeds on its second;
- ``large_result``: tracked messages whose task returns about 6 KB of JSON (kept in the record, under the 16 KiB cap);
- ``untracked``: the ``success`` scenario's task without ``track``: every DynamoDB call is counted.

**Units**, as DynamoDB bills on-demand tables (CapacityUnitCalculations): a write costs 1 unit per KB of the item
(an UpdateItem, the larger of the item before and after; a BatchWriteItem, each item); a strongly consistent read
1 unit per 4 KB. Item sizes are DynamoDB's count (``worker_tier.delays.delay.item_bytes``). A refused conditional
write would cost a unit too; none happens here (nothing is out of order).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from bench import results

MESSAGES = 50
REGION = "us-east-1"
KB = 1024
GOALS = {
    "untracked_dynamodb_calls": ("<=", 0),
    "success_write_units_per_job": ("<=", 3),
    "success_write_calls_per_job": ("<=", 2.1),
}


class CountingDynamoDB:
    """A DynamoDB client whose calls and units are counted (items sized before and after each write)."""

    def __init__(self, inner: Any, table: str) -> None:
        self._inner, self._table = inner, table
        self.calls: Counter[str] = Counter()
        self.write_units = 0
        self.read_units = 0

    def _size(self, key: dict[str, Any]) -> int:
        from worker_tier.delays.delay import item_bytes

        item = self._inner.get_item(TableName=self._table, Key=key, ConsistentRead=True).get("Item")
        return item_bytes(item) if item else 0

    def update_item(self, **request: Any) -> Any:
        self.calls["UpdateItem"] += 1
        before = self._size(request["Key"])
        try:
            return self._inner.update_item(**request)
        finally:
            self.write_units += max(1, math.ceil(max(before, self._size(request["Key"])) / KB))

    def put_item(self, **request: Any) -> Any:
        from worker_tier.delays.delay import item_bytes

        self.calls["PutItem"] += 1
        self.write_units += max(1, math.ceil(item_bytes(request["Item"]) / KB))
        return self._inner.put_item(**request)

    def batch_write_item(self, **request: Any) -> Any:
        from worker_tier.delays.delay import item_bytes

        self.calls["BatchWriteItem"] += 1
        for entries in request["RequestItems"].values():
            for entry in entries:
                item = entry.get("PutRequest", {}).get("Item")
                self.write_units += max(1, math.ceil(item_bytes(item) / KB)) if item else 1
        return self._inner.batch_write_item(**request)

    def get_item(self, **request: Any) -> Any:
        from worker_tier.delays.delay import item_bytes

        self.calls["GetItem"] += 1
        answer = self._inner.get_item(**request)
        size = item_bytes(answer["Item"]) if answer.get("Item") else 0
        units = max(1, math.ceil(size / (4 * KB)))
        self.read_units += units if request.get("ConsistentRead") else units / 2
        return answer

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"CountingDynamoDB does not model {name}")


def _scenario(name: str, handler: Any, track: bool, messages: int = MESSAGES) -> dict[str, Any]:
    """One scenario on a fresh moto world: its calls and units, per message."""
    import boto3
    from moto import mock_aws

    from worker_tier import Client, OutgoingMessage
    from worker_tier.core.envelope import lambda_record
    from worker_tier.core.settings import Settings
    from worker_tier.worker.batch import Worker
    from worker_tier.worker.registry import Registry

    with mock_aws():
        sqs, dynamodb = boto3.client("sqs", region_name=REGION), boto3.client("dynamodb", region_name=REGION)
        dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
        queue = sqs.create_queue(QueueName="work", Attributes={"VisibilityTimeout": "300"})["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        dynamodb.create_table(TableName="state", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                              AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
        counted = CountingDynamoDB(dynamodb, "state")
        tasks = Registry()
        tasks.task("/job")(handler)
        worker = Worker(Settings(error_visibility_timeout=0), queue_url=queue, dead_letter_queue_url=dlq, state_table="state",
                        registry=tasks, sqs=sqs, dynamodb=counted, random=lambda: 0.0)
        client = Client(queue, sqs=sqs, dynamodb=counted, state_table="state", sleep=lambda s: None)
        sent = client.send_batch([OutgoingMessage("/job", {"n": i}, track=track) for i in range(messages)])
        producer_writes = counted.write_units
        for _ in range(10):  # until the queue is empty: retries come back at once (visibility 0)
            got = _receive_all(sqs, queue)
            if not got:
                break
            event = {"Records": [lambda_record(m, arn, REGION) for m in got]}
            failed = {f["itemIdentifier"] for f in worker.handle(event, None)["batchItemFailures"]}
            for message, record in zip(got, event["Records"], strict=True):
                if record["messageId"] not in failed:
                    sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
        writes = counted.write_units
        for result in sent if track else ():
            assert client.status(result.job_id or "").state == "succeeded", result
    write_calls = sum(counted.calls[c] for c in ("UpdateItem", "PutItem", "BatchWriteItem"))
    return {
        "messages": messages,
        "calls": dict(counted.calls),
        "write_units_per_job": round(writes / messages, 3),
        "producer_write_units_per_job": round(producer_writes / messages, 3),
        "write_calls_per_job": round(write_calls / messages, 3),
        "status_read_units": round(counted.read_units / messages, 3) if track else 0,
        "name": name,
    }


def _receive_all(sqs: Any, queue: str) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    while True:
        page = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"],
                                   MessageAttributeNames=["All"], VisibilityTimeout=300).get("Messages", [])
        if not page:
            return got
        got.extend(page)


def _flaky() -> Any:
    seen: set[str] = set()

    def handler(task: Any) -> Any:
        if task.message_id not in seen:
            seen.add(task.message_id)
            raise ConnectionError("first try fails")
        return {"ok": True}

    return handler


def measure(messages: int = MESSAGES) -> dict[str, Any]:
    """Every scenario with ``messages`` messages each: the figures."""
    success = _scenario("success", lambda t: {"sum": t.json()["n"] * 2}, True, messages)
    retry = _scenario("retry", _flaky(), True, messages)
    large = _scenario("large_result", lambda t: {"rows": ["x" * 60] * 100}, True, messages)
    untracked = _scenario("untracked", lambda t: {"sum": t.json()["n"] * 2}, False, messages)
    return {
        "success_write_units_per_job": success["write_units_per_job"],
        "success_write_calls_per_job": success["write_calls_per_job"],
        "success_status_read_units": success["status_read_units"],
        "retry_write_units_per_job": retry["write_units_per_job"],
        "large_result_write_units_per_job": large["write_units_per_job"],
        "untracked_dynamodb_calls": sum(untracked["calls"].values()),
        "scenarios": [success, retry, large, untracked],
    }


def run() -> Any:
    """Run every scenario; write bench/results/jobs.json."""
    return results.write("jobs", measure(), GOALS, "make bench ARGS=jobs")
