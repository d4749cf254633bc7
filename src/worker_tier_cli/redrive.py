"""Moving dead letters back to the work queue: one batch at a time, or by SQS's own move task.

The batch move never loses a message. For each batch it receives from the DLQ, it sends the matching
messages to the work queue (body and attributes, without ``worker_tier.failure``, so the receive count
starts again), and deletes from the DLQ only those whose send succeeded. A message that does not match
is skipped; one whose send failed is counted failed and stays in the DLQ. Both are held (not received
again) until the move ends, then released. A delete that fails after its send leaves that message in
both queues: it is counted in ``not_deleted`` and named, so it can be removed by hand.

A run moves only what was in the DLQ when it began, each body once (see ``move_batches``): beside a
live worker that dead-letters the moved messages again, it ends rather than moving them round and round.

Without a filter, ``start_move_task`` asks SQS to move everything (StartMessageMoveTask) and
``follow_move_task`` polls it to the end; the local environment (moto) has no move task, so the command
falls back to the batch move.

On a FIFO DLQ the held messages block their message groups until the move ends (SQS returns no later
message of a group with one in flight), so one run moves what it can reach; run it again for the rest.
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from dataclasses import dataclass, field
from collections.abc import Iterator
from typing import Any, Callable

from worker_tier import limits, message
from worker_tier.retry import batches
from worker_tier_cli.dead_letters import RECEIVE_WAIT_SECONDS, DeadLetter, Filter, receive, release

MOVE_VISIBILITY_SECONDS = 300  # a batch is sent and deleted well within this; held ones are released at the end
MOVE_TASK_POLL_SECONDS = 2.0
MOVE_TASK_DONE = frozenset({"COMPLETED", "FAILED", "CANCELLED"})


@dataclass
class MoveReport:
    """What a redrive did: moved, skipped (not matching), failed (send refused), arrived, and any not deleted."""

    moved: int = 0
    skipped: int = 0
    failed: int = 0
    # Left for the next run: dead-lettered after the move began (SentTimestamp), or the same body and path as
    # one this run moved (a worker beside it dead-lettered the moved message again within the same second).
    arrived: int = 0
    not_deleted: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def move_batches(sqs: Any, dlq_url: str, queue_url: str, which: Filter,
                 wait_seconds: int = RECEIVE_WAIT_SECONDS,
                 progress: Callable[[MoveReport], None] = lambda report: None,
                 clock: Callable[[], float] = time.time) -> MoveReport:
    """Move the dead letters ``which`` matches, one received batch at a time; see the module docstring.

    Only those in the DLQ when it began, each body once: a message dead-lettered since (SQS's SentTimestamp
    after the start, by SQS's own clock, to the second) or one with the body and path of a message this run
    moved is held and counted in ``arrived``, so a redrive beside a worker that dead-letters the moved
    messages again moves each once and ends, instead of moving them round and round.
    """
    report = MoveReport()
    held: dict[str, DeadLetter] = {}
    fifo = queue_url.endswith(".fifo")
    started_ms = server_time_ms(sqs, dlq_url, clock)
    moved: set[tuple[str, str]] = set()
    try:
        while True:
            fresh = [m for m in receive(sqs, dlq_url, MOVE_VISIBILITY_SECONDS, wait_seconds) if m.message_id not in held]
            if not fresh:
                return report
            arrived = [m for m in fresh if int(m.system.get("SentTimestamp", 0)) > started_ms or (m.path, m.body) in moved]
            matching = [m for m in fresh if m not in arrived and which.matches(m)]
            skipped = [m for m in fresh if m not in matching and m not in arrived]
            report.skipped, report.arrived = report.skipped + len(skipped), report.arrived + len(arrived)
            held.update((m.message_id, m) for m in [*skipped, *arrived])
            failures = _move(sqs, dlq_url, queue_url, matching, fifo, report)
            for failed in failures:
                held[failed.message_id] = failed
            moved.update((m.path, m.body) for m in matching if m not in failures)
            progress(report)
    finally:
        release(sqs, dlq_url, list(held.values()))


def server_time_ms(sqs: Any, queue_url: str, clock: Callable[[], float] = time.time) -> int:
    """SQS's clock now, from a response's Date header (whole seconds, so the end of that second); else ``clock``."""
    response = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    date = (response.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("date")
    try:
        return int(parsedate_to_datetime(date).timestamp()) * 1000 + 999 if date else int(clock() * 1000)
    except (TypeError, ValueError):
        return int(clock() * 1000)


def _move(sqs: Any, dlq_url: str, queue_url: str, letters: list[DeadLetter], fifo: bool,
          report: MoveReport) -> list[DeadLetter]:
    """Send ``letters`` to the work queue, delete those sent; return those whose send failed."""
    failed: list[DeadLetter] = []
    for batch in _send_batches(letters):
        by_id = {str(i): letter for i, letter in enumerate(batch)}
        try:
            response = sqs.send_message_batch(QueueUrl=queue_url, Entries=[_entry(i, m, fifo) for i, m in by_id.items()])
        except Exception as error:  # the whole call failed: nothing of this batch was sent
            report.errors.append(f"SendMessageBatch: {error}")
            failed.extend(batch)
            continue
        for entry in response.get("Failed") or []:
            report.errors.append(f"{by_id[entry['Id']].message_id}: {entry.get('Code')}: {entry.get('Message')}")
            failed.append(by_id[entry["Id"]])
        _delete(sqs, dlq_url, [by_id[s["Id"]] for s in response.get("Successful") or []], report)
    report.failed += len(failed)
    return failed


def _send_batches(letters: list[DeadLetter]) -> Iterator[list[DeadLetter]]:
    """``letters`` in SendMessageBatch calls: at most 10 entries and SQS's 1 MiB in all (each fits alone)."""
    return batches(letters, lambda letter: message.message_bytes(letter.body, letter.original_attributes()),
                   max_count=limits.SQS_MAX_BATCH_ENTRIES, max_bytes=limits.SQS_MAX_MESSAGE_BYTES)


def _entry(entry_id: str, letter: DeadLetter, fifo: bool) -> dict[str, Any]:
    """A SendMessageBatch entry: the body and the original attributes; on FIFO, its group and a stable dedupe id."""
    entry: dict[str, Any] = {"Id": entry_id, "MessageBody": letter.body, "MessageAttributes": letter.original_attributes()}
    if fifo:
        entry["MessageGroupId"] = letter.system.get("MessageGroupId", letter.message_id)
        entry["MessageDeduplicationId"] = letter.message_id
    return entry


def _delete(sqs: Any, dlq_url: str, sent: list[DeadLetter], report: MoveReport) -> None:
    """Delete what was sent from the DLQ; what SQS does not delete is named in ``not_deleted``."""
    report.moved += len(sent)
    if not sent:
        return
    entries = [{"Id": str(i), "ReceiptHandle": m.receipt_handle} for i, m in enumerate(sent)]
    try:
        failed = [sent[int(f["Id"])] for f in sqs.delete_message_batch(QueueUrl=dlq_url, Entries=entries).get("Failed") or []]
    except Exception as error:
        report.errors.append(f"DeleteMessageBatch: {error}")
        failed = sent
    report.not_deleted.extend(m.message_id for m in failed)


def queue_arn(sqs: Any, queue_url: str) -> str:
    """A queue's ARN (GetQueueAttributes)."""
    return str(sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def start_move_task(sqs: Any, dlq_url: str, queue_url: str, rate: int | None = None) -> str:
    """StartMessageMoveTask from the DLQ to the work queue; its task handle."""
    request: dict[str, Any] = {"SourceArn": queue_arn(sqs, dlq_url), "DestinationArn": queue_arn(sqs, queue_url)}
    if rate is not None:
        request["MaxNumberOfMessagesPerSecond"] = rate
    return str(sqs.start_message_move_task(**request)["TaskHandle"])


def follow_move_task(sqs: Any, dlq_url: str, task_handle: str, sleep: Callable[[float], None] = time.sleep,
                     progress: Callable[[dict[str, Any]], None] = lambda task: None) -> dict[str, Any]:
    """Poll ListMessageMoveTasks until the task ends; its last state."""
    source = queue_arn(sqs, dlq_url)
    while True:
        tasks = sqs.list_message_move_tasks(SourceArn=source, MaxResults=10).get("Results") or []
        task = next((t for t in tasks if t.get("TaskHandle") == task_handle), tasks[0] if tasks else {})
        progress(task)
        if task.get("Status") in MOVE_TASK_DONE or not task:
            return dict(task)
        sleep(MOVE_TASK_POLL_SECONDS)
