"""The delay table's safety net: from the table's stream, deliver every message the dispatcher could have missed.

One idea, kept whole: one stream batch read, judged item by item, and each missed message delivered once.

The dispatcher (``worker_tier.delays.dispatcher``) reads each minute of the delay table once,
in order, from its watermark. Two kinds of item can escape that read:

- a **late write**: an item stored in a minute the dispatcher had
  already started reading, because the producer's clock was more than
  ``delay.MAX_CLOCK_SKEW_SECONDS`` behind;
- an **expired** item (item 2): deleted by the table's TTL
  (``delay.DISPATCHED_RETENTION_SECONDS`` after it was due) before the dispatcher read
  it, because the dispatcher was stopped or stuck on one minute for longer than that.

The table's stream (NEW_AND_OLD_IMAGES) carries both: the INSERT holds the new item,
the TTL's REMOVE the old one. The event source mapping passes only those two events
of message items (``b#...``; see ``infra/delay_recovery.py``), and ``DelayRecovery``
decides each from the dispatcher's state, read once per batch, of the shard group
that reads the record's shard (``worker_tier.delays.dispatch_state``: the layout is read
before and after, and all is read again if G changed between; a group without a
watermark of the layout's epoch stands at the layout's seed): the watermark ``W``
(first minute not fully dispatched) with its per-shard cursors (how far each shard
of ``W`` is dispatched), and the record of each minute ``m`` concerned, which the
dispatcher writes before its first Query of ``m`` (``started_ms``) and, when it
passes ``m``, completes (``finished_ms``). ``t`` is the record's stream time;
``CLOCK_TOLERANCE_SECONDS`` covers the stream's whole-second timestamps, the
dispatcher's clock skew, and its eventually consistent Query. An item is *in place*
when its pk is exactly ``bucket_key(m, s)`` with ``0 <= s < MAX_SHARDS`` and it is due in
``m``; only such items does the dispatcher read in time. A pk naming no minute is
dead-lettered.

- INSERT in place, ``m > W``, or ``m = W`` with neither a record of ``m`` nor cursors: skip;
  the dispatcher reads ``m`` later.
- INSERT in place, ``m <= W``, ``m`` first queried after ``t + tolerance``: skip; that Query saw it.
- INSERT otherwise, due within SQS's 900 s: **send now** (``late_writes``).
- INSERT otherwise, due later, its due minute not passed: **refile** it into that minute on
  the deciding group's shard nearest ``s % MAX_SHARDS`` (``refiled``); sending it would show it early.
- INSERT otherwise: the watermark is past minutes it cannot have reached: leave the item,
  count it (``watermark_ahead``, alarmed).
- REMOVE of an item not in a scheduled key, ``m > W``, or ``m = W`` past its shard's cursor:
  **send now** (``recovered_from_ttl``); the dispatcher has not read it, and no longer can.
- REMOVE, ``m = W`` up to its shard's cursor: skip; dispatched.
- REMOVE, ``m < W``, ``m`` finished before ``t - tolerance``: skip; the dispatcher read the item
  while it existed. The record may be the deciding group's, or (read only when that one would send)
  one of any group count's that reads the shard (``dispatch_state.minute_keys``): after a change of G,
  what the old layout dispatched is not sent again.
- REMOVE, otherwise (no record of ``m``, no ``finished_ms``, or ``m`` finished after the deletion): **send now**.

Every doubtful case sends, so a doubt costs a duplicate, never a loss. A message
sent here goes to the work queue as the dispatcher sends it (attributes plus
``worker_tier.due_at``, ``DelaySeconds`` = ceil(due - now) in 0..900), so it is
never early. A record that cannot be read, or a message SQS refuses for a sender
fault, goes to the work queue's DLQ with a ``worker_tier.failure`` reason. Anything
transient stops the batch at the first record not done; the handler reports it as
the batch item failure, and Lambda retries from there.

``finished_ms`` matters for one case: a minute the dispatcher began before the TTL
deleted one of its items and finished after (a stuck minute that thawed, resumed
from its cursors, and never saw the item). Records behind the watermark are read
eventually consistent (half the cost); a stale copy can only lack ``finished_ms``,
and a record without it sends. The watermark and its minute's record are read
consistently. An unreadable watermark counts as none (``state_unreadable``).

The guarantee, and its assumption: no message is lost to the TTL or to a late
write **provided this function processes each stream record within the stream's
24-hour retention** (``DYNAMODB_STREAM_RETENTION_SECONDS``) (records older than that are trimmed by DynamoDB). The
event source mapping retries for ``worker_tier_cdk.delay_recovery.STREAM_MAX_RECORD_AGE_SECONDS``,
then names the batch in its failure queue (alarmed), leaving the rest of the 24 h
to replay it; the IteratorAge alarm fires long before.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

from worker_tier.core import contract, limits, message, sqs_rules
from worker_tier.core import wall_clock
from worker_tier.delays import delay, delivery
from worker_tier.core.aws import LazyClient
from worker_tier.delays.delay import DelayedMessage
from worker_tier.core.envelope import Envelope
from worker_tier.core.priority import PriorityQueues
from worker_tier.core.contract import STATE_PARTITION_KEY as STATE_TABLE_PARTITION_KEY
from worker_tier.core.errors import LayoutLostError, StateError, UnreadableItemError, WorkerTierError
from worker_tier.core.retry import BATCH_ENTRIES, chunks
from worker_tier.delays.dispatch_state import (
    FINISHED_MS_ATTRIBUTE,
    LAYOUT_KEY,
    STARTED_MS_ATTRIBUTE,
    DispatchGroup,
    Layout,
    group_of,
    minute_keys,
)

INSERT, REMOVE = "INSERT", "REMOVE"
SKIP, SEND, REFILE, AHEAD = "skip", "send", "refile", "ahead"  # an INSERT's fates
# A TTL deletion is made by DynamoDB itself:
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/time-to-live-ttl-streams.html
TTL_PRINCIPAL = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
MESSAGE_KEY_PREFIX = contract.DELAY_BUCKET_KEY_PREFIX
# ApproximateCreationDateTime is whole seconds; the dispatcher's clock may be off by half the skew budget.
STREAM_TIME_RESOLUTION_SECONDS = 1
# The dispatcher's Query is eventually consistent: a write may be missing from it for a while after it
# succeeded. "Consistency across all copies of data is usually reached within one second":
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.ReadConsistency.html
EVENTUAL_CONSISTENCY_SECONDS = 1
CLOCK_TOLERANCE_SECONDS = STREAM_TIME_RESOLUTION_SECONDS + EVENTUAL_CONSISTENCY_SECONDS + delay.MAX_CLOCK_SKEW_SECONDS // 2
DYNAMODB_STREAM_RETENTION_SECONDS = limits.DYNAMODB_STREAM_RETENTION_SECONDS
MAX_DEAD_LETTER_BODY_HEAD_BYTES = 1024
# The layout is read before and after the groups' state; if a change of G came between, the state is read again.
LAYOUT_READS = 3


class StreamRecordError(WorkerTierError):
    """A stream record of the delay table that cannot be read as a message; ``record_text`` is the record as JSON."""

    def __init__(self, text: str, record_text: str, event_id: str = "") -> None:
        super().__init__(text)
        self.record_text = record_text
        self.event_id = event_id


class SendRefusedError(WorkerTierError):
    """SQS refused a recovered message for a sender fault: it can never be sent as it is."""


class _StoppedError(WorkerTierError):
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
    scheduled: bool = True  # the pk is one the dispatcher reads (delay.is_scheduled_key)
    item: Mapping[str, Any] = field(default_factory=dict)  # the image, for a refile
    table: str = ""  # the delay table, from the record's eventSourceARN when it has one

    @property
    def in_place(self) -> bool:
        """Whether the dispatcher reads this item where it is, in time: a key it reads, in the minute it is due."""
        return self.scheduled and self.message.bucket == self.bucket


@dataclass
class RecoveryReport:
    """What one batch did; ``failed_sequence_number`` is where Lambda must retry from, if anywhere."""

    records: int = 0
    skipped: int = 0
    late_writes: int = 0
    recovered_from_ttl: int = 0
    dead_lettered: int = 0
    refiled: int = 0  # inserts the dispatcher would not read where they are, moved where it reads them
    watermark_ahead: int = 0  # inserts left in place: due later than SQS can delay, behind an impossible watermark
    cancelled: int = 0  # cancellable inserts whose item is gone (cancelled or rescheduled): not sent
    state_unreadable: str = ""  # what was wrong with the watermark item, when it could not be read
    failed_sequence_number: str | None = None

    def count(self, counter: str) -> None:
        """Add one to the named counter."""
        setattr(self, counter, getattr(self, counter) + 1)


@dataclass
class DispatcherState:
    """What the dispatcher has read: its watermark (None before its first run), that minute's cursors, minute records."""

    watermark: int | None
    cursors: Mapping[int, str] = field(default_factory=dict)
    minutes: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    # (minute, shard) -> a finished record of that minute by a group of another count that read the shard
    finished_elsewhere: Mapping[tuple[int, int], Mapping[str, Any]] = field(default_factory=dict)

    def needs_minute_record(self, event: StreamEvent) -> bool:
        """Whether deciding ``event`` needs the dispatcher's record of its minute."""
        if self.watermark is None:  # lost: the dispatcher restarts after its latest finished minute
            return event.kind == INSERT
        return event.bucket <= self.watermark if event.kind == INSERT else event.bucket < self.watermark

    def insert_fate(self, event: StreamEvent, now_s: float) -> str:
        """SKIP (the dispatcher reads it in time), SEND now, REFILE where the dispatcher reads it, or leave it AHEAD.

        Nothing is sent due more than SQS's longest delay from now: SQS would show it early.
        """
        if event.in_place and not self.insert_was_missed(event):
            return SKIP
        if event.message.due_ms / 1000 <= now_s + limits.SQS_MAX_DELAY_SECONDS:
            return SEND
        if self.watermark is None or event.message.bucket > self.watermark:
            return REFILE
        return AHEAD  # due later than SQS can delay, in a minute an impossible watermark has passed

    def insert_was_missed(self, event: StreamEvent) -> bool:
        """Whether the dispatcher may have read this insert's minute before the insert."""
        if self.watermark is not None and event.bucket > self.watermark:
            return False
        minute = self.minutes.get(event.bucket)
        if minute is None and self.watermark is None:  # no watermark (lost, or never written): not read yet
            return False
        if minute is None:  # no record: behind the watermark, or in its minute with cursors, it was read
            return (self.watermark is not None and event.bucket < self.watermark) or bool(self.cursors)
        started_s = _seconds(minute, STARTED_MS_ATTRIBUTE)
        return started_s is None or started_s <= event.at_s + CLOCK_TOLERANCE_SECONDS

    def expiry_was_undispatched(self, event: StreamEvent) -> bool:
        """Whether the TTL may have deleted this item before the dispatcher read it."""
        if not event.scheduled or self.watermark is None or event.bucket > self.watermark:
            return True
        if event.bucket == self.watermark:  # the minute in progress: dispatched up to each shard's cursor
            cursor = self.cursors.get(event.shard)
            return cursor is None or event.sort_key > cursor
        # Behind the watermark the record is read eventually consistent: a stale copy may lack finished_ms
        # (stamped at most a second ago, so after the deletion): without it, send.
        return not (self.finished_before(self.minutes.get(event.bucket), event)
                    or self.finished_before(self.finished_elsewhere.get((event.bucket, event.shard)), event))

    @staticmethod
    def finished_before(minute: Mapping[str, Any] | None, event: StreamEvent) -> bool:
        """Whether a minute record says every item of its shards was read before ``event``'s deletion."""
        read_s = _seconds(minute, FINISHED_MS_ATTRIBUTE)
        return read_s is not None and read_s < event.at_s - CLOCK_TOLERANCE_SECONDS


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
    refile: StreamEvent | None = None  # move this item where the dispatcher reads it
    refile_shard: int = 0  # onto this shard: one the group that decided it reads


def read_record(record: Mapping[str, Any]) -> StreamEvent | None:
    """The message event in one stream record; None for anything else; StreamRecordError if unreadable."""
    try:
        kind: Any = record.get("eventName")  # INSERT or REMOVE once _concerns_safety_net passes
        change = record["dynamodb"]
        pk = change["Keys"][contract.DELAY_PARTITION_KEY]["S"]
        if not pk.startswith(MESSAGE_KEY_PREFIX) or not _concerns_safety_net(kind, record.get("userIdentity")):
            return None
        image = change["NewImage"] if kind == INSERT else change["OldImage"]
        parsed = delay.parse_bucket_key(pk)
        if parsed is None:
            raise ValueError(f"pk {pk!r} names no minute and shard ({MESSAGE_KEY_PREFIX}<minute>#<shard>, whole numbers)")
        return StreamEvent(kind, delay.read_item(image), *parsed, change["Keys"][contract.DELAY_SORT_KEY]["S"],
                           float(change["ApproximateCreationDateTime"]), delay.is_scheduled_key(pk), image,
                           _table_of(record.get("eventSourceARN")))
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as error:
        name = record.get("eventID") if isinstance(record, Mapping) else None
        raise StreamRecordError(
            f"stream record {name!r} is not a readable delay-table message: {_what(error)} "
            "(an INSERT needs dynamodb.NewImage, a REMOVE dynamodb.OldImage, with id, due_ms, body and attributes)",
            json.dumps(record, ensure_ascii=True, default=str, sort_keys=True),
            str(name or ""),
        ) from error


def _what(error: Exception) -> str:
    """An error's text, with its type unless it already says what was wrong with the item."""
    return str(error) if isinstance(error, UnreadableItemError) else f"{type(error).__name__}: {error}"


def _table_of(arn: Any) -> str:
    """The table a stream ARN belongs to (arn:aws:dynamodb:...:table/<name>/stream/<label>), or ''."""
    resource = arn.split(":", 5)[-1] if isinstance(arn, str) else ""
    parts = resource.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "table" else ""


def _concerns_safety_net(kind: Any, identity: Any) -> bool:
    """INSERTs, and REMOVEs made by the TTL (a user's delete is not a loss)."""
    return kind == INSERT or (kind == REMOVE and isinstance(identity, Mapping)
                              and all(identity.get(k) == v for k, v in TTL_PRINCIPAL.items()))


class DelayRecovery:
    """Sends to the work queue what the dispatcher could have missed; see the module docstring.

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
        clock: Callable[[], float] = wall_clock.now,
        sleep: Callable[[float], None] = time.sleep,
        delay_table: str | None = None,
        priority_queue_urls: Mapping[str, str] | None = None,
    ) -> None:
        self.delay_table = delay_table  # None: each record's eventSourceARN names it
        self.state_table = state_table
        self.queue_url = queue_url
        # With priorities, each message goes to its level's queue (its worker_tier.priority attribute).
        self.queues = PriorityQueues(queue_url, **dict(priority_queue_urls or {}))
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
        groups, states = self._read_state(readable, report) if readable else (1, {})
        return [a for a in (self._action(p, e, groups, states, report) for p, e in events) if a is not None]

    def _action(self, position: int, event: StreamEvent | StreamRecordError, groups: int,
                states: Mapping[DispatchGroup, DispatcherState], report: RecoveryReport) -> _Action | None:
        if isinstance(event, StreamRecordError):
            return _Action(position, body=event.record_text, error=event, message_id=event.event_id,
                           kept="in no readable form but this record")
        group = group_of(event.shard, groups)
        state = states[group]
        fate = state.insert_fate(event, self._clock()) if event.kind == INSERT else (
            SEND if state.expiry_was_undispatched(event) else SKIP)
        if fate in (SEND, REFILE) and event.kind == INSERT and event.message.cancellable and self._cancelled(event):
            report.count("cancelled")
            return None
        if fate == SEND:
            return _Action(position, message=event.message, counter="late_writes" if event.kind == INSERT else "recovered_from_ttl")
        if fate == REFILE:
            return _Action(position, message=None, counter="refiled", refile=event, refile_shard=group.shard_for(event.message.shard))
        report.count("watermark_ahead" if fate == AHEAD else "skipped")
        return None

    def _cancelled(self, event: StreamEvent) -> bool:
        """Whether a cancellable insert's item is gone (cancelled, or moved by a reschedule): read strongly consistent.

        Read after its minute's record (``_read_state``): once that record exists no cancel can succeed
        (``worker_tier.delays.cancellation``), so an item still there now is one to deliver, and one gone was
        cancelled before the dispatcher began its minute: sending the stream's copy would deliver it.
        """
        table = self.delay_table or event.table
        if not table:
            return False  # the wiring fault is reported where the action needs the table
        key = {k: event.item[k] for k in (contract.DELAY_PARTITION_KEY, contract.DELAY_SORT_KEY)}
        return "Item" not in self._dynamodb.get().get_item(TableName=table, Key=key, ConsistentRead=True)

    def _read_state(self, events: list[StreamEvent], report: RecoveryReport) -> tuple[int, dict[DispatchGroup, DispatcherState]]:
        """The layout's group count, and the state of each group the events fall in (``_read_group``).

        The layout is read again after the groups: if G changed between, all is read again,
        so no decision mixes one layout's groups with another's state. An unreadable layout
        raises StateError: the batch is retried (the dispatcher stops too) until it is fixed.
        Without a layout item the second read is skipped (one GetItem less per batch at G = 1): the only
        group is G = 1's, and a first change of G made meanwhile is seeded from G = 1's watermark. What
        G = 1 passed after this batch read its watermark, it read after the records' events (as without
        any change); what lies after the seed, the new groups read; so every decision taken on G = 1's
        state stays right. A layout that existed is never missing unnoticed (``Layout.check_not_lost``).
        """
        for _ in range(LAYOUT_READS):
            item = self._get_state(LAYOUT_KEY)
            layout = Layout.from_item(item)
            groups = {group_of(event.shard, layout.groups) for event in events}
            states = {group: self._read_group(group, layout, [e for e in events if group_of(e.shard, layout.groups) == group],
                                              report) for group in sorted(groups, key=lambda g: g.index)}
            if item is None or self._get_state(LAYOUT_KEY) == item:
                return layout.groups, states
        raise StateError(f"the layout of dispatch groups changed {LAYOUT_READS} times while this batch read it; retried")

    def _read_group(self, group: DispatchGroup, layout: Layout, events: list[StreamEvent], report: RecoveryReport) -> DispatcherState:
        """One group's watermark and cursors (consistent read; its layout's seed when it has none of this epoch), then its minute records.

        An unreadable watermark counts as none (the dispatcher restarts after its latest
        finished minute): an insert into a minute it started is sent, other inserts are
        left to it, expiries sent.
        """
        try:
            position = layout.position(group, self._get_state(group.watermark_key))
        except LayoutLostError:
            raise
        except StateError as error:
            report.state_unreadable = str(error)
            position = None
        state = DispatcherState(None) if position is None else DispatcherState(*position)
        state.minutes = self._read_minutes(group, {e.bucket for e in events if state.needs_minute_record(e)}, state.watermark)
        state.finished_elsewhere = self._finished_elsewhere(state, events)
        return state

    def _finished_elsewhere(self, state: DispatcherState, events: list[StreamEvent]) -> dict[tuple[int, int], Mapping[str, Any]]:
        """For each expiry behind the watermark that the group's own record would send: a finished record of its
        minute by the group of any other count that reads its shard (``minute_keys``), read until one says the item
        was read before its deletion. After a change of G, what the old layout dispatched is not sent again.
        """
        found: dict[tuple[int, int], Mapping[str, Any]] = {}
        for event in events:
            key = (event.bucket, event.shard)
            if (event.kind == INSERT or key in found or not event.scheduled or state.watermark is None
                    or event.bucket >= state.watermark or not state.expiry_was_undispatched(event)):
                continue
            for record_key in minute_keys(event.bucket, event.shard):
                record = self._get_state(record_key, consistent=False)
                if record is not None and state.finished_before(record, event):
                    found[key] = record
                    break
        return found

    def _get_state(self, key: str, consistent: bool = True) -> dict[str, Any] | None:
        """One state-table item, read consistently unless said otherwise, or None."""
        item: dict[str, Any] | None = self._dynamodb.get().get_item(
            TableName=self.state_table, Key={STATE_TABLE_PARTITION_KEY: {"S": key}}, ConsistentRead=consistent).get("Item")
        return item

    def _read_minutes(self, group: DispatchGroup, buckets: Iterable[int], watermark: int | None) -> dict[int, dict[str, Any]]:
        """The group's minute records of ``buckets`` (one GetItem each); absent ones are left out.

        Only the watermark's minute is read consistently: whether its record exists yet
        decides an insert. Behind the watermark every record is complete (``started_ms``
        never changes; ``finished_ms`` was stamped before the watermark passed it), and a
        stale copy can only lack it, which sends (see DispatcherState): half the read cost.
        GetItem rather than BatchGetItem: no role may batch-read the shared state table
        (tests/infra/test_stack.py).
        """
        found: dict[int, dict[str, Any]] = {}
        for bucket in sorted(buckets):
            item = self._dynamodb.get().get_item(
                TableName=self.state_table, Key={STATE_TABLE_PARTITION_KEY: {"S": group.minute_key(bucket)}},
                ConsistentRead=watermark is None or bucket == watermark,
            ).get("Item")
            if item is not None:
                found[bucket] = item
        return found

    # -- carrying out ---------------------------------------------------------------------------

    def _carry_out(self, actions: list[_Action], report: RecoveryReport) -> None:
        """Sends (runs of sends, 10 per SendMessageBatch) and dead-letters, in stream order; _StoppedError at the first not done."""
        for kind, run in itertools.groupby(actions, key=_kind):
            if kind == "send":
                for batch in chunks(list(run), limits.SQS_MAX_BATCH_ENTRIES):
                    self._flush(list(batch), report)
            else:
                for action in run:
                    (self._refile if kind == "refile" else self._dead_letter)(action, report)

    def _flush(self, batch: list[_Action], report: RecoveryReport) -> None:
        """Send the batch under ``BATCH_ENTRIES``; a sender fault dead-letters that message."""
        pending = batch
        for _ in BATCH_ENTRIES.attempts_with_pauses(self._sleep):
            pending, refused = self._send(pending, report)
            for index, action in enumerate(refused):
                try:
                    self._dead_letter(action, report)
                except _StoppedError as stopped:
                    raise _StoppedError(min(a.position for a in pending + refused[index:])) from stopped
            if not pending:
                return
        raise _StoppedError(min(a.position for a in pending))

    def _refile(self, action: _Action, report: RecoveryReport) -> None:
        """Move an insert the dispatcher would not read in time into its due minute, on a shard it reads."""
        event = action.refile
        assert event is not None
        table = self.delay_table or event.table
        if not table:  # a wiring fault: say so with the item, rather than send it early or drop it
            text = json.dumps(event.item, ensure_ascii=True, default=str, sort_keys=True)
            error = StreamRecordError(f"cannot move item {event.item[contract.DELAY_PARTITION_KEY]['S']!r} / {event.sort_key!r} where the "
                                      f"dispatcher reads it: no delay table given ({contract.DELAY_TABLE_VARIABLE}) and the record "
                                      "has no eventSourceARN", text)
            self._dead_letter(_Action(action.position, body=text, error=error, message_id=event.message.message_id,
                                      attributes=dict(event.message.attributes), kept="still in the delay table"), report)
            return
        try:
            delivery.refile(self._dynamodb.get(), table, event.item, event.message.bucket, action.refile_shard)
        except Exception as error:
            if not delivery.is_permanent_write_error(error):  # transient, or access: Lambda retries from this record
                raise _StoppedError(action.position) from error
            text = json.dumps(event.item, ensure_ascii=True, default=str, sort_keys=True)
            refused = StreamRecordError(f"cannot move item {event.item[contract.DELAY_PARTITION_KEY]['S']!r} / {event.sort_key!r} into minute "
                                        f"{event.message.bucket}, where the dispatcher reads it: DynamoDB refused the copy "
                                        f"({error}); the item stays where it is", text)
            self._dead_letter(_Action(action.position, body=text, error=refused, message_id=event.message.message_id,
                                      attributes=dict(event.message.attributes), kept="still in the delay table"), report)
            return
        report.count("refiled")

    def _send(self, actions: list[_Action], report: RecoveryReport) -> tuple[list[_Action], list[_Action]]:
        """One SendMessageBatch; returns the actions to try again and the dead-letter actions for refusals."""
        now = self._clock()
        entries = [delivery.entry(str(i), a.message, now) for i, a in enumerate(actions) if a.message is not None]
        accepted, refused_ids = delivery.send_batch(self._sqs.get(), self.queues, entries)
        retry, refused = [], []
        for index, action in enumerate(actions):
            if str(index) in accepted:
                report.count(action.counter)
            elif str(index) in refused_ids:
                refused.append(_refused(action, refused_ids[str(index)]))
            else:
                retry.append(action)
        return retry, refused

    def _dead_letter(self, action: _Action, report: RecoveryReport) -> None:
        """Send to the DLQ with its reason; if the DLQ refuses that copy, a small pointer naming it instead."""
        assert action.error is not None
        failed_at = datetime.fromtimestamp(self._clock(), timezone.utc)
        reason = message.failure_reason(action.error, attempts=0, path=_path(action.attributes), failed_at=failed_at)
        attributes, refused_attributes = delivery.acceptable_attributes(action.attributes)
        if refused_attributes:
            reason["refused_attributes"] = refused_attributes
        copy = Envelope.dead_letter(action.body, attributes, reason)
        refusal = sqs_rules.body_problem(action.body) or self._send_dead_letter(copy, action.position, quiet=True)
        if refusal:
            self._send_dead_letter(_pointer(action, reason, refusal), action.position)
        report.count("dead_lettered")

    def _send_dead_letter(self, envelope: Envelope, position: int, quiet: bool = False) -> str | None:
        """SendMessage to the DLQ: None if taken; SQS's refusal if ``quiet`` and a sender fault; else _StoppedError."""
        try:
            self._sqs.get().send_message(**envelope.request(self.dead_letter_queue_url))
            return None
        except Exception as error:
            details = getattr(error, "response", {}).get("Error", {})
            if quiet and details.get("Type") == "Sender":
                return f"{details.get('Code')}: {details.get('Message')}"
            raise _StoppedError(position) from error


def _kind(action: _Action) -> str:
    """What carrying out an action does: refile, send, or dead-letter."""
    return "refile" if action.refile is not None else "send" if action.message is not None else "dead_letter"


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


def _refused(action: _Action, refusal: str) -> _Action:
    """The dead-letter action for a message SQS refused."""
    delayed = action.message
    assert delayed is not None
    error = SendRefusedError(f"the work queue refused delayed message {delayed.message_id} (due {delayed.due_ms} ms) "
                             f"when the safety net sent it: {refusal}")
    kept = (f"kept in the delay table under {contract.DELAY_PARTITION_KEY} {delayed.key[contract.DELAY_PARTITION_KEY]['S']!r} and {contract.DELAY_SORT_KEY} "
            f"{delayed.key[contract.DELAY_SORT_KEY]['S']!r} until its TTL" if action.counter == "late_writes" else "already deleted by the TTL")
    return _Action(action.position, body=delayed.body, attributes=delay.with_due_at(delayed), error=error,
                   message_id=delayed.message_id, kept=kept)


def _pointer(action: _Action, reason: dict[str, Any], refusal: str) -> Envelope:
    """A small DLQ message naming a message whose full copy the DLQ refused, with the head of its body."""
    reason = {**reason, "copy_refused": f"the dead-letter queue refused the full copy ({refusal}); the item is {action.kept}"}
    head = action.body.encode("utf-8")[:MAX_DEAD_LETTER_BODY_HEAD_BYTES].decode("utf-8", "ignore")
    body = {"message_id": action.message_id, "reason": reason, "body_head": head}
    routing, _ = delivery.acceptable_attributes({k: v for k, v in action.attributes.items() if k == contract.PATH_ATTRIBUTE})
    return Envelope.dead_letter(json.dumps(body, ensure_ascii=True), routing, reason)


def _path(attributes: Mapping[str, Any]) -> str:
    """The message's route, for the reason."""
    value = attributes.get(contract.PATH_ATTRIBUTE)
    return str(value.get("StringValue") or "") if isinstance(value, Mapping) else ""
