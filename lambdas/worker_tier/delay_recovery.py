"""The delay table's safety net: from the table's stream, deliver every message the scheduler could have missed.

The scheduler (``worker_tier.scheduler``) reads each minute of the delay table once,
in order, from its watermark. Two kinds of item can escape that read:

- a **late write** (issue #8, item 6): an item stored in a minute the scheduler had
  already started reading, because the producer's clock was more than
  ``delay.MAX_CLOCK_SKEW_SECONDS`` behind;
- an **expired** item (item 2): deleted by the table's TTL
  (``delay.DISPATCHED_RETENTION_SECONDS`` after it was due) before the scheduler read
  it, because the scheduler was stopped or stuck on one minute for longer than that.

The table's stream (NEW_AND_OLD_IMAGES) carries both: the INSERT holds the new item,
the TTL's REMOVE the old one. The event source mapping passes only those two events
of message items (``b#...``; see ``infra/delay_recovery.py``), and ``DelayRecovery``
decides each from the scheduler's state, read once per batch: the watermark ``W``
(first minute not fully dispatched) with its per-shard cursors (how far each shard
of ``W`` is dispatched), and the record of each minute ``m`` concerned, which the
scheduler writes before its first Query of ``m`` (``started_ms``) and, when it
passes ``m``, completes (``finished_ms``). ``t`` is the record's stream time;
``CLOCK_TOLERANCE_SECONDS`` covers the stream's whole-second timestamps and the
scheduler's clock skew.

- INSERT, ``m > W``, or ``m = W`` with no record of ``m``: skip; the scheduler reads ``m`` later.
- INSERT, ``m <= W``, ``m`` first queried after ``t + tolerance``: skip; that Query saw it.
- INSERT, otherwise: **send now**, a late write (``late_writes``).
- REMOVE, ``m > W``, or ``m = W`` past its shard's cursor: **send now** (``recovered_from_ttl``);
  the scheduler has not read it, and no longer can.
- REMOVE, ``m = W`` up to its shard's cursor: skip; dispatched.
- REMOVE, ``m < W``, ``m`` finished (or, without ``finished_ms``, first queried) before
  ``t - tolerance``: skip; the scheduler read the item while it existed.
- REMOVE, otherwise (no record of ``m``, or ``m`` read after the deletion): **send now**.

Every doubtful case sends, so a doubt costs a duplicate, never a loss. A message
sent here goes to the work queue as the scheduler sends it (attributes plus
``worker_tier.due_at``, ``DelaySeconds`` = ceil(due - now) in 0..900), so it is
never early. A record that cannot be read, or a message SQS refuses for a sender
fault, goes to the work queue's DLQ with a ``worker_tier.failure`` reason. Anything
transient stops the batch at the first record not done; the handler reports it as
the batch item failure, and Lambda retries from there.

``finished_ms`` matters for one case: a minute the scheduler began before the TTL
deleted one of its items and finished after (a stuck minute that thawed, resumed
from its cursors, and never saw the item). A record without it (written before the
scheduler stamped it) falls back to ``started_ms``, which takes such an item as
dispatched.

The guarantee, and its assumption: no message is lost to the TTL or to a late
write **provided this function processes each stream record within the stream's
24-hour retention** (``DYNAMODB_STREAM_RETENTION_SECONDS``) (records older than that are trimmed by DynamoDB). The
event source mapping retries for ``infra.delay_recovery.STREAM_MAX_RECORD_AGE_SECONDS``,
then names the batch in its failure queue (alarmed), leaving the rest of the 24 h
to replay it; the IteratorAge alarm fires long before.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

from worker_tier import delay, limits, message, sqs_rules
from worker_tier.aws import LazyClient
from worker_tier.delay import DelayedMessage
from worker_tier.idempotency import STATE_TABLE_PARTITION_KEY
from worker_tier.scheduler import (
    BUCKET_ATTRIBUTE,
    CURSORS_ATTRIBUTE,
    FINISHED_MS_ATTRIBUTE,
    STARTED_MS_ATTRIBUTE,
    WATERMARK_KEY,
    _with_due_at,
    minute_key,
)

INSERT, REMOVE = "INSERT", "REMOVE"
# A TTL deletion is made by DynamoDB itself:
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/time-to-live-ttl-streams.html
TTL_PRINCIPAL = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
MESSAGE_KEY_PREFIX = "b#"
# ApproximateCreationDateTime is whole seconds; the scheduler's clock may be off by half the skew budget.
STREAM_TIME_RESOLUTION_SECONDS = 1
CLOCK_TOLERANCE_SECONDS = STREAM_TIME_RESOLUTION_SECONDS + delay.MAX_CLOCK_SKEW_SECONDS // 2
DYNAMODB_STREAM_RETENTION_SECONDS = limits.DYNAMODB_STREAM_RETENTION_SECONDS
# About 11 s of backoff before a batch stops: this also paces Lambda's retries of a failing batch.
MAX_SEND_ATTEMPTS = 8
RETRY_BASE_SECONDS = 0.1
RETRY_CAP_SECONDS = 5.0
MAX_DEAD_LETTER_BODY_HEAD_BYTES = 1024


class StreamRecordError(Exception):
    """A stream record of the delay table that cannot be read as a message; ``record_text`` is the record as JSON."""

    def __init__(self, text: str, record_text: str, event_id: str = "") -> None:
        super().__init__(text)
        self.record_text = record_text
        self.event_id = event_id


class SendRefusedError(Exception):
    """SQS refused a recovered message for a sender fault: it can never be sent as it is."""


class _StoppedError(Exception):
    """SQS kept failing transiently; ``position`` is the first record not done."""

    def __init__(self, position: int) -> None:
        super().__init__(position)
        self.position = position


@dataclass(frozen=True)
class StreamEvent:
    """An INSERT or TTL REMOVE of one message item."""

    kind: str
    message: DelayedMessage
    bucket: int
    shard: int
    sort_key: str
    at_s: float  # the record's ApproximateCreationDateTime


@dataclass
class RecoveryReport:
    """What one batch did; ``failed_sequence_number`` is where Lambda must retry from, if anywhere."""

    records: int = 0
    skipped: int = 0
    late_writes: int = 0
    recovered_from_ttl: int = 0
    dead_lettered: int = 0
    failed_sequence_number: str | None = None

    def count(self, counter: str) -> None:
        """Add one to the named counter."""
        setattr(self, counter, getattr(self, counter) + 1)


@dataclass
class SchedulerState:
    """What the scheduler has read: its watermark (None before its first run), that minute's cursors, minute records."""

    watermark: int | None
    cursors: Mapping[int, str] = field(default_factory=dict)
    minutes: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)

    def needs_minute_record(self, event: StreamEvent) -> bool:
        """Whether deciding ``event`` needs the scheduler's record of its minute."""
        if self.watermark is None:
            return False
        return event.bucket <= self.watermark if event.kind == INSERT else event.bucket < self.watermark

    def insert_was_missed(self, event: StreamEvent) -> bool:
        """Whether the scheduler may have read this insert's minute before the insert."""
        if self.watermark is None or event.bucket > self.watermark:
            return False
        minute = self.minutes.get(event.bucket)
        if minute is None:  # the watermark's minute has no record until its first Query: not read yet
            return event.bucket < self.watermark
        started_s = _seconds(minute, STARTED_MS_ATTRIBUTE)
        return started_s is None or started_s <= event.at_s + CLOCK_TOLERANCE_SECONDS

    def expiry_was_undispatched(self, event: StreamEvent) -> bool:
        """Whether the TTL may have deleted this item before the scheduler read it."""
        if self.watermark is None or event.bucket > self.watermark:
            return True
        if event.bucket == self.watermark:  # the minute in progress: dispatched up to each shard's cursor
            cursor = self.cursors.get(event.shard)
            return cursor is None or event.sort_key > cursor
        minute = self.minutes.get(event.bucket)
        read_s = _seconds(minute, FINISHED_MS_ATTRIBUTE)
        if read_s is None:
            read_s = _seconds(minute, STARTED_MS_ATTRIBUTE)
        return read_s is None or read_s >= event.at_s - CLOCK_TOLERANCE_SECONDS


@dataclass
class _Action:
    """One record's fate, in stream order: send ``message``, or dead-letter ``body`` with ``error``."""

    position: int
    message: DelayedMessage | None = None
    counter: str = ""
    body: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    message_id: str = ""
    kept: str = ""  # where the item is, for a pointer message


def read_record(record: Mapping[str, Any]) -> StreamEvent | None:
    """The message event in one stream record; None for anything else; StreamRecordError if unreadable."""
    try:
        kind = record.get("eventName")
        change = record["dynamodb"]
        pk = change["Keys"][delay.PK]["S"]
        if not pk.startswith(MESSAGE_KEY_PREFIX) or not _concerns_safety_net(kind, record.get("userIdentity")):
            return None
        image = change["NewImage"] if kind == INSERT else change["OldImage"]
        _, bucket, shard = pk.split("#")
        return StreamEvent(kind, DelayedMessage.from_item(image), int(bucket), int(shard), change["Keys"][delay.SK]["S"],
                           float(change["ApproximateCreationDateTime"]))
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as error:
        name = record.get("eventID") if isinstance(record, Mapping) else None
        raise StreamRecordError(
            f"stream record {name!r} is not a readable delay-table message: {type(error).__name__}: {error} "
            "(an INSERT needs dynamodb.NewImage, a REMOVE dynamodb.OldImage, with id, due_ms, body and attributes)",
            json.dumps(record, ensure_ascii=True, default=str, sort_keys=True),
            str(name or ""),
        ) from error


def _concerns_safety_net(kind: Any, identity: Any) -> bool:
    """INSERTs, and REMOVEs made by the TTL (a user's delete is not a loss)."""
    return kind == INSERT or (kind == REMOVE and isinstance(identity, Mapping)
                              and all(identity.get(k) == v for k, v in TTL_PRINCIPAL.items()))


class DelayRecovery:
    """Sends to the work queue what the scheduler could have missed; see the module docstring.

    Examples
    --------
    >>> recovery = DelayRecovery("state", "https://sqs/work", "https://sqs/dlq", sqs=sqs, dynamodb=dynamodb)  # doctest: +SKIP
    >>> recovery.process(event["Records"]).failed_sequence_number is None  # doctest: +SKIP
    True
    """

    def __init__(
        self,
        state_table: str,
        queue_url: str,
        dead_letter_queue_url: str,
        *,
        sqs: Any = None,
        dynamodb: Any = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.state_table = state_table
        self.queue_url = queue_url
        self.dead_letter_queue_url = dead_letter_queue_url
        self._sqs = LazyClient("sqs", sqs)
        self._dynamodb = LazyClient("dynamodb", dynamodb)
        self._clock = clock
        self._sleep = sleep

    def process(self, records: Sequence[Mapping[str, Any]]) -> RecoveryReport:
        """Decide and carry out every record's fate, in stream order; transient state-table errors raise."""
        report = RecoveryReport(records=len(records))
        actions = self._decide(records, report)
        try:
            self._carry_out(actions, report)
        except _StoppedError as stopped:
            report.failed_sequence_number = _sequence_number(records[stopped.position])
        return report

    # -- deciding -------------------------------------------------------------------------------

    def _decide(self, records: Sequence[Mapping[str, Any]], report: RecoveryReport) -> list[_Action]:
        """Each record's action; skipped records have none."""
        events: list[tuple[int, StreamEvent | StreamRecordError]] = []
        for position, record in enumerate(records):
            try:
                event = read_record(record)
            except StreamRecordError as error:
                events.append((position, error))
                continue
            if event is None:
                report.skipped += 1
            else:
                events.append((position, event))
        readable = [event for _, event in events if isinstance(event, StreamEvent)]
        state = self._read_state(readable) if readable else SchedulerState(None)
        return [a for a in (self._action(p, e, state, report) for p, e in events) if a is not None]

    def _action(self, position: int, event: StreamEvent | StreamRecordError, state: SchedulerState,
                report: RecoveryReport) -> _Action | None:
        if isinstance(event, StreamRecordError):
            return _Action(position, body=event.record_text, error=event, message_id=event.event_id,
                           kept="in no readable form but this record")
        if event.kind == INSERT and state.insert_was_missed(event):
            return _Action(position, message=event.message, counter="late_writes")
        if event.kind == REMOVE and state.expiry_was_undispatched(event):
            return _Action(position, message=event.message, counter="recovered_from_ttl")
        report.skipped += 1
        return None

    def _read_state(self, events: list[StreamEvent]) -> SchedulerState:
        """The watermark and its cursors (consistent read), then the minute records the events need."""
        item = self._dynamodb.get().get_item(
            TableName=self.state_table, Key={STATE_TABLE_PARTITION_KEY: {"S": WATERMARK_KEY}}, ConsistentRead=True
        ).get("Item")
        if item is None:
            return SchedulerState(None)
        cursors = {int(shard): value["S"] for shard, value in item.get(CURSORS_ATTRIBUTE, {}).get("M", {}).items()}
        state = SchedulerState(int(item[BUCKET_ATTRIBUTE]["N"]), cursors)
        state.minutes = self._read_minutes({e.bucket for e in events if state.needs_minute_record(e)})
        return state

    def _read_minutes(self, buckets: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The minute records of ``buckets`` (one consistent GetItem each); absent ones are left out.

        GetItem rather than BatchGetItem: no role may batch-read the shared state table
        (tests/infra/test_stack.py). A batch needs few: only late writes and expiries
        behind the watermark need one, and a batch of expiries spans the few minutes
        that expired together.
        """
        found: dict[int, dict[str, Any]] = {}
        for bucket in sorted(buckets):
            item = self._dynamodb.get().get_item(
                TableName=self.state_table, Key={STATE_TABLE_PARTITION_KEY: {"S": minute_key(bucket)}}, ConsistentRead=True
            ).get("Item")
            if item is not None:
                found[bucket] = item
        return found

    # -- carrying out ---------------------------------------------------------------------------

    def _carry_out(self, actions: list[_Action], report: RecoveryReport) -> None:
        """Sends (10 per SendMessageBatch) and dead-letters, in stream order; _StoppedError at the first not done."""
        batch: list[_Action] = []
        for action in actions:
            if action.message is None:
                self._flush(batch, report)
                self._dead_letter(action, report)
            else:
                batch.append(action)
                if len(batch) == limits.SQS_MAX_BATCH_ENTRIES:
                    self._flush(batch, report)
        self._flush(batch, report)

    def _flush(self, batch: list[_Action], report: RecoveryReport) -> None:
        """Send the batch, retrying transient failures; a sender fault dead-letters that message."""
        pending = list(batch)
        batch.clear()
        for attempt in range(MAX_SEND_ATTEMPTS):
            if not pending:
                return
            if attempt:
                self._sleep(min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2 ** (attempt - 1)))
            pending, refused = self._send(pending, report)
            for index, action in enumerate(refused):
                try:
                    self._dead_letter(action, report)
                except _StoppedError as stopped:
                    raise _StoppedError(min(a.position for a in pending + refused[index:])) from stopped
        if pending:
            raise _StoppedError(min(a.position for a in pending))

    def _send(self, actions: list[_Action], report: RecoveryReport) -> tuple[list[_Action], list[_Action]]:
        """One SendMessageBatch; returns the actions to try again and the dead-letter actions for refusals."""
        now = self._clock()
        entries = [_entry(str(i), a.message, now) for i, a in enumerate(actions) if a.message is not None]
        try:
            response = self._sqs.get().send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        except Exception:  # the call itself failed (botocore already retried throttling): all again
            return actions, []
        failed = {int(f["Id"]): f for f in response.get("Failed") or []}
        retry, refused = [], []
        for index, action in enumerate(actions):
            failure = failed.get(index)
            if failure is None:
                report.count(action.counter)
            elif failure.get("SenderFault"):
                refused.append(_refused(action, failure))
            else:
                retry.append(action)
        return retry, refused

    def _dead_letter(self, action: _Action, report: RecoveryReport) -> None:
        """Send to the DLQ with its reason; if the DLQ refuses that copy, a small pointer naming it instead."""
        assert action.error is not None
        failed_at = datetime.fromtimestamp(self._clock(), timezone.utc)
        reason = message.failure_reason(action.error, attempts=0, path=_path(action.attributes), failed_at=failed_at)
        attributes, refused_attributes = _acceptable_attributes(action.attributes)
        if refused_attributes:
            reason["refused_attributes"] = refused_attributes
        copy = {"MessageBody": action.body, "MessageAttributes": message.dead_letter_attributes(attributes, reason)}
        refusal = sqs_rules.body_problem(action.body) or self._send_dead_letter(copy, action.position, quiet=True)
        if refusal:
            self._send_dead_letter(_pointer(action, reason, refusal), action.position)
        report.count("dead_lettered")

    def _send_dead_letter(self, request: dict[str, Any], position: int, quiet: bool = False) -> str | None:
        """SendMessage to the DLQ: None if taken; SQS's refusal if ``quiet`` and a sender fault; else _StoppedError."""
        try:
            self._sqs.get().send_message(QueueUrl=self.dead_letter_queue_url, **request)
            return None
        except Exception as error:
            details = getattr(error, "response", {}).get("Error", {})
            if quiet and details.get("Type") == "Sender":
                return f"{details.get('Code')}: {details.get('Message')}"
            raise _StoppedError(position) from error


def _sequence_number(record: Mapping[str, Any]) -> str:
    """Where Lambda must retry from; a record without one cannot be retried alone, so the whole batch fails."""
    try:
        return str(record["dynamodb"]["SequenceNumber"])
    except (KeyError, TypeError) as error:
        raise StreamRecordError(f"stream record {record!r:.200} has no dynamodb.SequenceNumber to retry from",
                                json.dumps(record, default=str)) from error


def _seconds(minute: Mapping[str, Any] | None, attribute: str) -> float | None:
    """An epoch-ms attribute of a minute record, in seconds; None when absent."""
    value = (minute or {}).get(attribute)
    return int(value["N"]) / 1000 if value else None


def _entry(entry_id: str, delayed: DelayedMessage, now: float) -> dict[str, Any]:
    """A SendMessageBatch entry as the scheduler sends it: never visible before it is due."""
    wait = math.ceil(delayed.due_ms / 1000 - now)
    return {
        "Id": entry_id,
        "MessageBody": delayed.body,
        "MessageAttributes": _with_due_at(delayed),
        "DelaySeconds": max(0, min(limits.SQS_MAX_DELAY_SECONDS, wait)),
    }


def _refused(action: _Action, failure: Mapping[str, Any]) -> _Action:
    """The dead-letter action for a message SQS refused."""
    delayed = action.message
    assert delayed is not None
    error = SendRefusedError(f"the work queue refused delayed message {delayed.message_id} (due {delayed.due_ms} ms) "
                             f"when the safety net sent it: {failure.get('Code')}: {failure.get('Message')}")
    kept = (f"kept in the delay table under {delay.PK} {delayed.key[delay.PK]['S']!r} and {delay.SK} "
            f"{delayed.key[delay.SK]['S']!r} until its TTL" if action.counter == "late_writes" else "already deleted by the TTL")
    return _Action(action.position, body=delayed.body, attributes=_with_due_at(delayed), error=error,
                   message_id=delayed.message_id, kept=kept)


def _pointer(action: _Action, reason: dict[str, Any], refusal: str) -> dict[str, Any]:
    """A small DLQ message naming a message whose full copy the DLQ refused, with the head of its body."""
    reason = {**reason, "copy_refused": f"the dead-letter queue refused the full copy ({refusal}); the item is {action.kept}"}
    head = action.body.encode("utf-8")[:MAX_DEAD_LETTER_BODY_HEAD_BYTES].decode("utf-8", "ignore")
    body = {"message_id": action.message_id, "reason": reason, "body_head": head}
    routing, _ = _acceptable_attributes({k: v for k, v in action.attributes.items() if k == message.PATH_ATTRIBUTE})
    return {"MessageBody": json.dumps(body, ensure_ascii=True), "MessageAttributes": message.dead_letter_attributes(routing, reason)}


def _acceptable_attributes(attributes: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The attributes SQS would accept, and for each other one, why not."""
    problems = {n: sqs_rules.attribute_name_problem(n) or sqs_rules.attribute_value_problem(n, v) for n, v in attributes.items()}
    return {n: v for n, v in attributes.items() if not problems[n]}, {n: p for n, p in problems.items() if p}


def _path(attributes: Mapping[str, Any]) -> str:
    """The message's route, for the reason."""
    value = attributes.get(message.PATH_ATTRIBUTE)
    return str(value.get("StringValue") or "") if isinstance(value, Mapping) else ""
