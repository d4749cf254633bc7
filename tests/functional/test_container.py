"""The container worker against moto: same semantics as Lambda, drain on SIGTERM, scale-in protection."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest

from tests.support.container import consumer_for, depth, run_until
from tests.support.strict_sqs import StrictSQS
from worker_tier import Client, NonRetryableError, Task
from worker_tier.container import EXIT_CODE_TASKS_ABANDONED, Consumer, TaskProtection
from worker_tier.heartbeat import Heartbeat
from worker_tier.registry import Registry
from worker_tier.settings import Settings
from worker_tier.worker import Worker


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
