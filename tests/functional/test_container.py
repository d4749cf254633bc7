"""The container worker against moto: same semantics as Lambda, drain on SIGTERM, scale-in protection, leases that
last as long as the task, receiving only what can run, beats that never overwrite a decision, and its metrics."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest

from tests.support.aws_world import AwsWorld
from tests.support.container import consumer_for, depth, run_until
from tests.support.strict_sqs import StrictSQS
from tests.support.worker_world import Clock, entries, one_task, raise_, send
from worker_tier import Client, NonRetryableError, OutgoingMessage, RetryLater, Task
from worker_tier.core import observability
from worker_tier.container.consumer import EXIT_CODE_TASKS_ABANDONED, Consumer
from worker_tier.container.protection import TaskProtection
from worker_tier.worker.heartbeat import Heartbeat
from worker_tier.core.limits import SQS_MAX_VISIBILITY_TIMEOUT_SECONDS
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.worker.batch import Worker
from worker_tier.worker.fates import VISIBILITY_SAFETY_MARGIN_SECONDS


def test_runs_tasks_and_dead_letters_with_reason_like_lambda(aws):
    # GIVEN one good and one refused message
    tasks = Registry()
    done: list[str] = []
    tasks.task("/ok")(lambda t: done.append(t.body))

    @tasks.task("/refuse")
    def refuse(task: Task) -> None:
        raise NonRetryableError("customer 7 was deleted")

    client = Client(aws.queue_url, sqs=aws.sqs)
    client.send("/ok", "a")
    client.send("/refuse", "b")
    consumer = consumer_for(aws, tasks)
    # WHEN the container worker consumes
    thread = run_until(consumer, lambda: depth(aws) == 0)
    consumer.stopping.set()
    thread.join(10)
    # THEN the good one ran and was deleted; the refused one is in the DLQ with the same reason Lambda gives
    assert done == ["a"]
    [dead] = aws.dead_letters()
    reason = json.loads(dead["MessageAttributes"]["worker_tier.failure"]["StringValue"])
    assert (reason["error_type"], reason["error_message"], reason["path"]) == ("NonRetryableError", "customer 7 was deleted", "/refuse")


def test_sigterm_lets_running_work_finish_and_releases_unstarted_messages(aws):
    # GIVEN one slot, a task that runs 2 s, and three messages received in one poll
    tasks = Registry()
    started, finished = [], []

    @tasks.task("/slow")
    def slow(task: Task) -> None:
        started.append(task.body)
        time.sleep(2)
        finished.append(task.body)

    Client(aws.queue_url, sqs=aws.sqs).send_batch(
        [__import__("worker_tier").OutgoingMessage("/slow", str(n)) for n in range(3)]
    )
    consumer = consumer_for(aws, tasks, concurrency=1, grace_seconds=10)
    thread = run_until(consumer, lambda: len(started) == 1)
    # WHEN SIGTERM arrives mid-task
    consumer.stopping.set()
    thread.join(15)
    # THEN the running task finished and was deleted; the two unstarted ones are visible again at once
    assert finished == started and len(started) == 1
    again = aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in again) == sorted({"0", "1", "2"} - set(started))


def test_work_still_running_after_the_grace_period_keeps_its_message_and_the_process_exits(aws):
    # GIVEN a task that outlives the grace period, a short heartbeat (2 s extensions), strict SQS, and a recorded exit
    tasks = Registry()
    release = threading.Event()
    tasks.task("/stuck")(lambda t: release.wait(30))
    Client(aws.queue_url, sqs=aws.sqs).send("/stuck", "x")
    strict = StrictSQS(aws.sqs)  # every visibility change must be one SQS accepts
    heartbeat = Heartbeat(strict, aws.queue_url, interval_seconds=0.5, margin_seconds=1.5)
    exits: list[int] = []
    consumer = consumer_for(aws, tasks, sqs=strict, grace_seconds=0.5, heartbeat=heartbeat, exit_process=exits.append)
    thread = run_until(consumer, lambda: consumer._in_flight() == 1)
    # WHEN SIGTERM arrives and the grace period passes with the task still running
    consumer.stopping.set()
    thread.join(10)
    # THEN the process is told to exit (so the task dies with it) rather than the message being released
    assert exits == [EXIT_CODE_TASKS_ABANDONED]
    # AND while the process lives, the heartbeat keeps the message from a second worker, beyond several extensions
    time.sleep(3 * heartbeat.extension_seconds)
    assert aws.sqs.receive_message(QueueUrl=aws.queue_url).get("Messages") is None
    # AND once the process is gone (no more beats), the message returns when the last extension lapses
    heartbeat.stop()
    deadline = time.monotonic() + heartbeat.extension_seconds + 2
    while not (again := aws.sqs.receive_message(QueueUrl=aws.queue_url).get("Messages")):
        assert time.monotonic() < deadline, "the message did not return after the last extension"
        time.sleep(0.2)
    assert [m["Body"] for m in again] == ["x"]
    release.set()


def test_a_drain_with_nothing_left_running_does_not_exit_the_process(aws):
    # GIVEN a consumer whose task finishes within the grace period
    tasks = Registry()
    tasks.task("/quick")(lambda t: None)
    Client(aws.queue_url, sqs=aws.sqs).send("/quick", "x")
    exits: list[int] = []
    consumer = consumer_for(aws, tasks, grace_seconds=5, exit_process=exits.append)
    thread = run_until(consumer, lambda: depth(aws) == 0)
    # WHEN it stops  THEN it returns normally, with its heartbeat stopped
    consumer.stopping.set()
    thread.join(10)
    assert not thread.is_alive() and exits == []


class _Agent(BaseHTTPRequestHandler):
    calls: ClassVar[list[dict]] = []  # one handler per request: the record is the class's

    def do_PUT(self) -> None:
        length = int(self.headers["Content-Length"])
        _Agent.calls.append({"path": self.path, **json.loads(self.rfile.read(length))})
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def agent():
    _Agent.calls = []
    server = HTTPServer(("127.0.0.1", 0), _Agent)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_scale_in_protection_is_set_while_busy_and_cleared_when_idle(aws, agent):
    # GIVEN an ECS agent endpoint and a task that takes a moment
    tasks = Registry()
    tasks.task("/work")(lambda t: time.sleep(0.5))
    Client(aws.queue_url, sqs=aws.sqs).send("/work", "x")
    consumer = consumer_for(aws, tasks, protection=TaskProtection(agent_uri=agent, expires_minutes=30))
    # WHEN it takes the work, finishes it, and goes idle
    thread = run_until(consumer, lambda: depth(aws) == 0 and len(_Agent.calls) >= 2)
    consumer.stopping.set()
    thread.join(10)
    # THEN protection went on with an expiry, then off, through the task-protection endpoint
    assert [(c["path"], c["ProtectionEnabled"], c.get("ExpiresInMinutes")) for c in _Agent.calls[:2]] == [
        ("/task-protection/v1/state", True, 30),
        ("/task-protection/v1/state", False, None),
    ]


def test_lambda_worker_forwards_container_tasks_which_the_container_worker_runs(aws):
    # GIVEN a long task marked for the container, and a long-task queue
    long_queue = aws.sqs.create_queue(QueueName="long")["QueueUrl"]
    tasks = Registry()
    ran: list[Task] = []
    tasks.task("/render", container=True)(ran.append)
    Client(aws.queue_url, sqs=aws.sqs).send("/render", '{"frames": 9000}', attributes={"tenant": "acme"})
    lambda_worker = Worker(Settings(), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                           registry=tasks, sqs=aws.sqs, container_queue_url=long_queue)
    # WHEN the Lambda worker sees it  THEN it does not run it, but forwards it as it came
    assert lambda_worker.handle(aws.receive_event(), None) == {"batchItemFailures": []}
    assert ran == []
    # AND the container worker, consuming the long queue, runs it
    container_worker = Worker(Settings(), queue_url=long_queue, dead_letter_queue_url=aws.dead_letter_queue_url,
                              registry=tasks, sqs=aws.sqs)
    consumer = Consumer(container_worker, aws.sqs, long_queue, poll_wait_seconds=1, heartbeat_interval=1,
                        protection=TaskProtection(agent_uri=""))
    thread = run_until(consumer, lambda: len(ran) == 1)
    consumer.stopping.set()
    thread.join(10)
    assert (ran[0].path, ran[0].body, ran[0].attributes["tenant"]) == ("/render", '{"frames": 9000}', "acme")


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


# -- an idempotent task's record lives as long as its lease ---------------------------------------------------


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


# -- receive only what can run (prefetch: test_container_prefetch.py); count the 12 hours from the real receive --------------------------------------


def test_the_container_receives_no_more_messages_than_it_has_free_threads_until_tasks_prove_short(aws):
    # GIVEN three messages (fewer than the short tasks it takes to prefetch) and a consumer with one thread
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


def test_a_task_that_ends_while_the_receive_gathers_wakes_it_at_once(aws, monkeypatch):
    # GIVEN two threads running a long task and a short one, and the short one ending just after the gather counted
    # the messages in flight (before it waits for an end)
    tasks = Registry()
    go, long_started = threading.Event(), threading.Event()

    @tasks.task("/t")
    def run(task: Task) -> None:
        if task.body == "long":
            long_started.set()
            time.sleep(4)
        else:
            go.wait(10)

    client = Client(aws.queue_url, sqs=aws.sqs)
    client.send_batch([OutgoingMessage("/t", "long"), OutgoingMessage("/t", "short")])
    consumer = consumer_for(aws, tasks, concurrency=2, delete_linger_seconds=0)
    real_in_flight, ended_at = consumer._in_flight, []

    def in_flight() -> int:
        value = real_in_flight()
        gathering = sys._getframe(1).f_code.co_name == "_gather"
        if value == 2 and gathering and long_started.is_set() and not go.is_set():
            go.set()  # the short task ends now, after this count
            deadline = time.monotonic() + 5
            while consumer._busy() > 1 and time.monotonic() < deadline:
                time.sleep(0.001)
            ended_at.append(time.monotonic())
        return value

    monkeypatch.setattr(consumer, "_in_flight", in_flight)
    received_at: list[float] = []
    real_receive = aws.sqs.receive_message

    def receive_message(**params):
        received_at.append(time.monotonic())
        return real_receive(**params)

    monkeypatch.setattr(aws.sqs, "receive_message", receive_message)
    # WHEN it runs
    thread = run_until(consumer, lambda: ended_at and any(t > ended_at[0] for t in received_at))
    try:
        # THEN the freed thread's receive came at once, not after the gather's 1 s wait for the end it missed
        assert min(t for t in received_at if t > ended_at[0]) - ended_at[0] < 0.6
    finally:
        consumer.stopping.set()
        thread.join(15)


# -- a beat never overwrites the worker's decision -----------------------------------------------------------


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


# -- GeneratorExit in the container ---------------------------------------------------------------------------


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


# -- the container prints its metrics -----------------------------------------------------------------------


def _processed_printed(out: str) -> float:
    blobs = [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]
    values = [blob.get(observability.METRIC_PROCESSED, []) for blob in blobs]
    return sum(sum(v) if isinstance(v, list) else v for v in values)


def test_the_container_prints_the_metrics_of_its_last_messages_when_the_queue_falls_idle(aws, capsys, monkeypatch):
    # GIVEN three messages, metrics enabled, and a flush just made (so the messages' own flushes are not due)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    observability.metrics.clear_metrics()
    tasks = Registry()
    tasks.task("/p")(lambda t: None)
    for body in "abc":
        send(aws, "/p", body)
    consumer = consumer_for(aws, tasks)
    observability.flush()
    # WHEN the container consumes them and then only long-polls an empty queue (1 s polls here)
    printed = ""
    thread = run_until(consumer, lambda: depth(aws) == 0)
    deadline = time.monotonic() + 10
    while _processed_printed(printed) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
        printed += capsys.readouterr().out
    stopped_at = time.monotonic()
    consumer.stopping.set()
    thread.join(10)
    # THEN all three were counted before the stop, not only by the exit's flush
    assert _processed_printed(printed) == 3, f"printed before the stop: {printed!r}"
    assert stopped_at < deadline


def test_the_container_prints_its_metrics_at_most_once_a_second(capsys, monkeypatch):
    # GIVEN metrics enabled and a flush just made
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    observability.flush()
    capsys.readouterr()
    # WHEN counts are added and a flush is asked for within the second, then after it
    observability.count(observability.METRIC_PROCESSED)
    observability.flush_due()
    within = capsys.readouterr().out
    observability.count(observability.METRIC_PROCESSED)
    monkeypatch.setattr(observability, "_last_flush", [time.monotonic() - observability.FLUSH_INTERVAL_SECONDS])
    observability.flush_due()
    after = capsys.readouterr().out
    # THEN nothing was printed within the second, and one line with both counts after it
    assert within == ""
    assert _processed_printed(after) == 2 and len(after.splitlines()) == 1


def test_the_container_prints_its_metrics_while_it_works_and_before_it_exits(aws, capsys, monkeypatch):
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
    assert _processed_printed(capsys.readouterr().out) == 2
    assert observability.metrics.metric_set == {}


def test_the_container_prints_the_metrics_of_tasks_that_finish_during_the_grace_period(aws, capsys, monkeypatch):
    # GIVEN metrics enabled and a task that runs on for half a second after the stop
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    observability.metrics.clear_metrics()
    started = threading.Event()
    tasks = Registry()

    @tasks.task("/slow")
    def slow(task: Task) -> None:
        started.set()
        time.sleep(0.5)

    send(aws, "/slow", "a")
    consumer = consumer_for(aws, tasks, grace_seconds=10)
    thread = run_until(consumer, started.is_set)
    # WHEN SIGTERM arrives while it runs, and it finishes within the grace period
    consumer.stopping.set()
    thread.join(10)
    # THEN its count was printed before the worker returned, and nothing is left pending
    assert _processed_printed(capsys.readouterr().out) == 1
    assert observability.metrics.metric_set == {}


def test_the_container_prints_the_metrics_of_earlier_messages_while_a_long_task_runs(aws, capsys, monkeypatch):
    # GIVEN metrics enabled, one thread, a flush just made, and a short task followed by a 5 s one
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    observability.metrics.clear_metrics()
    long_started = threading.Event()
    tasks = Registry()

    @tasks.task("/t")
    def run(task: Task) -> None:
        if task.body == "long":
            long_started.set()
            time.sleep(5)

    send(aws, "/t", "short")
    consumer = consumer_for(aws, tasks, concurrency=1)
    observability.flush()
    thread = run_until(consumer, lambda: depth(aws) == 0)
    send(aws, "/t", "long")
    try:
        run_until_started = time.monotonic() + 10
        while not long_started.is_set():
            assert time.monotonic() < run_until_started
            time.sleep(0.05)
        # WHEN the long task runs on (2.5 s of its 5)
        time.sleep(2.5)
        # THEN the short task's count was printed meanwhile, not held until the long one ends
        assert _processed_printed(capsys.readouterr().out) == 1
    finally:
        consumer.stopping.set()
        thread.join(15)


def test_the_container_counts_every_message_of_many_threads_exactly_once(aws, capsys, monkeypatch):
    # GIVEN metrics enabled, flushed every time they are asked for, and 150 short messages for eight threads
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    monkeypatch.setattr(observability, "FLUSH_INTERVAL_SECONDS", 0.0)
    observability.metrics.clear_metrics()
    tasks = Registry()
    tasks.task("/p")(lambda t: None)
    client = Client(aws.queue_url, sqs=aws.sqs)
    for first in range(0, 150, 10):
        client.send_batch([OutgoingMessage("/p", str(n)) for n in range(first, first + 10)])
    consumer = consumer_for(aws, tasks, concurrency=8)
    # WHEN the container consumes them and stops
    thread = run_until(consumer, lambda: depth(aws) == 0, timeout=60)
    consumer.stopping.set()
    thread.join(15)
    # THEN the printed counts sum to 150, and nothing is left pending
    assert _processed_printed(capsys.readouterr().out) == 150
    assert observability.metrics.metric_set == {}
