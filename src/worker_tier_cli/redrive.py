"""Moving dead letters back to the work queue: one batch at a time, or by SQS's own move task.

The batch move never loses a message. For each batch it receives from the DLQ, it sends the matching
messages to the work queue (body and attributes, without ``dead_letters.REDRIVE_DROPPED_ATTRIBUTES``, so the
receive count starts again), and deletes from the DLQ only those whose send succeeded. A message that does not match
is skipped; one whose send failed is counted failed and stays in the DLQ. Both are held (not received
again) until the move ends, then released. A delete that fails after its send leaves that message in
both queues: it is counted in ``not_deleted`` and named, so it can be removed by hand.

A run moves only what was in the DLQ when it began (see ``arrived_since``): beside a live worker that
dead-letters the moved messages again, it ends rather than moving them round and round, and it moves every
message that was there, however many share a body.

A SendMessageBatch is never retried (botocore's retries would send again a batch whose answer was lost). One whose
answer is lost (a timeout, a dropped connection, a 5xx, a second Ctrl-C) may or may not have sent its messages: they stay in the DLQ and are named in ``possibly_sent``, never counted as merely failed; check the
work queue before moving them again. An attribute the worker dropped when it dead-lettered a message (SQS's
10-attribute quota, named in the reason's ``dropped_attributes``) cannot be restored, as the reason keeps only
its name: each such message is named in ``attributes_lost`` with the names.

A delay pointer (``DeadLetter.points_to``: the delay path's DLQ entry naming a delay-table item whose message
the DLQ refused) is not a task body: it is never sent, stays in the DLQ, and is named in ``delay_pointers_kept``.

A reason record (``worker_tier.worker.dead_letter``: the reason of a message too large to carry it) is never sent: it
joins its message (``dead_letters.RecordShelf``; read before or after it), whose match it decides, and is deleted
with it when it moves.

A Ctrl-C waits for the batch in hand; an error ends the run. Either way what it held is released and the report
returned with ``stopped``. The ``Journal`` keeps, on this machine, the ids of each batch sent before its delete is
asked for, and those whose send's answer was lost: a rerun deletes the first without sending them again, and
leaves the second in the DLQ, named, unless told to resend them.

Without a filter, ``start_move_task`` asks SQS to move everything (StartMessageMoveTask) and
``follow_move_task`` polls it to the end; the local environment (moto) has no move task, so the command
falls back to the batch move.

On a FIFO DLQ the held messages block their message groups until the move ends (SQS returns no later
message of a group with one in flight), so one run moves what it can reach: the report names those groups
(``fifo_groups_blocked``), as a rerun with the same filter reads the same messages again.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Callable

from botocore.config import Config
from botocore.exceptions import ClientError

from worker_tier.core import contract, limits
from worker_tier.core.aws import outcome_unknown
from worker_tier.core.priority import PriorityQueues
from worker_tier.core.errors import WorkerTierError
from worker_tier.core.retry import batches, chunks
from worker_tier_cli.dead_letters import RECEIVE_WAIT_SECONDS, DeadLetter, Filter, RecordShelf, receive, release

MOVE_VISIBILITY_SECONDS = 300  # a batch is sent and deleted well within this; held ones are released at the end
MOVE_TASK_POLL_SECONDS = 2.0
MOVE_TASK_DONE = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
TICK_POLL_SECONDS = 0.05  # how often the start reads SQS's Date header, waiting for its second to change
MAX_TICK_POLLS = 30  # 1.5 s of polls: a second must have ended by then
INTERRUPTED = "interrupted (Ctrl-C)"
DEFERRED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
# The client config of redrive's SendMessageBatch: one attempt. botocore's retries would send again a batch whose
# answer was lost (or failed 5xx after SQS acted): a silent duplicate, and no ``possibly_sent``.
NO_RETRIES = Config(retries={"total_max_attempts": 1})
JOURNAL_KEEP_SECONDS = 14 * 24 * 3600  # SQS's longest retention: a journaled message is gone from the DLQ by then
POINTER_NOTE = ("a pointer to a delayed message, not a task body: the message is in delay table {delay_table} "
                "(pk {pk}, sk {sk}) until its TTL; send it from there, then delete the pointer")
FIFO_BLOCKED_NOTE = ("FIFO message groups held by messages this run left in the DLQ (skipped by the filter, failed "
                     "or kept): {groups}; SQS hands out no later message of a group while one is in flight, so "
                     "matching messages behind them were not reached: move or delete those first (a redrive "
                     "without a filter moves them all), then run again")


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
    # Sent by an earlier run that stopped before deleting them (the journal): deleted now, not sent again.
    already_sent: list[str] = field(default_factory=list)
    # Message id -> the attributes its dead-lettering dropped (by name only): moved without them.
    attributes_lost: dict[str, list[str]] = field(default_factory=dict)
    # Reason records deleted with their moved message, and those left in the DLQ (their message stayed, or was
    # not seen). A reason record is never sent to the work queue.
    reason_records_deleted: int = 0
    reason_records_kept: list[str] = field(default_factory=list)
    # Delay pointers that matched (``DeadLetter.points_to``): not task bodies, never sent; left in the DLQ.
    delay_pointers_kept: list[dict[str, str]] = field(default_factory=list)
    # On a FIFO DLQ, the message groups of the messages it held to the end (skipped, failed, kept): SQS hands out
    # no later message of a group while one is in flight, so matching messages behind them were not reached.
    fifo_groups_blocked: list[str] = field(default_factory=list)
    # Dead letters in flight at the end, held by another reader (a DLQ page, dlq list): not reached by this run.
    in_flight: int = 0
    errors: list[str] = field(default_factory=list)
    # Why the run ended before the DLQ was done ("interrupted (Ctrl-C)", or the error); "" when it went to the end.
    stopped: str = ""


class Journal:
    """The DLQ message ids this machine's redrives sent whose delete is not confirmed (``SENT``), and those whose
    SendMessageBatch answer was lost (``UNSURE``), so a rerun after any stop sends none of them twice.

    One JSON file per DLQ under ``directory``, written (to a temporary file, then renamed) before each send (its ids
    ``UNSURE``), after it (``SENT``) and after each delete: whenever the run stops, what it may have sent is on disk. An entry is forgotten once its
    message is deleted, or after SQS's longest retention (14 days). Without a directory (the benchmark) it
    lives in memory only. Another machine has its own journal: a rerun there cannot know.
    """

    SENT = "sent"
    UNSURE = "unsure"

    def __init__(self, path: Path | None, clock: Callable[[], float] = time.time) -> None:
        self.path, self.clock = path, clock
        self.entries: dict[str, dict[str, Any]] = {}
        self.problems: list[str] = []
        if path is not None and path.exists():
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as error:
                raise JournalError(f"redrive journal {path} is unreadable ({error}): it names messages an earlier "
                                   "redrive sent; repair it, or move it away once you have checked the work queue") from None
            oldest = clock() - JOURNAL_KEEP_SECONDS
            self.entries = {k: v for k, v in loaded.items() if isinstance(v, dict) and v.get("at", 0) >= oldest}

    @classmethod
    def for_queue(cls, directory: Path | None, dlq_url: str, clock: Callable[[], float] = time.time) -> Journal:
        name = hashlib.sha256(dlq_url.encode("utf-8")).hexdigest()[:16]
        return cls(directory / f"redrive-{name}.json" if directory is not None else None, clock)

    def kind(self, message_id: str) -> str | None:
        entry = self.entries.get(message_id)
        return str(entry["kind"]) if entry else None

    def mark(self, kind: str, message_ids: list[str]) -> None:
        if message_ids:
            self.entries.update((i, {"kind": kind, "at": self.clock()}) for i in message_ids)
            self._save()

    def forget(self, message_ids: list[str]) -> None:
        if any(i in self.entries for i in message_ids):
            for i in message_ids:
                self.entries.pop(i, None)
            self._save()

    def _save(self) -> None:
        """Write the journal; a write that fails (a full disk) is kept in ``problems`` and never stops a delete."""
        if self.path is None:
            return
        try:
            self._write(self.path)
        except OSError as error:
            self.problems.append(f"redrive journal {self.path} not written ({error}): a rerun on this machine may "
                                 "send again what this run could not delete")

    def _write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        with temporary.open("w", encoding="utf-8") as out:
            json.dump(self.entries, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)


class JournalError(WorkerTierError):
    """The redrive journal cannot be read: running without it could send its messages twice."""


@contextmanager
def interrupts_deferred(notice: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT), SIGTERM or SIGHUP until the block ends, then raise KeyboardInterrupt: a batch received
    is sent, deleted and journaled whole. A second one stops at once (the journal already names what may have been
    sent). Outside the main thread (no signals) a no-op."""
    caught: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        if caught:
            raise KeyboardInterrupt
        caught.append(signum)
        notice()

    try:
        previous = {signum: signal.signal(signum, hold) for signum in DEFERRED_SIGNALS}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if caught:
        raise KeyboardInterrupt


def move_batches(sqs: Any, dlq_url: str, queue_url: str, which: Filter,
                 wait_seconds: int = RECEIVE_WAIT_SECONDS,
                 progress: Callable[[MoveReport], None] = lambda report: None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 journal: Journal | None = None, resend_possibly_sent: bool = False,
                 on_interrupt: Callable[[], None] = lambda: None, send_sqs: Any = None,
                 levels: PriorityQueues | None = None) -> MoveReport:
    """Move the dead letters ``which`` matches, one received batch at a time; see the module docstring.

    ``levels``: the work queue's priority levels (``worker_tier.core.priority``); each message goes back to its
    level's queue, by its ``worker_tier.priority`` attribute (``queue_url`` is the normal level's).

    ``send_sqs``, when given, makes the SendMessageBatch calls: it must not retry (``NO_RETRIES``), as a retry
    after a lost answer sends the batch twice and hides that the first may have been sent.

    Only those in the DLQ when it began: one dead-lettered since (``arrived_since``) is held and counted in
    ``arrived``, so a redrive beside a worker that dead-letters the moved messages again moves each once and ends.
    A Ctrl-C or an error ends the run after the batch in hand (``stopped``); the report is returned either way.
    """
    move = _Move(sqs, dlq_url, queue_url, which, journal or Journal(None, clock), resend_possibly_sent, send_sqs)
    move.levels = levels
    try:
        started_ms = server_start_ms(sqs, dlq_url, clock, sleep)  # a Ctrl-C here stops before anything is received
        while True:
            with interrupts_deferred(on_interrupt):
                if not move.batch(receive(sqs, dlq_url, MOVE_VISIBILITY_SECONDS, wait_seconds), started_ms):
                    move.report.in_flight = in_flight(sqs, dlq_url) - len(move.held)
                    return move.report
            progress(move.report)
    except KeyboardInterrupt:
        move.report.stopped = INTERRUPTED
    except Exception as error:  # an AWS or network error: stop, release, and say what may have been sent
        move.report.stopped = f"{type(error).__name__}: {error}"
    finally:
        move.report.reason_records_kept = [m.message_id for m in move.held.values() if m.describes is not None]
        if dlq_url.endswith(".fifo"):
            move.report.fifo_groups_blocked = sorted({m.system["MessageGroupId"] for m in move.held.values()
                                                      if m.system.get("MessageGroupId")})
        move.report.errors.extend(dict.fromkeys(move.journal.problems))
        release(sqs, dlq_url, list(move.held.values()))
    return move.report


class _Move:
    """One redrive's state between batches: what it holds, the reason records not yet joined, the journal."""

    def __init__(self, sqs: Any, dlq_url: str, queue_url: str, which: Filter, journal: Journal,
                 resend_possibly_sent: bool, send_sqs: Any = None) -> None:
        self.send_sqs = send_sqs or sqs  # SendMessageBatch only: a client that never retries (see move_batches)
        self.sqs, self.dlq_url, self.queue_url, self.which, self.journal = sqs, dlq_url, queue_url, which, journal
        self.resend_possibly_sent, self.fifo = resend_possibly_sent, queue_url.endswith(".fifo")
        self.report = MoveReport()
        self.held: dict[str, DeadLetter] = {}  # received and not deleted: released at the end
        self.shelf = RecordShelf()  # reason records not yet joined to a message
        self.unjoined: dict[str, list[DeadLetter]] = {}  # skipped without a reason: a later record may join them
        self.moved_unjoined: Counter[str] = Counter()  # moved without a record: a later record of theirs is deleted
        self.levels: PriorityQueues | None = None  # with priorities, each message back to its level's queue

    def batch(self, received: list[DeadLetter], started_ms: int) -> bool:
        """Handle one receive; False when it brought nothing new (the DLQ is done)."""
        fresh = [m for m in received if m.message_id not in self.held]
        if not fresh:
            return False
        self.held.update((m.message_id, m) for m in fresh)
        arrived = {m.message_id for m in fresh if arrived_since(m, started_ms)}
        self.report.arrived += sum(1 for m in fresh if m.message_id in arrived and m.describes is None)
        present = [m for m in fresh if m.message_id not in arrived]
        records = [m for m in present if m.describes is not None]
        letters = [m for m in present if m.describes is None]
        for record in records:
            self.shelf.add(record)
        deletable = self._records_of_moved({r.describes[0] for r in records if r.describes})
        revived = self._revived({r.describes[0] for r in records if r.describes})
        sent_before = [m for m in letters if self.journal.kind(m.message_id) == Journal.SENT]
        unsure = [m for m in letters if self.journal.kind(m.message_id) == Journal.UNSURE and not self.resend_possibly_sent]
        self.report.possibly_sent.extend(m.message_id for m in unsure)
        rest = [self._joined(m) for m in letters if m not in sent_before and m not in unsure]
        matching = [m for m in [*revived, *rest] if self.which.matches(m)]
        skipped = [m for m in rest if m not in matching]
        self.report.skipped += len(skipped) - sum(1 for m in revived if m in matching)
        for letter in skipped:
            if not letter.carries_reason and not letter.records:
                self.unjoined.setdefault(letter.body_md5, []).append(letter)
        sent_before = [self._joined(m) for m in sent_before]
        self.report.already_sent.extend(m.message_id for m in sent_before)
        self._delete([*sent_before, *(r for m in sent_before for r in m.records), *deletable])
        pointers = [m for m in matching if m.points_to is not None]
        self.report.delay_pointers_kept.extend({"message_id": m.message_id, **(m.points_to or {})} for m in pointers)
        self._move([m for m in matching if m.points_to is None])
        return True

    def _joined(self, letter: DeadLetter) -> DeadLetter:
        records = [] if letter.carries_reason else self.shelf.take(letter.body_md5)
        return letter.joined(records) if records else letter

    def _records_of_moved(self, md5s: set[str]) -> list[DeadLetter]:
        """Records just read whose message this run moved before they were read: deleted, not kept."""
        found: list[DeadLetter] = []
        for md5 in md5s:
            while self.moved_unjoined[md5] > 0 and self.shelf.has(md5):
                found += self.shelf.take(md5)
                self.moved_unjoined[md5] -= 1
        return found

    def _revived(self, md5s: set[str]) -> list[DeadLetter]:
        """Messages skipped for want of their reason whose record has now been read: joined, judged again."""
        revived: list[DeadLetter] = []
        for md5 in md5s:
            waiting = self.unjoined.get(md5) or []
            while waiting and self.shelf.has(md5):
                revived.append(waiting.pop(0).joined(self.shelf.take(md5)))
        return revived

    def _batches(self, letters: list[DeadLetter]) -> Iterator[tuple[str, list[DeadLetter]]]:
        """Each SendMessageBatch's queue and letters: one level's at a time (the work queue's without priorities)."""
        for queue_url, level_letters in _by_level(letters, self.levels, self.queue_url).items():
            for batch in _send_batches(level_letters):
                yield queue_url, batch

    def _move(self, letters: list[DeadLetter]) -> None:
        """Send ``letters`` to the work queue; delete those sent, with their reason records, from the DLQ.

        Each batch's ids are journaled ``UNSURE`` before it is sent and ``SENT`` once SQS says so, so a stop at any
        point (a second Ctrl-C, a kill) leaves on disk what may have been sent. Only a clear refusal (SQS answered
        4xx: nothing was processed) or an entry SQS names as failed is counted failed and forgotten; any other end
        of the call (no answer, a 5xx, an interrupt) names the batch in ``possibly_sent``.
        """
        for queue_url, batch in self._batches(letters):
            by_id = {str(i): letter for i, letter in enumerate(batch)}
            ids = [m.message_id for m in batch]
            self.journal.mark(Journal.UNSURE, ids)
            try:
                response = self.send_sqs.send_message_batch(QueueUrl=queue_url,
                                                            Entries=[_entry(i, m, self.fifo) for i, m in by_id.items()])
            except ClientError as error:
                self.report.errors.append(f"SendMessageBatch: {error}")
                if not outcome_unknown(error):  # SQS answered 4xx, refusing the call: nothing of this batch was sent
                    self.journal.forget(ids)
                    self.report.failed += len(batch)
                else:  # a server error: SQS may have sent them before it failed; held, and named as possibly sent
                    self.report.possibly_sent.extend(ids)
                continue
            except Exception as error:  # no answer: SQS may have sent them; held, and named as possibly sent
                self.report.errors.append(f"SendMessageBatch: {error}")
                self.report.possibly_sent.extend(ids)
                continue
            except BaseException:  # a second Ctrl-C during the send: the journal already names them
                self.report.possibly_sent.extend(ids)
                raise
            failed = response.get("Failed") or []
            self.report.errors.extend(f"{by_id[e['Id']].message_id}: {e.get('Code')}: {e.get('Message')}" for e in failed)
            self.report.failed += len(failed)
            sent = [by_id[s["Id"]] for s in response.get("Successful") or []]
            self.journal.mark(Journal.SENT, [m.message_id for m in sent])
            self.journal.forget([by_id[e["Id"]].message_id for e in failed])
            self.report.moved += len(sent)
            self.report.attributes_lost.update((m.message_id, m.dropped_attributes) for m in sent if m.dropped_attributes)
            for letter in sent:
                if not letter.carries_reason and not letter.records:
                    self.moved_unjoined[letter.body_md5] += 1
            self._delete([*sent, *(r for m in sent for r in m.records)])

    def _delete(self, letters: list[DeadLetter]) -> None:
        """Delete ``letters`` from the DLQ; a message SQS does not delete is named in ``not_deleted`` (and stays
        in the journal, so a rerun deletes it rather than send it again)."""
        for batch in chunks(letters, limits.SQS_MAX_BATCH_ENTRIES):
            entries = [{"Id": str(i), "ReceiptHandle": m.receipt_handle} for i, m in enumerate(batch)]
            try:
                response = self.sqs.delete_message_batch(QueueUrl=self.dlq_url, Entries=entries)
                refused = {int(f["Id"]) for f in response.get("Failed") or []}
            except Exception as error:
                self.report.errors.append(f"DeleteMessageBatch: {error}")
                refused = set(range(len(batch)))
            deleted = [m for i, m in enumerate(batch) if i not in refused]
            for letter in deleted:
                self.held.pop(letter.message_id, None)
            self.journal.forget([m.message_id for m in deleted])
            self.report.reason_records_deleted += sum(1 for m in deleted if m.describes is not None)
            self.report.not_deleted.extend(m.message_id for i, m in enumerate(batch) if i in refused and m.describes is None)


def priority_levels(target: Any, queue_url: str) -> PriorityQueues:
    """The work queue's priority levels as ``target`` (a ``worker_tier_cli.target.Target``) names them; not
    ``enabled`` without the priorities setting's queues."""
    return PriorityQueues(queue_url, **{level: url for level, field in contract.PRIORITY_QUEUE_FIELDS.items()
                                        if (url := target.optional(field))})


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


def _send_batches(letters: list[DeadLetter]) -> Iterator[list[DeadLetter]]:
    """``letters`` in SendMessageBatch calls: at most 10 entries and SQS's 1 MiB in all (each fits alone)."""
    return batches(letters, lambda letter: letter.redriven().size(),
                   max_count=limits.SQS_MAX_BATCH_ENTRIES, max_bytes=limits.SQS_MAX_MESSAGE_BYTES)


def _by_level(letters: list[DeadLetter], levels: PriorityQueues | None, default: str) -> dict[str, list[DeadLetter]]:
    """The letters grouped by the queue each goes back to: its priority level's, or ``default``."""
    grouped: dict[str, list[DeadLetter]] = {}
    for letter in letters:
        url = default if levels is None else levels.url_for(letter.attributes)
        grouped.setdefault(url, []).append(letter)
    return grouped


def _entry(entry_id: str, letter: DeadLetter, fifo: bool) -> dict[str, Any]:
    """A SendMessageBatch entry: the body and the attributes a redrive keeps; on FIFO, its group and a stable dedupe id."""
    if fifo:
        group_id = letter.system.get("MessageGroupId", letter.message_id)
        return letter.redriven().entry(entry_id, MessageGroupId=group_id, MessageDeduplicationId=letter.message_id)
    return letter.redriven().entry(entry_id)


def queue_arn(sqs: Any, queue_url: str) -> str:
    """A queue's ARN (GetQueueAttributes)."""
    return str(sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def start_move_task(sqs: Any, dlq_url: str, queue_url: str, rate: int | None = None) -> str:
    """StartMessageMoveTask from the DLQ to the work queue; its task handle."""
    request: dict[str, Any] = {"SourceArn": queue_arn(sqs, dlq_url), "DestinationArn": queue_arn(sqs, queue_url)}
    if rate is not None:
        request["MaxNumberOfMessagesPerSecond"] = rate
    return str(sqs.start_message_move_task(**request)["TaskHandle"])


def running_move_task(sqs: Any, dlq_url: str) -> dict[str, Any] | None:
    """The DLQ's move task still running, if ListMessageMoveTasks answers and shows one; else None."""
    try:
        tasks = sqs.list_message_move_tasks(SourceArn=queue_arn(sqs, dlq_url), MaxResults=1).get("Results") or []
    except Exception:  # an endpoint without move tasks (moto's server answers 500): nothing can be running
        return None
    return next((dict(t) for t in tasks if t.get("Status") in ("RUNNING", "CANCELLING")), None)


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


def counts_line(report: MoveReport) -> str:
    """The report's counts as one line: moved, skipped, failed (and arrived)."""
    arrived = f" ({report.arrived} dead-lettered since it began: left for the next run)" if report.arrived else ""
    return f"moved {report.moved}, skipped {report.skipped}, failed {report.failed}{arrived}"


def in_flight(sqs: Any, dlq_url: str) -> int:
    """The DLQ's messages in flight now (ApproximateNumberOfMessagesNotVisible); 0 when it cannot be read."""
    try:
        attributes = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])
        return int(attributes["Attributes"]["ApproximateNumberOfMessagesNotVisible"])
    except Exception:  # the count is a note; the run's own report stands without it
        return 0


def report_notes(report: MoveReport) -> list[str]:
    """Everything else a person must know of a run: why it stopped, errors, and each message left or at risk."""
    notes = []
    if report.in_flight > 0:
        notes.append(f"about {report.in_flight} dead letters left in the DLQ unread: in flight when it ended, held by "
                     "another reader (a DLQ page, dlq list); run it again once they are visible (up to 5 minutes)")
    if report.stopped:
        notes.append(f"stopped before the end: {report.stopped}; what it had received is released, and a rerun "
                     "moves the rest (nothing it sent is sent again)")
    notes += [f"  {error}" for error in report.errors[:10]]
    if report.not_deleted:
        notes.append("sent but still in the DLQ (a rerun on this machine deletes them without sending them again): "
                     f"{', '.join(report.not_deleted)}")
    if report.already_sent:
        notes.append(f"sent by an earlier run that stopped, deleted now: {', '.join(report.already_sent)}")
    if report.possibly_sent:
        notes.append("possibly sent (SQS's answer was lost; still in the DLQ, and a rerun leaves them there): check the "
                     "work queue, then delete them or rerun with --resend-possibly-sent: "
                     f"{', '.join(report.possibly_sent)}")
    notes += [f"{pointer['message_id']}: {POINTER_NOTE.format(**pointer)}; left in the DLQ, not sent"
              for pointer in report.delay_pointers_kept]
    if report.fifo_groups_blocked:
        notes.append(FIFO_BLOCKED_NOTE.format(groups=", ".join(report.fifo_groups_blocked)))
    if report.reason_records_kept:
        notes.append(f"reason records left in the DLQ with their message (or without one read): "
                     f"{', '.join(report.reason_records_kept)}")
    notes += [f"{message_id}: moved without {', '.join(names)}: dropped when it was dead-lettered (SQS's "
              "10-attribute quota); the reason kept only their names, so they cannot be restored"
              for message_id, names in report.attributes_lost.items()]
    return notes
