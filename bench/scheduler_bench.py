"""Delay-path benchmarks: cost per million, punctuality, CPU and API calls, counted with in-memory AWS fakes.

100,000 messages are stored through the real Client, due over six hours, and the
real DelayDispatcher runs once a minute (EventBridge fires a few seconds into the
minute) on a simulated clock. Every API call is metered in the units AWS bills,
including the scheduler's Query of every possible shard (MAX_SHARDS) of every minute (0.5 read unit
each when empty) and its state writes (minute records, cursors, watermark).

At scale (``at_scale``), the dispatcher runs on ``bench.network_model``: every call
costs its measured client CPU (one GIL, scaled to the function's share of a vCPU) and
its in-region round trip, with the dispatcher's threads as lanes, on a simulated clock.
It measures one run's rate, the largest minute put on time when every minute is as
large (in each minute, p99 lateness from due to visible <= ON_TIME_P99_SECONDS, 0 early; judged over SUSTAINED_MINUTES), and derives the largest single minute
among quiet ones (the horizon lets runs start on it 13 minutes ahead).
``spot_check_on_moto`` runs the real dispatcher against a moto server and the model
with moto's measured latencies, so the two can be compared.

The safety net is run too, as deployed: the real DelayRecovery gets the delay
table's stream the traffic makes (each message's INSERT when stored, and its TTL
REMOVE when it expires), batched as its event source mapping batches them (up to
``STREAM_BATCH_SIZE`` records or ``STREAM_MAX_BATCHING_WINDOW_SECONDS``), on the same
metered fakes; its Lambda time is billed at ``RECOVERY_MEMORY_MB``. The stream reads
themselves are free to Lambda. The fixed cost of the empty shard Queries per month is
reported on its own, since it does not scale with messages.
"""

from __future__ import annotations

import gc
import math
import random
import time
from typing import Any

from bench import results
from worker_tier_cdk.delay_recovery import RECOVERY_MEMORY_MB, STREAM_BATCH_SIZE, STREAM_MAX_BATCHING_WINDOW_SECONDS
from tests.support.fake_dynamodb import FakeDynamoDB
from tests.support.fakes import FakeSQS
from worker_tier import Client, OutgoingMessage
from worker_tier.delays.delay import BUCKET_KEY_PREFIX, MAX_SHARDS, TTL_ATTRIBUTE
from worker_tier.delays.delay_recovery import INSERT, REMOVE, TTL_PRINCIPAL, DelayRecovery
from worker_tier.delays.minute import DISPATCH_THREADS
from worker_tier.delays.dispatcher import DelayDispatcher
from worker_tier.delays.minute import RUN_MARGIN_MS, TIME_RUNNING_OUT
from worker_tier.delays.delay import BUCKET_SECONDS, DISPATCH_HORIZON_SECONDS, DelayedMessage, DelayStore, item_bytes
from worker_tier.core.contract import DUE_AT_ATTRIBUTE, PATH_ATTRIBUTE
from worker_tier_cdk.delay_dispatcher import DISPATCHER_MEMORY_MB, DISPATCHER_TIMEOUT_SECONDS, FANOUT_MEMORY_MB
from worker_tier.delays.dispatch_state import DispatchGroup
from bench.network_model import LAMBDA_MB_PER_VCPU, Network, SimulatedClock

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
QUERY_PAGE_BYTES = 1024 * 1024
# A dispatcher run's billed duration: the handler's fixed work (as the safety net's), plus the run as the network
# model times it (bench.network_model: client CPU on one GIL at the function's share of a vCPU, round trips overlapping).
DISPATCHER_BASE_SECONDS = 0.05
# The safety net's billed duration: a Python handler's fixed work, plus one round trip per AWS call it makes.
# (GetRecords by a Lambda trigger is free: https://aws.amazon.com/dynamodb/pricing/on-demand/)
STREAM_CONSUMER_BASE_SECONDS = 0.05
AWS_CALL_SECONDS = 0.01
MINUTES_PER_MONTH = 30 * 24 * 60
EMPTY_QUERY_READ_UNITS = 0.5  # eventually consistent, under 4 KB
EVENTBRIDGE_SCHEDULER_PLUS_SQS_USD_PER_MILLION = (PRICE_PER_SCHEDULER_INVOCATION + PRICE_PER_SQS_REQUEST) * 1e6


class MeteredDynamoDB(FakeDynamoDB):
    """Counts request units as on-demand DynamoDB bills them."""

    def __init__(self, clock, keep_stream: bool = True) -> None:
        super().__init__()
        self.copy_items = False
        self.keep_stream = keep_stream  # off at scale: a million stream records would only cost memory
        self.write_units = {"producer": 0.0, "scheduler": 0.0, "safety_net": 0.0}
        self.read_units = {"producer": 0.0, "scheduler": 0.0, "safety_net": 0.0}
        self.side = "producer"
        self.sizes: dict[tuple[str, str], int] = {}  # measured when written, so reads are metered cheaply
        self.stream: list[dict[str, Any]] = []  # the delay table's INSERT records, as the mapping passes them
        self._clock = clock
        self.page_size = 10**9  # DynamoDB caps a page by bytes only (QUERY_PAGE_BYTES, below), not at the fake's 100 items

    def batch_write_item(self, RequestItems: dict) -> dict:
        for requests in RequestItems.values():
            for request in requests:
                item = request["PutRequest"]["Item"]
                size = item_bytes(item)
                self.sizes[(item["pk"]["S"], item["sk"]["S"])] = size
                self.write_units[self.side] += math.ceil(size / 1024)
                if self.keep_stream:
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
        kept, total = [], 0
        for item in page["Items"]:  # a page ends at 1 MB of items: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Pagination.html
            total += self.sizes[(item["pk"]["S"], item["sk"]["S"])]
            if total > QUERY_PAGE_BYTES and kept:
                page = {"Items": kept, "Count": len(kept), "LastEvaluatedKey": {"pk": kept[-1]["pk"], "sk": kept[-1]["sk"]}}
                break
            kept.append(item)
        read_bytes = sum(self.sizes[(item["pk"]["S"], item["sk"]["S"])] for item in page["Items"])
        # eventually consistent: half a unit per 4 KB; ConsistentRead (the cancellable shard, refiled minutes): one
        self.read_units[self.side] += max(1, math.ceil(read_bytes / 4096)) * (1 if kwargs.get("ConsistentRead") else 0.5)
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


def simulate(messages: int = MESSAGES, groups: int = 1) -> dict[str, float]:
    """Store ``messages``, run the dispatcher (each of ``groups`` shard groups) each minute until all are out; measure everything.

    Delivery is timed with zero latency (the clock stands still during a run but for the dispatcher's waits:
    lateness and CPU are delivery's own), while each run's calls also go through ``bench.network_model`` on a clock of its own at the
    function's memory size, and that is its billed duration (client CPU on one GIL at the memory's share of a
    vCPU, round trips overlapping over the threads).
    """
    rng = random.Random(7)
    clock = SimulatedClock(START)
    dynamodb = MeteredDynamoDB(clock=clock)
    dynamodb.create_table("delay", "pk", "sk")
    dynamodb.create_table("state", "pk")
    sqs = MeteredSQS(clock=clock)
    client = Client(QUEUE, "delay", sqs=sqs, dynamodb=dynamodb, clock=clock, sleep=lambda s: None)
    memory_mb = DISPATCHER_MEMORY_MB if groups == 1 else FANOUT_MEMORY_MB
    timed = _TimedRuns(dynamodb, sqs, clock, memory_mb, groups)
    timed.run_all()  # deployed before any message: the first watermark is now, as in a real stack
    due: dict[str, float] = {}
    for _ in range(0, messages, 500):
        outgoing = [OutgoingMessage("/remind", BODY, delay=901 + rng.random() * SPREAD_SECONDS) for _ in range(500)]
        for message, result in zip(outgoing, client.send_batch(outgoing), strict=True):
            due[result.message_id] = START + message.delay
    producer_calls = len(dynamodb.calls)
    safety_net = SafetyNet(dynamodb, sqs, clock)
    safety_net.process(dynamodb.stream)  # the producers' INSERTs, a few minutes after they were written
    dynamodb.side = "scheduler"
    timed.runs = 0
    timed.billed_seconds = 0.0
    minute = math.floor(START / 60) * 60
    while len(sqs.sent) < messages:
        minute += 60
        clock.now = minute + rng.uniform(0, 5)  # EventBridge fires within the first seconds of the minute
        timed.run_all()
    scheduler_calls = len(dynamodb.calls) - producer_calls + len(sqs.calls) - safety_net.calls
    gc.unfreeze()
    safety_net.process(_ttl_removals(dynamodb))  # each item's TTL REMOVE, after the scheduler sent it
    lambda_cost = timed.runs * PRICE_PER_LAMBDA_REQUEST + timed.billed_seconds * memory_mb / 1024 * PRICE_PER_LAMBDA_GB_SECOND_ARM
    figures = _figures(dynamodb, sqs, due, timed.runs, timed.cpu, producer_calls, scheduler_calls, safety_net, messages, lambda_cost)
    return {**figures, **safety_net.figures(), "dispatcher_billed_seconds_per_run": timed.billed_seconds / timed.runs}


class _SelfTimedNetwork(Network):
    """A Network that counts the CPU its own bookkeeping takes, so a run's CPU figure can leave it out."""

    own_cpu_s: float = 0.0

    def send(self, operation: str, messages: int = 0) -> None:
        started = time.process_time()
        super().send(operation, messages)
        self.own_cpu_s += time.process_time() - started

    def answer(self, operation: str, items: int = 0) -> None:
        started = time.process_time()
        super().answer(operation, items)
        self.own_cpu_s += time.process_time() - started


class _TimedRuns:
    """Each group's run at the same start, each timed on its own CPU of the network model, and billed as timed."""

    def __init__(self, dynamodb: MeteredDynamoDB, sqs: MeteredSQS, clock: SimulatedClock, memory_mb: int, groups: int) -> None:
        self.dynamodb, self.sqs, self.clock, self.memory_mb, self.groups = dynamodb, sqs, clock, memory_mb, groups
        self.runs, self.billed_seconds, self.cpu = 0, 0.0, 0.0

    def run_all(self) -> None:
        for index in range(self.groups):
            began = self.clock.now
            timer = SimulatedClock(began)  # the run's time on the model; the world's clock stands still but for sleeps
            network = _SelfTimedNetwork(timer, self.memory_mb, OWN_CPU_PER_MESSAGE_SECONDS, DISPATCH_THREADS)

            def sleep(seconds: float, timer: SimulatedClock = timer) -> None:  # a wait (a batch's moment, a retry's pause) takes both
                self.clock.now += seconds
                timer.now += seconds

            dispatcher = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=QUEUE + "-dlq", sqs=network.wrap(self.sqs),
                                         dynamodb=network.wrap(self.dynamodb), clock=self.clock, sleep=sleep,
                                         pool=network.pool(), group=DispatchGroup(index, self.groups))
            gc.freeze()  # the simulated world so far is not the run's (a Lambda's heap holds one run): its collections stay out of the run's CPU
            started = time.process_time()
            dispatcher.run()
            self.cpu += time.process_time() - started - network.own_cpu_s
            self.runs += 1
            self.billed_seconds += DISPATCHER_BASE_SECONDS + timer.now - began
            self.clock.now = began  # every group starts at the minute's moment


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

    def __init__(self, dynamodb: MeteredDynamoDB, sqs: MeteredSQS, clock: SimulatedClock) -> None:
        self.dynamodb, self.sqs, self.clock = dynamodb, sqs, clock
        self.recovery = DelayRecovery("state", QUEUE, QUEUE + "-dlq", sqs=sqs, dynamodb=dynamodb, clock=clock,
                                      sleep=lambda s: None, delay_table="delay")
        self.invocations = self.calls = 0
        self.billed_seconds = 0.0
        self.sent = 0

    def process(self, records: list[dict[str, Any]]) -> None:
        """Invoke the recovery once per batch, at the time the batch closes."""
        side, self.dynamodb.side = self.dynamodb.side, "safety_net"
        for closes_at, batch in _mapping_batches(records):
            self.clock.now = max(self.clock.now, closes_at)
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
             producer_calls: int, scheduler_calls: int, safety_net: SafetyNet, messages: int, lambda_cost: float) -> dict[str, float]:
    by_body_order = list(sqs.sent)
    due_by_at = [entry["MessageAttributes"]["worker_tier.due_at"]["StringValue"] for entry in by_body_order]
    lateness = sorted(entry["visible_at"] - _epoch(at) for entry, at in zip(by_body_order, due_by_at, strict=True))
    safety_net_cost = safety_net.cost()
    ours = (
        sum(dynamodb.write_units.values()) * PRICE_PER_WRITE_UNIT
        + (dynamodb.read_units["producer"] + dynamodb.read_units["scheduler"]) * PRICE_PER_READ_UNIT
        + sqs.requests * PRICE_PER_SQS_REQUEST
        + lambda_cost
        + safety_net_cost
    )
    per_message_read = (dynamodb.read_units["producer"] + dynamodb.read_units["scheduler"]) / messages
    reference = (2 * PRICE_PER_WRITE_UNIT + per_message_read * PRICE_PER_READ_UNIT + PRICE_PER_SQS_REQUEST) * messages + lambda_cost
    ours_per_million = ours / messages * 1e6
    return {
        "messages": messages,
        "scheduler_runs": runs,
        "cost_per_million_usd": ours_per_million,
        "eventbridge_scheduler_plus_sqs_per_million_usd": EVENTBRIDGE_SCHEDULER_PLUS_SQS_USD_PER_MILLION,
        "reference_design_per_million_usd": reference / messages * 1e6,
        "cost_ratio_vs_eventbridge_scheduler": ours_per_million / EVENTBRIDGE_SCHEDULER_PLUS_SQS_USD_PER_MILLION,
        "cost_ratio_vs_reference_design": ours / reference,
        "write_units_per_message": sum(dynamodb.write_units.values()) / messages,
        "read_units_per_message": per_message_read,
        "scheduler_write_units_per_message": dynamodb.write_units["scheduler"] / messages,
        "safety_net_per_million_usd": safety_net_cost / messages * 1e6,
        "empty_shard_queries_usd_per_month": MAX_SHARDS * EMPTY_QUERY_READ_UNITS * MINUTES_PER_MONTH * PRICE_PER_READ_UNIT,
        "empty_shard_queries_per_million_usd_at_this_rate": _empty_query_cost(runs) / messages * 1e6,
        "sqs_requests_per_message": sqs.requests / messages,
        "early_count": sum(1 for value in lateness if value < 0),
        "p99_lateness_s": lateness[int(0.99 * (len(lateness) - 1))],
        "max_lateness_s": lateness[-1],
        "duplicates": len(sqs.sent) - messages,
        "cpu_us_per_dispatched_message": cpu / messages * 1e6,
        "api_calls_per_1000_messages": scheduler_calls / messages * 1000,
        "producer_api_calls_per_1000_messages": producer_calls / messages * 1000,
    }


def _empty_query_cost(runs: int) -> float:
    """What Querying every shard of each minute costs when the shards are empty (already inside the metered reads)."""
    return runs * MAX_SHARDS * EMPTY_QUERY_READ_UNITS * PRICE_PER_READ_UNIT


def _epoch(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# -- dispatch at scale: one run's throughput, and the largest minute it puts on time --------------------------

SCALE_BODY = BODY
SCALE_ATTRIBUTES = {PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/remind"}}
ONE_RUN_MESSAGES = 20_000
# Minutes of load, each as large, a run each minute, horizon SUSTAINED_HORIZON_SECONDS. Long enough for a backlog
# that grows by a few percent of a minute per minute to use up the horizon's slack and show (3 minutes did not:
# 22,000 passed over 3 minutes and was late over 40); each minute's messages are judged on their own.
SUSTAINED_MINUTES = 20
# One minute of slack, so capacity shows within the window: a deeper horizon only delays the same backlog.
SUSTAINED_HORIZON_SECONDS = 2 * BUCKET_SECONDS
RUN_JITTER_SECONDS = 2.0  # EventBridge fires a run within the first seconds of its minute
# Carried at scale (no backlog, and punctual): a minute's p99 lateness, due -> visible, within 2 s. It is the rounding
# of DelaySeconds up to whole seconds (at most send_moment.ALIGNED_ROUNDING_MS for a batch sent at its moment, up to
# 1 s for one spread too wide to have one) plus the time from the clock read for DelaySeconds to SQS receiving the
# call, which under a full CPU (the model's one GIL at a fraction of a vCPU) grows with the wave: at 256 MB a wave's
# last call goes ~0.3 s after its clock read. The p99 against the 1 s goal is a figure of its own (GOALS).
ON_TIME_P99_SECONDS = 2.0
SEARCH_STEP_MESSAGES = 500  # the largest on-time minute is found to within this
GOAL_MINUTE_MESSAGES = 1_000_000
# Our own code's CPU per dispatched message at one vCPU, beside botocore's (network_model.CLIENT_CPU_SECONDS and _PER_ITEM):
# simulate()'s cpu_us_per_dispatched_message measures it (in-memory fakes included, so it errs high).
OWN_CPU_PER_MESSAGE_SECONDS = 35e-6


class ScaleWorld:
    """A delay table holding ``per_minute`` messages due in each of ``minutes`` minutes, and a dispatcher on a network model."""

    def __init__(self, per_minute: int, minutes: int, memory_mb: int, lanes: int, horizon_seconds: int,
                 first_minute: int, group: DispatchGroup | None = None) -> None:
        group = group or DispatchGroup()
        self.clock = SimulatedClock(first_minute * BUCKET_SECONDS - horizon_seconds)  # the minute before is in reach
        self.runs_out_of_time = 0  # runs that stopped for time with work in reach: a backlog carried over
        self.runs, self.billed_seconds, self.longest_run_seconds = 0, 0.0, 0.0
        self.memory_mb = memory_mb
        self.dynamodb = dynamodb = MeteredDynamoDB(self.clock, keep_stream=False)
        dynamodb.create_table("delay", "pk", "sk")
        dynamodb.create_table("state", "pk")
        self.sqs = MeteredSQS(clock=self.clock)
        self.network = Network(self.clock, memory_mb, OWN_CPU_PER_MESSAGE_SECONDS, lanes)
        self.dispatcher = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=QUEUE + "-dlq",
                                          sqs=self.network.wrap(self.sqs), dynamodb=self.network.wrap(dynamodb),
                                          clock=self.clock, sleep=self._sleep, pool=self.network.pool(),
                                          horizon_seconds=horizon_seconds, group=group)
        # The first run, on the clean table (once per stack): it finds no watermark and writes one. Timed like every
        # run; it sends nothing, so no message of the load goes out in an untimed run.
        self.run_at(self.clock.now - BUCKET_SECONDS)
        rng = random.Random(per_minute)
        store = DelayStore("delay", dynamodb)
        shards = set(group.shards)  # a group's world holds only its shards' share of each minute
        for minute in range(first_minute, first_minute + minutes):
            dues = [int((minute * BUCKET_SECONDS + rng.random() * BUCKET_SECONDS) * 1000) for _ in range(per_minute)]
            store.put_many(DelayedMessage(f"{minute}-{n}", due, SCALE_BODY, SCALE_ATTRIBUTES, n % MAX_SHARDS)
                           for n, due in enumerate(dues) if n % MAX_SHARDS in shards)
        self.stored = len(dynamodb.tables["delay"])
        dynamodb.side = "scheduler"

    def _sleep(self, seconds: float) -> None:
        self.clock.now += seconds

    def run_at(self, start: float) -> float:
        """One run from ``start`` (or when the last ended), with the function's timeout; returns its end."""
        self.clock.now = max(start, self.clock.now)
        began, deadline = self.clock.now, self.clock.now + DISPATCHER_TIMEOUT_SECONDS
        report = self.dispatcher.run(lambda: int((deadline - self.clock.now) * 1000))
        self.runs_out_of_time += report.stopped == TIME_RUNNING_OUT
        self.runs += 1
        self.billed_seconds += DISPATCHER_BASE_SECONDS + self.clock.now - began
        self.longest_run_seconds = max(self.longest_run_seconds, self.clock.now - began)
        return self.clock.now

    def cost_usd(self) -> float:
        """What this world's dispatch cost: every unit metered (the producers' writes too), and its runs' Lambda time."""
        units = (sum(self.dynamodb.write_units.values()) * PRICE_PER_WRITE_UNIT
                 + sum(self.dynamodb.read_units.values()) * PRICE_PER_READ_UNIT + self.sqs.requests * PRICE_PER_SQS_REQUEST)
        return units + self.runs * PRICE_PER_LAMBDA_REQUEST + self.billed_seconds * self.memory_mb / 1024 * PRICE_PER_LAMBDA_GB_SECOND_ARM

    def lateness(self) -> tuple[dict[int, list[float]], int]:
        """(each sent message's lateness, sorted, by its due minute; how many SQS shows before they are due).

        Lateness: from its due time to when SQS shows it (``visible_at``: received + DelaySeconds).
        It includes up to 1 s by design (DelaySeconds is whole seconds, rounded up), and whatever
        passed between the clock read for DelaySeconds and SQS receiving the call.
        """
        late: dict[int, list[float]] = {}
        early = 0
        for entry in self.sqs.sent:
            due = _epoch(entry["MessageAttributes"][DUE_AT_ATTRIBUTE]["StringValue"])
            late.setdefault(math.floor(due / BUCKET_SECONDS), []).append(entry["visible_at"] - due)
            early += entry["visible_at"] < due
        return {minute: sorted(values) for minute, values in late.items()}, early


def one_run_rate(memory_mb: int, lanes: int = DISPATCH_THREADS, messages: int = ONE_RUN_MESSAGES) -> float:
    """Messages per second of one run sending a large minute, well ahead of it (simulated time)."""
    first = math.floor(START / BUCKET_SECONDS) + 30
    world = ScaleWorld(messages, 1, memory_mb, lanes, DISPATCH_HORIZON_SECONDS, first)
    start = (first + 1) * BUCKET_SECONDS - DISPATCH_HORIZON_SECONDS  # the first moment the minute is in reach
    end = world.run_at(start)
    return len(world.sqs.sent) / (end - start)


def sustained(per_minute: int, memory_mb: int, lanes: int = DISPATCH_THREADS) -> tuple[float, int]:
    """(the worst minute's p99 lateness, early count) when each of SUSTAINED_MINUTES minutes holds ``per_minute`` messages.

    inf when a run stopped for time (a backlog carried over), or a minute's messages were not all sent in the window.
    """
    first = math.floor(START / BUCKET_SECONDS) + 30
    world = ScaleWorld(per_minute, SUSTAINED_MINUTES, memory_mb, lanes, SUSTAINED_HORIZON_SECONDS, first)
    minute = first - 2
    while len(world.sqs.sent) < per_minute * SUSTAINED_MINUTES and minute < first + 2 * SUSTAINED_MINUTES:
        world.run_at(minute * BUCKET_SECONDS + RUN_JITTER_SECONDS)
        minute += 1
    by_minute, early = world.lateness()
    # Every minute as large: a run that could not finish the minute in reach leaves a backlog that only grows,
    # though it takes the horizon's slack many minutes to show as lateness (22,000 a minute: 30 minutes).
    if world.runs_out_of_time or len(by_minute) < SUSTAINED_MINUTES or any(len(v) < per_minute for v in by_minute.values()):
        return math.inf, early
    return max(values[int(0.99 * (len(values) - 1))] for values in by_minute.values()), early


def largest_sustained_minute(memory_mb: int, rate: float, start: int | None = None) -> tuple[int, float]:
    """(the largest minute, repeated every minute, put on time: each minute's p99 lateness <= ON_TIME_P99_SECONDS,
    0 early; its worst minute's p99), tried down from the rate's prediction."""
    usable_s = DISPATCHER_TIMEOUT_SECONDS - RUN_MARGIN_MS / 1000 - RUN_JITTER_SECONDS
    candidate = start or int(rate * usable_s * 1.1 // 500 * 500)
    failed = None
    while candidate >= 100:
        p99, early = sustained(candidate, memory_mb)
        if p99 <= ON_TIME_P99_SECONDS and early == 0:
            break
        failed, candidate = candidate, int(candidate * 0.9 // 100 * 100)
    else:
        return 0, math.inf
    while failed is not None and failed - candidate > SEARCH_STEP_MESSAGES:  # between the last on time and the first late
        middle = (candidate + failed) // 2 // SEARCH_STEP_MESSAGES * SEARCH_STEP_MESSAGES
        if middle <= candidate:
            break
        middle_p99, early = sustained(middle, memory_mb)
        if middle_p99 <= ON_TIME_P99_SECONDS and early == 0:
            candidate, p99 = middle, middle_p99
        else:
            failed = middle
    return candidate, p99


def at_scale(memory_mb: int = DISPATCHER_MEMORY_MB, one_run_messages: int = ONE_RUN_MESSAGES,
             every_minute_from: int | None = None) -> dict[str, float]:
    """Dispatch figures on the network model, at the deployed memory size and at one full vCPU.

    ``every_minute_from``: where the search for the largest on-time minute starts (default: the rate's prediction).
    """
    rate = one_run_rate(memory_mb, messages=one_run_messages)
    rate_one_vcpu = one_run_rate(LAMBDA_MB_PER_VCPU, messages=one_run_messages)
    sequential = one_run_rate(memory_mb, lanes=1, messages=one_run_messages)
    sustained_minute, sustained_p99 = largest_sustained_minute(memory_mb, rate, every_minute_from)
    ahead_s = DISPATCH_HORIZON_SECONDS - BUCKET_SECONDS - RUN_MARGIN_MS / 1000
    return {
        "dispatch_msgs_per_s_one_run": rate,
        "dispatch_msgs_per_s_one_run_one_thread": sequential,
        "dispatch_msgs_per_s_one_run_at_1769mb": rate_one_vcpu,
        "largest_on_time_minute_every_minute": sustained_minute,
        "p99_lateness_s_every_minute_at_largest": sustained_p99,  # worst minute's, due -> visible
        # One large minute among quiet ones: the horizon lets runs start on it ahead_s before it begins.
        "largest_on_time_minute_alone": int(rate * ahead_s * (1 - RUN_MARGIN_MS / 1000 / DISPATCHER_TIMEOUT_SECONDS)),
        "goal_minute_messages": GOAL_MINUTE_MESSAGES,
        "one_run_share_of_goal_minute_every_minute": sustained_minute / GOAL_MINUTE_MESSAGES,
        "runs_needed_for_goal_minute_at_1769mb": math.ceil(GOAL_MINUTE_MESSAGES / (rate_one_vcpu * (
            DISPATCHER_TIMEOUT_SECONDS - RUN_MARGIN_MS / 1000 - RUN_JITTER_SECONDS))),
    }


# -- fan-out: G shard groups, each its own invocation on its own CPU, sharing nothing but AWS's latency ------------

# Minutes of load each fan-out judges: each group's run must finish each minute in reach (a run stopped for time
# fails the whole G), so a backlog cannot grow unseen; 20 minutes of 1,000,000 would be 20 million simulated messages.
FANOUT_MINUTES = 3
FANOUT_GROUP_CHOICES = (1, 2, 4, 8, 16)
ONE_SECOND = 1.0  # the share of messages within it is reported beside the p99


def fanout(per_minute: int, groups: int, memory_mb: int = FANOUT_MEMORY_MB, minutes: int = FANOUT_MINUTES,
           simulated: int | None = None) -> dict[str, float]:
    """Each of ``groups`` groups dispatching its shards' share of ``per_minute`` messages a minute, in its own world.

    The groups share nothing but DynamoDB's and SQS's latency (the model has no contention), so each is
    simulated alone, and their lateness merged by due minute. ``simulated``: only that many groups, the
    largest (group 0) and the smallest (the last) first, spread evenly (``messages`` counts only theirs).
    """
    first = math.floor(START / BUCKET_SECONDS) + 30
    by_minute: dict[int, list[float]] = {}
    totals = {"early": 0, "runs_out_of_time": 0, "cost_usd": 0.0, "unsent": 0, "longest_run_s": 0.0, "runs": 0, "messages": 0}
    for index in _spread(groups, simulated or groups):
        world = ScaleWorld(per_minute, minutes, memory_mb, DISPATCH_THREADS, SUSTAINED_HORIZON_SECONDS, first,
                           DispatchGroup(index, groups))
        minute = first - 2
        while len(world.sqs.sent) < world.stored and minute < first + 2 * minutes and not world.runs_out_of_time:
            world.run_at(minute * BUCKET_SECONDS + RUN_JITTER_SECONDS)
            minute += 1
        late, early = world.lateness()
        for due_minute, values in late.items():
            by_minute.setdefault(due_minute, []).extend(values)
        totals["early"] += early
        totals["runs_out_of_time"] += world.runs_out_of_time
        totals["unsent"] += world.stored - len(world.sqs.sent)
        totals["cost_usd"] += world.cost_usd()
        totals["runs"] += world.runs
        totals["messages"] += world.stored
        totals["longest_run_s"] = max(totals["longest_run_s"], world.longest_run_seconds)
    return {**totals, **_lateness_figures(by_minute), "groups_simulated": len(_spread(groups, simulated or groups))}


def _spread(groups: int, count: int) -> list[int]:
    """``count`` of ``groups`` group indices, evenly spread, the first and the last among them."""
    if count >= groups:
        return list(range(groups))
    return sorted({round(n * (groups - 1) / max(1, count - 1)) for n in range(count)})


def _lateness_figures(by_minute: dict[int, list[float]]) -> dict[str, float]:
    """The worst minute's p99 (due -> visible), and the share of all messages visible within 1 s of due."""
    if not by_minute:
        return {"worst_minute_p99_s": math.inf, "within_one_second": 0.0}
    p99s = []
    for values in by_minute.values():
        values.sort()
        p99s.append(values[int(0.99 * (len(values) - 1))])
    count = sum(len(values) for values in by_minute.values())
    within = sum(1 for values in by_minute.values() for value in values if value <= ONE_SECOND)
    return {"worst_minute_p99_s": max(p99s), "within_one_second": within / count}


def fanout_on_time(result: dict[str, float]) -> bool:
    """Every message sent, no run stopped for time, none early, each minute's p99 within ON_TIME_P99_SECONDS."""
    return (result["unsent"] == 0 and result["runs_out_of_time"] == 0 and result["early"] == 0
            and result["worst_minute_p99_s"] <= ON_TIME_P99_SECONDS)


def smallest_fanout(per_minute: int, rate_one_vcpu: float, memory_mb: int = FANOUT_MEMORY_MB,
                    minutes: int = FANOUT_MINUTES, simulated: int | None = None) -> tuple[int, dict[str, float], int]:
    """(the smallest G that puts ``per_minute`` on time, its figures, the largest G ruled out by the bound).

    A G whose largest group holds more than one run of one vCPU can send (``rate_one_vcpu`` over the run's usable
    seconds) is ruled out without simulating it; the others are simulated, smallest first.
    """
    usable_s = DISPATCHER_TIMEOUT_SECONDS - RUN_MARGIN_MS / 1000 - RUN_JITTER_SECONDS
    ruled_out = 0
    for groups in FANOUT_GROUP_CHOICES:
        largest_share = len(DispatchGroup(0, groups).shards) / MAX_SHARDS
        if per_minute * largest_share > rate_one_vcpu * usable_s:
            ruled_out = groups
            continue
        result = fanout(per_minute, groups, memory_mb, minutes, simulated)
        if fanout_on_time(result):
            return groups, result, ruled_out
        ruled_out = groups
    return 0, {}, ruled_out


def fanout_figures(rate_one_vcpu: float, per_minute: int = GOAL_MINUTE_MESSAGES, minutes: int = FANOUT_MINUTES,
                   safety_net_per_million: float = 0.0, simulated: int | None = None) -> dict[str, float]:
    """The smallest G carrying ``per_minute`` on time at a full vCPU, its lateness, and its cost per million."""
    groups, result, ruled_out = smallest_fanout(per_minute, rate_one_vcpu, minutes=minutes, simulated=simulated)
    if not groups:  # no G up to one group per shard carries the minute: every figure says so
        result = {"worst_minute_p99_s": math.inf, "within_one_second": 0.0, "early": 0, "runs_out_of_time": math.inf,
                  "longest_run_s": math.inf, "cost_usd": math.inf, "messages": 1, "groups_simulated": 0}
    per_million = result["cost_usd"] / result["messages"] * 1e6 + safety_net_per_million
    return {
        "fanout_goal_minute_messages": per_minute,
        "largest_on_time_minute_fanned_out": per_minute if groups else 0,
        "fanout_groups_for_goal_minute": groups,
        "fanout_memory_mb": FANOUT_MEMORY_MB,
        "fanout_largest_group_count_ruled_out": ruled_out,
        "fanout_minutes_judged": minutes,
        "fanout_groups_simulated": result["groups_simulated"],
        "fanout_p99_lateness_s_worst_minute": result["worst_minute_p99_s"],
        "fanout_share_within_1s": result["within_one_second"],
        "fanout_early_count": result["early"],
        "fanout_runs_out_of_time": result["runs_out_of_time"],
        "fanout_longest_run_s": result["longest_run_s"],
        "fanout_cost_per_million_usd": per_million,
        "fanout_cost_ratio_vs_eventbridge_scheduler": per_million / EVENTBRIDGE_SCHEDULER_PLUS_SQS_USD_PER_MILLION,
    }


# -- the model against a moto server: one sequential run, measured and predicted ------------------------------

MOTO_CHECK_MESSAGES = 3000


class _Stopwatch:
    """A boto3 client whose calls are timed: wall and this process's CPU, per operation."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.wall: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        def timed(**kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return method(**kwargs)
            finally:
                self.wall.setdefault(name, []).append(time.perf_counter() - wall)
                self.cpu.setdefault(name, []).append(time.process_time() - cpu)

        return timed

    def means(self) -> tuple[dict[str, float], dict[str, float]]:
        """(round trip: wall less CPU, client CPU) per operation, means."""
        cpu = {name: sum(values) / len(values) for name, values in self.cpu.items()}
        return {name: sum(values) / len(values) - cpu[name] for name, values in self.wall.items()}, cpu


def spot_check_on_moto(messages: int = MOTO_CHECK_MESSAGES, groups: int = 1) -> dict[str, float]:
    """A sequential dispatch run of ``messages`` (one run per group, one after another) against a moto server, and the
    model's prediction from moto's latencies. With ``groups`` > 1 the figures are prefixed ``moto_groups<G>_``."""
    import socket
    import subprocess
    import sys

    import boto3

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    gc.collect()
    gc.freeze()  # the simulations' heap is not the dispatcher's: its collections would count as the run's CPU
    try:
        options = {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1",
                   "aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
        _wait_for(lambda: boto3.client("sqs", **options).list_queues())
        measured = _moto_run(options, messages, groups)
    finally:
        gc.unfreeze()
        server.terminate()
        server.wait(timeout=10)
    round_trip, client_cpu = measured.pop("round_trip"), measured.pop("client_cpu")
    predicted = _model_run(messages, round_trip, client_cpu, measured["moto_own_cpu_us_per_message"] / 1e6, groups)
    figures = {**measured, "moto_model_msgs_per_s": predicted,
               "moto_measured_over_model": measured["moto_measured_msgs_per_s"] / predicted}
    return figures if groups == 1 else {key.replace("moto_", f"moto_groups{groups}_", 1): value for key, value in figures.items()}


def _wait_for(call: Any, seconds: float = 30.0) -> None:
    """Retry ``call`` until it answers (the server is starting), for at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            call()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _moto_run(options: dict[str, str], messages: int, groups: int = 1) -> dict[str, Any]:
    """Store ``messages`` in one minute on moto, then time one sequential dispatch run of them per group."""
    import boto3

    dynamodb, sqs = boto3.client("dynamodb", **options), boto3.client("sqs", **options)
    for table, keys in (("delay", ("pk", "sk")), ("state", ("pk",))):
        dynamodb.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                              KeySchema=[{"AttributeName": k, "KeyType": t} for k, t in zip(keys, ("HASH", "RANGE")[:len(keys)], strict=True)],
                              AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in keys])
    queue = sqs.create_queue(QueueName="work")["QueueUrl"]
    started = time.time()
    offset = [START - started]  # the dispatcher's clock: START when this run began, then real seconds
    clock = lambda: time.time() + offset[0]  # noqa: E731
    timed_dynamodb, timed_sqs = _Stopwatch(dynamodb), _Stopwatch(sqs)
    dispatchers = [DelayDispatcher("delay", "state", queue, dead_letter_queue_url=queue, sqs=timed_sqs, dynamodb=timed_dynamodb,
                                   clock=clock, parallel=False, group=DispatchGroup(g, groups)) for g in range(groups)]
    for dispatcher in dispatchers:
        dispatcher.run()  # the first run: the watermark
    minute = math.floor((clock() + DISPATCH_HORIZON_SECONDS) / BUCKET_SECONDS)  # the next minute to come in reach
    offset[0] += BUCKET_SECONDS  # a minute later
    DelayStore("delay", dynamodb).put_many(
        DelayedMessage(f"m-{n}", int((minute * BUCKET_SECONDS + n / messages * BUCKET_SECONDS) * 1000), SCALE_BODY,
                       SCALE_ATTRIBUTES, n % MAX_SHARDS) for n in range(messages))
    for stopwatch in (timed_dynamodb, timed_sqs):
        stopwatch.wall.clear()
        stopwatch.cpu.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    sent = sum(dispatcher.run().sent for dispatcher in dispatchers)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    in_queue = _queue_depth(sqs, queue)
    dynamodb_trip, dynamodb_cpu = timed_dynamodb.means()
    sqs_trip, sqs_cpu = timed_sqs.means()
    calls_cpu = sum(sum(values) for stopwatch in (timed_dynamodb, timed_sqs) for values in stopwatch.cpu.values())
    return {
        "moto_messages": messages,
        "moto_sent": sent,
        "moto_in_queue": in_queue,
        "moto_measured_msgs_per_s": sent / wall,
        "moto_send_message_batch_ms": (sqs_trip.get("send_message_batch", 0) + sqs_cpu.get("send_message_batch", 0)) * 1000,
        "moto_query_ms": (dynamodb_trip.get("query", 0) + dynamodb_cpu.get("query", 0)) * 1000,
        "moto_own_cpu_us_per_message": max(0.0, cpu - calls_cpu) / max(1, sent) * 1e6,
        "round_trip": {**dynamodb_trip, **sqs_trip},
        "client_cpu": {**dynamodb_cpu, **sqs_cpu},
    }


def _queue_depth(sqs: Any, queue: str) -> int:
    """Messages in the queue, visible or still delayed (moto counts both): each stored message once means none lost or doubled."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessages",
                                                                          "ApproximateNumberOfMessagesDelayed"])["Attributes"]
    return sum(int(value) for value in attributes.values())


def _model_run(messages: int, round_trip: dict[str, float], client_cpu: dict[str, float], own_cpu_s: float,
               groups: int = 1) -> float:
    """The model's rate for the same sequential runs (one per group), with moto's latencies and this machine's one core."""
    first = math.floor(START / BUCKET_SECONDS) + 30
    sent, seconds = 0, 0.0
    for index in range(groups):
        world = ScaleWorld(messages, 1, LAMBDA_MB_PER_VCPU, 1, DISPATCH_HORIZON_SECONDS, first, DispatchGroup(index, groups))
        world.network.own_cpu_per_message_seconds = own_cpu_s
        world.network.round_trip_seconds.update(round_trip)
        world.network.client_cpu_seconds.update(client_cpu)
        world.network.client_cpu_per_item_seconds = {}  # moto's means per call are at the run's own page and batch sizes
        start = (first + 1) * BUCKET_SECONDS - DISPATCH_HORIZON_SECONDS
        seconds += world.run_at(start) - start
        sent += len(world.sqs.sent)
    return sent / seconds


GOALS = {
    "cost_ratio_vs_eventbridge_scheduler": ("<=", 0.5),
    # the delay path's goal, fanned out: the goal minute on time (each minute's p99 due -> visible <= ON_TIME_P99_SECONDS, 0 early,
    # no run stopped for time) at the smallest G that carries it; its p99 against the 1 s; its cost
    "largest_on_time_minute_fanned_out": (">=", GOAL_MINUTE_MESSAGES),
    "fanout_p99_lateness_s_worst_minute": ("<=", 1.0),
    "fanout_early_count": ("<=", 0),
    "fanout_cost_ratio_vs_eventbridge_scheduler": ("<=", 0.5),
    "early_count": ("<=", 0),
    "p99_lateness_s": ("<=", 1.0),
    "cpu_us_per_dispatched_message": ("<=", 50.0),
}


MOTO_CHECK_GROUPS = 2  # the fan-out's spot check: two groups, one run each, against the same moto server


def measure(messages: int = MESSAGES, one_run_messages: int = ONE_RUN_MESSAGES, moto_messages: int = MOTO_CHECK_MESSAGES,
            every_minute_from: int | None = None, fanout_per_minute: int = GOAL_MINUTE_MESSAGES,
            fanout_minutes: int = FANOUT_MINUTES, fanout_simulated_groups: int | None = None) -> dict[str, float]:
    """Every figure; the arguments make it small (tests/bench runs it with tiny N)."""
    base = simulate(messages)
    scale = at_scale(one_run_messages=one_run_messages, every_minute_from=every_minute_from)
    fanned = fanout_figures(scale["dispatch_msgs_per_s_one_run_at_1769mb"], fanout_per_minute, fanout_minutes,
                            base["safety_net_per_million_usd"], fanout_simulated_groups)
    groups = int(fanned["fanout_groups_for_goal_minute"]) or max(FANOUT_GROUP_CHOICES)
    quiet = simulate(messages, groups=groups)  # the same quiet traffic as `base`, dispatched by the goal's G
    return {**base, **scale, **fanned,
            "cost_ratio_vs_eventbridge_scheduler_quiet_traffic_at_fanout_groups": quiet["cost_ratio_vs_eventbridge_scheduler"],
            "cost_per_million_usd_quiet_traffic_at_fanout_groups": quiet["cost_per_million_usd"],
            "dispatcher_billed_seconds_per_run_quiet_traffic_at_fanout_groups": quiet["dispatcher_billed_seconds_per_run"],
            **spot_check_on_moto(moto_messages), **spot_check_on_moto(moto_messages, MOTO_CHECK_GROUPS)}


def run():
    """Measure and write bench/results/scheduler.json."""
    figures = measure()
    return results.write("scheduler", {k: round(v, 6) if isinstance(v, float) else v for k, v in figures.items()}, GOALS, "make bench")
