"""Flow control benchmark: rate limits and concurrency keys held across 20 workers, in real time (issue #21).

Run with `make bench` (all benchmarks) or `python -m bench flow`.

One idea, kept whole: a scenario's run (workers, queue, table), what it observed, and the figures drawn from it.

**What runs.** ``Sizes.workers`` threads, each its own ``worker_tier.worker.batch.Worker`` (its own limiter caches and
``FlowControl``, as each Lambda execution environment has), receive batches of 10 from one queue and handle each as
Lambda would: ``Worker.handle(event, context)`` with a context whose deadline is 900 s away, then the records reported
done are deleted (DeleteMessageBatch); the visibility changes the worker makes (ChangeMessageVisibilityBatch) are
applied by the queue, so a throttled message comes back after its wait. The queue is ``bench.memory_sqs.FastQueue``
with a redrive policy at ``Settings.redrive_max_receive_count`` into a dead-letter queue, so a message the policy
would move for its waits is counted (``throttled_dead_lettered``), not assumed away. Time is real: real threads,
and ``FlowControl`` really sleeps for a reserved turn.

**The state table** is moto's DynamoDB, in-process, behind ``CountingDynamoDB``: each call pays a modelled round
trip (``bench.network_model.ROUND_TRIP_SECONDS``: 8 ms a write, 5 ms a read, half each way) and is counted by
operation. DynamoDB serialises the writes to one item; moto does not (20 threads doing read-then-conditional-write
on one item in moto lost 186 of 1,984 acknowledged writes, measured 2026-11-29), so the wrapper serialises moto's
calls with one lock, and measures how busy that made it (``table_busy_share``: moto's time under the lock ÷ the
run's wall time; well under 1 means it kept up). Units, on items under 1 KB (``largest_item_bytes`` checks it): a
write (UpdateItem, PutItem, DeleteItem), a failed conditional one included, is 1 write unit; a strongly consistent
GetItem 1 read unit, an eventually consistent one 0.5.

**Figures.** An admission is a task's start (after any reserved turn's sleep), timed by the task body.
``rate_limit_error`` = |observed rate ÷ limit − 1| over the steady part: the admissions sorted by time, the first
and last ``TRIM_SHARE`` (10 %) dropped, rate = (kept − 1) ÷ (last − first) (intervals over the span they cover).
Per key, the worst key's. ``concurrency_limit_exceeded``: task starts at which more than the limit of their key were
running (a lock-protected counter in the task body). Every message is tracked by its number in the body (a fresh copy
made by ``worker_tier.worker.fates._refresh`` keeps it): lost, duplicated and dead-lettered are counted.
Each admission's turn is recorded too (``TurnClock``: the worker's clock reading the limiter admitted at, plus the
reserved sleep it was told to take), so a start's lateness (start − turn: the call, the sleep's wake-up, this
machine's load) is told apart from the limiter's spacing: ``peak_per_second`` counts starts, ``peak_per_second_by_turn``
turns.

**Baseline: none.** No peer enforces a rate limit across workers on SQS; Celery's ``rate_limit`` is per worker
process (a task at 50/s on 20 workers may run 1,000 a second), so there is nothing like-for-like to run beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import statistics
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from bench import results
from bench.memory_sqs import ACCOUNT, REGION, FastQueue
from bench.network_model import ROUND_TRIP_SECONDS
from bench.worker_bench import spread

GOALS = {
    "rate_limit_error": ("<=", 0.05),
    "per_key_rate_limit_error": ("<=", 0.05),
    "concurrency_limit_exceeded": ("==", 0),
    "throttled_dead_lettered": ("==", 0),
}
TRIM_SHARE = 0.10  # the steady part: admissions by time, less this share at each end
BATCH_MESSAGES = 10  # Lambda's default batch size for SQS
CONTEXT_SECONDS = 900  # the Lambda context's deadline: generous, so the timeout guard never releases a record
TABLE = "flow-bench-state"
WRITES = {"update_item", "put_item", "delete_item"}
BASELINE = ("none: no peer enforces a rate limit across workers on SQS; Celery's rate_limit is per worker process "
            "(50/s on 20 workers lets up to 1,000/s through), so it is not run")
METHOD = (f"real time, real threads; steady part = admissions sorted by time less the first and last {TRIM_SHARE:.0%}, "
          "rate = (kept - 1) / (last - first); moto DynamoDB serialised by one lock, with modelled round trips")


@dataclass(frozen=True)
class Scenario:
    """One load: a task's options, its messages' keys, and the limit the bench checks what it observed against."""

    name: str
    messages: int
    options: dict[str, Any]  # the @task options (a test may leave the limit out to see the bench catch it)
    limit: float  # per key: messages a second (rate), or at once (concurrency)
    kind: str  # "rate" or "concurrency"
    keys: int = 0  # messages spread over this many keys, round robin (0: no key)
    key_field: str = ""  # the body's field that carries the key
    task_seconds: tuple[float, float] = (0.0, 0.0)  # each task sleeps uniformly this long
    max_retries: int | None = None  # None: the default setting


@dataclass(frozen=True)
class Sizes:
    """How much each run measures: ``make bench`` uses the defaults, the test suite small ones."""

    runs: int = 3
    messages: int = 2000
    redrive_messages: int = 300
    workers: int = 20


def scenarios(sizes: Sizes) -> list[Scenario]:
    """The four loads: a global rate, a rate per key, a concurrency per key, and a crowded rate under max_retries 3."""
    return [
        Scenario("global", sizes.messages, {"rate_limit": "50/s"}, 50, "rate"),
        Scenario("per_key", sizes.messages, {"rate_limit": "5/s", "rate_key": "customer"}, 5, "rate", keys=10,
                 key_field="customer"),
        Scenario("concurrency", sizes.messages, {"concurrency": 3, "concurrency_key": "tenant"}, 3, "concurrency",
                 keys=10, key_field="tenant", task_seconds=(0.020, 0.060)),
        # 20 workers on 10/s: a turn is ~2 s ahead, past the 1 s a worker may hold, so most receives are throttled and a
        # message waits many times: at max_retries 3 the redrive policy (6 receives) would take it if waits counted.
        Scenario("redrive", sizes.redrive_messages, {"rate_limit": "10/s"}, 10, "rate", max_retries=3),
    ]


# -- the state table -------------------------------------------------------------------------------


class CountingDynamoDB:
    """A DynamoDB client that pays a modelled round trip per call, serialises moto's calls, and counts units."""

    def __init__(self, inner: Any, round_trip: Callable[[str], float] = lambda op: ROUND_TRIP_SECONDS.get(op, 0.008),
                 sleep: Callable[[float], Any] = time.sleep) -> None:
        self.inner, self._round_trip, self._sleep = inner, round_trip, sleep
        self._moto = threading.Lock()
        self._count = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.write_units = 0.0
        self.read_units = 0.0
        self.busy_seconds = 0.0
        self.service_seconds: list[float] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def counted(**kwargs: Any) -> Any:
            half = self._round_trip(name) / 2
            self._sleep(half)
            try:
                with self._moto:
                    started = time.perf_counter()
                    try:
                        return method(**kwargs)
                    finally:
                        self._record(name, kwargs, time.perf_counter() - started)
            finally:
                self._sleep(half)

        return counted

    def _record(self, name: str, request: dict[str, Any], seconds: float) -> None:
        with self._count:
            self.calls[name] += 1
            self.busy_seconds += seconds
            self.service_seconds.append(seconds)
            if name in WRITES:
                self.write_units += 1
            elif name == "get_item":
                self.read_units += 1 if request.get("ConsistentRead") else 0.5


def item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB bills it: each attribute's name plus its value (strings in UTF-8, numbers ~1 byte per 2 digits + 1)."""
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        if "S" in value:
            size += len(value["S"].encode())
        elif "N" in value:
            size += (len(value["N"].lstrip("-").replace(".", "")) + 1) // 2 + 1
    return size


def _state_table(dynamodb: Any) -> None:
    from worker_tier.core.contract import STATE_PARTITION_KEY

    dynamodb.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                          KeySchema=[{"AttributeName": STATE_PARTITION_KEY, "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": STATE_PARTITION_KEY, "AttributeType": "S"}])


def _largest_item(dynamodb: Any) -> int:
    items = dynamodb.scan(TableName=TABLE).get("Items") or []
    return max((item_bytes(item) for item in items), default=0)


# -- what the tasks observed -----------------------------------------------------------------------


@dataclass
class Observed:
    """Each task start (time, key), the runs of each message number, and, per key, the most running at once."""

    limit: float
    starts: list[tuple[float, str]] = field(default_factory=list)
    runs: Counter[int] = field(default_factory=Counter)
    running: Counter[str] = field(default_factory=Counter)
    most_running: Counter[str] = field(default_factory=Counter)
    exceeded: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def started(self, number: int, key: str, turn: float) -> None:
        with self.lock:
            self.starts.append((time.time(), key, turn))
            self.runs[number] += 1
            self.running[key] += 1
            if self.running[key] > self.limit:
                self.exceeded += 1
            self.most_running[key] = max(self.most_running[key], self.running[key])

    def ended(self, key: str) -> None:
        with self.lock:
            self.running[key] -= 1


def steady_rate(times: list[float], trim: float = TRIM_SHARE) -> float:
    """Admissions a second over the steady part: sorted, ``trim`` of them dropped at each end, (kept - 1) / span.

    Examples
    --------
    >>> round(steady_rate([0.1 * n for n in range(101)]), 6)
    10.0
    """
    ordered = sorted(times)
    cut = int(len(ordered) * trim)
    kept = ordered[cut:len(ordered) - cut]
    if len(kept) < 2 or kept[-1] <= kept[0]:
        raise ValueError(f"a steady rate needs at least 2 admissions at distinct times after trimming, got {len(kept)}")
    return (len(kept) - 1) / (kept[-1] - kept[0])


def rate_limit_error(times: list[float], limit: float) -> float:
    """|observed steady rate ÷ limit − 1|."""
    return abs(steady_rate(times) / limit - 1)


def peak_per_second(times: list[float]) -> int:
    """The most admissions in any one-second window."""
    ordered, peak, first = sorted(times), 0, 0
    for last, moment in enumerate(ordered):
        while moment - ordered[first] >= 1.0:
            first += 1
        peak = max(peak, last - first + 1)
    return peak


class TurnClock:
    """The workers' wall clock and reserved-turn sleep: per thread, its last reading and the turn it last slept to.

    ``FlowControl`` reads the clock just before an admission and, when the admission is a reservation, sleeps for it
    (``Worker.flow_control.sleep``): the turn is that reading plus the sleep, or the reading itself when it did not
    sleep. No other clock reading comes between an admission and its task.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def __call__(self) -> float:
        now = time.time()
        self._local.now = self._local.turn = now
        return now

    def sleep(self, seconds: float) -> None:
        self._local.turn = getattr(self._local, "now", time.time()) + seconds
        time.sleep(seconds)

    def turn(self) -> float:
        """This thread's last turn (its last clock reading when it did not sleep since)."""
        return getattr(self._local, "turn", time.time())


# -- one run of a scenario -------------------------------------------------------------------------


class _Queues:
    """One SQS client over the work queue and its dead-letter queue, by QueueUrl (the worker's ``sqs``)."""

    def __init__(self, *queues: FastQueue) -> None:
        self._by_url = {queue.url: queue for queue in queues}

    def __getattr__(self, name: str) -> Any:
        def call(QueueUrl: str, **kwargs: Any) -> Any:
            return getattr(self._by_url[QueueUrl], name)(QueueUrl=QueueUrl, **kwargs)

        return call


def _registry(scenario: Scenario, observed: Observed, clock: TurnClock) -> Any:
    """A registry of its own (as each execution environment imports the tasks) with the scenario's one task."""
    from worker_tier.worker.registry import Registry

    registry = Registry()
    low, high = scenario.task_seconds

    @registry.task("/flow", **scenario.options)
    def flow(task: Any) -> None:
        body = task.json()
        key = str(body.get(scenario.key_field, "")) if scenario.key_field else ""
        observed.started(body["n"], key, clock.turn())
        try:
            if high:
                time.sleep(random.uniform(low, high))
        finally:
            observed.ended(key)

    return registry


def _bodies(scenario: Scenario) -> list[str]:
    name = scenario.key_field
    return [json.dumps({"n": n, **({name: f"{name}-{n % scenario.keys}"} if name else {})}) for n in range(scenario.messages)]


class _Tally:
    """A count many threads add to."""

    def __init__(self) -> None:
        self.value, self._lock = 0, threading.Lock()

    def add(self, amount: int = 1) -> None:
        with self._lock:
            self.value += amount


def _consume(worker: Any, queue: FastQueue, stop: threading.Event, received: _Tally) -> None:
    """Lambda's event source and one execution environment: receive 10, handle them, delete what is reported done."""
    from worker_tier.core import observability
    from worker_tier.core.envelope import lambda_record
    from worker_tier_local.context import LocalContext

    while not stop.is_set():
        messages = queue.receive_message(QueueUrl=queue.url, MaxNumberOfMessages=BATCH_MESSAGES, WaitTimeSeconds=1,
                                         MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"]).get("Messages") or []
        if not messages:
            continue
        received.add(len(messages))
        event = {"Records": [lambda_record(m, queue.arn, REGION) for m in messages]}
        response = worker.handle(event, LocalContext("flow-bench", CONTEXT_SECONDS, 1769, REGION, ACCOUNT))
        observability.flush_invocation()
        failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
        done = [m for m in messages if m["MessageId"] not in failed]
        for start in range(0, len(done), 10):
            queue.delete_message_batch(QueueUrl=queue.url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done[start:start + 10])])


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Metrics lines to nowhere and the worker's logs at ERROR, for the run; restored after (and Powertools' warning
    when an invocation's flush finds no metric, silenced)."""
    from worker_tier.core.observability import logger

    level = logger.log_level
    logger.setLevel("ERROR")
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        try:
            yield
        finally:
            logger.setLevel(level)


def run_scenario(scenario: Scenario, workers: int) -> dict[str, Any]:
    """Run ``scenario`` to its end on ``workers`` workers; what it observed and cost."""
    import boto3
    from moto import mock_aws

    from worker_tier.core.contract import PATH_ATTRIBUTE
    from worker_tier.core.settings import Settings
    from worker_tier.worker.batch import Worker
    from worker_tier.worker.fates import OUTCOME_THROTTLED, add_outcome_listener, remove_outcome_listener

    settings = Settings() if scenario.max_retries is None else Settings(max_retries=scenario.max_retries)
    observed = Observed(scenario.limit)
    throttled, received = _Tally(), _Tally()

    def heard(outcome: Any) -> None:
        if outcome.status == OUTCOME_THROTTLED:
            throttled.add()

    with mock_aws(), _quiet():
        dynamodb = CountingDynamoDB(boto3.client("dynamodb", region_name=REGION))
        _state_table(dynamodb.inner)
        dlq = FastQueue("flow-bench-dlq", visibility_timeout=settings.visibility_timeout)
        queue = FastQueue("flow-bench", visibility_timeout=settings.visibility_timeout, dead_letter_queue=dlq,
                          max_receive_count=settings.redrive_max_receive_count)
        sqs = _Queues(queue, dlq)
        clock = TurnClock()
        fleet = [Worker(settings, queue_url=queue.url, dead_letter_queue_url=dlq.url, state_table=TABLE,
                        registry=_registry(scenario, observed, clock), sqs=sqs, dynamodb=dynamodb, clock=clock)
                 for _ in range(workers)]
        for worker in fleet:
            worker.flow_control.sleep = clock.sleep
        queue.fill(_bodies(scenario), {PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/flow"}})
        stop = threading.Event()
        threads = [threading.Thread(target=_consume, args=(w, queue, stop, received), daemon=True) for w in fleet]
        add_outcome_listener(heard)
        started = time.monotonic()
        try:
            for thread in threads:
                thread.start()
            ended = _wait_for_the_end(scenario, queue, dlq, observed, started)
        finally:
            stop.set()
            queue.close()
            for thread in threads:
                thread.join(timeout=30)
            remove_outcome_listener(heard)
        largest = _largest_item(dynamodb.inner)
    return _report(scenario, observed, dynamodb, queue, dlq, throttled.value, received.value,
                   ended - started, largest)


def _wait_for_the_end(scenario: Scenario, queue: FastQueue, dlq: FastQueue, observed: Observed, started: float) -> float:
    """When every message ran or was dead-lettered and the queue is empty; raises past a generous deadline."""
    throughput = scenario.limit * max(1, scenario.keys) if scenario.kind == "rate" else 20.0
    deadline = started + 120 + 3 * scenario.messages / throughput
    while time.monotonic() < deadline:
        with observed.lock:
            ran = len(observed.runs)
        if ran + len(dlq) >= scenario.messages and len(queue) == 0:
            return time.monotonic()
        time.sleep(0.05)
    raise RuntimeError(f"scenario {scenario.name} did not end in {deadline - started:.0f} s: "
                       f"{len(observed.runs)} of {scenario.messages} ran, {len(queue)} left in the queue, {len(dlq)} dead-lettered")


def _report(scenario: Scenario, observed: Observed, dynamodb: CountingDynamoDB, queue: FastQueue, dlq: FastQueue,
            throttled: int, received: int, wall: float, largest: int) -> dict[str, Any]:
    n = scenario.messages
    service = sorted(dynamodb.service_seconds) or [0.0]
    report: dict[str, Any] = {
        "messages": n,
        "ran_once": sum(1 for count in observed.runs.values() if count == 1),
        "duplicated": sum(1 for count in observed.runs.values() if count > 1),
        "lost": n - len(observed.runs) - len(dlq),
        "throttled_dead_lettered": len(dlq),
        "wall_seconds": round(wall, 2),
        "receives_per_message": round(received / n, 3),
        "throttled_receives_per_message": round(throttled / n, 3),
        "fresh_copies": queue.calls["SendMessageBatch"],
        "dynamodb_units_per_message": {"write": round(dynamodb.write_units / n, 3), "read": round(dynamodb.read_units / n, 3)},
        "dynamodb_calls": dict(sorted(dynamodb.calls.items())),
        "dynamodb_calls_per_s": round(sum(dynamodb.calls.values()) / wall, 1),
        "table_busy_share": round(dynamodb.busy_seconds / wall, 3),
        "moto_service_ms": {"p50": round(statistics.median(service) * 1000, 2),
                            "p99": round(service[min(len(service) - 1, int(len(service) * 0.99))] * 1000, 2)},
        "largest_item_bytes": largest,
    }
    if scenario.kind == "rate":
        by_key: dict[str, list[float]] = {}
        turns: dict[str, list[float]] = {}
        for moment, key, turn in observed.starts:
            by_key.setdefault(key, []).append(moment)
            turns.setdefault(key, []).append(turn)
        late = sorted(moment - turn for moment, _, turn in observed.starts)
        errors = {key: rate_limit_error(times, scenario.limit) for key, times in sorted(by_key.items())}
        worst = max(errors, key=errors.__getitem__)
        report["rate_limit_error"] = round(errors[worst], 4)
        report["observed_rate"] = round(steady_rate(by_key[worst]), 3)
        report["peak_per_second"] = max(peak_per_second(times) for times in by_key.values())
        report["peak_per_second_by_turn"] = max(peak_per_second(times) for times in turns.values())
        report["rate_limit_error_by_turn"] = round(max(rate_limit_error(t, scenario.limit) for t in turns.values()), 4)
        report["start_after_turn_ms"] = {"p50": round(late[len(late) // 2] * 1000, 1),
                                          "p99": round(late[min(len(late) - 1, int(len(late) * 0.99))] * 1000, 1),
                                          "max": round(late[-1] * 1000, 1)}
        if scenario.keys:
            report["rate_limit_error_by_key"] = {key: round(error, 4) for key, error in errors.items()}
    else:
        report["concurrency_limit_exceeded"] = observed.exceeded
        report["most_running_by_key"] = dict(sorted(observed.most_running.items()))
    return report


# -- every run -------------------------------------------------------------------------------------


def measure(sizes: Sizes = Sizes()) -> dict[str, Any]:
    """Every scenario ``sizes.runs`` times (interleaved: run 1 of each, then run 2...); the goal figures as ``spread``."""
    loads = scenarios(sizes)
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in loads}
    for _ in range(sizes.runs):
        for scenario in loads:
            runs[scenario.name].append(run_scenario(scenario, sizes.workers))
    per_run_dead = [sum(runs[s.name][i]["throttled_dead_lettered"] for s in loads) for i in range(sizes.runs)]
    figures: dict[str, Any] = {
        "rate_limit_error": spread([r["rate_limit_error"] for r in runs["global"]]),
        "per_key_rate_limit_error": spread([r["rate_limit_error"] for r in runs["per_key"]]),
        "concurrency_limit_exceeded": spread([r["concurrency_limit_exceeded"] for r in runs["concurrency"]]),
        "throttled_dead_lettered": spread(per_run_dead),
        "dynamodb_units_per_message": {name: {"write": spread([r["dynamodb_units_per_message"]["write"] for r in rs]),
                                              "read": spread([r["dynamodb_units_per_message"]["read"] for r in rs])}
                                       for name, rs in runs.items()},
        "throttled_receives_per_message": {name: spread([r["throttled_receives_per_message"] for r in rs])
                                           for name, rs in runs.items()},
        "lost": sum(r["lost"] for rs in runs.values() for r in rs),
        "duplicated": sum(r["duplicated"] for rs in runs.values() for r in rs),
        "wall_seconds": {name: spread([r["wall_seconds"] for r in rs]) for name, rs in runs.items()},
        "workers": sizes.workers,
        "method": METHOD,
        "baseline": BASELINE,
        "scenarios": runs,
    }
    return figures


def run() -> Path:
    """Measure every flow figure and write bench/results/flow.json."""
    return results.write("flow", measure(), GOALS, "make bench")
