"""A network and CPU model for the in-memory AWS fakes, on a simulated clock: dispatch timing without AWS or threads.

Each AWS call costs its client CPU (botocore's request building and response parsing,
plus our own code per message it carries) and then its network round trip. CPU is one
timeline, as under the GIL: two calls never use it at once, and a Lambda function gets
``memory_mb / LAMBDA_MB_PER_VCPU`` of a core. Round trips overlap freely, up to
``lanes`` calls in flight (the dispatcher's threads). ``SimulatedPool.map`` stands in
for the dispatcher's ThreadPoolExecutor: each call starts in the lane that frees first.
Everything is deterministic, so a simulated minute of a million messages takes seconds.

Where the figures come from (``ROUND_TRIP_SECONDS``, ``CLIENT_CPU_SECONDS``):

- round trips, in-region: DynamoDB answers small requests in single-digit milliseconds
  (https://aws.amazon.com/dynamodb/, "single-digit millisecond performance at any
  scale"); a Query page of 100 items of ~200 B (20 KB) is put at 10 ms, a small PutItem
  or UpdateItem at 8 ms (writes wait for two of three replicas), GetItem at 5 ms. SQS
  SendMessageBatch of 10 is put at 20 ms: SoftwareMill's in-region measurements of
  batched sends (https://softwaremill.com/amazon-sqs-performance-latency/) show
  tens of milliseconds at the median; 20 ms is the figure the delay path is designed for.
- client CPU: measured here (``measure_client_cpu``: botocore against a local moto
  server, the client process's CPU only), on this machine's cores, which a 1,769 MB
  Lambda function matches: "at 1,769 MB, a function has the equivalent of one vCPU"
  (https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

LAMBDA_MB_PER_VCPU = 1769

# In-region round trips, seconds, by client method (see the module docstring).
ROUND_TRIP_SECONDS = {
    "send_message_batch": 0.020,
    "query": 0.010,
    "put_item": 0.008,
    "update_item": 0.008,
    "delete_item": 0.008,
    "get_item": 0.005,
    "scan": 0.010,
    "get_queue_attributes": 0.010,
}
# botocore's client CPU per call at one vCPU, seconds, beside CLIENT_CPU_PER_ITEM_SECONDS: measured by measure_client_cpu()
# against moto (2026-11-23, the machine quiet; medians of five runs of 150 calls): an empty Query page 1.0 ms and one of
# 100 items of ~200 B 3.5 ms; SendMessageBatch of one message of ~70 B with 2 attributes 1.9 ms, of ten 2.5 ms; a
# small PutItem 1.0 ms. (A flat 4.2 ms a Query page and 2.4 ms a SendMessageBatch, measured under load, were used before.)
CLIENT_CPU_SECONDS = {
    "send_message_batch": 0.00182,
    "query": 0.0010,
    "put_item": 0.0010,
    "update_item": 0.0010,
    "delete_item": 0.0010,
    "get_item": 0.0010,
    "scan": 0.0010,
    "get_queue_attributes": 0.0010,
}
# ... and per item a call carries: each entry of a SendMessageBatch (building it), each item of a Query or Scan page
# (parsing it, after the answer).
CLIENT_CPU_PER_ITEM_SECONDS = {
    "send_message_batch": 0.000064,
    "query": 0.000025,
    "scan": 0.000025,
}


@dataclass
class SimulatedClock:
    """Simulated time, and when the one CPU is next free."""

    now: float
    cpu_free_at: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Network:
    """The cost of each call: ``own_cpu_per_message_seconds`` is our code's CPU per message a send carries."""

    clock: SimulatedClock
    memory_mb: int
    own_cpu_per_message_seconds: float
    lanes: int
    round_trip_seconds: dict[str, float] = field(default_factory=lambda: dict(ROUND_TRIP_SECONDS))
    client_cpu_seconds: dict[str, float] = field(default_factory=lambda: dict(CLIENT_CPU_SECONDS))
    client_cpu_per_item_seconds: dict[str, float] = field(default_factory=lambda: dict(CLIENT_CPU_PER_ITEM_SECONDS))
    calls: int = 0

    def send(self, operation: str, messages: int = 0) -> None:
        """Advance the clock to when AWS receives a call: its CPU when the CPU is free, then half its round trip.

        ``messages``: the entries it carries (each costs botocore's per-item CPU and our own per message).
        """
        per_message = self.own_cpu_per_message_seconds + self.client_cpu_per_item_seconds.get(operation, 0.0)
        self._use_cpu(self.client_cpu_seconds[operation] + messages * per_message)
        self.clock.now += self.round_trip_seconds[operation] / 2
        self.calls += 1

    def answer(self, operation: str, items: int = 0) -> None:
        """Advance the clock to when the answer is back (the other half of the round trip), and parsed: ``items`` it carries."""
        self.clock.now += self.round_trip_seconds[operation] / 2
        if operation != "send_message_batch":
            self._use_cpu(items * self.client_cpu_per_item_seconds.get(operation, 0.0))

    def _use_cpu(self, seconds_at_one_vcpu: float) -> None:
        """The CPU for this long at one vCPU, from when it is free: the clock moves to its end."""
        if not seconds_at_one_vcpu:
            return
        start = max(self.clock.now, self.clock.cpu_free_at)
        self.clock.cpu_free_at = start + seconds_at_one_vcpu / min(1.0, self.memory_mb / LAMBDA_MB_PER_VCPU)
        self.clock.now = self.clock.cpu_free_at

    def wrap(self, fake: Any) -> "Timed":
        """``fake`` with every call timed by this network."""
        return Timed(fake, self)

    def pool(self) -> "SimulatedPool":
        """A stand-in for the dispatcher's thread pool, ``lanes`` calls in flight."""
        return SimulatedPool(self.clock, self.lanes)


class Timed:
    """A fake whose calls advance the simulated clock; a call takes effect when AWS receives it (a delay counts from then)."""

    def __init__(self, fake: Any, network: Network) -> None:
        self._fake, self._network = fake, network

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._fake, name)
        if name not in self._network.round_trip_seconds:
            return method

        def timed(**kwargs: Any) -> Any:
            self._network.send(name, len(kwargs.get("Entries") or ()))
            answer: Any = None
            try:
                answer = method(**kwargs)
                return answer
            finally:
                self._network.answer(name, len(answer.get("Items") or ()) if isinstance(answer, dict) else 0)

        return timed


class SimulatedPool:
    """Executor.map on the simulated clock: each call starts when a lane frees; map returns when all have ended."""

    def __init__(self, clock: SimulatedClock, lanes: int) -> None:
        self.clock, self.lanes = clock, lanes

    def map(self, call: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        free = [self.clock.now] * self.lanes
        heapq.heapify(free)
        results, ends = [], [self.clock.now]
        for item in items:
            self.clock.now = heapq.heappop(free)  # non-decreasing: the CPU timeline stays in order
            results.append(call(item))
            heapq.heappush(free, self.clock.now)
            ends.append(self.clock.now)
        self.clock.now = max(ends)
        return results


def measure_client_cpu(endpoint_url: str, calls: int = 150) -> dict[str, float]:
    """botocore's CPU per call in this process against a running moto server: the base and per-item figures above.

    Each of ``CLIENT_CPU_SECONDS``'s measured calls at two sizes (an empty and a 100-item Query page, a
    SendMessageBatch of one and of ten): the per-item figure is the slope between them, the base what is left.
    """
    import json
    import time

    import boto3

    options = {"endpoint_url": endpoint_url, "region_name": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "x"}
    sqs, dynamodb = boto3.client("sqs", **options), boto3.client("dynamodb", **options)
    url = sqs.create_queue(QueueName="cpu")["QueueUrl"]
    body = json.dumps({"user_id": 123456, "template": "trial-ending", "locale": "en-GB"})
    attributes = {name: {"DataType": "String", "StringValue": value}
                  for name, value in (("worker_tier.path", "/remind"), ("worker_tier.due_at", "2027-01-15T08:00:00.000Z"))}
    dynamodb.create_table(TableName="cpu", BillingMode="PAY_PER_REQUEST",
                          KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}])
    for n in range(100):
        dynamodb.put_item(TableName="cpu", Item={"pk": {"S": "b#1#0"}, "sk": {"S": f"{n:06d}"}, "body": {"S": body},
                                                 "due_ms": {"N": "1800000000000"}, "attributes": {"S": json.dumps(attributes)}})

    def cpu_per_call(call: Callable[[], Any]) -> float:
        call()
        started = time.process_time()
        for _ in range(calls):
            call()
        return (time.process_time() - started) / calls

    def query(pk: str) -> float:
        return cpu_per_call(lambda: dynamodb.query(TableName="cpu", KeyConditionExpression="pk = :pk", Limit=100,
                                                   ExpressionAttributeValues={":pk": {"S": pk}}))

    def send(count: int) -> float:
        entries = [{"Id": str(i), "MessageBody": body, "MessageAttributes": attributes, "DelaySeconds": 100} for i in range(count)]
        return cpu_per_call(lambda: sqs.send_message_batch(QueueUrl=url, Entries=entries))

    empty_page, full_page, one, ten = query("b#1#9"), query("b#1#0"), send(1), send(10)
    return {
        "query": empty_page,
        "query_per_item": (full_page - empty_page) / 100,
        "send_message_batch": one - (ten - one) / 9,
        "send_message_batch_per_item": (ten - one) / 9,
        "put_item": cpu_per_call(lambda: dynamodb.put_item(TableName="cpu", Item={"pk": {"S": "s"}, "sk": {"S": "x"}})),
    }
