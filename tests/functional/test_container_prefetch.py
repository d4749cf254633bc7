"""The container worker's prefetch on a standard queue: once tasks prove short it receives ahead of its free threads,
but a prefetched message never waits hidden long behind a long task, and the stop releases what it had not started."""

from __future__ import annotations

import threading
import time

from tests.support.container import consumer_for, run_until
from worker_tier import Client, OutgoingMessage, Task
from worker_tier.container import consumer as consumer_module
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
