"""Each log line written while a record runs names its message id and path, read when the line is written."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.fakes import FakeSQS
from worker_tier.core.observability import logger
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.core.task import Task
from worker_tier.worker.batch import Worker

QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/work"


@pytest.fixture
def lines() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """Reads the worker logger's JSON lines so far: at INFO, into a buffer, for the test's length."""
    handler = logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    buffer = io.StringIO()
    previous_stream, previous_level = handler.setStream(buffer), logger.log_level
    logger.setLevel("INFO")
    try:
        yield lambda: [json.loads(line) for line in buffer.getvalue().splitlines()]
    finally:
        handler.setStream(previous_stream)
        logger.setLevel(previous_level)


def _record(message_id: str, path: str) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "receiptHandle": f"handle-{message_id}",
        "body": "{}",
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1700000000000"},
        "messageAttributes": {"beanstalk.sqsd.path": {"dataType": "String", "stringValue": path}},
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:work",
    }


def _worker(registry: Registry) -> Worker:
    return Worker(Settings(), queue_url=QUEUE_URL, dead_letter_queue_url=None, registry=registry, sqs=FakeSQS())


def test_a_records_lines_name_it_and_a_line_after_the_batch_names_none(lines):
    # GIVEN a task that logs, and one that fails (the worker logs its retry)
    registry = Registry()

    @registry.task("/talk")
    def talk(task: Task) -> None:
        logger.info("talking")

    @registry.task("/fail")
    def fail(task: Task) -> None:
        raise RuntimeError("no")

    # WHEN a batch of both runs, and a line is logged after it
    _worker(registry).handle({"Records": [_record("m-1", "/talk"), _record("m-2", "/fail")]}, None)
    logger.info("after the batch")
    # THEN each record's lines name it; the later line names no record
    named = {line["message"]: (line.get("message_id"), line.get("path")) for line in lines()}
    assert named["talking"] == ("m-1", "/talk")
    assert named["task failed; retrying"] == ("m-2", "/fail")
    assert named["after the batch"] == (None, None)


def test_a_line_that_names_its_own_message_id_keeps_it(lines):
    # GIVEN a task that logs about another message
    registry = Registry()

    @registry.task("/other")
    def other(task: Task) -> None:
        logger.info("about another", extra={"message_id": "someone-else"})

    # WHEN it runs
    _worker(registry).handle({"Records": [_record("m-1", "/other")]}, None)
    # THEN its own message_id stands, beside the running record's path
    [line] = [line for line in lines() if line["message"] == "about another"]
    assert (line["message_id"], line["path"]) == ("someone-else", "/other")


def test_records_running_at_once_on_two_threads_each_name_their_own(lines):
    # GIVEN a task that logs only once both records are running
    registry = Registry()
    both_running = threading.Barrier(2, timeout=10)

    @registry.task("/together")
    def together(task: Task) -> None:
        both_running.wait()
        logger.info("running", extra={"body_id": task.message_id})

    worker = _worker(registry)
    threads = [
        threading.Thread(target=worker.handle, args=({"Records": [_record(message_id, "/together")]}, None))
        for message_id in ("m-1", "m-2")
    ]
    # WHEN both run at once, each on its own thread (as the container worker runs them)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    # THEN each line names the record of its own thread
    running = [line for line in lines() if line["message"] == "running"]
    assert sorted((line["body_id"], line["message_id"]) for line in running) == [("m-1", "m-1"), ("m-2", "m-2")]
