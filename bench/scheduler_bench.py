"""Delay-path benchmarks: cost per million, punctuality, CPU and API calls, counted with in-memory AWS fakes.

100,000 messages are stored through the real Client, due over six hours, and the
real DelayDispatcher runs once a minute (EventBridge fires a few seconds into the
minute) on a simulated clock. Every API call is metered in the units AWS bills,
including the scheduler's Query of every possible shard (MAX_SHARDS) of every minute (0.5 read unit
each when empty) and its state writes (minute records, cursors, watermark).

The safety net is run too, as deployed: the real DelayRecovery gets the delay
table's stream the traffic makes (each message's INSERT when stored, and its TTL
REMOVE when it expires), batched as its event source mapping batches them (up to
``STREAM_BATCH_SIZE`` records or ``STREAM_MAX_BATCHING_WINDOW_SECONDS``), on the same
metered fakes; its Lambda time is billed at ``RECOVERY_MEMORY_MB``. The stream reads
themselves are free to Lambda. The fixed cost of the empty shard Queries per month is
reported on its own, since it does not scale with messages.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

from bench import results
from worker_tier_cdk.delay_recovery import RECOVERY_MEMORY_MB, STREAM_BATCH_SIZE, STREAM_MAX_BATCHING_WINDOW_SECONDS
from tests.fake_dynamodb import FakeDynamoDB
from tests.fakes import FakeSQS
from worker_tier import Client, OutgoingMessage
from worker_tier.delay import BUCKET_KEY_PREFIX, MAX_SHARDS, TTL_ATTRIBUTE
from worker_tier.delay_recovery import INSERT, REMOVE, TTL_PRINCIPAL, DelayRecovery
from worker_tier.dispatcher import DelayDispatcher

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
# The safety net's billed duration: a Python handler's fixed work, plus one round trip per AWS call it makes.
# (GetRecords by a Lambda trigger is free: https://aws.amazon.com/dynamodb/pricing/on-demand/)
STREAM_CONSUMER_BASE_SECONDS = 0.05
AWS_CALL_SECONDS = 0.01
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

    def __init__(self, clock) -> None:
        super().__init__()
        self.copy_items = False
        self.write_units = {"producer": 0.0, "scheduler": 0.0, "safety_net": 0.0}
        self.read_units = {"producer": 0.0, "scheduler": 0.0, "safety_net": 0.0}
        self.side = "producer"
        self.sizes: dict[tuple[str, str], int] = {}  # measured when written, so reads are metered cheaply
        self.stream: list[dict[str, Any]] = []  # the delay table's INSERT records, as the mapping passes them
        self._clock = clock

    def batch_write_item(self, RequestItems: dict) -> dict:
        for requests in RequestItems.values():
            for request in requests:
                item = request["PutRequest"]["Item"]
                size = item_bytes(item)
                self.sizes[(item["pk"]["S"], item["sk"]["S"])] = size
                self.write_units[self.side] += math.ceil(size / 1024)
                self.stream.append(stream_record(INSERT, item, self._clock()))
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
        self.read_units[self.side] += 1 if kwargs.get("ConsistentRead") else 0.5  # under 4 KB
        return super().get_item(**kwargs)

    def query(self, **kwargs: Any) -> dict:
        page = super().query(**kwargs)
        read_bytes = sum(self.sizes[(item["pk"]["S"], item["sk"]["S"])] for item in page["Items"])
        self.read_units[self.side] += max(1, math.ceil(read_bytes / 4096)) * 0.5  # eventually consistent
        return page

    def scan(self, **kwargs: Any) -> dict:
        page = super().scan(**kwargs)
        self.read_units[self.side] += max(1, math.ceil(sum(item_bytes(i) for i in page["Items"]) / 4096)) * 0.5
        return page


class MeteredSQS(FakeSQS):
    """Counts SQS requests as billed: each 64 KB of a batch's payload is one request."""

    def __init__(self, clock) -> None:
        super().__init__(clock=clock)
        self.requests = 0

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        payload = sum(len(e["MessageBody"].encode()) for e in Entries)
        self.requests += max(1, math.ceil(payload / SQS_BILLING_CHUNK_BYTES))
        return super().send_message_batch(QueueUrl, Entries)


def simulate() -> dict[str, float]:
    """Store MESSAGES, run the scheduler each minute until all are out; measure everything."""
    rng = random.Random(7)
    now = [START]
    dynamodb = MeteredDynamoDB(clock=lambda: now[0])
    dynamodb.create_table("delay", "pk", "sk")
    dynamodb.create_table("state", "pk")
    sqs = MeteredSQS(clock=lambda: now[0])
    client = Client(QUEUE, "delay", sqs=sqs, dynamodb=dynamodb, clock=lambda: now[0], sleep=lambda s: None)
    scheduler = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=QUEUE + "-dlq", sqs=sqs, dynamodb=dynamodb, clock=lambda: now[0],
                               sleep=lambda s: None, parallel=False)
    scheduler.run()  # deployed before any message: the first watermark is now, as in a real stack
    due: dict[str, float] = {}
    for _ in range(0, MESSAGES, 500):
        outgoing = [OutgoingMessage("/remind", BODY, delay=901 + rng.random() * SPREAD_SECONDS) for _ in range(500)]
        for message, result in zip(outgoing, client.send_batch(outgoing), strict=True):
            due[result.message_id] = START + message.delay
    producer_calls = len(dynamodb.calls)
    safety_net = SafetyNet(dynamodb, sqs, now)
    safety_net.process(dynamodb.stream)  # the producers' INSERTs, a few minutes after they were written
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
    scheduler_calls = len(dynamodb.calls) - producer_calls + len(sqs.calls) - safety_net.calls
    safety_net.process(_ttl_removals(dynamodb))  # each item's TTL REMOVE, after the scheduler sent it
    figures = _figures(dynamodb, sqs, due, runs, cpu, producer_calls, scheduler_calls, safety_net)
    return {**figures, **safety_net.figures()}


def stream_record(kind: str, item: dict[str, Any], at_s: float) -> dict[str, Any]:
    """A delay-table stream record as Lambda delivers it (NEW_AND_OLD_IMAGES); a REMOVE is the TTL's."""
    image = "NewImage" if kind == INSERT else "OldImage"
    record = {"eventName": kind, "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/delay/stream/bench",
              "dynamodb": {"ApproximateCreationDateTime": float(int(at_s)), "Keys": {"pk": item["pk"], "sk": item["sk"]},
                           "SequenceNumber": "0", image: item}}
    if kind == REMOVE:
        record["userIdentity"] = dict(TTL_PRINCIPAL)
    return record


def _ttl_removals(dynamodb: MeteredDynamoDB) -> list[dict[str, Any]]:
    """Each message item's TTL REMOVE, at its expiration time, in time order."""
    items = [item for item in dynamodb.tables["delay"].values() if item["pk"]["S"].startswith(BUCKET_KEY_PREFIX)]
    return [stream_record(REMOVE, item, float(item[TTL_ATTRIBUTE]["N"]))
            for item in sorted(items, key=lambda item: int(item[TTL_ATTRIBUTE]["N"]))]


class SafetyNet:
    """The real DelayRecovery, fed stream records in the batches its event source mapping makes, metered."""

    def __init__(self, dynamodb: MeteredDynamoDB, sqs: MeteredSQS, now: list[float]) -> None:
        self.dynamodb, self.sqs, self.now = dynamodb, sqs, now
        self.recovery = DelayRecovery("state", QUEUE, QUEUE + "-dlq", sqs=sqs, dynamodb=dynamodb, clock=lambda: now[0],
                                      sleep=lambda s: None, delay_table="delay")
        self.invocations = self.calls = 0
        self.billed_seconds = 0.0
        self.sent = 0

    def process(self, records: list[dict[str, Any]]) -> None:
        """Invoke the recovery once per batch, at the time the batch closes."""
        side, self.dynamodb.side = self.dynamodb.side, "safety_net"
        for closes_at, batch in _mapping_batches(records):
            self.now[0] = max(self.now[0], closes_at)
            calls_before = len(self.dynamodb.calls) + len(self.sqs.calls)
            report = self.recovery.process(batch)
            calls = len(self.dynamodb.calls) + len(self.sqs.calls) - calls_before
            self.invocations += 1
            self.calls += calls
            self.billed_seconds += STREAM_CONSUMER_BASE_SECONDS + calls * AWS_CALL_SECONDS
            self.sent += report.late_writes + report.recovered_from_ttl
        self.dynamodb.side = side

    def cost(self) -> float:
        """Lambda requests and duration at the deployed memory size, plus the state-table reads."""
        lambda_cost = (self.invocations * PRICE_PER_LAMBDA_REQUEST
                       + self.billed_seconds * RECOVERY_MEMORY_MB / 1024 * PRICE_PER_LAMBDA_GB_SECOND_ARM)
        return lambda_cost + self.dynamodb.read_units["safety_net"] * PRICE_PER_READ_UNIT

    def figures(self) -> dict[str, float]:
        return {
            "safety_net_invocations": self.invocations,
            "safety_net_read_units": self.dynamodb.read_units["safety_net"],
            "safety_net_aws_calls": self.calls,
            "safety_net_sent": self.sent,
        }


def _mapping_batches(records: list[dict[str, Any]]) -> Any:
    """(closing time, records) as a stream mapping batches: up to STREAM_BATCH_SIZE, or its batching window."""
    batch: list[dict[str, Any]] = []
    opened = 0.0
    for record in records:
        at = record["dynamodb"]["ApproximateCreationDateTime"]
        if batch and at >= opened + STREAM_MAX_BATCHING_WINDOW_SECONDS:
            yield opened + STREAM_MAX_BATCHING_WINDOW_SECONDS, batch
            batch = []
        if not batch:
            opened = at
        batch.append(record)
        if len(batch) == STREAM_BATCH_SIZE:
            yield at, batch
            batch = []
    if batch:
        yield opened + STREAM_MAX_BATCHING_WINDOW_SECONDS, batch


def _figures(dynamodb: MeteredDynamoDB, sqs: MeteredSQS, due: dict[str, float], runs: int, cpu: float,
             producer_calls: int, scheduler_calls: int, safety_net: SafetyNet) -> dict[str, float]:
    by_body_order = list(sqs.sent)
    due_by_at = [entry["MessageAttributes"]["worker_tier.due_at"]["StringValue"] for entry in by_body_order]
    lateness = sorted(entry["visible_at"] - _epoch(at) for entry, at in zip(by_body_order, due_by_at, strict=True))
    lambda_cost = runs * (PRICE_PER_LAMBDA_REQUEST + ASSUMED_RUN_SECONDS * SCHEDULER_MEMORY_GB * PRICE_PER_LAMBDA_GB_SECOND_ARM)
    safety_net_cost = safety_net.cost()
    ours = (
        sum(dynamodb.write_units.values()) * PRICE_PER_WRITE_UNIT
        + (dynamodb.read_units["producer"] + dynamodb.read_units["scheduler"]) * PRICE_PER_READ_UNIT
        + sqs.requests * PRICE_PER_SQS_REQUEST
        + lambda_cost
        + safety_net_cost
    )
    per_message_read = (dynamodb.read_units["producer"] + dynamodb.read_units["scheduler"]) / MESSAGES
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
