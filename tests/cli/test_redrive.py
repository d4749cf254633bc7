"""`redrive`: dead letters back to the work queue, without their reason, never lost nor duplicated."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from tests.cli.deployment import NOW, parsed
from tests.support.strict_sqs import StrictSQS
from worker_tier.core import contract, envelope, message
from worker_tier.delays.delay import DelayedMessage
from worker_tier.delays.delivery import Delivery
from worker_tier.core.errors import NonRetryableError
from worker_tier_cli.commands import MOVE_TASK_FALLBACK_NOTE
from worker_tier_cli.dead_letters import DeadLetter
from worker_tier_cli.redrive import Journal, arrived_since


class FailingSQS(StrictSQS):
    """StrictSQS that refuses SendMessageBatch call ``fail_call`` whole (400 ThrottlingException: SQS processed
    nothing), and fails one entry of call ``fail_entry_call``."""

    def __init__(self, inner, fail_call: int, fail_entry_call: int) -> None:
        super().__init__(inner)
        self.send_calls = 0
        self.fail_call, self.fail_entry_call = fail_call, fail_entry_call
        self.failed_bodies: list[str] = []

    def send_message_batch(self, QueueUrl, Entries, **rest):
        self.send_calls += 1
        if self.send_calls == self.fail_call:
            self.failed_bodies += [e["MessageBody"] for e in Entries]
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "injected"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "SendMessageBatch")
        if self.send_calls == self.fail_entry_call:
            self.failed_bodies.append(Entries[0]["MessageBody"])
            response = super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries[1:], **rest)
            failed = {"Id": Entries[0]["Id"], "Code": "InternalError", "Message": "injected", "SenderFault": False}
            return {**response, "Failed": [*response["Failed"], failed]}
        return super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries, **rest)


def _bodies(messages):
    return Counter(m["Body"] for m in messages)


def _use(deployment, sqs):
    deployment.runtime.client = lambda service, **kwargs: sqs if service == "sqs" else boto3.client(service, **kwargs)


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
    # GIVEN 400 /resize and 100 /email dead letters, and an SQS that refuses the 20th send whole and fails one
    # entry of the 30th
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


# -- a message too large for its reason: its reason record belongs to it, and is never work ------------------------


def test_redrive_moves_a_message_too_large_for_its_reason_and_deletes_its_reason_records(deployment):
    # GIVEN a message too large to carry its reason, dead-lettered twice over (two reason records, one message: the
    # worker's first send of the message failed after its record went out), and an ordinary dead letter
    big = "B" * 2_000
    first = deployment.too_large_dead_letter("/big", NonRetryableError("too big"), big, "src-1", attempts=3)
    deployment.sqs.send_message(**first[0])  # the repeated attempt's record
    deployment.dead_letter("/small", RuntimeError("flaky"), "s1")
    # WHEN the NonRetryableErrors are redriven (the record carries the big message's error type)
    report = parsed(deployment.run("redrive", "--error", "NonRetryableError", "--json"))
    # THEN the big message, and only it, is back as work: no reason record reached the work queue
    assert [m["Body"] for m in deployment.drain(deployment.queue_url)] == [big]
    assert (report["moved"], report["skipped"], report["reason_records_deleted"]) == (1, 1, 2)
    # AND its records left the DLQ with it; the other dead letter stayed
    assert _bodies(deployment.drain(deployment.dlq_url)) == Counter({"s1": 1})


def test_redrive_joins_a_reason_record_read_after_its_message(deployment):
    # GIVEN a message too large for its reason whose record the DLQ hands out after it, 15 dead letters later
    big = "B" * 2_000
    sends = deployment.too_large_dead_letter("/big", NonRetryableError("too big"), big, "src-1")
    deployment.sqs.purge_queue(QueueUrl=deployment.dlq_url)
    deployment.sqs.send_message(**sends[1])
    for n in range(15):
        deployment.dead_letter("/other", RuntimeError("x"), f"o{n}")
    deployment.sqs.send_message(**sends[0])
    # WHEN the NonRetryableErrors are redriven
    report = parsed(deployment.run("redrive", "--error", "NonRetryableError", "--json"))
    # THEN the message is moved once its record is read, and the record deleted; nothing else moved
    assert [m["Body"] for m in deployment.drain(deployment.queue_url)] == [big]
    assert (report["moved"], report["skipped"], report["reason_records_deleted"]) == (1, 15, 1)
    assert deployment.depth(deployment.dlq_url) == 15


def test_redrive_keeps_the_reason_record_of_a_message_it_does_not_move(deployment):
    # GIVEN a message too large for its reason, on /big
    deployment.too_large_dead_letter("/big", NonRetryableError("too big"), "B" * 2_000, "src-1")
    # WHEN another path is redriven
    report = parsed(deployment.run("redrive", "--path", "/other", "--json"))
    # THEN both stay in the DLQ, the record named as kept, and nothing became work
    assert (report["moved"], report["skipped"], len(report["reason_records_kept"])) == (0, 1, 1)
    assert deployment.depth(deployment.queue_url) == 0 and deployment.depth(deployment.dlq_url) == 2


# -- a fresh start: no failure history travels back --------------------------------------------------------------


def test_redrive_sends_a_message_back_without_its_failure_history(deployment):
    # GIVEN a dead letter that carried a rescheduled retry's history: earlier receives and its first receive
    deployment.dead_letter("/a", RuntimeError("x"), "a1", attributes={
        contract.ATTEMPTS_ATTRIBUTE: "4", contract.FIRST_RECEIVED_ATTRIBUTE: "1763800000000", "tenant": "acme"})
    # WHEN it is redriven
    parsed(deployment.run("redrive", "--path", "/a", "--json"))
    # THEN it is back with its own attributes only: no reason, no attempts, no first receive
    [moved] = deployment.drain(deployment.queue_url)
    assert set(moved["MessageAttributes"]) == {contract.PATH_ATTRIBUTE, "tenant"}


# -- every stop: nothing sent twice, and what may have been sent is named ------------------------------------------


class InterruptedSQS(StrictSQS):
    """StrictSQS where a Ctrl-C (a real SIGINT to this process) arrives during DeleteMessageBatch call ``at``,
    and ``fail_at`` makes that call fail as SQS's error instead. It keeps every delete's receipt handles, so a test
    can make the messages visible again as their visibility timeout ending would (moto's clock is the real one)."""

    def __init__(self, inner, interrupt_at: int | None = None, fail_at: int | None = None) -> None:
        super().__init__(inner)
        self.deletes, self.interrupt_at, self.fail_at = 0, interrupt_at, fail_at
        self.handles: list[str] = []

    def delete_message_batch(self, QueueUrl, Entries, **rest):
        self.deletes += 1
        self.handles += [e["ReceiptHandle"] for e in Entries]
        if self.deletes == self.interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)
        if self.deletes == self.fail_at:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "DeleteMessageBatch")
        return self.inner.delete_message_batch(QueueUrl=QueueUrl, Entries=Entries, **rest)


@pytest.fixture
def sigint_raises():
    """Ctrl-C as in a terminal (KeyboardInterrupt), whatever the test runner set; restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _visible_again(deployment, handles):
    """The visibility timeout of every message handled so far ends now (the rerun comes later)."""
    for n in range(0, len(handles), 10):
        deployment.sqs.change_message_visibility_batch(QueueUrl=deployment.dlq_url, Entries=[
            {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0} for i, h in enumerate(handles[n:n + 10])])


def _stopped_then_rerun(deployment, **stop) -> tuple[Any, dict]:
    """``redrive --path /a`` stopped as ``stop`` says (InterruptedSQS), then run again on a plain client once the
    DLQ's visibility timeouts have passed: the first run's result and the second's JSON."""
    stopping = InterruptedSQS(boto3.client("sqs", region_name="us-east-1"), **stop)
    _use(deployment, stopping)
    first = deployment.run("redrive", "--path", "/a", "--json")
    _visible_again(deployment, stopping.handles)
    _use(deployment, StrictSQS(boto3.client("sqs", region_name="us-east-1")))
    return first, parsed(deployment.run("redrive", "--path", "/a", "--json"))


def test_redrive_interrupted_during_a_delete_then_run_again_moves_each_message_once(deployment, sigint_raises):
    # GIVEN 30 dead letters, and a Ctrl-C during the second DeleteMessageBatch
    for n in range(30):
        deployment.dead_letter("/a", NonRetryableError("bad"), f"a{n}")
    # WHEN redrive runs, is interrupted, and runs again once the DLQ's visibility timeouts have passed
    first, second = _stopped_then_rerun(deployment, interrupt_at=2)
    # THEN between the two runs every message went to the work queue exactly once, and the DLQ is empty
    assert _bodies(deployment.drain(deployment.queue_url)) == Counter({f"a{n}": 1 for n in range(30)})
    assert deployment.depth(deployment.dlq_url) == 0 and second["already_sent"] == []
    # AND the first run finished the batch in hand, said it was interrupted, and exited 130
    assert first.exit_code == 130, first.output
    assert json.loads(first.stdout)["stopped"] == "interrupted (Ctrl-C)"


def test_redrive_run_again_after_a_failed_delete_deletes_what_was_sent_without_sending_it_again(deployment):
    # GIVEN 30 dead letters, and SQS failing the second DeleteMessageBatch
    for n in range(30):
        deployment.dead_letter("/a", NonRetryableError("bad"), f"a{n}")
    # WHEN redrive runs, and again once the DLQ's visibility timeouts have passed
    first, second = _stopped_then_rerun(deployment, fail_at=2)
    # THEN every message is in the work queue once, none left in the DLQ
    assert _bodies(deployment.drain(deployment.queue_url)) == Counter({f"a{n}": 1 for n in range(30)})
    assert deployment.depth(deployment.dlq_url) == 0
    # AND the first named the 10 it sent and could not delete; the second deleted exactly those, unsent
    not_deleted = json.loads(first.stdout)["not_deleted"]
    assert first.exit_code == 1 and len(not_deleted) == 10
    assert sorted(second["already_sent"]) == sorted(not_deleted) and second["moved"] == 0


class LostThenRefusedSQS(StrictSQS):
    """StrictSQS whose first SendMessageBatch is accepted but its answer lost (a read timeout), and whose second
    ReceiveMessage of the DLQ is refused (AccessDenied): a run that stops on an error after a lost answer."""

    def __init__(self, inner, deployment) -> None:
        super().__init__(inner)
        self.deployment, self.sends, self.receives = deployment, 0, 0

    def send_message_batch(self, QueueUrl, Entries, **rest):
        response = super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries, **rest)
        self.sends += 1
        if self.sends == 1:
            raise ReadTimeoutError(endpoint_url=QueueUrl)
        return response

    def receive_message(self, **request):
        if request["QueueUrl"] == self.deployment.dlq_url:
            self.receives += 1
            if self.receives == 2:
                raise ClientError({"Error": {"Code": "AccessDenied", "Message": "injected"}}, "ReceiveMessage")
        return self.inner.receive_message(**request)


def test_redrive_that_stops_on_an_error_names_what_may_have_been_sent_and_a_rerun_leaves_them(deployment):
    # GIVEN 15 dead letters: the first batch's send answer is lost, then the DLQ refuses a receive
    for n in range(15):
        deployment.dead_letter("/a", NonRetryableError("bad"), f"a{n}")
    _use(deployment, LostThenRefusedSQS(boto3.client("sqs", region_name="us-east-1"), deployment))
    # WHEN redrive runs (as text)
    text = deployment.run("redrive", "--path", "/a")
    # THEN it printed its counts, why it stopped, and the ids of the 10 possibly sent
    assert text.exit_code == 1, text.output
    assert text.stdout == "moved 0, skipped 0, failed 0\n"
    assert "stopped before the end: ClientError: An error occurred (AccessDenied)" in text.stderr
    possibly = text.stderr.split("--resend-possibly-sent: ")[1].split("\n")[0].split(", ")
    assert len(possibly) == 10
    # AND a rerun (JSON) leaves those 10 in the DLQ, names them again, and moves only the other 5
    _use(deployment, StrictSQS(boto3.client("sqs", region_name="us-east-1")))
    rerun = deployment.run("redrive", "--path", "/a", "--json")
    report = json.loads(rerun.stdout)
    assert rerun.exit_code == 1 and sorted(report["possibly_sent"]) == sorted(possibly) and report["moved"] == 5
    assert _bodies(deployment.drain(deployment.queue_url)) == Counter({f"a{n}": 1 for n in range(15)})
    assert deployment.depth(deployment.dlq_url) == 10


def test_redrive_whose_journal_cannot_be_written_still_moves_everything_and_says_so(deployment, tmp_path):
    # GIVEN dead letters, and a state directory that is a file (the journal cannot be written)
    for n in range(3):
        deployment.dead_letter("/a", NonRetryableError("bad"), f"a{n}")
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    deployment.runtime.state_dir = blocker
    # WHEN redrive runs
    report = parsed(deployment.run("redrive", "--path", "/a", "--json"))
    # THEN every message moved once, and the report says the journal was not written
    assert report["moved"] == 3 and deployment.depth(deployment.dlq_url) == 0
    assert any(e.startswith(f"redrive journal {blocker}/redrive-") and "not written" in e for e in report["errors"])


def test_redrive_with_an_unreadable_journal_refuses_to_run_and_names_it(deployment, tmp_path):
    # GIVEN a dead letter, and a journal file that is not JSON
    deployment.dead_letter("/a", NonRetryableError("bad"), "a1")
    deployment.runtime.state_dir = tmp_path
    Journal.for_queue(tmp_path, deployment.dlq_url).path.write_text("{half")
    # WHEN redrive runs  THEN it stops before moving anything, naming the file and what to do
    result = deployment.run("redrive", "--path", "/a")
    assert result.exit_code == 1 and deployment.depth(deployment.dlq_url) == 1
    assert f"redrive journal {tmp_path}/redrive-" in result.stderr
    assert "it names messages an earlier redrive sent; repair it, or move it away once you have checked the work queue" in result.stderr


def test_redrive_whose_send_answer_is_lost_sends_it_once_names_it_and_a_rerun_leaves_it(lossy):
    # GIVEN a dead letter, and a connection that loses the answer of the first SendMessageBatch (SQS has sent it)
    message_id = lossy.dead_letter("/a", "a1")
    lossy.proxy.lose["SendMessageBatch"] = 1
    # WHEN redrive runs with boto3's own client (and its default retries)
    first = lossy.run("redrive", "--path", "/a", "--json")
    # THEN the batch was sent once, never retried, and the run names the message possibly sent and exits 1
    assert lossy.proxy.calls.count("SendMessageBatch") == 1, lossy.proxy.events
    report = json.loads(first.stdout)
    assert first.exit_code == 1 and report["possibly_sent"] == [message_id] and report["moved"] == 0
    # AND a rerun leaves it in the DLQ and names it again: the work queue holds one copy
    rerun = json.loads(lossy.run("redrive", "--path", "/a", "--json").stdout)
    assert rerun["possibly_sent"] == [message_id] and rerun["moved"] == 0
    assert lossy.bodies(lossy.queue_url) == ["a1"] and lossy.bodies(lossy.dlq_url) == ["a1"]


def test_redrive_whose_send_fails_with_a_server_error_names_it_possibly_sent_not_failed(lossy):
    # GIVEN a dead letter, and SQS answering the first SendMessageBatch 500 InternalError
    message_id = lossy.dead_letter("/a", "a1")
    lossy.proxy.fail["SendMessageBatch"] = 1
    # WHEN redrive runs
    first = lossy.run("redrive", "--path", "/a")
    # THEN it is named possibly sent (a 5xx may come after SQS acted), with the error, and not retried
    assert first.exit_code == 1 and first.stdout == "moved 0, skipped 0, failed 0\n"
    assert f"--resend-possibly-sent: {message_id}" in first.stderr and "InternalError" in first.stderr
    assert lossy.proxy.events == ["500 for SendMessageBatch"]
    # AND a rerun leaves it; one told to resend it moves it
    assert json.loads(lossy.run("redrive", "--path", "/a", "--json").stdout)["possibly_sent"] == [message_id]
    resent = lossy.run("redrive", "--path", "/a", "--resend-possibly-sent", "--json")
    assert parsed(resent)["moved"] == 1 and lossy.bodies(lossy.queue_url) == ["a1"]


class DoubleInterruptSQS(StrictSQS):
    """StrictSQS where two Ctrl-C (real SIGINTs to this process) arrive once SendMessageBatch has reached SQS,
    before its answer is read: the second stops the run at once, inside the send."""

    def send_message_batch(self, QueueUrl, Entries, **rest):
        response = super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries, **rest)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        return response


def test_redrive_stopped_by_a_second_ctrl_c_during_a_send_names_it_and_a_rerun_does_not_send_it_again(
        deployment, sigint_raises):
    # GIVEN a dead letter, and two Ctrl-C while its SendMessageBatch is in flight
    message_id = deployment.dead_letter("/a", NonRetryableError("bad"), "a1")
    _use(deployment, DoubleInterruptSQS(boto3.client("sqs", region_name="us-east-1")))
    # WHEN redrive runs, and runs again
    first = deployment.run("redrive", "--path", "/a", "--json")
    _use(deployment, StrictSQS(boto3.client("sqs", region_name="us-east-1")))
    rerun = deployment.run("redrive", "--path", "/a", "--json")
    # THEN the first stopped at once, naming it possibly sent; the rerun left it in the DLQ and named it again
    assert first.exit_code == 130, first.output
    assert json.loads(first.stdout)["possibly_sent"] == [message_id]
    assert json.loads(rerun.stdout)["possibly_sent"] == [message_id] and json.loads(rerun.stdout)["moved"] == 0
    assert _bodies(deployment.drain(deployment.queue_url)) == Counter({"a1": 1})
    assert deployment.depth(deployment.dlq_url) == 1


def _delay_pointer(deployment, path: str) -> str:
    """The DLQ entry the delay path writes when the DLQ refuses a delayed message's full copy
    (``worker_tier.delays.delivery.Delivery._pointer``, the writer itself), sent to the DLQ; its message id."""
    delayed = DelayedMessage(message_id="m-1", due_ms=1_800_000_000_000, body='{"video": 1}',
                             attributes={contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": path}})
    delivery = Delivery(None, deployment.dlq_url, "delays", clock=NOW.timestamp)
    entry = delivery._pointer(delayed, delivery._reason(RuntimeError("too large"), path), "MessageTooLong")
    sent = deployment.sqs.send_message(QueueUrl=deployment.dlq_url, MessageBody=entry["MessageBody"],
                                       MessageAttributes=entry["MessageAttributes"])
    return str(sent["MessageId"])


def test_redrive_never_sends_a_delay_pointer_as_work_and_says_where_its_message_is(deployment):
    # GIVEN a /transcode dead letter, and the delay path's pointer to a /transcode message kept in its delay table
    deployment.dead_letter("/transcode", NonRetryableError("bad"), "t1")
    pointer_id = _delay_pointer(deployment, "/transcode")
    # WHEN redrive --path /transcode runs
    result = deployment.run("redrive", "--path", "/transcode")
    # THEN the dead letter moved, the pointer stayed in the DLQ, and the run said why and exits 1
    assert result.exit_code == 1 and result.stdout == "moved 1, skipped 0, failed 0\n"
    assert (f"{pointer_id}: a pointer to a delayed message, not a task body: the message is in delay table delays "
            "(pk ") in result.stderr and "; left in the DLQ, not sent" in result.stderr
    assert [m["Body"] for m in deployment.drain(deployment.queue_url)] == ["t1"]
    assert [m["MessageId"] for m in deployment.drain(deployment.dlq_url)] == [pointer_id]


class InterruptedAtStartSQS(StrictSQS):
    """StrictSQS where a Ctrl-C (a real SIGINT) arrives during the first GetQueueAttributes: the start's wait for
    SQS's clock to tick, before anything is received."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.interrupted = False

    def get_queue_attributes(self, **request):
        if not self.interrupted:
            self.interrupted = True
            os.kill(os.getpid(), signal.SIGINT)
        return self.inner.get_queue_attributes(**request)


def test_redrive_interrupted_while_it_waits_to_start_prints_its_report_and_moves_nothing(deployment, sigint_raises):
    # GIVEN a dead letter, and a Ctrl-C while the start waits for SQS's clock
    deployment.dead_letter("/a", NonRetryableError("bad"), "a1")
    _use(deployment, InterruptedAtStartSQS(boto3.client("sqs", region_name="us-east-1")))
    # WHEN redrive runs
    result = deployment.run("redrive", "--path", "/a", "--json")
    # THEN it printed its report, stopped by the interrupt, moved nothing, and exited 130 (not "Aborted!")
    assert result.exit_code == 130 and "Aborted" not in result.output
    report = json.loads(result.stdout)
    assert (report["stopped"], report["moved"]) == ("interrupted (Ctrl-C)", 0)
    assert deployment.depth(deployment.dlq_url) == 1 and deployment.depth(deployment.queue_url) == 0


class MoveTaskSQS(StrictSQS):
    """StrictSQS with SQS's move task as its API reference describes it (StartMessageMoveTask answers a TaskHandle;
    ListMessageMoveTasks answers Results with Status RUNNING), which moto lacks; a Ctrl-C (a real SIGINT) arrives
    during the first ListMessageMoveTasks."""

    def start_message_move_task(self, SourceArn, DestinationArn, **rest):
        return {"TaskHandle": "task-handle-1"}

    def list_message_move_tasks(self, SourceArn, MaxResults=1):
        os.kill(os.getpid(), signal.SIGINT)
        return {"Results": [{"TaskHandle": "task-handle-1", "Status": "RUNNING", "SourceArn": SourceArn,
                             "ApproximateNumberOfMessagesMoved": 0, "ApproximateNumberOfMessagesToMove": 1}]}


def test_redrive_move_task_interrupted_says_it_keeps_running_on_sqs_and_names_its_handle(deployment, sigint_raises):
    # GIVEN a dead letter, and an SQS with a move task, interrupted while it is followed
    deployment.dead_letter("/a", NonRetryableError("bad"), "a1")
    _use(deployment, MoveTaskSQS(boto3.client("sqs", region_name="us-east-1")))
    # WHEN redrive runs without a filter
    result = deployment.run("redrive", "--json")
    # THEN it says the task keeps running on the SQS side, names its handle and how to stop it, and exits 130
    assert result.exit_code == 130 and "Aborted" not in result.output
    assert ("stopped following the move task; it keeps running on the SQS side (task handle task-handle-1): "
            "aws sqs list-message-move-tasks to follow it, aws sqs cancel-message-move-task --task-handle "
            "task-handle-1 to stop it") in result.stderr


def test_redrive_on_a_fifo_dlq_names_the_groups_its_skipped_messages_block(deployment):
    # GIVEN FIFO queues, and in one message group 10 /b dead letters ahead of a /a one
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    work = deployment.sqs.create_queue(QueueName="work.fifo", Attributes=fifo)["QueueUrl"]
    dlq = deployment.sqs.create_queue(QueueName="dlq.fifo", Attributes=fifo)["QueueUrl"]
    reason = message.failure_reason(NonRetryableError("bad"), attempts=3, path="/b", failed_at=NOW)
    for n, path in enumerate(["/b"] * 10 + ["/a"]):
        deployment.sqs.send_message(QueueUrl=dlq, MessageBody=f"{path}-{n}", MessageGroupId="tenant-1",
                                    MessageAttributes=envelope.dead_letter_attributes(
                                        {contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": path}},
                                        {**reason, "path": path}))
    deployment.queue_url, deployment.dlq_url = work, dlq
    # WHEN redrive --path /a runs
    result = deployment.run("redrive", "--path", "/a")
    # THEN it says the group is blocked by what it skipped, and what to do
    assert "moved 0, skipped 10, failed 0" in result.stdout
    assert ("FIFO message groups held by messages this run left in the DLQ (skipped by the filter, failed or kept): "
            "tenant-1; SQS hands out no later message of a group while one is in flight") in result.stderr


def test_redrive_moves_every_dead_letter_even_when_bodies_repeat(deployment):
    # GIVEN 30 dead letters that were all in the DLQ before the redrive began, with the same path and body
    # (a poison ping task: body "{}"), 30 distinct SQS messages
    for _ in range(30):
        deployment.dead_letter("/ping", NonRetryableError("bad"), "{}")
    # WHEN redrive --path /ping runs
    report = parsed(deployment.run("redrive", "--path", "/ping", "--json"))
    # THEN all 30 moved (none was dead-lettered after the run began)
    assert (report["moved"], report["arrived"]) == (30, 0)
    assert deployment.depth(deployment.dlq_url) == 0


class LostResponseSQS(StrictSQS):
    """SQS accepts the SendMessageBatch, but its response is lost (a read timeout): the client sees an error."""

    def __init__(self, inner, queue_url) -> None:
        super().__init__(inner)
        self.queue_url, self.calls = queue_url, 0

    def send_message_batch(self, QueueUrl, Entries, **rest):
        response = super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries, **rest)
        if QueueUrl == self.queue_url:
            self.calls += 1
            if self.calls == 1:
                raise ReadTimeoutError(endpoint_url=QueueUrl)
        return response


def test_redrive_send_whose_response_is_lost_does_not_duplicate_silently(deployment):
    # GIVEN 5 dead letters, and SQS whose first SendMessageBatch to the work queue succeeds but the response is lost
    for n in range(5):
        deployment.dead_letter("/a", NonRetryableError("bad"), f"a{n}")
    _use(deployment, LostResponseSQS(boto3.client("sqs", region_name="us-east-1"), deployment.queue_url))
    # WHEN redrive --path /a runs
    result = deployment.run("redrive", "--path", "/a", "--json")
    report = json.loads(result.stdout)
    work, dead = _bodies(deployment.drain(deployment.queue_url)), deployment.drain(deployment.dlq_url)
    # THEN no message is in both queues, or at least the report names them as possibly sent (not merely "failed"),
    # by the message id of the copy left in the DLQ
    both = {m["MessageId"] for m in dead if m["Body"] in work}
    assert both and set(report["possibly_sent"]) >= both and report["failed"] == 0, (report, work, dead)
    assert result.exit_code == 1


def test_redrive_of_a_message_that_had_ten_attributes_brings_them_all_back_or_says_so(deployment):
    # GIVEN a message that carried path + 9 user attributes (SQS's 10): dead-lettering it with the reason drops one
    users = {f"a{n}": f"v{n}" for n in range(9)}
    deployment.dead_letter("/full", NonRetryableError("bad"), "f1", attributes=users)
    # WHEN it is redriven
    result = deployment.run("redrive", "--path", "/full", "--json")
    report = parsed(result)
    [moved] = deployment.drain(deployment.queue_url)
    back = set(moved.get("MessageAttributes", {}))
    # THEN every original attribute is back, or the report names the ones that are gone (the reason that named them is removed)
    missing = set(users) - back
    assert not missing or any(name in json.dumps(report) for name in missing), (missing, report)


class DiesDuringRedrive(StrictSQS):
    """A live worker: during the redrive's first send, a message that was sent to the work queue before the redrive
    began reaches maxReceiveCount and SQS itself moves it to the DLQ (keeping its original SentTimestamp)."""

    def __init__(self, inner, deployment) -> None:
        super().__init__(inner)
        self.deployment, self.done = deployment, False

    def send_message_batch(self, QueueUrl, Entries, **rest):
        if QueueUrl == self.deployment.queue_url and not self.done:
            self.done = True
            raw = self.deployment.sqs
            for _ in range(3):  # received, not deleted, again: over maxReceiveCount, SQS dead-letters it
                raw.receive_message(QueueUrl=QueueUrl, MaxNumberOfMessages=10, VisibilityTimeout=0)
        return super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries, **rest)


def test_redrive_never_moves_a_message_dead_lettered_after_it_began(deployment):
    sqs = deployment.sqs
    arn = sqs.get_queue_attributes(QueueUrl=deployment.dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.set_queue_attributes(QueueUrl=deployment.queue_url, Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "1"})})
    # GIVEN a dead letter, and a message in the work queue (sent before the redrive begins) that will die during it
    deployment.dead_letter("/a", NonRetryableError("bad"), "old")
    sqs.send_message(QueueUrl=deployment.queue_url, MessageBody="late",
                     MessageAttributes={contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/a"}})
    _use(deployment, DiesDuringRedrive(boto3.client("sqs", region_name="us-east-1"), deployment))
    # WHEN redrive --path /a runs
    report = json.loads(deployment.run("redrive", "--path", "/a", "--json").stdout)
    dead = _bodies(deployment.drain(deployment.dlq_url))
    # THEN "late", dead-lettered after the redrive began, was not moved: it is still in the DLQ
    assert dead.get("late") == 1, (report, dead)


def test_redrive_against_the_local_environment_runs_a_move_task_quietly(tmp_path, capfd):
    # GIVEN the local environment (its moto server) with three dead letters, the DLQ its work queue's
    from click.testing import CliRunner

    from worker_tier.core.settings import Settings
    from worker_tier_cli import cli
    from worker_tier_cli.session import Runtime
    from worker_tier_local import LocalEnvironment
    from worker_tier_local.environment import LOCAL_REGION

    with LocalEnvironment(Settings()) as env:
        for n in range(3):
            original = {contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/poison"}}
            reason = message.failure_reason(NonRetryableError(f"bad {n}"), attempts=3, path="/poison", failed_at=NOW)
            env.sqs.send_message(QueueUrl=env.dead_letter_queue_url, MessageBody=f"b{n}",
                                 MessageAttributes=envelope.dead_letter_attributes(original, reason))
        given = ["--endpoint-url", env.endpoint_url, "--region", LOCAL_REGION, "--queue-url", env.queue_url,
                 "--dlq-url", env.dead_letter_queue_url]
        runtime = Runtime(interactive=lambda: False, wait_seconds=0, state_dir=tmp_path, sleep=lambda seconds: None)
        # WHEN an unfiltered redrive runs
        result = CliRunner().invoke(cli, [*given, "redrive", "--json"], obj=runtime)
        # THEN SQS's move task (answered by the local environment) moved all three, as they were, to the work queue
        assert result.exit_code == 0, result.output
        shown = json.loads(result.stdout)
        assert shown["method"] == "move_task" and MOVE_TASK_FALLBACK_NOTE not in result.stderr
        assert (shown["task"]["Status"], shown["task"]["ApproximateNumberOfMessagesMoved"]) == ("COMPLETED", 3)
        moved = env.sqs.receive_message(QueueUrl=env.queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
        assert sorted(m["Body"] for m in moved["Messages"]) == ["b0", "b1", "b2"]
        assert all(contract.FAILURE_ATTRIBUTE in m["MessageAttributes"] for m in moved["Messages"])
        assert env.queue_depth(env.dead_letter_queue_url) == 0
    # AND nothing was printed to the terminal running the environment: no traceback of moto's
    assert "Traceback" not in capfd.readouterr().err
