"""A world for flow control's state machine: several real ``Worker`` objects on in-memory SQS (visibility, receive counts,
the redrive policy) and DynamoDB, each on its own clock (the world's plus a skew), sharing one virtual time.

A sleep of any worker (a rate limit's reserved turn) is time passing for all: the world's time moves, and every
worker's clock with it. A crash is an invocation that never returns: it runs on a thread whose task parks for
good, so its message keeps its visibility timeout, its slot keeps its lease, and the records after it in its
batch are received but never run. Each message's body names it (``id``) across the fresh copies the worker may make.
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field
from typing import Any

from worker_tier import Task
from worker_tier.core import contract
from worker_tier.core.settings import Settings
from worker_tier.flow.control import FLOW_MAX_HOLD_SECONDS
from worker_tier.testing import lambda_record
from worker_tier.testing.queues import REGION, MemoryQueues
from worker_tier.testing.tables import MemoryTables
from worker_tier.worker import Worker
from worker_tier.worker.registry import Registry

START = 1_893_456_000.0  # 2030-01-01, a whole minute
STATE_TABLE = "flow-state"
CONCURRENT, RATED, BOTH = "/concurrent", "/rated", "/both"  # the last: one at a time per key, and at the rate
CRASH_WAIT_SECONDS = 10  # how long the test waits for a crashing invocation's task to park (it parks at once)
POLL_SECONDS = 0.002


class TaskFailure(RuntimeError):
    """A task's planned failure: a real attempt that fails."""


@dataclass
class Run:
    """One run of a task body: which message, of which key, started when (world time), by a worker of which skew."""

    ident: int
    path: str
    key: str
    started: float
    skew: float


@dataclass
class FlowWorld:
    """The queues, the state table, the workers and what the task bodies saw."""

    settings: Settings
    skews: list[float]
    concurrency: int
    rate_per_second: float
    rate_burst: int
    now: float = START
    runs: dict[int, int] = field(default_factory=dict)  # task runs (real attempts) of each message
    lost: dict[int, int] = field(default_factory=dict)  # receives in a crashed invocation that never reached the task
    succeeded: dict[int, int] = field(default_factory=dict)
    failed_tries: dict[int, set[int]] = field(default_factory=dict)  # the attempts so far at each failing run
    fails: dict[int, int] = field(default_factory=dict)  # how many of its first runs fail, per message
    running: list[Run] = field(default_factory=list)  # task bodies started and not ended (nested invocations)
    crashed: list[Run] = field(default_factory=list)  # task bodies that never end
    rated: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # each path and rate key's run starts
    # Each concurrent run's path and key, the slots held as it started (its own included), and when.
    concurrency_seen: list[tuple[str, str, int, float]] = field(default_factory=list)
    handling: list[int] = field(default_factory=list)  # the skews' indexes of the invocations in progress
    crash_armed: bool = False
    nest_armed: bool = False
    parked: threading.Event = field(default_factory=threading.Event)  # never set: a crashed task waits on it for good
    crashing: threading.Event = field(default_factory=threading.Event)
    crashed_message: str | None = None

    def __post_init__(self) -> None:
        self.queues = MemoryQueues(self.clock)
        self.tables = MemoryTables()
        visibility = self.settings.visibility_timeout
        dead_letter_queue = self.queues.create("flow-dlq", visibility)
        queue = self.queues.create("flow-queue", visibility, dead_letter_queue, self.settings.redrive_max_receive_count)
        self.queue_url, self.queue_arn, self.dead_letter_queue_url = queue.url, queue.arn, dead_letter_queue.url
        self.tables.create_table(STATE_TABLE, contract.STATE_PARTITION_KEY)
        self.registry = Registry()
        self.registry.task(CONCURRENT, concurrency=self.concurrency, concurrency_key="key")(self._body)
        rate = {"rate_limit": f"{self.rate_per_second}/s", "rate_burst": self.rate_burst, "rate_key": "key"}
        self.registry.task(RATED, **rate)(self._body)
        self.registry.task(BOTH, concurrency=1, concurrency_key="key", **rate)(self._body)
        self.workers = [self._worker(index) for index in range(len(self.skews))]

    # -- time --------------------------------------------------------------------------------

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)

    # -- what the tests do ------------------------------------------------------------------

    def send(self, ident: int, path: str, key: str, fails: int) -> None:
        self.fails[ident] = fails
        self.queues.send_message(self.queue_url, json.dumps({"id": ident, "key": key}), MessageAttributes={
            contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": path}})

    def handle(self, index: int) -> bool:
        """One invocation of worker ``index`` on the visible messages, settled as Lambda's event source settles it."""
        event = self._event()
        if not event["Records"]:
            return False
        self.handling.append(index)
        try:
            failed = {item["itemIdentifier"] for item in self.workers[index].handle(event, None)["batchItemFailures"]}
        finally:
            self.handling.pop()
        for record in event["Records"]:
            if record["messageId"] not in failed:
                self.queues.delete_message(self.queue_url, record["receiptHandle"])
        return True

    def crash(self, index: int) -> None:
        """An invocation of worker ``index`` that dies in its first task: the worker is replaced by a fresh one. When no
        task runs (every message throttled), the invocation ends as any other and is settled."""
        event = self._event()
        if not event["Records"]:
            return
        self.crash_armed, self.crashed_message = True, None
        self.crashing.clear()
        answers: list[dict[str, Any]] = []
        self.handling.append(index)
        thread = threading.Thread(target=lambda: answers.append(self.workers[index].handle(event, None)), daemon=True)
        thread.start()
        settled = any(self.crashing.wait(POLL_SECONDS) or not thread.is_alive()
                      for _ in range(int(CRASH_WAIT_SECONDS / POLL_SECONDS)))
        self.handling.pop()
        self.crash_armed = False
        assert settled, "a crashing invocation neither parked in a task nor ended"
        if not self.crashing.is_set():
            thread.join()
            failed = {item["itemIdentifier"] for item in answers[0]["batchItemFailures"]}
            for record in event["Records"]:
                if record["messageId"] not in failed:
                    self.queues.delete_message(self.queue_url, record["receiptHandle"])
            return
        ids = [record["messageId"] for record in event["Records"]]
        for record in event["Records"][ids.index(self.crashed_message) + 1:]:
            ident = json.loads(record["body"])["id"]
            self.lost[ident] = self.lost.get(ident, 0) + 1
        self.workers[index] = self._worker(index)  # the dead invocation's process is gone: a fresh one

    def next_visible_at(self) -> float | None:
        return min((stored.visible_at for stored in self.queues.queues[self.queue_url].messages.values()), default=None)

    def pending(self) -> int:
        return len(self.queues.queues[self.queue_url].messages)

    def dead_letters(self) -> list[tuple[int, dict[str, Any] | None]]:
        """Each DLQ message's id and the worker's reason (None: SQS's redrive moved it)."""
        stored = self.queues.queues[self.dead_letter_queue_url].messages.values()
        return [(json.loads(s.body)["id"], json.loads(s.attributes[contract.FAILURE_ATTRIBUTE]["StringValue"])
                 if contract.FAILURE_ATTRIBUTE in s.attributes else None) for s in stored]

    def tries(self, ident: int) -> int:
        """The receives that were attempts: task runs, and receives a crash took before the task could run."""
        return self.runs.get(ident, 0) + self.lost.get(ident, 0)

    def limit(self, path: str) -> int:
        """A concurrent path's limit per key."""
        return 1 if path == BOTH else self.concurrency

    def holders(self, path: str, key: str) -> list[Run]:
        """The runs of ``path`` and ``key`` holding a slot now: those running, and those crashed whose lease has not
        ended by any worker's clock (the fastest clock sees it end first, and its worker may take the slot, then give
        it back to a slower one). The lease was taken on the crashed worker's clock, for the visibility timeout (no
        heartbeat, no deadline), as the task started, or before a rate's reserved turn of at most
        ``FLOW_MAX_HOLD_SECONDS`` (so, for a task with both, counted from that much before its start)."""
        lease, fastest = self.settings.visibility_timeout, max(self.skews)
        reserved = FLOW_MAX_HOLD_SECONDS if path == BOTH else 0.0
        live = [run for run in self.running if run.path == path and run.key == key]
        return live + [run for run in self.crashed if run.path == path and run.key == key
                       and self.now + fastest <= run.started - reserved + run.skew + lease]

    # -- helpers ----------------------------------------------------------------------------

    def _worker(self, index: int) -> Worker:
        skew = self.skews[index]
        worker = Worker(self.settings, queue_url=self.queue_url, dead_letter_queue_url=self.dead_letter_queue_url,
                        state_table=STATE_TABLE, registry=self.registry, sqs=self.queues, dynamodb=self.tables,
                        clock=lambda: self.now + skew, random=random.Random(index).random, middleware=[])
        worker.flow_control.sleep = self.sleep
        return worker

    def _event(self) -> dict[str, Any]:
        messages = self.queues.receive_message(self.queue_url, MaxNumberOfMessages=self.settings.batch_size,
                                               AttributeNames=["All"], MessageAttributeNames=["All"]).get("Messages", [])
        return {"Records": [lambda_record(message, self.queue_arn, REGION) for message in messages]}

    def _body(self, task: Task) -> None:
        """Every task's body: counts its run, checks the limits at its start, then ends, fails, crashes or nests."""
        data = task.json()
        ident, key = data["id"], data["key"]
        run = Run(ident, task.path, key, self.now, self.skews[self.handling[-1]])
        self.runs[ident] = self.runs.get(ident, 0) + 1
        if task.path in (CONCURRENT, BOTH):
            self.concurrency_seen.append((task.path, key, len(self.holders(task.path, key)) + 1, self.now))
        if task.path in (RATED, BOTH):
            self.rated.setdefault((task.path, key), []).append(self.now)
        if self.crash_armed and threading.current_thread() is not threading.main_thread():
            self.crash_armed = False
            self.crashed.append(run)
            self.crashed_message = task.message_id
            self.crashing.set()
            self.parked.wait()  # never returns: the invocation died here
        self.running.append(run)
        try:
            if self.nest_armed and len(self.handling) == 1:
                self.nest_armed = False
                self.handle((self.handling[-1] + 1) % len(self.workers))  # another worker's invocation meanwhile
            if self.runs[ident] <= self.fails[ident]:
                self.failed_tries.setdefault(ident, set()).add(self.tries(ident))
                raise TaskFailure(f"message {ident} fails its run {self.runs[ident]}")
            self.succeeded[ident] = self.succeeded.get(ident, 0) + 1
        finally:
            self.running.remove(run)
