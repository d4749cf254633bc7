"""`redrive`: dead letters back to the work queue, without their reason, never lost nor duplicated."""

from __future__ import annotations

import json
from collections import Counter

import boto3
from botocore.exceptions import ClientError

from tests.cli.deployment import parsed
from tests.strict_sqs import StrictSQS
from worker_tier import contract
from worker_tier.errors import NonRetryableError
from worker_tier_cli.commands import MOVE_TASK_FALLBACK_NOTE
from worker_tier_cli.dead_letters import DeadLetter
from worker_tier_cli.redrive import arrived_since


class FailingSQS(StrictSQS):
    """StrictSQS that fails SendMessageBatch call ``fail_call`` whole, and one entry of call ``fail_entry_call``."""

    def __init__(self, inner, fail_call: int, fail_entry_call: int) -> None:
        super().__init__(inner)
        self.send_calls = 0
        self.fail_call, self.fail_entry_call = fail_call, fail_entry_call
        self.failed_bodies: list[str] = []

    def send_message_batch(self, QueueUrl, Entries, **rest):
        self.send_calls += 1
        if self.send_calls == self.fail_call:
            self.failed_bodies += [e["MessageBody"] for e in Entries]
            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "SendMessageBatch")
        if self.send_calls == self.fail_entry_call:
            self.failed_bodies.append(Entries[0]["MessageBody"])
            response = super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries[1:], **rest)
            failed = {"Id": Entries[0]["Id"], "Code": "InternalError", "Message": "injected", "SenderFault": False}
            return {**response, "Failed": [*response["Failed"], failed]}
        return super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries, **rest)


def _bodies(messages):
    return Counter(m["Body"] for m in messages)


def test_redrive_by_path_moves_only_that_path_without_the_reason(deployment):
    # GIVEN two /resize and one /email dead letters, one with a user attribute
    deployment.dead_letter("/resize", NonRetryableError("bad"), "r1", attributes={"tenant": "acme"})
    deployment.dead_letter("/resize", NonRetryableError("bad"), "r2")
    deployment.dead_letter("/email", NonRetryableError("bad"), "e1")
    # WHEN redrive --path /resize runs
    result = deployment.run("redrive", "--path", "/resize")
    # THEN the two are in the work queue with their attributes and no reason, and /email stays in the DLQ
    assert result.exit_code == 0, result.output
    assert "moved 2, skipped 1, failed 0" in result.stdout
    moved = {m["Body"]: m.get("MessageAttributes", {}) for m in deployment.drain(deployment.queue_url)}
    assert set(moved) == {"r1", "r2"}
    assert moved["r1"][contract.PATH_ATTRIBUTE]["StringValue"] == "/resize"
    assert moved["r1"]["tenant"]["StringValue"] == "acme"
    assert all(contract.FAILURE_ATTRIBUTE not in attributes for attributes in moved.values())
    assert _bodies(deployment.drain(deployment.dlq_url)) == Counter({"e1": 1})


def test_redrive_of_500_with_send_failures_in_the_middle_loses_and_duplicates_nothing(deployment):
    # GIVEN 400 /resize and 100 /email dead letters, and an SQS whose 20th send fails whole and 30th fails one entry
    for n in range(500):
        path = "/resize" if n % 5 else "/email"
        deployment.dead_letter(path, NonRetryableError("bad"), f"{path}-{n}")
    failing = FailingSQS(boto3.client("sqs", region_name="us-east-1"), fail_call=20, fail_entry_call=30)
    deployment.runtime.client = lambda service, **kwargs: failing if service == "sqs" else boto3.client(service, **kwargs)
    # WHEN redrive --path /resize runs, as JSON
    result = deployment.run("redrive", "--path", "/resize", "--json")
    # THEN the counts add up: a whole batch and one entry failed, the rest moved, /email skipped
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    failed = len(failing.failed_bodies)
    assert failed > 2 and (report["moved"], report["failed"], report["skipped"]) == (400 - failed, failed, 100)
    assert report["not_deleted"] == [] and len(report["errors"]) == 2
    # AND every message is in exactly one queue: nothing lost, nothing duplicated; the failed ones stayed
    work, dead = _bodies(deployment.drain(deployment.queue_url)), _bodies(deployment.drain(deployment.dlq_url))
    assert sum(work.values()) == 400 - failed and sum(dead.values()) == 100 + failed
    assert set(failing.failed_bodies) <= set(dead)
    assert set(work).isdisjoint(dead) and max((work + dead).values()) == 1
    assert set(work + dead) == {f"{'/resize' if n % 5 else '/email'}-{n}" for n in range(500)}
    assert all(body.startswith("/resize") for body in work)
    assert not failing.refused  # every request was one real SQS accepts


def test_redrive_without_a_filter_falls_back_to_batches_on_moto_and_says_so(deployment):
    # GIVEN two dead letters on moto, which has no StartMessageMoveTask
    deployment.dead_letter("/a", NonRetryableError("x"), "a")
    deployment.dead_letter("/b", RuntimeError("y"), "b")
    # WHEN redrive runs without a filter
    result = deployment.run("redrive", "--json")
    # THEN it says it falls back, and moves both
    assert MOVE_TASK_FALLBACK_NOTE in result.stderr
    report = parsed(result)
    assert (report["method"], report["moved"], report["skipped"], report["failed"]) == ("batches", 2, 0, 0)
    assert _bodies(deployment.drain(deployment.queue_url)) == Counter({"a": 1, "b": 1})


def test_redrive_asks_on_a_terminal_and_moves_nothing_when_told_no(deployment):
    # GIVEN a dead letter and a terminal
    deployment.dead_letter("/a", NonRetryableError("x"), "a")
    deployment.runtime.interactive = lambda: True
    # WHEN the question is answered no
    result = deployment.run("redrive", "--path", "/a", input="n\n")
    # THEN it aborts and the message stays
    assert result.exit_code == 1 and "Move matching dead letters from" in result.output and "Aborted" in result.output
    assert deployment.depth(deployment.dlq_url) == 1


def test_redrive_yes_skips_the_question(deployment):
    deployment.dead_letter("/a", NonRetryableError("x"), "a")
    deployment.runtime.interactive = lambda: True
    result = deployment.run("redrive", "--path", "/a", "--yes")
    assert result.exit_code == 0 and "Move" not in result.output and "moved 1, skipped 0, failed 0" in result.stdout


def test_redrive_splits_large_messages_into_batches_sqs_accepts(deployment):
    # GIVEN six dead letters of 200 KB each: 1.2 MB in all, more than one SendMessageBatch may carry
    bodies = {f"{n}" + "x" * 200_000 for n in range(6)}
    for body in bodies:
        deployment.dead_letter("/big", NonRetryableError("x"), body)
    strict = StrictSQS(boto3.client("sqs", region_name="us-east-1"))
    deployment.runtime.client = lambda service, **kwargs: strict if service == "sqs" else boto3.client(service, **kwargs)
    # WHEN they are redriven
    result = deployment.run("redrive", "--path", "/big")
    # THEN SQS refused no request and all six moved
    assert not strict.refused
    assert result.exit_code == 0 and "moved 6, skipped 0, failed 0" in result.stdout
    assert set(_bodies(deployment.drain(deployment.queue_url))) == bodies


def test_redrive_shows_progress_on_a_terminal_only(deployment):
    # GIVEN dead letters, once on a terminal and once piped
    for n in range(12):
        deployment.dead_letter("/a", NonRetryableError("x"), f"a{n}")
    deployment.runtime.interactive = lambda: True
    on_terminal = deployment.run("redrive", "--path", "/a", "--yes")
    for n in range(3):
        deployment.dead_letter("/a", NonRetryableError("x"), f"b{n}")
    deployment.runtime.interactive = lambda: False
    piped = deployment.run("redrive", "--path", "/a")
    # THEN the progress bar, with the running counts, is on the terminal's stderr only
    assert "moved 12, skipped 0, failed 0" in on_terminal.stderr and "12/12" in on_terminal.stderr
    assert on_terminal.stdout == "moved 12, skipped 0, failed 0\n"
    assert piped.stderr == "" and piped.stdout == "moved 3, skipped 0, failed 0\n"


class DeadLetteringWorker(StrictSQS):
    """StrictSQS where every message sent to the work queue is dead-lettered again at once, as a live worker
    would do to a poison message: a new DLQ message with the same body and reason."""

    def __init__(self, inner, deployment) -> None:
        super().__init__(inner)
        self.deployment = deployment

    def send_message_batch(self, QueueUrl, Entries, **rest):
        response = super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries, **rest)
        if QueueUrl == self.deployment.queue_url:
            for entry in Entries:
                self.deployment.dead_letter("/poison", NonRetryableError("again"), entry["MessageBody"])
        return response


def test_redrive_beside_a_worker_that_dead_letters_them_again_moves_each_once_and_ends(deployment):
    # GIVEN 25 poison dead letters, and a worker that dead-letters each moved message again at once
    for n in range(25):
        deployment.dead_letter("/poison", NonRetryableError("bad"), f"p{n}")
    worker = DeadLetteringWorker(boto3.client("sqs", region_name="us-east-1"), deployment)
    deployment.runtime.client = lambda service, **kwargs: worker if service == "sqs" else boto3.client(service, **kwargs)
    # WHEN they are redriven
    result = deployment.run("redrive", "--path", "/poison", "--json")
    # THEN each of the 25 moved once; their new dead letters are left for the next run, and said so
    report = parsed(result)
    assert (report["moved"], report["arrived"], report["failed"]) == (25, 25, 0)
    assert _bodies(deployment.drain(deployment.queue_url)) == Counter({f"p{n}": 1 for n in range(25)})
    assert deployment.depth(deployment.dlq_url) == 25


def _letter(reason, **system):
    return DeadLetter("m", "r", "b", {}, {k: str(v) for k, v in system.items()}, reason)


def test_arrived_since_judges_by_sqs_timestamps_and_a_moved_message_by_its_first_receive():
    start = 1_000_000
    # GIVEN dead letters with our reason (sent to the DLQ by the worker): by SentTimestamp alone
    assert not arrived_since(_letter({"path": "/a"}, SentTimestamp=start - 1, ApproximateReceiveCount=5), start)
    assert arrived_since(_letter({"path": "/a"}, SentTimestamp=start, ApproximateReceiveCount=1), start)
    # AND without a reason, never received before this run: by SentTimestamp too
    assert not arrived_since(_letter({}, SentTimestamp=start - 1, ApproximateReceiveCount=1), start)
    # THEN one without a reason moved by SQS's redrive policy (old SentTimestamp, received before) arrived when
    # its first receive is after the start, and was there before only if that receive was before it
    assert arrived_since(_letter({}, SentTimestamp=start - 60_000, ApproximateReceiveCount=3,
                                 ApproximateFirstReceiveTimestamp=start + 5), start)
    assert not arrived_since(_letter({}, SentTimestamp=start - 60_000, ApproximateReceiveCount=3,
                                     ApproximateFirstReceiveTimestamp=start - 5), start)
