"""The container worker deletes succeeded messages in shared batches; the heartbeat holds each until its answer."""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable

from tests.support.aws_world import AwsWorld
from tests.support.container import consumer_for, depth, run_until
from worker_tier import Client, OutgoingMessage, Task
from worker_tier.core import observability
from worker_tier.container.consumer import EXIT_CODE_TASKS_ABANDONED
from worker_tier.worker.heartbeat import Heartbeat
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings

NOT_DELETED = "succeeded messages were not deleted: they will run again when they return"


class CountingSQS:
    """Moto's SQS, counting the calls made through it by operation; ``on_delete`` may answer a DeleteMessageBatch itself."""

    def __init__(self, sqs, on_delete: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None) -> None:
        self._sqs = sqs
        self._on_delete = on_delete
        self.calls: dict[str, int] = {}
        self.batch_sizes: list[int] = []

    def __getattr__(self, name: str):
        method = getattr(self._sqs, name)

        def call(**kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            if name == "delete_message_batch":
                self.batch_sizes.append(len(kwargs["Entries"]))
                if self._on_delete is not None and (answer := self._on_delete(kwargs)) is not None:
                    return answer
            return method(**kwargs)

        return call


def refuse_all(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"Successful": [], "Failed": [{"Id": e["Id"], "SenderFault": False, "Code": "InternalError"} for e in kwargs["Entries"]]}


def recording_tasks(done: list[str]) -> Registry:
    tasks = Registry()

    @tasks.task("/ok")
    def ok(task: Task) -> None:
        done.append(task.body)

    return tasks


def send(aws: AwsWorld, count: int, first: int = 0) -> None:
    Client(aws.queue_url, sqs=aws.sqs).send_batch([OutgoingMessage("/ok", str(i)) for i in range(first, first + count)])


def quick_heartbeat(sqs, aws: AwsWorld) -> Heartbeat:
    """Beats every 0.5 s with a 1.5 s margin: a message it lets go is visible again 2 s later."""
    return Heartbeat(sqs, aws.queue_url, interval_seconds=0.5, margin_seconds=1.5)


def test_succeeded_messages_are_deleted_in_batches(aws):
    # GIVEN 20 messages and four threads
    done: list[str] = []
    send(aws, 20)
    sqs = CountingSQS(aws.sqs)
    consumer = consumer_for(aws, recording_tasks(done), sqs=sqs, concurrency=4)
    # WHEN the container worker drains the queue
    thread = run_until(consumer, lambda: depth(aws) == 0)
    consumer.stopping.set()
    thread.join(10)
    # THEN every task ran once, and the deletes went out in DeleteMessageBatch calls, never one by one
    assert sorted(done, key=int) == [str(i) for i in range(20)]
    assert "delete_message" not in sqs.calls
    assert 2 <= sqs.calls["delete_message_batch"] < 20


def test_a_failed_delete_is_logged_with_the_message_ids(aws, caplog):
    # GIVEN a queue whose batch deletes fail
    caplog.set_level(logging.ERROR, logger=observability.logger.name)
    done: list[str] = []
    send(aws, 1)
    consumer = consumer_for(aws, recording_tasks(done), sqs=CountingSQS(aws.sqs, refuse_all))
    # WHEN the task succeeds and the worker stops
    thread = run_until(consumer, lambda: done == ["0"])
    consumer.stopping.set()
    thread.join(10)
    # THEN the failure is logged, naming the message, which stays in the queue to run again
    [record] = [r for r in caplog.records if "not deleted" in r.getMessage()]
    assert record.getMessage() == NOT_DELETED
    assert record.codes == ["InternalError"] and len(record.message_ids) == 1
    assert depth(aws) == 1


def test_a_fifo_group_waits_until_its_failed_delete_returns_the_message(aws_fifo):
    # GIVEN steps A then B of one group, and A's delete refused once
    aws, log = aws_fifo, []
    tasks = Registry()
    tasks.task("/step")(lambda task: log.append(task.body))
    Client(aws.queue_url, sqs=aws.sqs).send_batch([OutgoingMessage("/step", b, group_id="g") for b in ("A", "B")])
    refusals: list[int] = []

    def refuse_once(kwargs: dict[str, Any]) -> dict[str, Any] | None:
        if refusals:
            return None
        refusals.append(1)
        return refuse_all(kwargs)

    sqs = CountingSQS(aws.sqs, refuse_once)
    consumer = consumer_for(aws, tasks, Settings(fifo=True), sqs=sqs, concurrency=2, heartbeat=quick_heartbeat(sqs, aws))
    # WHEN the worker runs the group
    thread = run_until(consumer, lambda: len(log) >= 3, timeout=10)
    consumer.stopping.set()
    thread.join(10)
    # THEN B waits until A is really gone: A runs again first
    assert log[:3] == ["A", "A", "B"]


def test_slow_deletes_hold_their_threads_and_messages_so_none_runs_twice(aws):
    # GIVEN 20 messages and DeleteMessageBatch calls that take 1.5 s each, most of the heartbeat's 2 s window
    runs: collections.Counter[str] = collections.Counter()
    tasks = Registry()
    tasks.task("/ok")(lambda task: runs.update([task.body]))
    send(aws, 10)
    send(aws, 10, first=10)
    sqs = CountingSQS(aws.sqs, lambda kwargs: time.sleep(1.5))
    consumer = consumer_for(aws, tasks, sqs=sqs, concurrency=10, heartbeat=quick_heartbeat(sqs, aws))
    # WHEN the worker drains the queue
    thread = run_until(consumer, lambda: depth(aws) == 0, timeout=10)
    consumer.stopping.set()
    thread.join(10)
    # THEN each ran once: the heartbeat holds each message until its delete is answered
    assert sorted(runs, key=int) == [str(i) for i in range(20)]
    assert set(runs.values()) == {1}
    assert sqs.batch_sizes and max(sqs.batch_sizes) <= 10


def test_a_hanging_delete_does_not_hold_the_exit_past_the_grace_period(aws):
    # GIVEN a DeleteMessageBatch that hangs
    done: list[str] = []
    send(aws, 1)
    hang = threading.Event()
    exits: list[int] = []
    sqs = CountingSQS(aws.sqs, lambda kwargs: hang.wait(20) and None)
    consumer = consumer_for(aws, recording_tasks(done), sqs=sqs, concurrency=1, grace_seconds=1, exit_process=exits.append)
    thread = run_until(consumer, lambda: sqs.batch_sizes == [1])
    # WHEN the worker is told to stop while the delete is in flight
    stopped_at = time.monotonic()
    consumer.stopping.set()
    thread.join(10)
    took = time.monotonic() - stopped_at
    hang.set()
    # THEN it exits within the grace period, the message still held (it runs again if it was not deleted)
    assert took < 2
    assert exits == [EXIT_CODE_TASKS_ABANDONED]


def test_a_long_task_does_not_slow_the_receives_of_the_free_threads(aws):
    # GIVEN one long task on one of two threads
    short: list[str] = []
    release = threading.Event()
    tasks = Registry()
    tasks.task("/long")(lambda task: release.wait(10))
    tasks.task("/short")(lambda task: short.append(task.body))
    client = Client(aws.queue_url, sqs=aws.sqs)
    client.send("/long", "L")
    consumer = consumer_for(aws, tasks, concurrency=2)
    thread = run_until(consumer, lambda: consumer._in_flight() == 1)
    # WHEN 20 instant tasks arrive
    started = time.monotonic()
    client.send_batch([OutgoingMessage("/short", str(i)) for i in range(10)])
    client.send_batch([OutgoingMessage("/short", str(i)) for i in range(10, 20)])
    while len(short) < 20:
        assert time.monotonic() - started < 5, "the short tasks did not finish"
        time.sleep(0.02)
    took = time.monotonic() - started
    release.set()
    consumer.stopping.set()
    thread.join(10)
    # THEN the free thread ran them without waiting on the long task before each receive
    assert took < 3


def test_a_broken_delete_answer_fails_its_messages_and_later_deletes_still_work(aws, caplog):
    # GIVEN a first DeleteMessageBatch answer that cannot be read (a Failed entry without an Id)
    caplog.set_level(logging.ERROR, logger=observability.logger.name)
    runs: collections.Counter[str] = collections.Counter()
    tasks = Registry()
    tasks.task("/ok")(lambda task: runs.update([task.body]))
    answers: list[int] = []

    def garbled_once(kwargs: dict[str, Any]) -> dict[str, Any] | None:
        if answers:
            return None
        answers.append(1)
        return {"Failed": [{"Code": "InternalError"}]}

    sqs = CountingSQS(aws.sqs, garbled_once)
    send(aws, 1)
    consumer = consumer_for(aws, tasks, sqs=sqs, concurrency=2, heartbeat=quick_heartbeat(sqs, aws))
    # WHEN the worker runs it, then, once that delete has its garbled answer, a second message
    thread = run_until(consumer, lambda: bool(answers))
    send(aws, 1, first=1)
    deadline = time.monotonic() + 4
    while depth(aws) or runs["0"] < 2:
        assert time.monotonic() < deadline, f"not all deleted: {dict(runs)}"
        time.sleep(0.05)
    consumer.stopping.set()
    thread.join(10)
    # THEN the failure is logged, the first message ran again and was deleted, and the second ran once
    assert [r.getMessage() for r in caplog.records if "not deleted" in r.getMessage()] == [NOT_DELETED]
    assert runs == {"0": 2, "1": 1}


def test_a_single_fifo_group_is_not_slowed_by_the_delete_linger(aws_fifo):
    # GIVEN ten instant steps of one group and one thread
    aws, log = aws_fifo, []
    tasks = Registry()
    tasks.task("/step")(lambda task: log.append(task.body))
    Client(aws.queue_url, sqs=aws.sqs).send_batch([OutgoingMessage("/step", str(i), group_id="g") for i in range(10)])
    consumer = consumer_for(aws, tasks, Settings(fifo=True), concurrency=1, delete_linger_seconds=60)
    # WHEN the worker runs them
    started = time.monotonic()
    thread = run_until(consumer, lambda: len(log) == 10, timeout=5)
    took = time.monotonic() - started
    consumer.stopping.set()
    thread.join(10)
    # THEN each delete went out at once (its thread was the only one busy), in order
    assert log == [str(i) for i in range(10)]
    assert took < 3


def test_deletes_of_a_standard_queue_fill_batches_across_receives(aws):
    # GIVEN 30 messages and two threads: one receive brings at most two
    done: list[str] = []
    sqs = CountingSQS(aws.sqs)
    send(aws, 10)
    send(aws, 10, first=10)
    send(aws, 10, first=20)
    consumer = consumer_for(aws, recording_tasks(done), sqs=sqs, concurrency=2)
    # WHEN the worker drains the queue
    thread = run_until(consumer, lambda: depth(aws) == 0)
    consumer.stopping.set()
    thread.join(10)
    # THEN threads handed their deletes over and took new work: batches hold more messages than threads
    assert sorted(done, key=int) == [str(i) for i in range(30)]
    assert max(sqs.batch_sizes) > 2
    assert sum(sqs.batch_sizes) == 30
    assert sqs.calls["delete_message_batch"] < sqs.calls["receive_message"]


def test_waiting_deletes_go_out_at_the_stop_and_the_exit_is_clean(aws):
    # GIVEN deletes that linger a minute before they go out
    done: list[str] = []
    exits: list[int] = []
    sqs = CountingSQS(aws.sqs)
    send(aws, 3)
    consumer = consumer_for(aws, recording_tasks(done), sqs=sqs, concurrency=3, delete_linger_seconds=60,
                            exit_process=exits.append)
    thread = run_until(consumer, lambda: len(done) == 3)
    # WHEN the worker is told to stop before the linger ends
    stopped_at = time.monotonic()
    consumer.stopping.set()
    thread.join(10)
    # THEN the deletes went out at once, every message is gone, and nothing was abandoned
    assert time.monotonic() - stopped_at < 5
    assert depth(aws) == 0
    assert exits == []
    assert consumer.heartbeat.held() == []


def test_deletes_that_cannot_go_out_stop_the_threads_after_a_bound(aws):
    # GIVEN a DeleteMessageBatch that hangs, one thread, and more messages than the pending bound (20)
    done: list[str] = []
    hang = threading.Event()
    sqs = CountingSQS(aws.sqs, lambda kwargs: hang.wait(20) and None)
    send(aws, 10)
    send(aws, 10, first=10)
    send(aws, 10, first=20)
    consumer = consumer_for(aws, recording_tasks(done), sqs=sqs, concurrency=1, grace_seconds=1, exit_process=lambda code: None)
    # WHEN the worker runs while the first delete hangs
    thread = run_until(consumer, lambda: len(done) >= 20)
    time.sleep(1.5)
    # THEN the thread stopped taking work once 20 deletes waited (the 21st task ran, its hand-over waits):
    # no unbounded pile of held messages
    assert 20 <= len(done) <= 21
    held = len(done)
    time.sleep(1)
    assert len(done) == held
    consumer.stopping.set()
    hang.set()
    thread.join(10)
