"""The worker core against moto: every fate a message can meet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.aws_world import AwsWorld
from worker_tier import Client, NonRetryableError, RetryLater, Task
from worker_tier_local.context import LocalContext
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.worker.batch import Worker
from worker_tier.worker.fates import OUTCOME_RELEASED, Outcome, add_outcome_listener, remove_outcome_listener


def make_worker(aws: AwsWorld, registry: Registry, dead_letter_queue_url: str | None = None, **settings) -> Worker:
    return Worker(
        Settings(**settings),
        queue_url=aws.queue_url,
        dead_letter_queue_url=dead_letter_queue_url or aws.dead_letter_queue_url,
        state_table=aws.state_table,
        registry=registry,
        sqs=aws.sqs,
        dynamodb=aws.dynamodb,
        random=lambda: 0.999,
    )


def failure_ids(response: dict) -> set[str]:
    return {item["itemIdentifier"] for item in response["batchItemFailures"]}


def visibility_entries(aws: AwsWorld) -> list[dict]:
    return [entry for params in aws.params("ChangeMessageVisibilityBatch") for entry in params["Entries"]]


def failure_of(dead_letter: dict) -> dict:
    return json.loads(dead_letter["MessageAttributes"]["worker_tier.failure"]["StringValue"])


@pytest.fixture
def registry() -> Registry:
    tasks = Registry()

    @tasks.task("/ok")
    def ok(task: Task) -> None:
        pass

    @tasks.task("/boom")
    def boom(task: Task) -> None:
        raise RuntimeError("boom")

    return tasks


def test_partial_failure_reports_only_failed_records(aws, registry):
    # GIVEN three good messages and two failing ones
    client = Client(aws.queue_url, sqs=aws.sqs)
    for path in ["/ok", "/boom", "/ok", "/boom", "/ok"]:
        client.send(path, "{}")
    event = aws.receive_event()
    # WHEN the worker handles the batch
    response = make_worker(aws, registry).handle(event, None)
    # THEN exactly the two failures are reported, each with a backoff visibility
    boom_ids = {r["messageId"] for r in event["Records"] if r["messageAttributes"]["beanstalk.sqsd.path"]["stringValue"] == "/boom"}
    assert failure_ids(response) == boom_ids
    assert [e["VisibilityTimeout"] for e in visibility_entries(aws)] == [2, 2]


def test_all_failed_batch_is_reported_per_item_not_raised(aws, registry):
    # GIVEN a batch in which every record fails
    Client(aws.queue_url, sqs=aws.sqs).send_batch([_msg("/boom") for _ in range(3)])
    event = aws.receive_event()
    # WHEN it is handled
    response = make_worker(aws, registry).handle(event, None)
    # THEN no BatchProcessingError: all three are reported
    assert len(response["batchItemFailures"]) == 3


def test_backoff_grows_with_receive_count_and_is_capped(aws, registry):
    # GIVEN a failing message on its 5th receive (base 2 -> ceiling 32) with max_backoff 20
    Client(aws.queue_url, sqs=aws.sqs).send("/boom", "{}")
    event = aws.receive_event()
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = "5"
    # WHEN it fails with jitter at the top of its range
    make_worker(aws, registry, max_backoff=20).handle(event, None)
    # THEN the delay is the cap, not 32
    assert visibility_entries(aws)[0]["VisibilityTimeout"] == 20


def test_visibility_changes_go_out_ten_per_call(aws, registry):
    # GIVEN 25 failing records in one event (as a batching window builds)
    client = Client(aws.queue_url, sqs=aws.sqs)
    client.send_batch([_msg("/boom") for _ in range(25)])
    event = aws.receive_event(max_messages=25)
    assert len(event["Records"]) == 25
    # WHEN handled
    make_worker(aws, registry, batch_size=100, max_batching_window=1).handle(event, None)
    # THEN three ChangeMessageVisibilityBatch calls carry all 25 changes; no single-message calls
    assert aws.count("ChangeMessageVisibilityBatch") == 3
    assert aws.count("ChangeMessageVisibility") == 0
    assert len(visibility_entries(aws)) == 25


def test_retry_later_sets_the_requested_delay(aws):
    # GIVEN a task that asks to be retried in 120 s
    tasks = Registry()

    @tasks.task("/later")
    def later(task: Task) -> None:
        raise RetryLater(120)

    Client(aws.queue_url, sqs=aws.sqs).send("/later", "{}")
    event = aws.receive_event()
    # WHEN handled
    response = make_worker(aws, tasks).handle(event, None)
    # THEN it is reported failed with visibility 120
    assert len(response["batchItemFailures"]) == 1
    assert visibility_entries(aws)[0]["VisibilityTimeout"] == 120


def test_non_retryable_error_dead_letters_at_once_with_reason(aws):
    # GIVEN a task that refuses its input, with extra attributes on the message
    tasks = Registry()

    @tasks.task("/refuse")
    def refuse(task: Task) -> None:
        raise NonRetryableError("customer 7 was deleted")

    Client(aws.queue_url, sqs=aws.sqs).send("/refuse", '{"c": 7}', attributes={"tenant": "acme", "n": 3})
    event = aws.receive_event()
    # WHEN handled on the first receive
    response = make_worker(aws, tasks).handle(event, None)
    # THEN the source copy is reported done and the DLQ has body, attributes and reason
    assert response["batchItemFailures"] == []
    [dead] = aws.dead_letters()
    assert dead["Body"] == '{"c": 7}'
    assert dead["MessageAttributes"]["tenant"]["StringValue"] == "acme"
    assert dead["MessageAttributes"]["n"] == {"StringValue": "3", "DataType": "Number"}
    reason = failure_of(dead)
    assert reason["error_type"] == "NonRetryableError"
    assert reason["error_message"] == "customer 7 was deleted"
    assert reason["attempts"] == 1
    assert reason["path"] == "/refuse"
    assert reason["failed_at"].endswith("Z")


def test_unknown_path_dead_letters_with_reason(aws, registry):
    # GIVEN a message for a path nobody registered
    Client(aws.queue_url, sqs=aws.sqs).send("/nobody", "{}")
    # WHEN handled
    response = make_worker(aws, registry).handle(aws.receive_event(), None)
    # THEN it is in the DLQ saying so
    assert response["batchItemFailures"] == []
    reason = failure_of(aws.dead_letters()[0])
    assert reason["error_type"] == "UnknownPathError"
    assert reason["error_message"] == "no task is registered for path '/nobody'; registered paths: /boom, /ok"


def test_a_handler_registered_again_after_the_worker_started_is_the_one_that_runs(aws):
    # GIVEN a worker that has already run a message of one task
    ran: list[str] = []

    def handler_for(tag: str):
        def handler(task: Task) -> None:  # one qualified name, so registering it again replaces it (a module reloaded)
            ran.append(tag)
        return handler

    tasks = Registry()
    tasks.task("/work")(handler_for("old"))
    worker = make_worker(aws, tasks)
    Client(aws.queue_url, sqs=aws.sqs).send("/work", "{}")
    assert worker.handle(aws.receive_event(), None) == {"batchItemFailures": []}
    # WHEN the path's handler is registered again, and a task for a new path too
    tasks.task("/work")(handler_for("new"))
    tasks.task("/later")(lambda t: ran.append("later"))
    for path in ("/work", "/later"):
        Client(aws.queue_url, sqs=aws.sqs).send(path, "{}")
        assert worker.handle(aws.receive_event(), None) == {"batchItemFailures": []}
    # THEN the new handler runs, and so does the new path's task: the worker's routes follow the registry
    assert ran == ["old", "new", "later"]


def test_body_the_parser_rejects_dead_letters_as_malformed(aws):
    # GIVEN a task that declares a JSON parser and a body that is not JSON
    tasks = Registry()
    seen = []

    @tasks.task("/typed", parser=json.loads)
    def typed(task: Task) -> None:
        seen.append(task.payload)

    client = Client(aws.queue_url, sqs=aws.sqs)
    client.send("/typed", "not json")
    client.send("/typed", '{"w": 1}')
    # WHEN handled
    response = make_worker(aws, tasks).handle(aws.receive_event(), None)
    # THEN the bad one is dead-lettered as malformed, the good one ran with its payload
    assert response["batchItemFailures"] == []
    assert seen == [{"w": 1}]
    reason = failure_of(aws.dead_letters()[0])
    assert reason["error_type"] == "MalformedBodyError"
    assert reason["error_message"].startswith("parser loads of task '/typed' rejected the body of message ")


def test_gives_up_at_max_retries_with_reason(aws, registry):
    # GIVEN a failing message on its max_retries-th receive
    Client(aws.queue_url, sqs=aws.sqs).send("/boom", "payload")
    event = aws.receive_event()
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = "3"
    # WHEN handled with max_retries 3
    response = make_worker(aws, registry, max_retries=3).handle(event, None)
    # THEN it is dead-lettered with attempts 3 and deleted from the source
    assert response["batchItemFailures"] == []
    reason = failure_of(aws.dead_letters()[0])
    assert (reason["error_type"], reason["error_message"], reason["attempts"]) == ("RuntimeError", "boom", 3)


def test_dead_letter_send_failure_keeps_the_message(aws, registry):
    # GIVEN a worker whose DLQ does not exist
    Client(aws.queue_url, sqs=aws.sqs).send("/nobody", "{}")
    event = aws.receive_event()
    worker = make_worker(aws, registry, dead_letter_queue_url=aws.dead_letter_queue_url + "-missing")
    # WHEN a message must be dead-lettered
    response = worker.handle(event, None)
    # THEN it is reported failed (kept), with a backoff for the retry
    assert failure_ids(response) == {event["Records"][0]["messageId"]}
    assert visibility_entries(aws)[0]["VisibilityTimeout"] == 2


def test_timeout_guard_releases_unstarted_records_at_once(aws):
    # GIVEN a 30 s invocation whose first task uses 25 s of it (margin 10 s)
    now = [0.0]
    tasks = Registry()
    ran = []

    @tasks.task("/slow")
    def slow(task: Task) -> None:
        ran.append(task.message_id)
        now[0] += 25

    Client(aws.queue_url, sqs=aws.sqs).send_batch([_msg("/slow") for _ in range(3)])
    event = aws.receive_event()
    context = LocalContext("fn", 30, 128, "us-east-1", "123456789012", clock=lambda: now[0])
    released: list[Outcome] = []
    add_outcome_listener(released.append)
    try:
        # WHEN handled
        response = make_worker(aws, tasks, visibility_timeout=300, inactivity_timeout=30).handle(event, context)
    finally:
        remove_outcome_listener(released.append)
    # THEN one ran, the other two are reported failed with visibility 0
    assert len(ran) == 1
    assert len(response["batchItemFailures"]) == 2
    assert [e["VisibilityTimeout"] for e in visibility_entries(aws)] == [0, 0]
    assert [o.status for o in released if o.status == OUTCOME_RELEASED] == [OUTCOME_RELEASED] * 2


def test_eb_shaped_messages_route_by_default_path_and_carry_schedule(aws):
    # GIVEN an EB periodic-task message and a message with no path attribute at all
    tasks = Registry()
    seen: list[Task] = []

    @tasks.task("/backup")
    def backup(task: Task) -> None:
        seen.append(task)

    @tasks.task("/")
    def root(task: Task) -> None:
        seen.append(task)

    aws.sqs.send_message(
        QueueUrl=aws.queue_url,
        MessageBody="elasticbeanstalk scheduled job",
        MessageAttributes={
            "beanstalk.sqsd.path": {"DataType": "String", "StringValue": "/backup"},
            "beanstalk.sqsd.task_name": {"DataType": "String", "StringValue": "backup-job"},
            "beanstalk.sqsd.scheduled_time": {"DataType": "String", "StringValue": "2026-11-22 12:00:00 UTC"},
        },
    )
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody='{"from": "s3"}')
    # WHEN handled
    response = make_worker(aws, tasks).handle(aws.receive_event(), None)
    # THEN both succeed, the scheduled one with its task name and time
    assert response["batchItemFailures"] == []
    by_path = {t.path: t for t in seen}
    assert by_path["/backup"].task_name == "backup-job"
    assert by_path["/backup"].scheduled_at.isoformat() == "2026-11-22T12:00:00+00:00"
    assert by_path["/"].body == '{"from": "s3"}'


def test_idempotent_task_runs_once_for_a_duplicate(aws):
    # GIVEN an idempotent task keyed by order id, and two messages for the same order
    tasks = Registry()
    runs = []

    @tasks.task("/charge", idempotent=True, idempotency_key="order")
    def charge(task: Task) -> None:
        runs.append(task.json()["order"])

    client = Client(aws.queue_url, sqs=aws.sqs)
    client.send("/charge", '{"order": "A-1"}')
    client.send("/charge", '{"order": "A-1"}')
    client.send("/charge", '{"order": "B-2"}')
    # WHEN both are handled, in separate invocations
    worker = make_worker(aws, tasks)
    event = aws.receive_event()
    for record in event["Records"]:
        context = LocalContext("fn", 300, 128, "us-east-1", "123456789012")
        assert worker.handle({"Records": [record]}, context)["batchItemFailures"] == []
    # THEN the charge ran once per order
    assert sorted(runs) == ["A-1", "B-2"]


def test_fifo_failure_stops_only_its_group(aws_fifo, registry):
    # GIVEN group g1: boom, ok; group g2: ok
    client = Client(aws_fifo.queue_url, sqs=aws_fifo.sqs)
    client.send("/boom", "1", group_id="g1", dedupe_key="1")
    client.send("/ok", "2", group_id="g1", dedupe_key="2")
    client.send("/ok", "3", group_id="g2", dedupe_key="3")
    event = aws_fifo.receive_event()
    assert len(event["Records"]) == 3
    # WHEN handled by a FIFO worker
    response = make_worker(aws_fifo, registry, fifo=True).handle(event, None)
    # THEN g1's both messages are failed (the second never ran), g2's succeeded
    ids = [r["messageId"] for r in event["Records"]]
    assert failure_ids(response) == {ids[0], ids[1]}
    visibilities = {e["ReceiptHandle"]: e["VisibilityTimeout"] for e in visibility_entries(aws_fifo)}
    handles = [r["receiptHandle"] for r in event["Records"]]
    assert visibilities == {handles[0]: 2, handles[1]: 0}


def test_dead_letter_of_fifo_message_keeps_group(aws_fifo):
    # GIVEN a FIFO message that is refused
    tasks = Registry()

    @tasks.task("/refuse")
    def refuse(task: Task) -> None:
        raise NonRetryableError("no")

    Client(aws_fifo.queue_url, sqs=aws_fifo.sqs).send("/refuse", "x", group_id="g9", dedupe_key="k")
    worker = make_worker(aws_fifo, tasks, fifo=True)
    # WHEN handled
    assert worker.handle(aws_fifo.receive_event(), None)["batchItemFailures"] == []
    # THEN the FIFO DLQ has it, in the same message group
    [dead] = aws_fifo.sqs.receive_message(
        QueueUrl=aws_fifo.dead_letter_queue_url, MessageSystemAttributeNames=["MessageGroupId"]
    )["Messages"]
    assert dead["Attributes"]["MessageGroupId"] == "g9"


def _msg(path: str):
    from worker_tier import OutgoingMessage

    return OutgoingMessage(path, "{}")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX's")
@pytest.mark.parametrize("how, status", [("exit-0", 0), ("exit-3", 3), ("raise", 1), ("return", 0)])
def test_a_tasks_forked_child_ends_where_it_comes_back_and_never_runs_the_rest_of_the_batch(tmp_path, how, status):
    # GIVEN a batch of three whose first task forks, its child ending by sys.exit, an exception or a return
    log = tmp_path / "log"
    repo = Path(__file__).resolve().parents[2]
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    # WHEN a worker process handles it (tests.functional.forking_batch)
    done = subprocess.run([sys.executable, "-m", "tests.functional.forking_batch", how, str(log)], env=environ,
                          capture_output=True, text=True, timeout=120, check=False)
    # THEN only the worker answered for the batch, all of it succeeded
    assert done.returncode == 0, done.stderr
    [answer] = [json.loads(line) for line in done.stdout.splitlines()]
    assert answer["response"] == {"batchItemFailures": []}
    # AND the child ended where it came back, with Python's status for how it ended; the worker ran the rest
    [child, *rest] = [line.split() for line in log.read_text().splitlines()]
    worker = str(answer["pid"])
    assert child[0] == "child" and child[1] != worker
    assert rest == [["child-status", str(status), worker], ["record-1", worker], ["record-2", worker]]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX's")
def test_an_idempotent_tasks_forked_child_leaves_the_parents_idempotency_record_alone(tmp_path):
    # GIVEN a batch whose first task is idempotent and forks, its child ending by sys.exit(0)
    log = tmp_path / "log"
    repo = Path(__file__).resolve().parents[2]
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    # WHEN a worker process handles it, the state table in a moto server (tests.functional.forking_batch)
    done = subprocess.run([sys.executable, "-m", "tests.functional.forking_batch", "exit-0", str(log), "idempotent"],
                          env=environ, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    [answer] = [json.loads(line) for line in done.stdout.splitlines()]
    assert answer["response"] == {"batchItemFailures": []}
    # THEN the child ended before the idempotency layer saw it: the parent's record is still INPROGRESS after it
    lines = [line.split() for line in log.read_text().splitlines()]
    assert ["record-status", "INPROGRESS", str(answer["pid"])] in lines, lines
