"""The container worker's prefetch on a standard queue: once tasks prove short it receives ahead of its free threads,
but a prefetched message never waits hidden long behind a long task, and the stop releases what it had not started."""

from __future__ import annotations

import threading
import time


from tests.support.container import consumer_for, run_until
from worker_tier import Client, OutgoingMessage, Task
from worker_tier.container import consumer as consumer_module
from worker_tier.core.settings import Settings
from worker_tier.worker.registry import Registry

SHORT_TASKS = consumer_module.PREFETCH_AFTER_SHORT_TASKS + 2


def _visible(aws) -> int:
    attributes = aws.sqs.get_queue_attributes(QueueUrl=aws.queue_url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def _short_then_long(aws, long_seconds: float) -> tuple[Registry, list[str], threading.Event]:
    """SHORT_TASKS instant tasks, then one that runs ``long_seconds``, then a, b and c: the tasks that ran, and an
    event set when the long one starts."""
    tasks = Registry()
    ran: list[str] = []
    long_started = threading.Event()

    @tasks.task("/t")
    def run(task: Task) -> None:
        if task.body == "long":
            long_started.set()
            time.sleep(long_seconds)
        ran.append(task.body)

    client = Client(aws.queue_url, sqs=aws.sqs)
    bodies = [f"s{n}" for n in range(SHORT_TASKS)] + ["long", "a", "b", "c"]
    for first in range(0, len(bodies), 10):
        client.send_batch([OutgoingMessage("/t", body) for body in bodies[first : first + 10]])
    return tasks, ran, long_started


def test_a_long_task_does_not_hold_prefetched_messages_hidden_beyond_the_bound(aws):
    # GIVEN one thread, short tasks (so it prefetches), then a 4 s task received together with three more
    tasks, ran, long_started = _short_then_long(aws, long_seconds=4)
    consumer = consumer_for(aws, tasks, concurrency=1, delete_linger_seconds=0)
    thread = run_until(consumer, long_started.is_set)
    try:
        # THEN it did receive ahead of its one thread
        assert max(p["MaxNumberOfMessages"] for p in aws.params("ReceiveMessage")) > 1
        # AND the three waiting behind the long task are visible again within the bound, while it still runs
        deadline = time.monotonic() + consumer_module.PREFETCH_HOLD_SECONDS + 1.5
        while _visible(aws) < 3:
            assert time.monotonic() < deadline, "prefetched messages stayed hidden behind the long task"
            time.sleep(0.05)
        assert "long" not in ran and not {"a", "b", "c"} & set(ran)
        # AND once it ends, every task has run exactly once
        deadline = time.monotonic() + 15
        while len(ran) < SHORT_TASKS + 4:
            assert time.monotonic() < deadline, f"not all ran: {ran}"
            time.sleep(0.05)
        assert sorted(ran) == sorted([f"s{n}" for n in range(SHORT_TASKS)] + ["long", "a", "b", "c"])
    finally:
        consumer.stopping.set()
        thread.join(15)


def test_sigterm_releases_prefetched_messages_and_lets_the_running_task_finish(aws, monkeypatch):
    # GIVEN one thread that prefetched three messages behind a 2 s task, with a bound too long to release them first
    monkeypatch.setattr(consumer_module, "PREFETCH_HOLD_SECONDS", 60.0)
    tasks, ran, long_started = _short_then_long(aws, long_seconds=2)
    consumer = consumer_for(aws, tasks, concurrency=1, grace_seconds=10, delete_linger_seconds=0)
    thread = run_until(consumer, long_started.is_set)
    assert _visible(aws) == 0, "the three were not prefetched with the long task"
    # WHEN SIGTERM arrives
    consumer.stopping.set()
    # THEN the three are visible again while the running task finishes (its grace period is 10 s)
    deadline = time.monotonic() + 1.5
    while _visible(aws) < 3:
        assert time.monotonic() < deadline, "prefetched messages not released at the stop"
        time.sleep(0.02)
    assert "long" not in ran
    # AND the running task finished, the three never ran
    thread.join(15)
    assert not thread.is_alive()
    assert "long" in ran and not {"a", "b", "c"} & set(ran)
    again = aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in again) == ["a", "b", "c"]


def test_a_receive_never_asks_for_fewer_than_one_message_when_the_prefetch_stops_just_before_it(aws, monkeypatch):
    # GIVEN a consumer whose room shrinks between the loop's look and the receive (as when a running task passes
    # PREFETCH_SHORT_TASK_SECONDS, or the waiting deletes reach a batch, at that moment): 2, then 1, then none
    tasks = Registry()
    tasks.task("/t")(lambda task: None)
    consumer = consumer_for(aws, tasks, concurrency=1, delete_linger_seconds=0)
    sizes = iter([2, 1, 0])
    monkeypatch.setattr(consumer, "_capacity", lambda: next(sizes, 1))
    # WHEN it polls a few times
    thread = run_until(consumer, lambda: len(aws.params("ReceiveMessage")) >= 2)
    consumer.stopping.set()
    thread.join(15)
    # THEN every receive asked for 1 to 10 messages (SQS refuses 0 with InvalidParameterValue, a pause and a warning)
    assert all(1 <= p["MaxNumberOfMessages"] <= 10 for p in aws.params("ReceiveMessage")), aws.params("ReceiveMessage")


def test_a_prefetched_message_released_unstarted_keeps_its_retries(aws):
    # GIVEN one thread, max_retries 2, short tasks (so it prefetches), a 2 s task, then "a", which fails once
    tasks = Registry()
    long_started = threading.Event()
    runs: list[str] = []

    @tasks.task("/t")
    def run(task: Task) -> None:
        if task.body == "long":
            long_started.set()
            time.sleep(2)
        runs.append(task.body)
        if task.body == "a" and runs.count("a") == 1:
            raise RuntimeError("fails on its first run")

    client = Client(aws.queue_url, sqs=aws.sqs)
    bodies = [f"s{n}" for n in range(SHORT_TASKS)] + ["long", "a"]
    for first in range(0, len(bodies), 10):
        client.send_batch([OutgoingMessage("/t", body) for body in bodies[first : first + 10]])
    consumer = consumer_for(aws, tasks, Settings(max_retries=2), concurrency=1, delete_linger_seconds=0)
    # WHEN "a" is prefetched behind the long task, released unstarted, received again, and fails on its first run
    thread = run_until(consumer, lambda: "a" in runs, timeout=30)
    try:
        assert aws.params("ChangeMessageVisibilityBatch") or aws.params("ChangeMessageVisibility")
        time.sleep(0.5)
        # THEN it is retried, as any message that failed once with max_retries 2, not dead-lettered
        assert aws.dead_letters() == []
    finally:
        consumer.stopping.set()
        thread.join(15)


def test_sigterm_during_a_long_poll_releases_prefetched_messages_at_once(aws, monkeypatch):
    # GIVEN one thread that prefetched three messages behind a 4 s task, then went on to long-poll an empty queue for
    # 10 s (the long task still counted as short when it asked), with a bound too long to release them first
    monkeypatch.setattr(consumer_module, "PREFETCH_HOLD_SECONDS", 60.0)
    monkeypatch.setattr(consumer_module, "PREFETCH_SHORT_TASK_SECONDS", 0.5)
    tasks, ran, long_started = _short_then_long(aws, long_seconds=4)
    consumer = consumer_for(aws, tasks, concurrency=1, grace_seconds=10, delete_linger_seconds=0)
    consumer.poll_wait_seconds = 10
    thread = run_until(consumer, long_started.is_set)
    time.sleep(0.3)
    assert _visible(aws) == 0, "the three were not prefetched with the long task"
    # WHEN SIGTERM arrives while the poll waits
    consumer.stopping.set()
    try:
        # THEN the three are visible again at once, not when the poll ends
        deadline = time.monotonic() + 2
        while _visible(aws) < 3:
            assert time.monotonic() < deadline, "prefetched messages stayed hidden until the long poll ended"
            time.sleep(0.05)
        assert not {"a", "b", "c"} & set(ran)
    finally:
        thread.join(20)


def test_prefetched_messages_released_as_threads_take_them_each_run_exactly_once(aws, monkeypatch):
    # GIVEN two threads, a bound so short that prefetched messages are released while threads are about to take them,
    # and 20 ms tasks with a 0.3 s one every 25th message
    monkeypatch.setattr(consumer_module, "PREFETCH_HOLD_SECONDS", 0.05)
    monkeypatch.setattr(consumer_module, "PREFETCH_CHECK_SECONDS", 0.01)
    tasks = Registry()
    lock = threading.Lock()
    running: set[str] = set()
    ran: list[str] = []
    overlaps: list[str] = []

    @tasks.task("/t")
    def run(task: Task) -> None:
        with lock:
            if task.body in running:
                overlaps.append(task.body)
            running.add(task.body)
        time.sleep(0.3 if int(task.body) % 25 == 24 else 0.02)
        with lock:
            running.discard(task.body)
            ran.append(task.body)

    client = Client(aws.queue_url, sqs=aws.sqs)
    for first in range(0, 80, 10):
        client.send_batch([OutgoingMessage("/t", str(n)) for n in range(first, first + 10)])
    consumer = consumer_for(aws, tasks, concurrency=2, delete_linger_seconds=0)
    # WHEN it consumes them all
    thread = run_until(consumer, lambda: len(set(ran)) == 80, timeout=90)
    consumer.stopping.set()
    thread.join(15)
    # THEN some were released unstarted, yet each ran exactly once, never two at once
    releases = [e for p in aws.params("ChangeMessageVisibilityBatch") for e in p["Entries"] if e["VisibilityTimeout"] == 0]
    assert releases, "no prefetched message was released: the race was not exercised"
    assert overlaps == []
    assert sorted(ran, key=int) == [str(n) for n in range(80)]
