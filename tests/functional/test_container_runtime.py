"""The container worker's runtime: forwards, scale-in protection, heartbeat retries, drain on SIGTERM, receive errors,
FIFO order within a group, and the first lease."""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from tests.support.aws_world import AwsWorld
from tests.support.container import depth, run_until
from tests.support.strict_sqs import StrictSQS
from worker_tier import Client, OutgoingMessage, Task
from worker_tier.core import contract, observability
from worker_tier.container.consumer import Consumer
from worker_tier.container.protection import TaskProtection
from worker_tier.core.errors import QueueConfigurationError
from worker_tier.worker.heartbeat import Heartbeat
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.worker.batch import Worker


def worker_on(aws: AwsWorld, tasks: Registry, queue_url: str, sqs=None, container_queue_url: str | None = None) -> Worker:
    return Worker(Settings(), queue_url=queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                  state_table=aws.state_table, registry=tasks, sqs=sqs or aws.sqs, dynamodb=aws.dynamodb,
                  container_queue_url=container_queue_url)


def container_on(aws: AwsWorld, tasks: Registry, queue_url: str, sqs=None, **kwargs) -> Consumer:
    sqs = sqs or aws.sqs
    kwargs.setdefault("protection", TaskProtection(agent_uri=""))
    kwargs.setdefault("poll_wait_seconds", 1)
    kwargs.setdefault("heartbeat_interval", 1)
    kwargs.setdefault("exit_process", lambda code: None)
    return Consumer(worker_on(aws, tasks, queue_url, sqs), sqs, queue_url, **kwargs)


# -- an idempotent container task runs once per source message ------------------------------------------------


def test_a_source_message_delivered_twice_runs_its_idempotent_container_task_once(aws):
    # GIVEN an idempotent container task (default key) and one source message the Lambda worker receives twice
    long_queue = aws.sqs.create_queue(QueueName="long")["QueueUrl"]
    runs: list[str] = []
    tasks = Registry()
    tasks.task("/render", idempotent=True, container=True)(lambda t: runs.append(t.message_id))
    Client(aws.queue_url, sqs=aws.sqs).send("/render", '{"video": 1}')
    event = aws.receive_event()
    lambda_worker = worker_on(aws, tasks, aws.queue_url, StrictSQS(aws.sqs), container_queue_url=long_queue)
    # WHEN both deliveries are forwarded and the container worker consumes the long queue
    for _ in range(2):
        assert lambda_worker.handle(event, None) == {"batchItemFailures": []}
    consumer = container_on(aws, tasks, long_queue, concurrency=1)
    thread = run_until(consumer, lambda: aws.sqs.get_queue_attributes(
        QueueUrl=long_queue, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"] == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"})
    consumer.stopping.set()
    thread.join(10)
    # THEN the task ran once: both forwards carry the source message id, the container's idempotency key
    assert len(runs) == 1


def test_a_forward_with_no_room_for_the_source_id_still_goes_and_says_so(aws, caplog):
    # GIVEN a source message carrying SQS's 10 attributes (the path and 9 of its own)
    caplog.set_level(logging.WARNING, logger=observability.logger.name)
    long_queue = aws.sqs.create_queue(QueueName="long")["QueueUrl"]
    tasks = Registry()
    tasks.task("/render", container=True)(lambda t: None)
    Client(aws.queue_url, sqs=aws.sqs).send("/render", "{}", attributes={f"a{i}": str(i) for i in range(9)})
    lambda_worker = worker_on(aws, tasks, aws.queue_url, StrictSQS(aws.sqs), container_queue_url=long_queue)
    # WHEN the Lambda worker forwards it
    assert lambda_worker.handle(aws.receive_event(), None) == {"batchItemFailures": []}
    # THEN the forward keeps its 10 attributes (an 11th would be refused), and the log says the key falls back
    [forwarded] = aws.sqs.receive_message(QueueUrl=long_queue, MessageAttributeNames=["All"])["Messages"]
    assert len(forwarded["MessageAttributes"]) == 10
    assert "worker_tier.source_message_id" not in forwarded["MessageAttributes"]
    assert [r.getMessage() for r in caplog.records] == [
        "no room for the source message id on the forward: the container's default idempotency key is the "
        "forwarded message's own id"
    ]


# -- one failed heartbeat extension is retried within the window, not left to the next beat -------------------


class FailingExtensions:
    """Moto's SQS whose first ``failures`` ChangeMessageVisibilityBatch calls fail every entry (InternalError)."""

    def __init__(self, sqs, failures: int) -> None:
        self._sqs = sqs
        self.failures = failures
        self.calls = 0

    def __getattr__(self, name: str):
        return getattr(self._sqs, name)

    def change_message_visibility_batch(self, **kwargs):
        self.calls += 1
        if self.calls <= self.failures:
            failed = [{"Id": e["Id"], "SenderFault": False, "Code": "InternalError", "Message": "try again"}
                      for e in kwargs["Entries"]]
            return {"Successful": [], "Failed": failed}
        return self._sqs.change_message_visibility_batch(**kwargs)


class SteppingClock:
    """A monotonic clock that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def held_heartbeat(aws: AwsWorld, sqs, clock: SteppingClock):
    Client(aws.queue_url, sqs=aws.sqs).send("/long", "x")
    [message] = aws.sqs.receive_message(QueueUrl=aws.queue_url, VisibilityTimeout=40)["Messages"]
    heartbeat = Heartbeat(sqs, aws.queue_url, interval_seconds=30, margin_seconds=10, clock=clock, sleep=clock.sleep)
    heartbeat.hold(message["MessageId"], message["ReceiptHandle"])
    return heartbeat, message["MessageId"]


def test_a_failed_extension_is_retried_within_the_window_and_the_lease_kept(aws):
    # GIVEN a held message (deployed timings: 30 s beats, 40 s window) whose first extension fails
    clock = SteppingClock()
    sqs = FailingExtensions(aws.sqs, failures=1)
    heartbeat, message_id = held_heartbeat(aws, sqs, clock)
    # WHEN the beat comes, 30 s after the receive
    clock.now += 30
    heartbeat.beat()
    # THEN the extension was retried about a second later, succeeded, and the task keeps its lease
    assert (sqs.calls, clock.sleeps) == (2, [1.0])
    assert heartbeat.held() == [message_id] and not heartbeat.lease(message_id).is_set()


def test_extensions_failing_through_every_retry_lose_the_lease_before_the_window_ends(aws, caplog):
    # GIVEN a held message whose extensions keep failing
    caplog.set_level(logging.WARNING, logger=observability.logger.name)
    clock = SteppingClock()
    sqs = FailingExtensions(aws.sqs, failures=100)
    heartbeat, message_id = held_heartbeat(aws, sqs, clock)
    lease = heartbeat.lease(message_id)
    # WHEN the beat comes and its retries fail too
    clock.now += 30
    heartbeat.beat()
    # THEN three retries were made inside the 10 s margin, then the task was told at once (not at the next beat)
    assert (sqs.calls, clock.sleeps) == (4, [1.0, 1.0, 1.0])
    assert lease.is_set() and heartbeat.held() == []
    [lost] = [r for r in caplog.records if r.getMessage() == "heartbeat lost a message's lease"]
    assert lost.reason == "the extension and 3 retries failed within the extension window"


def visible_now(aws: AwsWorld) -> int:
    attributes = aws.sqs.get_queue_attributes(QueueUrl=aws.queue_url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def hanging_task(tasks: Registry, path: str = "/hang"):
    """Register a task that signals its start and runs until released; returns (started, release)."""
    started, release = threading.Event(), threading.Event()
    tasks.task(path)(lambda t: (started.set(), release.wait(30)))
    return started, release


def test_one_failed_extension_never_lets_a_second_consumer_take_a_live_message(aws):
    # GIVEN a message held by a 1.5 s heartbeat (2 s window) whose first extension fails
    Client(aws.queue_url, sqs=aws.sqs).send("/long", "x")
    [message] = aws.sqs.receive_message(QueueUrl=aws.queue_url, VisibilityTimeout=2)["Messages"]
    sqs = FailingExtensions(aws.sqs, failures=1)
    seen_by_second: list[str] = []
    # WHEN a second consumer polls for 4 s while the task lives
    with Heartbeat(sqs, aws.queue_url, interval_seconds=1.5, margin_seconds=0.5) as heartbeat:
        heartbeat.hold(message["MessageId"], message["ReceiptHandle"])
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            got = aws.sqs.receive_message(QueueUrl=aws.queue_url, VisibilityTimeout=30).get("Messages") or []
            seen_by_second += [m["MessageId"] for m in got]
            time.sleep(0.1)
        lease = heartbeat.lease(message["MessageId"])
    # THEN the retry kept the message hidden: the second consumer never got it, and the lease still holds
    assert seen_by_second == [] and lease is not None and not lease.is_set()


# -- scale-in protection is renewed by a timer while every slot is busy ---------------------------------------


class AgentAnswers(BaseHTTPRequestHandler):
    """An ECS agent stand-in: records each PUT (with the time) and answers 200 with the next queued body."""

    calls: ClassVar[list[tuple[float, dict]]] = []  # one handler per request: the record is the class's
    answers: ClassVar[list[bytes]] = []

    def do_PUT(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        AgentAnswers.calls.append((time.monotonic(), body))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(AgentAnswers.answers.pop(0) if AgentAnswers.answers else b'{"protection": {}}')

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def agent_answers():
    AgentAnswers.calls, AgentAnswers.answers = [], []
    server = HTTPServer(("127.0.0.1", 0), AgentAnswers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_protection_is_renewed_while_every_slot_is_busy(aws, agent_answers):
    # GIVEN one slot, taken by a long task, and protection expiring after 3 s (renewed after 1.5 s)
    tasks = Registry()
    started, release = hanging_task(tasks)
    Client(aws.queue_url, sqs=aws.sqs).send("/hang", "x")
    protection = TaskProtection(agent_uri=agent_answers, expires_minutes=0.05)
    consumer = container_on(aws, tasks, aws.queue_url, concurrency=1, protection=protection)
    # WHEN the task runs for 4 s, so the loop never receives
    thread = run_until(consumer, started.is_set)
    time.sleep(4)
    enabled_while_running = [body for _, body in AgentAnswers.calls if body["ProtectionEnabled"]]
    release.set()
    consumer.stopping.set()
    thread.join(10)
    # THEN the timer renewed protection during the task, not only when it was set
    assert len(enabled_while_running) >= 2
    assert enabled_while_running[0] == {"ProtectionEnabled": True, "ExpiresInMinutes": 0.05}


def test_a_200_answer_holding_a_failure_is_a_failed_protection_update(agent_answers, caplog):
    # GIVEN an agent that answers the first PUT with 200 and a failure, as it does for a refused update
    caplog.set_level(logging.WARNING, logger=observability.logger.name)
    AgentAnswers.answers = [b'{"failure": {"Arn": "arn:task", "Reason": "TASK_NOT_VALID"}}']
    protection = TaskProtection(agent_uri=agent_answers)
    # WHEN protection is asked for twice
    protection.hold(True)
    enabled_after_failure = protection.enabled
    protection.hold(True)
    # THEN the first answer counted as a failure (logged), so the second call tried again and succeeded
    assert (enabled_after_failure, protection.enabled, len(AgentAnswers.calls)) == (False, True, 2)
    [failed] = [r for r in caplog.records if r.getMessage() == "task protection update failed"]
    assert "TASK_NOT_VALID" in failed.error


# -- SIGTERM during the long poll ----------------------------------------------------------------------------


def test_a_message_a_poll_returns_after_sigterm_is_released_not_started(aws):
    # GIVEN a container worker inside a 3 s long poll
    tasks = Registry()
    ran: list[str] = []
    tasks.task("/job")(lambda t: ran.append(t.body))
    consumer = container_on(aws, tasks, aws.queue_url, poll_wait_seconds=3, grace_seconds=2)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    time.sleep(0.5)
    # WHEN SIGTERM comes, then a message arrives before the poll ends
    consumer.stopping.set()
    Client(aws.queue_url, sqs=aws.sqs).send("/job", "late")
    thread.join(10)
    # THEN it was not started, and is visible again at once for another worker
    assert ran == [] and not thread.is_alive()
    assert visible_now(aws) == 1


def test_the_grace_period_counts_from_sigterm_not_from_the_end_of_the_poll(aws):
    # GIVEN a task that outlives any grace, and the worker inside a 3 s long poll with a 3 s grace
    tasks = Registry()
    started, release = hanging_task(tasks)
    Client(aws.queue_url, sqs=aws.sqs).send("/hang", "x")
    exits: list[float] = []
    consumer = container_on(aws, tasks, aws.queue_url, concurrency=2, poll_wait_seconds=3, grace_seconds=3,
                            exit_process=lambda code: exits.append(time.monotonic()))
    thread = run_until(consumer, started.is_set)
    time.sleep(0.3)
    # WHEN SIGTERM comes during the poll
    stopped_at = time.monotonic()
    consumer.stopping.set()
    thread.join(10)
    release.set()
    # THEN the process exits 3 s after SIGTERM, not a grace period after the poll ends (about 5.7 s)
    assert len(exits) == 1 and 2.9 < exits[0] - stopped_at < 4.5


def test_the_poll_wait_is_cut_to_fit_the_stop_timeout_with_a_warning(aws, caplog):
    # GIVEN Fargate's 120 s stop timeout and a 100 s grace period
    caplog.set_level(logging.WARNING, logger=observability.logger.name)
    # WHEN a 20 s poll is asked for
    consumer = container_on(aws, Registry(), aws.queue_url, poll_wait_seconds=20, grace_seconds=100)
    # THEN it polls 15 s at most, so the poll, the grace and the release fit before SIGKILL
    assert consumer.poll_wait_seconds == 15
    assert [r.getMessage() for r in caplog.records] == [
        "poll_wait_seconds cut from 20 to 15: it must be <= stop timeout 120 s - grace_seconds 100 - 5 s to release, "
        "so the drain ends before SIGKILL"
    ]


# -- a failed ReceiveMessage is retried; only a configuration error stops the worker --------------------------


class FailingReceives:
    """Moto's SQS whose ReceiveMessage calls number ``failing`` raise ``error``."""

    def __init__(self, sqs, failing: set[int], error: Exception) -> None:
        self._sqs = sqs
        self.failing = failing
        self.error = error
        self.calls = 0

    def __getattr__(self, name: str):
        return getattr(self._sqs, name)

    def receive_message(self, **kwargs):
        self.calls += 1
        if self.calls in self.failing:
            raise self.error
        return self._sqs.receive_message(**kwargs)


def test_a_failed_receive_is_retried_and_running_work_goes_on(aws):
    # GIVEN a running task, and the next ReceiveMessage failing (network down, after botocore's retries)
    tasks = Registry()
    done: list[str] = []
    started, release = hanging_task(tasks)
    tasks.task("/job")(lambda t: done.append(t.body))
    Client(aws.queue_url, sqs=aws.sqs).send("/hang", "x")
    sqs = FailingReceives(aws.sqs, {2}, EndpointConnectionError(endpoint_url="https://sqs.us-east-1.amazonaws.com/"))
    exits: list[int] = []
    consumer = container_on(aws, tasks, aws.queue_url, sqs=sqs, grace_seconds=1, exit_process=exits.append)
    # WHEN the worker goes on after the failure
    thread = run_until(consumer, lambda: started.is_set() and sqs.calls >= 2)
    Client(aws.queue_url, sqs=aws.sqs).send("/job", "after the outage")
    wait_until(lambda: done == ["after the outage"])
    release.set()
    wait_until(lambda: depth(aws) == 0)
    consumer.stopping.set()
    thread.join(10)
    # THEN it kept polling, the running task finished and was deleted, and the process never exited
    assert exits == [] and not thread.is_alive()


@pytest.mark.parametrize("code", ["AccessDenied", "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"])
def test_a_configuration_error_on_receive_drains_running_work_then_raises(aws, code):
    # GIVEN a running task, and ReceiveMessage then refused for want of permission or of the queue
    tasks = Registry()
    finished: list[str] = []
    tasks.task("/slow")(lambda t: (time.sleep(1), finished.append(t.body)))
    Client(aws.queue_url, sqs=aws.sqs).send("/slow", "x")
    denied = ClientError({"Error": {"Code": code, "Message": "refused"}}, "ReceiveMessage")
    sqs = FailingReceives(aws.sqs, set(range(2, 100)), denied)
    exits: list[int] = []
    consumer = container_on(aws, tasks, aws.queue_url, sqs=sqs, grace_seconds=10, exit_process=exits.append)
    # WHEN it runs
    with pytest.raises(QueueConfigurationError) as raised:
        consumer.run()
    # THEN it stopped receiving at once, let the running task finish (deleted), and raised the error after the drain
    assert str(raised.value) == (
        f"ReceiveMessage on {aws.queue_url} was refused with {code}: check the queue URL "
        f"({contract.QUEUE_URL_VARIABLE}) and the task role's sqs:ReceiveMessage permission"
    )
    assert raised.value.__cause__ is denied and sqs.calls == 2
    assert (finished, exits, depth(aws)) == (["x"], [], 0)


# -- FIFO order within a group -------------------------------------------------------------------------------


def test_fifo_messages_of_one_group_run_in_order_and_a_failure_holds_back_the_rest(aws_fifo):
    # GIVEN four steps of one group, received together, the first failing once
    aws = aws_fifo
    tasks = Registry()
    log: list[str] = []
    lock = threading.Lock()

    @tasks.task("/step")
    def step(task: Task) -> None:
        with lock:
            log.append(f"start {task.body}")
        time.sleep(0.2)
        if task.body == "1" and task.receive_count == 1:
            raise RuntimeError("step 1 failed once")
        with lock:
            log.append(f"done {task.body}")

    Client(aws.queue_url, sqs=aws.sqs).send_batch([OutgoingMessage("/step", str(i), group_id="order-42") for i in range(1, 5)])
    worker = Worker(Settings(fifo=True, batch_size=10), queue_url=aws.queue_url,
                    dead_letter_queue_url=aws.dead_letter_queue_url, registry=tasks, sqs=aws.sqs, dynamodb=aws.dynamodb)
    consumer = Consumer(worker, aws.sqs, aws.queue_url, concurrency=4, poll_wait_seconds=1, heartbeat_interval=1,
                        protection=TaskProtection(agent_uri=""), exit_process=lambda code: None)
    # WHEN the container worker consumes them on four threads
    thread = run_until(consumer, lambda: len([e for e in log if e.startswith("done")]) == 4, timeout=20)
    consumer.stopping.set()
    thread.join(10)
    # THEN nothing after step 1 ran before step 1's retry succeeded, and the group finished in order
    assert log == ["start 1", "start 1", "done 1", "start 2", "done 2", "start 3", "done 3", "start 4", "done 4"]


# -- received hidden for the heartbeat's window, not the queue's visibility timeout -------------------------


def test_a_crash_before_the_first_beat_gives_the_message_back_within_the_heartbeat_window(aws):
    # GIVEN a queue whose visibility timeout is 8 s, and a heartbeat whose window is 2 s (first beat at 1.5 s)
    aws.sqs.set_queue_attributes(QueueUrl=aws.queue_url, Attributes={"VisibilityTimeout": "8"})
    tasks = Registry()
    started, release = hanging_task(tasks)
    Client(aws.queue_url, sqs=aws.sqs).send("/hang", "x")
    heartbeat = Heartbeat(aws.sqs, aws.queue_url, interval_seconds=1.5, margin_seconds=0.5)
    consumer = container_on(aws, tasks, aws.queue_url, concurrency=1, heartbeat=heartbeat, grace_seconds=0)
    thread = run_until(consumer, started.is_set)
    # WHEN the worker dies before the first beat (its heartbeat stops)
    heartbeat.stop()
    crashed_at = time.monotonic()
    # THEN the message is visible again within the 2 s window, not after the queue's 8 s
    wait_until(lambda: visible_now(aws) == 1, timeout=6)
    assert time.monotonic() - crashed_at < 4
    release.set()
    consumer.stopping.set()
    thread.join(10)


def wait_until(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)
