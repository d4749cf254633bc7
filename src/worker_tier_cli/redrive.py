"""Moving dead letters back to the work queue: one batch at a time, or by SQS's own move task.

The batch move never loses a message. For each batch it receives from the DLQ, it sends the matching
messages to the work queue (body and attributes, without ``worker_tier.failure``, so the receive count
starts again), and deletes from the DLQ only those whose send succeeded. A message that does not match
is skipped; one whose send failed is counted failed and stays in the DLQ. Both are held (not received
again) until the move ends, then released. A delete that fails after its send leaves that message in
both queues: it is counted in ``not_deleted`` and named, so it can be removed by hand.

A run moves only what was in the DLQ when it began (see ``arrived_since``): beside a live worker that
dead-letters the moved messages again, it ends rather than moving them round and round, and it moves every
message that was there, however many share a body.

A SendMessageBatch whose answer is lost (a timeout, a dropped connection) may or may not have sent its
messages: they stay in the DLQ and are named in ``possibly_sent``, never counted as merely failed; check the
work queue before moving them again. An attribute the worker dropped when it dead-lettered a message (SQS's
10-attribute quota, named in the reason's ``dropped_attributes``) cannot be restored, as the reason keeps only
its name: each such message is named in ``attributes_lost`` with the names.

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

from botocore.exceptions import ClientError

from worker_tier import limits, message
from worker_tier.retry import batches
from worker_tier_cli.dead_letters import RECEIVE_WAIT_SECONDS, DeadLetter, Filter, receive, release

MOVE_VISIBILITY_SECONDS = 300  # a batch is sent and deleted well within this; held ones are released at the end
MOVE_TASK_POLL_SECONDS = 2.0
MOVE_TASK_DONE = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
TICK_POLL_SECONDS = 0.05  # how often the start reads SQS's Date header, waiting for its second to change
MAX_TICK_POLLS = 30  # 1.5 s of polls: a second must have ended by then


@dataclass
class MoveReport:
    """What a redrive did: moved, skipped (not matching), failed (send refused), arrived, and any not deleted."""

    moved: int = 0
    skipped: int = 0
    failed: int = 0
    # Left for the next run: dead-lettered after the move began (``arrived_since``).
    arrived: int = 0
    not_deleted: list[str] = field(default_factory=list)
    # Held in the DLQ, but their SendMessageBatch's answer was lost: they may also be in the work queue.
    possibly_sent: list[str] = field(default_factory=list)
    # Message id -> the attributes its dead-lettering dropped (by name only): moved without them.
    attributes_lost: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def move_batches(sqs: Any, dlq_url: str, queue_url: str, which: Filter,
                 wait_seconds: int = RECEIVE_WAIT_SECONDS,
                 progress: Callable[[MoveReport], None] = lambda report: None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> MoveReport:
    """Move the dead letters ``which`` matches, one received batch at a time; see the module docstring.

    Only those in the DLQ when it began: one dead-lettered since (``arrived_since``) is held and counted in
    ``arrived``, so a redrive beside a worker that dead-letters the moved messages again moves each once and ends.
    """
    report = MoveReport()
    held: dict[str, DeadLetter] = {}
    fifo = queue_url.endswith(".fifo")
    started_ms = server_start_ms(sqs, dlq_url, clock, sleep)
    try:
        while True:
            fresh = [m for m in receive(sqs, dlq_url, MOVE_VISIBILITY_SECONDS, wait_seconds) if m.message_id not in held]
            if not fresh:
                return report
            arrived = [m for m in fresh if arrived_since(m, started_ms)]
            matching = [m for m in fresh if m not in arrived and which.matches(m)]
            skipped = [m for m in fresh if m not in matching and m not in arrived]
            report.skipped, report.arrived = report.skipped + len(skipped), report.arrived + len(arrived)
            held.update((m.message_id, m) for m in [*skipped, *arrived])
            for failed in _move(sqs, dlq_url, queue_url, matching, fifo, report):
                held[failed.message_id] = failed
            progress(report)
    finally:
        release(sqs, dlq_url, list(held.values()))


def arrived_since(letter: DeadLetter, started_ms: int) -> bool:
    """Whether ``letter`` reached the DLQ at or after ``started_ms`` (SQS's clock), so a run begun then leaves it.

    A message with our reason, or one never received before this run's receive (ApproximateReceiveCount 1), was
    sent to the DLQ by the worker: its SentTimestamp is when it was dead-lettered. One without a reason that was
    received before may have been moved by SQS's own redrive policy, which keeps its original SentTimestamp; it
    must have been received in the work queue before it died, so it arrived before the run only if both its
    SentTimestamp and its ApproximateFirstReceiveTimestamp are before the start. Where SQS would count this run's
    own receive as the first, such a message is left for the next run, never moved early.
    """
    sent_ms = int(letter.system.get("SentTimestamp", 0))
    if letter.reason or int(letter.system.get("ApproximateReceiveCount", 1)) <= 1:
        return sent_ms >= started_ms
    return max(sent_ms, int(letter.system.get("ApproximateFirstReceiveTimestamp", 0))) >= started_ms


def server_start_ms(sqs: Any, queue_url: str, clock: Callable[[], float] = time.time,
                    sleep: Callable[[float], None] = time.sleep) -> int:
    """A start on SQS's clock to the millisecond: the instant its Date header (whole seconds) turns to the next second.

    The run begins once that tick is seen, so every message SQS timestamped before the tick was there before it.
    Without a Date header (an endpoint that sends none), ``clock``.
    """
    first = _server_second(sqs, queue_url)
    if first is None:
        return int(clock() * 1000)
    for _ in range(MAX_TICK_POLLS):
        sleep(TICK_POLL_SECONDS)
        second = _server_second(sqs, queue_url)
        if second is not None and second > first:
            return second * 1000
    return (first + 1) * 1000


def _server_second(sqs: Any, queue_url: str) -> int | None:
    """SQS's clock now in whole seconds, from a response's Date header; None without one."""
    response = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    date = (response.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("date")
    try:
        return int(parsedate_to_datetime(date).timestamp()) if date else None
    except (TypeError, ValueError):
        return None


def _move(sqs: Any, dlq_url: str, queue_url: str, letters: list[DeadLetter], fifo: bool,
          report: MoveReport) -> list[DeadLetter]:
    """Send ``letters`` to the work queue, delete those sent; return those whose send failed."""
    failed: list[DeadLetter] = []
    unsure: list[DeadLetter] = []
    for batch in _send_batches(letters):
        by_id = {str(i): letter for i, letter in enumerate(batch)}
        try:
            response = sqs.send_message_batch(QueueUrl=queue_url, Entries=[_entry(i, m, fifo) for i, m in by_id.items()])
        except ClientError as error:  # SQS answered: the whole call was refused, nothing of this batch was sent
            report.errors.append(f"SendMessageBatch: {error}")
            failed.extend(batch)
            continue
        except Exception as error:  # no answer: SQS may have sent them; held, and named as possibly sent
            report.errors.append(f"SendMessageBatch: {error}")
            report.possibly_sent.extend(m.message_id for m in batch)
            unsure.extend(batch)
            continue
        for entry in response.get("Failed") or []:
            report.errors.append(f"{by_id[entry['Id']].message_id}: {entry.get('Code')}: {entry.get('Message')}")
            failed.append(by_id[entry["Id"]])
        _delete(sqs, dlq_url, [by_id[s["Id"]] for s in response.get("Successful") or []], report)
    report.failed += len(failed)
    return failed + unsure


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
    report.attributes_lost.update((m.message_id, m.dropped_attributes) for m in sent if m.dropped_attributes)
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
