"""The container worker's runtime against the hostile audit of issue #8 (items 2-7, 11): forwards, protection,
heartbeat retries, drain on SIGTERM, receive errors, FIFO order, the first lease."""

from __future__ import annotations

import logging
import threading

from tests.functional.conftest import AwsWorld
from tests.functional.test_consumer import run_until
from tests.strict_sqs import StrictSQS
from worker_tier import Client, Task, observability
from worker_tier.consumer import Consumer, TaskProtection
from worker_tier.heartbeat import Heartbeat
from worker_tier.registry import Registry
from worker_tier.settings import Settings
from worker_tier.worker import Worker


def worker_on(aws: AwsWorld, tasks: Registry, queue_url: str, sqs=None, long_queue_url: str | None = None) -> Worker:
    return Worker(Settings(), queue_url=queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                  state_table=aws.state_table, registry=tasks, sqs=sqs or aws.sqs, dynamodb=aws.dynamodb,
                  long_queue_url=long_queue_url)


def container_on(aws: AwsWorld, tasks: Registry, queue_url: str, sqs=None, **kwargs) -> Consumer:
    sqs = sqs or aws.sqs
    kwargs.setdefault("protection", TaskProtection(agent_uri=""))
    kwargs.setdefault("poll_wait_seconds", 1)
    kwargs.setdefault("heartbeat_interval", 1)
    return Consumer(worker_on(aws, tasks, queue_url, sqs), sqs, queue_url, exit_process=lambda code: None, **kwargs)


# -- item 2: an idempotent container task runs once per source message ------------------------------------------------


def test_a_source_message_delivered_twice_runs_its_idempotent_container_task_once(aws):
    # GIVEN an idempotent container task (default key) and one source message the Lambda worker receives twice
    long_queue = aws.sqs.create_queue(QueueName="long")["QueueUrl"]
    runs: list[str] = []
    tasks = Registry()
    tasks.task("/render", idempotent=True, container=True)(lambda t: runs.append(t.message_id))
    Client(aws.queue_url, sqs=aws.sqs).send("/render", '{"video": 1}')
    event = aws.receive_event()
    lambda_worker = worker_on(aws, tasks, aws.queue_url, StrictSQS(aws.sqs), long_queue_url=long_queue)
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


# -- item 4: one failed heartbeat extension is retried within the window, not left to the next beat -------------------


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
