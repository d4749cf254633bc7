"""The delay scheduler: each minute, move what falls due within the horizon from the delay table into SQS.

One run, under a lease in the state table so runs never overlap:

1. read the watermark: the first minute not yet fully dispatched;
2. for each minute from the watermark to the last one that has ended by
   now + ``DISPATCH_HORIZON_SECONDS``: query its shards in parallel (paginated),
   send every message with ``DelaySeconds = ceil(due − now)`` (0..900), retrying
   ``Failed`` entries, and only then advance the watermark past it;
3. stop taking minutes when the invocation's time runs low; the watermark stays true.

A run that finds itself behind (missed runs, an outage) catches up from the
watermark; messages already due go out at once, and their lateness is recorded.
Dispatched items stay in the table until their TTL. A crash after a send and
before the watermark moves sends that minute again (the only duplicates), and a
minute that cannot be finished marks what it did send so the next run skips it.
"""

from __future__ import annotations

import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from worker_tier import delay, limits
from worker_tier.aws import LazyClient, is_condition_failure
from worker_tier.delay import BUCKET_SECONDS, DISPATCH_HORIZON_SECONDS, DelayedMessage
from worker_tier.idempotency import STATE_TABLE_PARTITION_KEY, STATE_TABLE_TTL_ATTRIBUTE
from worker_tier.message import DUE_AT_ATTRIBUTE

LEASE_KEY = "scheduler#lease"
WATERMARK_KEY = "scheduler#watermark"
LEASE_SECONDS = 120
RUN_MARGIN_MS = 10_000
MAX_SEND_ATTEMPTS = 10
MAX_READ_ATTEMPTS = 8
RETRY_BASE_SECONDS = 0.05
RETRY_CAP_SECONDS = 1.0
DISPATCHED_ATTRIBUTE = "dispatched"


class DispatchIncompleteError(Exception):
    """Some messages of a minute were not accepted by SQS after retries."""


class LeaseLostError(Exception):
    """Another run moved the watermark: this run no longer holds the lease."""


@dataclass
class RunReport:
    """What one run did."""

    ran: bool = True
    buckets: int = 0
    sent: int = 0
    watermark: int | None = None
    max_lateness_s: float = 0.0
    lag_s: float = 0.0
    stopped: str = ""


class DelayScheduler:
    """Dispatches the delay table into the work queue."""

    def __init__(
        self,
        delay_table: str,
        state_table: str,
        queue_url: str,
        *,
        shards: int = delay.DEFAULT_SHARDS,
        sqs: Any = None,
        dynamodb: Any = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        parallel: bool = True,
        horizon_seconds: int = DISPATCH_HORIZON_SECONDS,
    ) -> None:
        self.delay_table = delay_table
        self.horizon_seconds = horizon_seconds
        self.state_table = state_table
        self.queue_url = queue_url
        self.shards = shards
        self._sqs = LazyClient("sqs", sqs)
        self._dynamodb = LazyClient("dynamodb", dynamodb)
        self._clock = clock
        self._sleep = sleep
        self._parallel = parallel

    def run(self, remaining_ms: Callable[[], int] | None = None) -> RunReport:
        """One dispatch run; see the module docstring."""
        holder = str(uuid.uuid4())
        if not self._acquire(holder):
            return RunReport(ran=False, stopped="another run holds the lease")
        try:
            return self._dispatch(remaining_ms)
        finally:
            self._release(holder)

    def _dispatch(self, remaining_ms: Callable[[], int] | None) -> RunReport:
        report = RunReport()
        watermark = self._read_watermark()
        last = math.floor((self._clock() + self.horizon_seconds) / BUCKET_SECONDS) - 1
        while watermark <= last:
            if remaining_ms is not None and remaining_ms() < RUN_MARGIN_MS:
                report.stopped = "invocation time running out"
                break
            try:
                report.sent += self._dispatch_bucket(watermark, report)
            except DispatchIncompleteError as error:
                report.stopped = str(error)
                break
            self._advance(watermark)
            watermark += 1
            report.buckets += 1
        report.watermark = watermark
        report.lag_s = max(0.0, self._clock() + self.horizon_seconds - watermark * BUCKET_SECONDS)
        return report

    def _dispatch_bucket(self, bucket: int, report: RunReport) -> int:
        """Send every message of one minute; DispatchIncompleteError when SQS keeps refusing some."""
        messages = [m for m in self._read_bucket(bucket) if not m[1]]
        pending = [m for m, _ in messages]
        sent: list[DelayedMessage] = []
        for attempt in range(MAX_SEND_ATTEMPTS):
            failed: list[DelayedMessage] = []
            for start in range(0, len(pending), limits.SQS_MAX_BATCH_ENTRIES):
                chunk = pending[start : start + limits.SQS_MAX_BATCH_ENTRIES]
                ok, bad = self._send_chunk(chunk, report)
                sent += ok
                failed += bad
            pending = failed
            if not pending:
                return len(sent)
            self._sleep(min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2**attempt))
        self._mark_dispatched(sent)
        report.sent += len(sent)
        raise DispatchIncompleteError(f"minute {bucket}: SQS did not accept {len(pending)} messages after {MAX_SEND_ATTEMPTS} attempts")

    def _send_chunk(self, chunk: list[DelayedMessage], report: RunReport) -> tuple[list[DelayedMessage], list[DelayedMessage]]:
        """One SendMessageBatch; returns (accepted, failed)."""
        now = self._clock()
        entries = []
        for index, message in enumerate(chunk):
            wait = message.due_ms / 1000 - now
            if wait < 0:
                report.max_lateness_s = max(report.max_lateness_s, -wait)
            entry: dict[str, Any] = {
                "Id": str(index),
                "MessageBody": message.body,
                "MessageAttributes": _with_due_at(message),
                "DelaySeconds": max(0, min(limits.SQS_MAX_DELAY_SECONDS, math.ceil(wait))),
            }
            entries.append(entry)
        try:
            response = self._sqs.get().send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        except Exception:  # the whole call failed (botocore already retried throttling): all retry
            return [], chunk
        failed_ids = {int(f["Id"]) for f in response.get("Failed") or []}
        return (
            [m for i, m in enumerate(chunk) if i not in failed_ids],
            [m for i, m in enumerate(chunk) if i in failed_ids],
        )

    def _read_bucket(self, bucket: int) -> list[tuple[DelayedMessage, bool]]:
        """Every item of one minute, all shards (in parallel), each query paginated; due order."""
        shards = range(self.shards)
        if self._parallel and self.shards > 1:
            with ThreadPoolExecutor(max_workers=min(self.shards, 16)) as pool:
                parts = list(pool.map(lambda shard: self._query_shard(bucket, shard), shards))
        else:
            parts = [self._query_shard(bucket, shard) for shard in shards]
        items = [item for part in parts for item in part]
        items.sort(key=lambda pair: (pair[0].due_ms, pair[0].message_id))
        return items

    def _query_shard(self, bucket: int, shard: int) -> list[tuple[DelayedMessage, bool]]:
        """All pages of one shard's Query, each page retried on throttling."""
        results: list[tuple[DelayedMessage, bool]] = []
        request: dict[str, Any] = {
            "TableName": self.delay_table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": delay.bucket_key(bucket, shard)}},
        }
        while True:
            page = self._with_retries(lambda: self._dynamodb.get().query(**request))
            for item in page.get("Items") or []:
                results.append((DelayedMessage.from_item(item), DISPATCHED_ATTRIBUTE in item))
            if "LastEvaluatedKey" not in page:
                return results
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _with_retries(self, call: Callable[[], Any]) -> Any:
        """Retry a DynamoDB read that throttles or fails transiently; the last error propagates."""
        for attempt in range(MAX_READ_ATTEMPTS):
            try:
                return call()
            except Exception:
                if attempt == MAX_READ_ATTEMPTS - 1:
                    raise
                self._sleep(min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2**attempt))
        raise AssertionError("unreachable")

    def _mark_dispatched(self, sent: list[DelayedMessage]) -> None:
        """Flag what an unfinished minute did send, so the next run does not send it again."""
        if not sent:
            return
        items = [{**m.to_item(), DISPATCHED_ATTRIBUTE: {"BOOL": True}} for m in sent]
        delay.DelayStore(self.delay_table, self._dynamodb.get(), self.shards, self._sleep).put_items(items)

    # -- state table: lease and watermark -------------------------------------------------

    def _acquire(self, holder: str) -> bool:
        now = int(self._clock())
        try:
            self._dynamodb.get().put_item(
                TableName=self.state_table,
                Item={
                    STATE_TABLE_PARTITION_KEY: {"S": LEASE_KEY},
                    "holder": {"S": holder},
                    "lease_until": {"N": str(now + LEASE_SECONDS)},
                    STATE_TABLE_TTL_ATTRIBUTE: {"N": str(now + 24 * 60 * 60)},
                },
                ConditionExpression="attribute_not_exists(pk) OR lease_until < :now",
                ExpressionAttributeValues={":now": {"N": str(now)}},
            )
        except Exception as error:
            if is_condition_failure(error):
                return False
            raise
        return True

    def _release(self, holder: str) -> None:
        try:
            self._dynamodb.get().delete_item(
                TableName=self.state_table,
                Key={STATE_TABLE_PARTITION_KEY: {"S": LEASE_KEY}},
                ConditionExpression="holder = :me",
                ExpressionAttributeValues={":me": {"S": holder}},
            )
        except Exception as error:  # expired and taken over, or a transient error: the lease expires anyway
            if not is_condition_failure(error):
                raise

    def _read_watermark(self) -> int:
        """The first minute not fully dispatched."""
        item = self._dynamodb.get().get_item(
            TableName=self.state_table, Key={STATE_TABLE_PARTITION_KEY: {"S": WATERMARK_KEY}}, ConsistentRead=True
        ).get("Item")
        if item is None:
            return self._initial_watermark()
        return int(item["bucket"]["N"])

    def _initial_watermark(self) -> int:
        """The first run ever starts at the earliest minute in the table, or now.

        A one-time Scan (keys only): messages stored before the scheduler first
        ran may be due in minutes that are already past. A producer writing
        meanwhile writes only minutes after now (the module invariant).
        """
        now_bucket = math.floor(self._clock() / BUCKET_SECONDS)
        earliest = now_bucket
        request: dict[str, Any] = {"TableName": self.delay_table, "ProjectionExpression": "pk, sk"}
        while True:
            page = self._with_retries(lambda: self._dynamodb.get().scan(**request))
            for item in page.get("Items") or []:
                if item["pk"]["S"].startswith("b#"):
                    earliest = min(earliest, int(item["pk"]["S"].split("#")[1]))
            if "LastEvaluatedKey" not in page:
                return earliest
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _advance(self, bucket: int) -> None:
        """Move the watermark past ``bucket``, only from where this run found it."""
        condition = "attribute_not_exists(pk) OR #bucket = :previous"
        try:
            self._dynamodb.get().put_item(
                TableName=self.state_table,
                Item={STATE_TABLE_PARTITION_KEY: {"S": WATERMARK_KEY}, "bucket": {"N": str(bucket + 1)}},
                ConditionExpression=condition,
                ExpressionAttributeNames={"#bucket": "bucket"},
                ExpressionAttributeValues={":previous": {"N": str(bucket)}},
            )
        except Exception as error:
            if is_condition_failure(error):
                raise LeaseLostError(f"watermark moved by another run while dispatching minute {bucket}") from error
            raise


def _with_due_at(message: DelayedMessage) -> dict[str, Any]:
    """The stored attributes plus when the message was due, for ``Task.due_at``."""
    due = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(message.due_ms // 1000)) + f".{message.due_ms % 1000:03d}Z"
    return {**message.attributes, DUE_AT_ATTRIBUTE: {"DataType": "String", "StringValue": due}}
