"""The container path against the hostile audit of issue #8: leases, prefetch, beats racing decisions, metrics."""

from __future__ import annotations

import json
import threading
import time

from tests.support.aws_world import AwsWorld
from tests.support.container import consumer_for, depth, run_until
from tests.support.worker_world import Clock, entries, one_task, raise_, send
from tests.support.strict_sqs import StrictSQS
from worker_tier import RetryLater, Task, observability
from worker_tier.heartbeat import Heartbeat
from worker_tier.limits import SQS_MAX_VISIBILITY_TIMEOUT_SECONDS
from worker_tier.registry import Registry
from worker_tier.settings import Settings
from worker_tier.worker import VISIBILITY_SAFETY_MARGIN_SECONDS, Worker

INTERVAL_SECONDS = 1
MARGIN_SECONDS = 1  # the lease: interval + margin = 2 s
TWO_HOURS_SECONDS = 2 * 3600


def container_worker(aws: AwsWorld, tasks: Registry, sqs=None, clock=time.time) -> Worker:
    return Worker(Settings(), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                  state_table=aws.state_table, registry=tasks, sqs=sqs or aws.sqs, dynamodb=aws.dynamodb,
                  clock=clock, random=lambda: 0.999)


def wait_for(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


# -- item 3: an idempotent task's record lives as long as its lease ---------------------------------------------------


def test_a_duplicate_arriving_after_the_first_lease_window_does_not_run_beside_the_live_task(aws):
    # GIVEN an idempotent task keyed on the order, its first copy running long under a live 1 s heartbeat (2 s lease)
    runs: list[str] = []
    finish = threading.Event()
    tasks = Registry()

    @tasks.task("/charge", idempotent=True, idempotency_key=lambda t: "order-1")
    def charge(task: Task) -> None:
        runs.append(task.body)
        if task.body == "A":
            finish.wait(30)

    send(aws, "/charge", "A")
    send(aws, "/charge", "B")
    records = sorted(aws.receive_event()["Records"], key=lambda r: r["body"])
    worker = container_worker(aws, tasks)
    heartbeat = Heartbeat(aws.sqs, aws.queue_url, interval_seconds=INTERVAL_SECONDS, margin_seconds=MARGIN_SECONDS)
    for record in records:
        heartbeat.hold(record["messageId"], record["receiptHandle"])
    with heartbeat:
        first = threading.Thread(target=worker.handle, args=({"Records": [records[0]]}, None), kwargs={"heartbeat": heartbeat})
        first.start()
        wait_for(lambda: runs == ["A"])
        # WHEN the duplicate arrives well after the first lease window (2 s) while A is alive
        time.sleep(2 * (INTERVAL_SECONDS + MARGIN_SECONDS))
        response = worker.handle({"Records": [records[1]]}, None, heartbeat=heartbeat)
        finish.set()
        first.join(10)
    # THEN the duplicate did not run: it is reported failed for a retry
    assert runs == ["A"]
    assert [item["itemIdentifier"] for item in response["batchItemFailures"]] == [records[1]["messageId"]]


# -- item 5: receive only what can run; count the 12 hours from the real receive --------------------------------------


def test_the_container_receives_no_more_messages_than_it_has_free_threads(aws):
    # GIVEN three messages and a consumer with one thread
    tasks = Registry()
    ran: list[str] = []
    tasks.task("/p")(lambda t: ran.append(t.body))
    for body in "abc":
        send(aws, "/p", body)
    consumer = consumer_for(aws, tasks, concurrency=1)
    # WHEN it consumes them
    thread = run_until(consumer, lambda: depth(aws) == 0)
    consumer.stopping.set()
    thread.join(10)
    # THEN every poll asked for one message at most
    assert sorted(ran) == ["a", "b", "c"]
    assert {params["MaxNumberOfMessages"] for params in aws.params("ReceiveMessage")} == {1}


def test_a_message_held_for_two_hours_before_it_runs_gets_a_retry_sqs_accepts(aws):
    # GIVEN a message the container received two hours before its task runs (worker, heartbeat and SQS clocks agree)
    wall = Clock()
    sqs = aws.sqs = StrictSQS(aws.sqs, clock=wall)
    send(aws, "/later")
    [record] = aws.receive_event()["Records"]
    monotonic = [0.0]
    heartbeat = Heartbeat(sqs, aws.queue_url, interval_seconds=30, clock=lambda: monotonic[0])
    heartbeat.hold(record["messageId"], record["receiptHandle"])
    wall.now += TWO_HOURS_SECONDS
    monotonic[0] += TWO_HOURS_SECONDS
    worker = container_worker(aws, one_task("/later", raise_(RetryLater(43_100))), sqs=sqs, clock=wall)
    # WHEN its task asks for a retry just under 12 hours
    worker.handle({"Records": [record]}, None, heartbeat=heartbeat)
    # THEN the retry is shortened to what SQS allows 12 hours from the real receive, and SQS accepts it
    longest = SQS_MAX_VISIBILITY_TIMEOUT_SECONDS - TWO_HOURS_SECONDS - VISIBILITY_SAFETY_MARGIN_SECONDS
    assert [e["VisibilityTimeout"] for e in entries(aws)] == [longest]
    assert sqs.refused == []


# -- item 7: a beat never overwrites the worker's decision -----------------------------------------------------------


class GatedSQS:
    """Holds the heartbeat thread's ChangeMessageVisibilityBatch until told; logs every change in the order applied."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.applied: list[tuple[str, list[int]]] = []
        self.beat_in_call = threading.Event()
        self.let_beat_go = threading.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def change_message_visibility_batch(self, QueueUrl, Entries):
        who = threading.current_thread().name
        if who == "beat":
            self.beat_in_call.set()
            self.let_beat_go.wait(10)
        response = self.inner.change_message_visibility_batch(QueueUrl=QueueUrl, Entries=Entries)
        self.applied.append((who, [e["VisibilityTimeout"] for e in Entries]))
        return response


def test_a_beat_in_flight_when_the_task_fails_never_overwrites_its_retry(aws):
    # GIVEN a held message, and a beat that has taken its snapshot and is inside its SQS call
    send(aws, "/later")
    [record] = aws.receive_event()["Records"]
    sqs = GatedSQS(aws.sqs)
    heartbeat = Heartbeat(sqs, aws.queue_url, interval_seconds=30)
    heartbeat.hold(record["messageId"], record["receiptHandle"])
    beat = threading.Thread(target=heartbeat.beat, name="beat")
    beat.start()
    sqs.beat_in_call.wait(10)
    # WHEN the task asks for a retry in an hour while the beat is still in flight, and the beat then completes
    worker = container_worker(aws, one_task("/later", raise_(RetryLater(3600))), sqs=sqs)
    handled = threading.Thread(target=worker.handle, args=({"Records": [record]}, None), kwargs={"heartbeat": heartbeat}, name="task")
    handled.start()
    time.sleep(0.3)  # long enough for the worker to decide and (without the fix) flush before the beat's call
    sqs.let_beat_go.set()
    beat.join(10)
    handled.join(10)
    # THEN the worker's hour is the last change SQS applied
    assert sqs.applied == [("beat", [heartbeat.extension_seconds]), ("task", [3600])]


# -- item 9: GeneratorExit in the container ---------------------------------------------------------------------------


def test_a_generator_exit_in_the_container_releases_the_message_from_the_heartbeat(aws):
    # GIVEN a task that raises GeneratorExit
    attempts: list[str] = []

    def task(t: Task) -> None:
        attempts.append(t.body)
        raise GeneratorExit()

    send(aws, "/gen", "x")
    consumer = consumer_for(aws, one_task("/gen", task))
    # WHEN the container runs it
    thread = run_until(consumer, lambda: attempts and consumer._in_flight() == 0)
    held = consumer.heartbeat.held()
    consumer.stopping.set()
    thread.join(10)
    # THEN the heartbeat no longer holds it (it retries after its backoff instead of hiding until the 12-hour cap)
    assert held == []
    assert depth(aws) == 1


# -- item 11: the container prints its metrics -----------------------------------------------------------------------


def test_the_container_prints_its_metrics_after_each_message(aws, capsys, monkeypatch):
    # GIVEN two messages, no metrics pending, and metrics enabled (the test suite disables them)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    observability.metrics.clear_metrics()
    tasks = Registry()
    tasks.task("/p")(lambda t: None)
    send(aws, "/p", "a")
    send(aws, "/p", "b")
    consumer = consumer_for(aws, tasks)
    # WHEN the container consumes them
    thread = run_until(consumer, lambda: depth(aws) == 0)
    consumer.stopping.set()
    thread.join(10)
    # THEN their counts were printed as EMF, and nothing is left pending
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    values = [blob.get(observability.METRIC_PROCESSED, []) for blob in blobs]
    assert sum(sum(v) if isinstance(v, list) else v for v in values) == 2
    assert observability.metrics.metric_set == {}
