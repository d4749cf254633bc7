"""The standard queue's background deletes (``_BackgroundDeletions``): reproductions against moto.

Faults come from wrappers around moto's client and fakes passed in; the code under test is not patched.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Callable

from tests.support.aws_world import AwsWorld
from tests.support.container import consumer_for, depth, run_until
from worker_tier import Client, OutgoingMessage, Task
from worker_tier.core import observability
from worker_tier.container.consumer import EXIT_CODE_TASKS_ABANDONED
from worker_tier.worker.heartbeat import Heartbeat
from worker_tier.worker.registry import Registry

ABANDON = "tasks still running after the grace period: exiting without releasing their messages (they run again)"


class FaultySQS:
    """Moto's SQS; ``on_delete`` / ``on_change`` may answer (or hang, or raise) a batch call themselves."""

    def __init__(self, sqs, on_delete: Callable[[dict], dict | None] | None = None,
                 on_change: Callable[[dict], dict | None] | None = None) -> None:
        self._sqs = sqs
        self.on_delete = on_delete
        self.on_change = on_change
        self.deletes: list[list[str]] = []  # receipt handles per DeleteMessageBatch, at the call

    def __getattr__(self, name: str):
        method = getattr(self._sqs, name)

        def call(**kwargs):
            if name == "delete_message_batch":
                self.deletes.append([e["ReceiptHandle"] for e in kwargs["Entries"]])
                if self.on_delete is not None and (answer := self.on_delete(kwargs)) is not None:
                    return answer
            if name == "change_message_visibility_batch" and self.on_change is not None and (
                (answer := self.on_change(kwargs)) is not None
            ):
                return answer
            return method(**kwargs)

        return call


class RecordingProtection:
    """Stands in for ECS task protection: records every hold() and keeps the busy() the consumer gives it."""

    def __init__(self) -> None:
        self.holds: list[bool] = []
        self.busy: Callable[[], bool] | None = None

    def start(self, busy: Callable[[], bool]) -> None:
        self.busy = busy

    def stop(self) -> None:
        pass

    def hold(self, busy: bool) -> None:
        self.holds.append(busy)


def quick_heartbeat(sqs, aws: AwsWorld) -> Heartbeat:
    """Beats every 0.5 s with a 1.5 s margin: a message it lets go is visible again 2 s later."""
    return Heartbeat(sqs, aws.queue_url, interval_seconds=0.5, margin_seconds=1.5)


def counting_tasks(runs: collections.Counter, long_release: threading.Event | None = None) -> Registry:
    tasks = Registry()
    tasks.task("/ok")(lambda task: runs.update([task.body]))

    @tasks.task("/long")
    def long(task: Task) -> None:
        runs.update([task.body])
        if long_release is not None:
            long_release.wait(20)

    return tasks


def test_at_the_stop_waiting_deletes_go_out_at_once_even_while_a_task_outlives_the_grace(aws, caplog):
    # GIVEN a delete linger of 5 s, a short task that succeeded before the stop and a long task that outlives the grace
    caplog.set_level(logging.WARNING, logger=observability.logger.name)
    runs: collections.Counter[str] = collections.Counter()
    release = threading.Event()
    client = Client(aws.queue_url, sqs=aws.sqs)
    client.send("/long", "L")
    sqs = FaultySQS(aws.sqs)
    exits: list[tuple[int, int]] = []
    consumer = consumer_for(aws, counting_tasks(runs, release), sqs=sqs, concurrency=2, grace_seconds=1,
                            delete_linger_seconds=5, exit_process=lambda code: exits.append((code, len(sqs.deletes))))
    thread = run_until(consumer, lambda: runs["L"] == 1)
    client.send("/ok", "S")
    run_until_done = time.monotonic() + 5
    while runs["S"] == 0:
        assert time.monotonic() < run_until_done
        time.sleep(0.02)
    time.sleep(0.1)  # S handed its delete over
    # WHEN the worker is told to stop
    consumer.stopping.set()
    thread.join(10)
    release.set()
    # THEN (the behaviour: "at the stop, waiting deletes go out at once, within the grace period") S's delete was sent
    # during the grace period, and the exit names only L as abandoned
    [(code, deletes_sent_at_exit)] = exits
    assert code == EXIT_CODE_TASKS_ABANDONED
    [abandon] = [r for r in caplog.records if r.getMessage() == ABANDON]
    assert abandon.count == 1, f"S's delete never went out during the grace: abandoned {abandon.message_ids}"
    assert deletes_sent_at_exit >= 1


def test_protection_stays_on_while_a_delete_is_unanswered(aws):
    # GIVEN a DeleteMessageBatch that hangs and a task that succeeded
    runs: collections.Counter[str] = collections.Counter()
    hang = threading.Event()
    sqs = FaultySQS(aws.sqs, on_delete=lambda kwargs: hang.wait(20) and None)
    Client(aws.queue_url, sqs=aws.sqs).send("/ok", "0")
    protection = RecordingProtection()
    consumer = consumer_for(aws, counting_tasks(runs), sqs=sqs, concurrency=1, grace_seconds=1,
                            protection=protection, exit_process=lambda code: None)
    thread = run_until(consumer, lambda: len(sqs.deletes) == 1)
    time.sleep(1.5)  # a receive or two later
    # THEN while its message is still held (delete unanswered), ECS scale-in protection is still wanted
    try:
        assert consumer.heartbeat.held() != []
        assert protection.busy is not None and protection.busy(), "the renewal timer would drop protection"
        assert protection.holds[-1] is True, f"protection dropped while a delete is pending: {protection.holds}"
    finally:
        consumer.stopping.set()
        hang.set()
        thread.join(10)


def test_a_stale_delete_answer_does_not_release_the_hold_of_the_messages_new_run(aws):
    # GIVEN a first DeleteMessageBatch that hangs, then answers success without deleting (SQS's answer for a stale
    # receipt handle), and lost extensions meanwhile, so the message comes back and runs again (a long run)
    runs: collections.Counter[str] = collections.Counter()
    release_delete = threading.Event()
    release_task = threading.Event()
    failing = threading.Event()
    first: list[int] = []

    def stale_then_real(kwargs: dict) -> dict | None:
        if first:
            return None
        first.append(1)
        release_delete.wait(20)
        return {"Successful": [{"Id": e["Id"]} for e in kwargs["Entries"]], "Failed": []}

    def fail_extensions(kwargs: dict) -> dict | None:
        if failing.is_set():
            raise ConnectionError("extension refused")
        return None

    tasks = Registry()

    @tasks.task("/ok")
    def ok(task: Task) -> None:
        runs.update([task.body])
        if runs[task.body] > 1:
            release_task.wait(20)

    sqs = FaultySQS(aws.sqs, on_delete=stale_then_real, on_change=fail_extensions)
    Client(aws.queue_url, sqs=aws.sqs).send("/ok", "0")
    consumer = consumer_for(aws, tasks, sqs=sqs, concurrency=1, grace_seconds=1,
                            heartbeat=quick_heartbeat(sqs, aws), exit_process=lambda code: None)
    thread = run_until(consumer, lambda: len(sqs.deletes) == 1)
    failing.set()
    time.sleep(3)
    failing.clear()
    try:
        run_until_second = time.monotonic() + 5
        while runs["0"] < 2:
            assert time.monotonic() < run_until_second, "never ran again"
            time.sleep(0.05)
        [message_id] = consumer.heartbeat.held()
        # WHEN the first (stale) delete is answered while the second run is still going
        release_delete.set()
        time.sleep(0.5)
        # THEN the second run's message is still held by the heartbeat (else it returns mid-run: a third run)
        assert consumer.heartbeat.held() == [message_id], "the stale answer released the running copy's hold"
    finally:
        release_task.set()
        consumer.stopping.set()
        thread.join(10)


def test_a_raised_delete_error_is_logged_with_its_message_ids_and_the_sender_goes_on(aws, caplog):
    # GIVEN a DeleteMessageBatch that raises once
    caplog.set_level(logging.ERROR, logger=observability.logger.name)
    runs: collections.Counter[str] = collections.Counter()
    raised: list[int] = []

    def raise_once(kwargs: dict) -> dict | None:
        if not raised:
            raised.append(1)
            raise ConnectionError("reset")
        return None

    sqs = FaultySQS(aws.sqs, on_delete=raise_once)
    Client(aws.queue_url, sqs=aws.sqs).send_batch([OutgoingMessage("/ok", str(i)) for i in range(3)])
    consumer = consumer_for(aws, counting_tasks(runs), sqs=sqs, concurrency=3, heartbeat=quick_heartbeat(sqs, aws))
    thread = run_until(consumer, lambda: depth(aws) == 0, timeout=10)
    consumer.stopping.set()
    thread.join(10)
    # THEN the failure names its messages, they ran again and were deleted
    [record] = [r for r in caplog.records if "not deleted" in r.getMessage()]
    assert record.message_ids and record.codes == ["ConnectionError"]
    assert sum(runs.values()) == 3 + len(record.message_ids)


def test_the_exit_after_unanswered_deletes_does_not_claim_tasks_were_running(aws, caplog):
    # GIVEN a DeleteMessageBatch that hangs and no task running at the stop
    caplog.set_level(logging.WARNING, logger=observability.logger.name)
    runs: collections.Counter[str] = collections.Counter()
    hang = threading.Event()
    exits: list[int] = []
    sqs = FaultySQS(aws.sqs, on_delete=lambda kwargs: hang.wait(20) and None)
    Client(aws.queue_url, sqs=aws.sqs).send("/ok", "0")
    consumer = consumer_for(aws, counting_tasks(runs), sqs=sqs, concurrency=1, grace_seconds=1, exit_process=exits.append)
    thread = run_until(consumer, lambda: len(sqs.deletes) == 1)
    consumer.stopping.set()
    thread.join(10)
    hang.set()
    # THEN the exit says abandoned, and its log says why: deletes unanswered, not tasks running
    assert exits == [EXIT_CODE_TASKS_ABANDONED]
    assert not [r for r in caplog.records if r.getMessage() == ABANDON], "logged as running tasks"


def test_a_delete_answered_before_the_stop_is_not_reported_unanswered(aws):
    # GIVEN heartbeat extensions that take 1.2 s (a beat in progress delays heartbeat.release), deletes that succeed
    runs: collections.Counter[str] = collections.Counter()
    answered = threading.Event()
    exits: list[int] = []

    slow = threading.Event()

    def delete_now(kwargs: dict) -> dict:
        slow.set()
        time.sleep(0.6)  # a beat starts meanwhile, and takes 1.2 s
        answer = aws.sqs.delete_message_batch(**kwargs)
        answered.set()
        return answer

    sqs = FaultySQS(aws.sqs, on_delete=delete_now, on_change=lambda kwargs: slow.is_set() and time.sleep(1.2))
    Client(aws.queue_url, sqs=aws.sqs).send("/ok", "0")
    consumer = consumer_for(aws, counting_tasks(runs), sqs=sqs, concurrency=1, grace_seconds=0.5,
                            heartbeat=quick_heartbeat(sqs, aws), exit_process=exits.append)
    thread = run_until(consumer, answered.is_set, timeout=10)
    # WHEN the worker stops after SQS deleted the message
    consumer.stopping.set()
    thread.join(10)
    # THEN nothing is unanswered: the exit is clean
    assert depth(aws) == 0
    assert exits == [], "a message SQS had deleted was reported as an unanswered delete (exit 75)"


def test_deletes_piling_up_behind_a_hanging_delete_do_not_outgrow_the_heartbeat(aws):
    # GIVEN 7 threads, a DeleteMessageBatch that hangs, ChangeMessageVisibilityBatch calls of 0.25 s each
    # (a slow SQS: the same moment deletes pile up), and 80 instant tasks
    runs: collections.Counter[str] = collections.Counter()
    hang = threading.Event()
    sqs = FaultySQS(aws.sqs, on_delete=lambda kwargs: hang.wait(30) and None,
                    on_change=lambda kwargs: time.sleep(0.25))
    client = Client(aws.queue_url, sqs=aws.sqs)
    for first in range(0, 80, 10):
        client.send_batch([OutgoingMessage("/ok", str(i)) for i in range(first, first + 10)])
    consumer = consumer_for(aws, counting_tasks(runs), sqs=sqs, concurrency=7, grace_seconds=1,
                            heartbeat=quick_heartbeat(sqs, aws), exit_process=lambda code: None)
    thread = run_until(consumer, lambda: sum(runs.values()) >= 20, timeout=20)
    time.sleep(5)
    try:
        # THEN the held pile (the running tasks and at most 20 deletes) still gets its extensions in time: none visible again
        held = len(consumer.heartbeat.held())
        attributes = aws.sqs.get_queue_attributes(QueueUrl=aws.queue_url, AttributeNames=["ApproximateNumberOfMessages"])
        visible = int(attributes["Attributes"]["ApproximateNumberOfMessages"])
        twice = sorted(body for body, n in runs.items() if n > 1)
        assert not twice, f"ran again while their deletes were pending: {len(twice)}"
        ran = sum(runs.values())
        assert held == ran and visible == 80 - ran, (
            f"{ran} succeeded, none deleted, yet the heartbeat holds {held} and {visible} are visible to other workers")
    finally:
        consumer.stopping.set()
        hang.set()
        thread.join(15)
