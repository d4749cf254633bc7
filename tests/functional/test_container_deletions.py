"""The container worker deletes succeeded messages in batches, flushes them before it exits, and says when one fails."""

from __future__ import annotations

import logging

from tests.functional.conftest import AwsWorld
from tests.functional.test_container import consumer_for, depth, run_until
from worker_tier import Client, OutgoingMessage, Task, observability
from worker_tier.registry import Registry


class CountingSQS:
    """Moto's SQS, counting the calls made through it by operation."""

    def __init__(self, sqs, fail_deletes: bool = False) -> None:
        self._sqs = sqs
        self._fail_deletes = fail_deletes
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str):
        method = getattr(self._sqs, name)

        def call(**kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            if self._fail_deletes and name == "delete_message_batch":
                failed = [{"Id": e["Id"], "SenderFault": False, "Code": "InternalError"} for e in kwargs["Entries"]]
                return {"Successful": [], "Failed": failed}
            return method(**kwargs)

        return call


def recording_tasks(done: list[str]) -> Registry:
    tasks = Registry()

    @tasks.task("/ok")
    def ok(task: Task) -> None:
        done.append(task.body)

    return tasks


def send(aws: AwsWorld, count: int) -> None:
    Client(aws.queue_url, sqs=aws.sqs).send_batch([OutgoingMessage("/ok", str(i)) for i in range(count)])


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


def test_deletes_still_waiting_go_out_before_the_worker_stops(aws):
    # GIVEN deletes that would wait a minute for their batch to fill
    done: list[str] = []
    send(aws, 3)
    consumer = consumer_for(aws, recording_tasks(done), delete_linger_seconds=60)
    thread = run_until(consumer, lambda: len(done) == 3)
    assert depth(aws) == 3  # run, not yet deleted
    # WHEN the worker stops
    consumer.stopping.set()
    thread.join(10)
    # THEN it deleted them on its way out
    assert not thread.is_alive() and depth(aws) == 0


def test_a_failed_delete_is_logged_with_the_message_ids(aws, caplog):
    # GIVEN a queue whose batch deletes fail
    caplog.set_level(logging.ERROR, logger=observability.logger.name)
    done: list[str] = []
    send(aws, 1)
    consumer = consumer_for(aws, recording_tasks(done), sqs=CountingSQS(aws.sqs, fail_deletes=True))
    # WHEN the task succeeds and the worker stops
    thread = run_until(consumer, lambda: done == ["0"])
    consumer.stopping.set()
    thread.join(10)
    # THEN the failure is logged, naming the message, which stays in the queue to run again
    [record] = [r for r in caplog.records if "not deleted" in r.getMessage()]
    assert record.getMessage() == "succeeded messages were not deleted: they will run again when they return"
    assert record.codes == ["InternalError"] and len(record.message_ids) == 1
    assert depth(aws) == 1
