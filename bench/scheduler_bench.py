"""Delay-path benchmarks: cost per million, punctuality, CPU and API calls, counted with in-memory AWS fakes.

100,000 messages are stored through the real Client, due over six hours, and the
real DelayScheduler runs once a minute (EventBridge fires a few seconds into the
minute) on a simulated clock. Every API call is metered in the units AWS bills,
including the scheduler's Query of every possible shard (MAX_SHARDS) of every minute (0.5 read unit
each when empty) and its state writes (minute records, cursors, watermark).

Two costs the simulation does not run are added as line items: the safety net, a
Lambda on the delay table's stream invoked once per 1,000 stream records, with two
records per message (its INSERT and its TTL REMOVE), 100 ms at 128 MB each (the
stream reads themselves are free to Lambda); and the fixed cost of the empty shard
Queries per month, reported on its own since it does not scale with messages.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

from bench import results
from tests.fake_dynamodb import FakeDynamoDB
from tests.fakes import FakeSQS
from worker_tier import Client, OutgoingMessage
from worker_tier.delay import MAX_SHARDS
from worker_tier.scheduler import DelayScheduler

MESSAGES = 100_000
SPREAD_SECONDS = 6 * 3600
START = 1_800_000_000.0
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
BODY = '{"user_id": 123456, "template": "trial-ending", "locale": "en-GB"}'

# us-east-1 list prices (on-demand), USD.
# https://aws.amazon.com/dynamodb/pricing/on-demand/  https://aws.amazon.com/sqs/pricing/
# https://aws.amazon.com/lambda/pricing/  https://aws.amazon.com/eventbridge/pricing/
PRICE_PER_WRITE_UNIT = 0.625e-6
PRICE_PER_READ_UNIT = 0.125e-6
PRICE_PER_SQS_REQUEST = 0.40e-6
PRICE_PER_LAMBDA_REQUEST = 0.20e-6
PRICE_PER_LAMBDA_GB_SECOND_ARM = 0.0000133334
PRICE_PER_SCHEDULER_INVOCATION = 1.00e-6
SQS_BILLING_CHUNK_BYTES = 64 * 1024
ASSUMED_RUN_SECONDS = 1.0  # per-minute run's billed duration at 256 MB: generous for a few dozen API calls
SCHEDULER_MEMORY_GB = 0.25
# The safety net: https://aws.amazon.com/dynamodb/pricing/on-demand/ (GetRecords by a Lambda trigger is free)
STREAM_RECORDS_PER_MESSAGE = 2  # the INSERT, and the TTL's REMOVE
STREAM_BATCH_RECORDS = 1000
STREAM_CONSUMER_SECONDS = 0.1
STREAM_CONSUMER_MEMORY_GB = 0.125
MINUTES_PER_MONTH = 30 * 24 * 60
EMPTY_QUERY_READ_UNITS = 0.5  # eventually consistent, under 4 KB
EVENTBRIDGE_SCHEDULER_PLUS_SQS_USD_PER_MILLION = (PRICE_PER_SCHEDULER_INVOCATION + PRICE_PER_SQS_REQUEST) * 1e6


def item_bytes(item: dict[str, dict[str, Any]]) -> int:
    """DynamoDB's item size: attribute names plus values (numbers about half their digits)."""
    size = 0
    for name, value in item.items():
        (kind, data), = value.items()
        size += len(name) + (len(str(data)) // 2 + 1 if kind == "N" else 1 if kind == "BOOL" else len(str(data).encode()))
    return size


class MeteredDynamoDB(FakeDynamoDB):
    """Counts request units as on-demand DynamoDB bills them."""

    def __init__(self) -> None:
        super().__init__()
        self.copy_items = False
        self.write_units = {"producer": 0.0, "scheduler": 0.0}
        self.read_units = 0.0
        self.side = "producer"
        self.sizes: dict[tuple[str, str], int] = {}  # measured when written, so reads are metered cheaply

    def batch_write_item(self, RequestItems: dict) -> dict:  # noqa: N803
        for requests in RequestItems.values():
            for request in requests:
                item = request["PutRequest"]["Item"]
                size = item_bytes(item)
                self.sizes[(item["pk"]["S"], item["sk"]["S"])] = size
                self.write_units[self.side] += math.ceil(size / 1024)
        return super().batch_write_item(RequestItems)

    def put_item(self, **kwargs: Any) -> dict:
        self.write_units[self.side] += math.ceil(item_bytes(kwargs["Item"]) / 1024)
        return super().put_item(**kwargs)

    def delete_item(self, **kwargs: Any) -> dict:
        self.write_units[self.side] += 1
        return super().delete_item(**kwargs)

    def update_item(self, **kwargs: Any) -> dict:
        self.write_units[self.side] += 1  # the scheduler's minute records: well under 1 KB
        return super().update_item(**kwargs)

    def get_item(self, **kwargs: Any) -> dict:
        self.read_units += 1  # strongly consistent, under 4 KB
        return super().get_item(**kwargs)

    def query(self, **kwargs: Any) -> dict:
        page = super().query(**kwargs)
        read_bytes = sum(self.sizes[(item["pk"]["S"], item["sk"]["S"])] for item in page["Items"])
        self.read_units += max(1, math.ceil(read_bytes / 4096)) * 0.5  # eventually consistent
        return page

    def scan(self, **kwargs: Any) -> dict:
        page = super().scan(**kwargs)
        self.read_units += max(1, math.ceil(sum(item_bytes(i) for i in page["Items"]) / 4096)) * 0.5
        return page


class MeteredSQS(FakeSQS):
    """Counts SQS requests as billed: each 64 KB of a batch's payload is one request."""

    def __init__(self, clock) -> None:  # type: ignore[no-untyped-def]
        super().__init__(clock=clock)
        self.requests = 0

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        payload = sum(len(e["MessageBody"].encode()) for e in Entries)
        self.requests += max(1, math.ceil(payload / SQS_BILLING_CHUNK_BYTES))
        return super().send_message_batch(QueueUrl, Entries)


def simulate() -> dict[str, float]:
    """Store MESSAGES, run the scheduler each minute until all are out; measure everything."""
    rng = random.Random(7)
    now = [START]
    dynamodb = MeteredDynamoDB()
    dynamodb.create_table("delay", "pk", "sk")
    dynamodb.create_table("state", "pk")
    sqs = MeteredSQS(clock=lambda: now[0])
    client = Client(QUEUE, "delay", sqs=sqs, dynamodb=dynamodb, clock=lambda: now[0], sleep=lambda s: None)
    scheduler = DelayScheduler("delay", "state", QUEUE, dead_letter_queue_url=QUEUE + "-dlq", sqs=sqs, dynamodb=dynamodb, clock=lambda: now[0],
                               sleep=lambda s: None, parallel=False)
    scheduler.run()  # deployed before any message: the first watermark is now, as in a real stack
    due: dict[str, float] = {}
    for start in range(0, MESSAGES, 500):
        outgoing = [OutgoingMessage("/remind", BODY, delay=901 + rng.random() * SPREAD_SECONDS) for _ in range(500)]
        for message, result in zip(outgoing, client.send_batch(outgoing)):
            due[result.message_id] = START + message.delay  # type: ignore[operator]
    producer_calls = len(dynamodb.calls)
    dynamodb.side = "scheduler"
    runs, cpu = 0, 0.0
    minute = math.floor(START / 60) * 60
    while len(sqs.sent) < MESSAGES:
        minute += 60
        now[0] = minute + rng.uniform(0, 5)  # EventBridge fires within the first seconds of the minute
        started = time.process_time()
        scheduler.run()
        cpu += time.process_time() - started
        runs += 1
    return _figures(dynamodb, sqs, due, runs, cpu, producer_calls)


def _figures(dynamodb: MeteredDynamoDB, sqs: MeteredSQS, due: dict[str, float], runs: int, cpu: float,
             producer_calls: int) -> dict[str, float]:
    by_body_order = [entry for entry in sqs.sent]
    due_by_at = [entry["MessageAttributes"]["worker_tier.due_at"]["StringValue"] for entry in by_body_order]
    lateness = sorted(entry["visible_at"] - _epoch(at) for entry, at in zip(by_body_order, due_by_at))
    scheduler_calls = len(dynamodb.calls) - producer_calls + len(sqs.calls)  # (the first, empty run's few calls included)
    lambda_cost = runs * (PRICE_PER_LAMBDA_REQUEST + ASSUMED_RUN_SECONDS * SCHEDULER_MEMORY_GB * PRICE_PER_LAMBDA_GB_SECOND_ARM)
    safety_net_cost = _safety_net_cost(MESSAGES)
    ours = (
        sum(dynamodb.write_units.values()) * PRICE_PER_WRITE_UNIT
        + dynamodb.read_units * PRICE_PER_READ_UNIT
        + sqs.requests * PRICE_PER_SQS_REQUEST
        + lambda_cost
        + safety_net_cost
    )
    per_message_read = dynamodb.read_units / MESSAGES
    reference = (2 * PRICE_PER_WRITE_UNIT + per_message_read * PRICE_PER_READ_UNIT + PRICE_PER_SQS_REQUEST) * MESSAGES + lambda_cost
    ours_per_million = ours / MESSAGES * 1e6
    return {
        "messages": MESSAGES,
        "scheduler_runs": runs,
        "cost_per_million_usd": ours_per_million,
        "eventbridge_scheduler_plus_sqs_per_million_usd": EVENTBRIDGE_SCHEDULER_PLUS_SQS_USD_PER_MILLION,
        "reference_design_per_million_usd": reference / MESSAGES * 1e6,
        "cost_ratio_vs_eventbridge_scheduler": ours_per_million / EVENTBRIDGE_SCHEDULER_PLUS_SQS_USD_PER_MILLION,
        "cost_ratio_vs_reference_design": ours / reference,
        "write_units_per_message": sum(dynamodb.write_units.values()) / MESSAGES,
        "read_units_per_message": per_message_read,
        "scheduler_write_units_per_message": dynamodb.write_units["scheduler"] / MESSAGES,
        "safety_net_per_million_usd": safety_net_cost / MESSAGES * 1e6,
        "empty_shard_queries_usd_per_month": MAX_SHARDS * EMPTY_QUERY_READ_UNITS * MINUTES_PER_MONTH * PRICE_PER_READ_UNIT,
        "empty_shard_queries_per_million_usd_at_this_rate": _empty_query_cost(runs) / MESSAGES * 1e6,
        "sqs_requests_per_message": sqs.requests / MESSAGES,
        "early_count": sum(1 for value in lateness if value < 0),
        "p99_lateness_s": lateness[int(0.99 * (len(lateness) - 1))],
        "max_lateness_s": lateness[-1],
        "duplicates": len(sqs.sent) - MESSAGES,
        "cpu_us_per_dispatched_message": cpu / MESSAGES * 1e6,
        "api_calls_per_1000_messages": scheduler_calls / MESSAGES * 1000,
        "producer_api_calls_per_1000_messages": producer_calls / MESSAGES * 1000,
    }


def _safety_net_cost(messages: int) -> float:
    """The stream consumer: one invocation per STREAM_BATCH_RECORDS stream records."""
    invocations = messages * STREAM_RECORDS_PER_MESSAGE / STREAM_BATCH_RECORDS
    per_invocation = PRICE_PER_LAMBDA_REQUEST + STREAM_CONSUMER_SECONDS * STREAM_CONSUMER_MEMORY_GB * PRICE_PER_LAMBDA_GB_SECOND_ARM
    return invocations * per_invocation


def _empty_query_cost(runs: int) -> float:
    """What Querying every shard of each minute costs when the shards are empty (already inside the metered reads)."""
    return runs * MAX_SHARDS * EMPTY_QUERY_READ_UNITS * PRICE_PER_READ_UNIT


def _epoch(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def run():
    """Measure and write bench/results/scheduler.json."""
    figures = simulate()
    goals = {
        "cost_ratio_vs_eventbridge_scheduler": ("<=", 0.5),
        "early_count": ("<=", 0),
        "p99_lateness_s": ("<=", 1.0),
        "cpu_us_per_dispatched_message": ("<=", 50.0),
    }
    return results.write("scheduler", {k: round(v, 6) if isinstance(v, float) else v for k, v in figures.items()}, goals, "make bench")
