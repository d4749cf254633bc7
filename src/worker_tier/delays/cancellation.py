"""Cancelling and rescheduling delayed messages, and their race with the delay dispatcher, settled by DynamoDB.

A message sent with ``cancellable=True`` (it needs a ``dedupe_key``: cancel and reschedule find it by its key)
is stored in the delay table on ``delay.CANCELLABLE_SHARD`` of its due minute, in one transaction with

- its key's marker (``worker_tier.delays.dedupe``'s claim rule), which also records where the item is
  (``item_pk``, ``item_sk``) and that it is cancellable; and
- checks that the delay dispatcher has not started that minute (``not_started_checks``).

**The race.** The delay dispatcher writes a minute's record in the state table (``started_ms``) before its
first Query of the minute, and Queries the cancellable shard with ConsistentRead
(``delay.read_consistently``). A cancel is one transaction: the same check, the item's delete (it must
exist) and the marker's delete (it must still point at the item). DynamoDB serializes transactions with the
record's write, so exactly one of these holds:

- the cancel committed first: every Query of that shard comes after the record, reads strongly consistent,
  and cannot see the item; the message is never delivered, and ``cancel`` says True;
- the record was there first: the transaction is refused and changes nothing, so the message is delivered
  exactly as if there had been no cancel, and ``cancel`` says False.

No clock decides it: the client's clock only names the minute, and the check is DynamoDB's. An eventually
consistent Query could still return a deleted item for about a second, which is why the shard is read
consistently; ordinary messages (other shards) keep their cheaper reads, so the common path pays nothing.

**A cancelled key.** The cancel does not delete the marker: it marks it cancelled (``CANCELLED_ATTRIBUTE``,
no item named) and leaves it to expire at due + ``dedupe.DEDUPE_RETENTION_SECONDS``, as a delivered message's
marker does. So a producer's retry of the very send that was cancelled (a lost answer, at-least-once
producers) is deduplicated, not stored again: the cancel stays a cancel. The key is free again after that
retention, exactly as after a delivery.

A reschedule is one transaction too: both minutes' checks, the old item's delete, the new item's put and
the marker's move. It never leaves two copies, nor none: refused, it leaves the message as it was sent.

**The window.** A message can be cancelled until the delay dispatcher starts its minute, which it does once
the minute has ended by its clock plus ``delay.DISPATCH_HORIZON_SECONDS`` (840 s). So a cancellable
message must be due more than ``CANCELLABLE_MIN_DELAY_SECONDS`` ahead; a shorter one is refused with an
error naming its delay and this rule (it could not be both cancellable and on time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from worker_tier.delays import delay, dedupe
from worker_tier.core.aws import error_response
from worker_tier.core.contract import DELAY_PARTITION_KEY as PK
from worker_tier.core.contract import DELAY_SORT_KEY as SK
from worker_tier.core.contract import STATE_PARTITION_KEY
from worker_tier.delays.delay import DelayedMessage
from worker_tier.delays.dispatch_state import minute_keys
from worker_tier.core.errors import MessageError, UnreadableItemError
from worker_tier.core.message import format_due_at

# A cancellable message due this close (or closer) is in a minute the delay dispatcher starts in its next run.
CANCELLABLE_MIN_DELAY_SECONDS = delay.DISPATCH_HORIZON_SECONDS
# A cancel or reschedule that finds the marker moved (another reschedule) between its read and its write reads again.
MAX_MARKER_READS = 3
DISPATCH_STARTED_CODE = "DispatchStarted"
ITEM_PK_ATTRIBUTE, ITEM_SK_ATTRIBUTE, CANCELLABLE_ATTRIBUTE = "item_pk", "item_sk", "cancellable"
CANCELLED_ATTRIBUTE = "cancelled"  # on a cancelled key's marker, kept until it expires so a retried send is deduplicated

# What a cancel or reschedule came to.
DONE = "done"  # cancelled (never delivered), or moved (delivered once, at the new time)
STARTED = "dispatch started"  # too late: delivered as sent
NOT_FOUND = "not found"
NOT_CANCELLABLE = "not cancellable"
CONTENDED = "contended"  # other reschedules kept moving it: it is still there, delivered unless cancelled again


@dataclass(frozen=True)
class Outcome:
    """What became of one cancel or reschedule: ``status`` (DONE, STARTED, NOT_FOUND, NOT_CANCELLABLE, CONTENDED) and why."""

    key: str
    status: str
    detail: str
    message: DelayedMessage | None = None  # a done cancel's message when read (``read_cancelled=True``); a reschedule's

    @property
    def done(self) -> bool:
        """True when the cancel or reschedule took effect."""
        return self.status == DONE


def not_started_checks(state_table: str, bucket: int, shard: int) -> list[dict[str, Any]]:
    """The transaction checks that the delay dispatcher has not started dispatching ``shard`` of minute ``bucket``.

    The one place that knows which state-table records say so: the dispatch group that reads ``shard`` writes
    its minute record (``DispatchGroup.minute_key``) before its first Query of the minute. The group depends on
    the group count G (``dispatch_groups``), which can change while an old layout's run is still going, so
    there is one check per possible G (``CHECKS_PER_MINUTE`` of them, G = 1's key first): whichever layout
    reads the shard, its record is among them. A record left by an earlier layout only refuses a cancel
    (delivered as sent), never lets one through.

    Examples
    --------
    >>> [c["ConditionCheck"]["Key"]["pk"]["S"] for c in not_started_checks("state", 30_000_000, 15)][:2]
    ['scheduler#minute#30000000', 'scheduler#2.1#minute#30000000']
    """
    return [{"ConditionCheck": {
        "TableName": state_table,
        "Key": {STATE_PARTITION_KEY: {"S": key}},
        "ConditionExpression": "attribute_not_exists(#pk)",
        "ExpressionAttributeNames": {"#pk": STATE_PARTITION_KEY},
    }} for key in minute_keys(bucket, shard)]


# Entries of ``not_started_checks`` for one minute: the transactions below index their answers by it.
CHECKS_PER_MINUTE = delay.MAX_SHARDS


def check_key(key: object) -> str:
    """``key`` when it is a non-empty str (a dedupe key); else MessageError naming the value."""
    if not isinstance(key, str) or not key:
        raise MessageError(f"a dedupe_key is a non-empty str (the one the message was sent with), got {key!r}")
    return key


def check_reschedule_delay(seconds: float) -> None:
    """MessageError naming the delay when a reschedule's new time is too soon to cancel, or beyond send's maximum."""
    check_delay(seconds)
    if math.ceil(seconds) > delay.MAX_DELAY_SECONDS:
        raise MessageError(f"a delay of {math.ceil(seconds)} s is beyond the {delay.MAX_DELAY_SECONDS} s (366 days) "
                           "maximum of a delayed message; reschedule it sooner")


def check_delay(seconds: float) -> None:
    """MessageError naming the delay when a cancellable message is due too soon for its cancel window."""
    if math.ceil(seconds) <= CANCELLABLE_MIN_DELAY_SECONDS:
        raise MessageError(
            f"a cancellable message must be due more than {CANCELLABLE_MIN_DELAY_SECONDS} s ahead, got "
            f"{f'{math.ceil(seconds)} s' if seconds > 0 else 'a time in the past'}: "
            f"the delay dispatcher sends each minute {delay.DISPATCH_HORIZON_SECONDS} s before it ends, and a message "
            "is cancellable only until then; send it later, or without cancellable=True"
        )


class Cancellations:
    """Stores cancellable messages, and cancels or reschedules them by their dedupe key (see the module docstring)."""

    def __init__(self, delay_table: str, state_table: str, dynamodb: Any, clock: Callable[[], float], *,
                 read_cancelled: bool = False) -> None:
        self._delay_table = delay_table
        self._state_table = state_table
        self._dynamodb = dynamodb
        self._clock = clock
        # Read the item before cancelling it, so the caller can delete what it points at (an offloaded body's object).
        self._read_cancelled = read_cancelled
        # The ids of messages ``store`` did not store because an earlier send holds their key.
        self.deduplicated: set[str] = set()

    def store(self, message: DelayedMessage) -> tuple[str, str] | None:
        """Store a cancellable message with its marker, if its minute has not started; a ``delay.KeyedWrite``.

        None when stored or deduplicated; else (code, reason): ``DedupeKeyInFlight`` (retryable) or
        ``DispatchStarted``. Other DynamoDB errors raise.
        """
        key, now_ms = str(message.dedupe_key), int(self._clock() * 1000)
        marker = {**dedupe.marker_item(key, message.due_ms / 1000, now_ms, sent=True), **_location(message)}
        try:
            self._dynamodb.transact_write_items(TransactItems=[
                {"Put": {"TableName": self._delay_table, "Item": marker, **dedupe.claim_condition(now_ms)}},
                {"Put": {"TableName": self._delay_table, "Item": message.to_item()}},
                *not_started_checks(self._state_table, message.bucket, message.shard),
            ])
        except Exception as error:
            refused = _refusals(error)
            if not refused:
                raise
            if refused[0]:
                holder = refused[0].get("Item")
                claim = dedupe.Claim(key, dedupe.held_outcome(holder), now_ms, holder)
                if claim.outcome == dedupe.DEDUPLICATED:
                    self.deduplicated.add(message.message_id)
                return claim.failure()
            if any(refused[2:]):
                return DISPATCH_STARTED_CODE, _started_reason(key, message)
            raise
        return None

    def cancel(self, key: str) -> Outcome:
        """Delete the key's message and mark its marker cancelled unless the delay dispatcher has started its minute."""
        check_key(key)
        for _ in range(MAX_MARKER_READS):
            marker = self._marker(key)
            unfit = _unfit(key, marker)
            if unfit is not None:
                return unfit
            place = _place(marker)  # type: ignore[arg-type]  # _unfit returned None: a cancellable marker
            cancelled = self._read(place) if self._read_cancelled else None
            try:
                self._dynamodb.transact_write_items(TransactItems=[
                    *self._checks_of(place),
                    {"Delete": {"TableName": self._delay_table, "Key": place, **_exists("attribute_exists")}},
                    {"Put": {"TableName": self._delay_table, "Item": _cancelled(marker), **_still_at(place)}},  # type: ignore[arg-type]
                ])
            except Exception as error:
                refused = _refusals(error)
                outcome = self._refused(key, place, refused, error)
                if outcome is not None:
                    return outcome
                if not refused[CHECKS_PER_MINUTE + 1]:  # the marker still points at it, and the item is gone
                    return Outcome(key, NOT_FOUND, f"dedupe_key {key!r}: its marker names an item that is gone (expired)")
                continue  # the marker moved (a reschedule): read it again
            return Outcome(key, DONE, f"cancelled: it was due {_due_text(place)}; it will never be delivered", cancelled)
        return Outcome(key, CONTENDED, f"dedupe_key {key!r} kept moving (rescheduled {MAX_MARKER_READS} times while "
                                       "cancelling): it is still there and delivered unless cancelled again")

    def reschedule(self, key: str, due_ms: int) -> Outcome:
        """Move the key's message to ``due_ms`` in one transaction; MessageError when that is too soon or too far."""
        check_key(key)
        check_reschedule_delay(due_ms / 1000 - self._clock())
        for _ in range(MAX_MARKER_READS):
            marker = self._marker(key)
            unfit = _unfit(key, marker)
            if unfit is not None:
                return unfit
            old = self._dynamodb.get_item(TableName=self._delay_table, Key=_place(marker), ConsistentRead=True).get("Item")  # type: ignore[arg-type]
            if old is None:
                return Outcome(key, NOT_FOUND, f"dedupe_key {key!r}: its marker names an item that is gone (delivered and expired)")
            moved = delay.read_item(old)
            _check_payload_life(key, moved, due_ms)
            new = DelayedMessage(moved.message_id, due_ms, moved.body, moved.attributes, delay.CANCELLABLE_SHARD, key, True)
            try:
                self._dynamodb.transact_write_items(TransactItems=self._move(key, marker, moved, new))  # type: ignore[arg-type]
            except Exception as error:
                outcome = self._refused(key, _place(marker), _refusals(error), error, new=new)  # type: ignore[arg-type]
                if outcome is not None:
                    return outcome
                continue
            return Outcome(key, DONE, f"rescheduled from {_due_text(moved.key)} to {_due_text(new.key)}", message=new)
        return Outcome(key, CONTENDED, f"dedupe_key {key!r} kept moving (rescheduled {MAX_MARKER_READS} times meanwhile): "
                                       "it is delivered as the last of those left it")

    def _move(self, key: str, marker: Mapping[str, Any], old: DelayedMessage, new: DelayedMessage) -> list[dict[str, Any]]:
        """A reschedule's transaction: the old minute's check, the new minute's (when it differs), then the writes."""
        checks = self._checks_of(old.key)
        if new.bucket != old.bucket:
            checks += not_started_checks(self._state_table, new.bucket, new.shard)
        expiration = {"N": str(math.ceil(new.due_ms / 1000) + dedupe.DEDUPE_RETENTION_SECONDS)}
        moved_marker = {**marker, **_location(new), delay.TTL_ATTRIBUTE: expiration}
        writes: list[dict[str, Any]] = [{"Put": {"TableName": self._delay_table, "Item": moved_marker, **_still_at(old.key)}}]
        if new.key != old.key:
            writes.append({"Delete": {"TableName": self._delay_table, "Key": old.key, **_exists("attribute_exists")}})
            writes.append({"Put": {"TableName": self._delay_table, "Item": new.to_item(), **_exists("attribute_not_exists")}})
        return checks + writes

    def _refused(self, key: str, place: Mapping[str, Any], refused: list[Mapping[str, Any] | None], error: Exception,
                 new: DelayedMessage | None = None) -> Outcome | None:
        """The outcome of a refused transaction (its first ``CHECKS_PER_MINUTE`` entries: the minute's checks); None when
        the marker moved.

        For a reschedule into another minute (``new``), the next ``CHECKS_PER_MINUTE`` are that minute's: MessageError.
        Other errors raise.
        """
        if not refused:
            raise error
        if any(refused[:CHECKS_PER_MINUTE]):
            return Outcome(key, STARTED, f"too late: the delay dispatcher has started the minute of {_due_text(place)}; "
                                         "it is delivered as sent")
        if new is not None and new.bucket != delay.parse_bucket_key(place[PK]["S"])[0] and any(refused[CHECKS_PER_MINUTE:2 * CHECKS_PER_MINUTE]):  # type: ignore[index]
            raise MessageError(_started_reason(key, new))
        return None

    def find(self, key: str) -> DelayedMessage | Outcome:
        """The cancellable message ``key`` names, as it is now (read strongly consistent); else the Outcome a cancel
        would have (NOT_FOUND, NOT_CANCELLABLE), changing nothing: what a confirmation names before a cancel."""
        marker = self._marker(check_key(key))
        unfit = _unfit(key, marker)
        if unfit is not None:
            return unfit
        found = self._read(_place(marker))  # type: ignore[arg-type]
        return found if found is not None else Outcome(key, NOT_FOUND, f"dedupe_key {key!r}: its marker names an item "
                                                                     "that is gone (delivered and expired)")

    def _checks_of(self, place: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``not_started_checks`` of the minute and shard an item key names."""
        bucket, shard = delay.parse_bucket_key(place[PK]["S"]) or (0, 0)
        return not_started_checks(self._state_table, bucket, shard)

    def _read(self, place: Mapping[str, Any]) -> DelayedMessage | None:
        """The item at ``place``, read strongly consistent; None when it is gone or unreadable (the cancel says why)."""
        item = self._dynamodb.get_item(TableName=self._delay_table, Key=place, ConsistentRead=True).get("Item")
        try:
            return delay.read_item(item) if item else None
        except UnreadableItemError:
            return None

    def _marker(self, key: str) -> dict[str, Any] | None:
        """The key's marker, read strongly consistent."""
        item: dict[str, Any] | None = self._dynamodb.get_item(
            TableName=self._delay_table, Key=dedupe.marker_key(key), ConsistentRead=True).get("Item")
        return item


def _location(message: DelayedMessage) -> dict[str, Any]:
    """A cancellable message's marker attributes: where its item is."""
    return {ITEM_PK_ATTRIBUTE: message.key[PK], ITEM_SK_ATTRIBUTE: message.key[SK], CANCELLABLE_ATTRIBUTE: {"BOOL": True}}


def _cancelled(marker: Mapping[str, Any]) -> dict[str, Any]:
    """A cancelled key's marker: the same claim (sent, same TTL), naming no item."""
    kept = {name: value for name, value in marker.items() if name not in (ITEM_PK_ATTRIBUTE, ITEM_SK_ATTRIBUTE)}
    return {**kept, CANCELLED_ATTRIBUTE: {"BOOL": True}}


def _place(marker: Mapping[str, Any]) -> dict[str, Any]:
    """The item key a cancellable marker points at."""
    return {PK: marker[ITEM_PK_ATTRIBUTE], SK: marker[ITEM_SK_ATTRIBUTE]}


def _still_at(place: Mapping[str, Any]) -> dict[str, Any]:
    """The condition that the marker still points at ``place``."""
    return {
        "ConditionExpression": "#item_pk = :item_pk AND #item_sk = :item_sk",
        "ExpressionAttributeNames": {"#item_pk": ITEM_PK_ATTRIBUTE, "#item_sk": ITEM_SK_ATTRIBUTE},
        "ExpressionAttributeValues": {":item_pk": place[PK], ":item_sk": place[SK]},
    }


def _exists(function: str) -> dict[str, Any]:
    """The condition that the item exists (``attribute_exists``) or not (``attribute_not_exists``)."""
    return {"ConditionExpression": f"{function}(#pk)", "ExpressionAttributeNames": {"#pk": PK}}


def _unfit(key: str, marker: Mapping[str, Any] | None) -> Outcome | None:
    """NOT_FOUND without a marker, NOT_CANCELLABLE for a key not sent with cancellable=True; else None."""
    if marker is None:
        return Outcome(key, NOT_FOUND, f"no delayed message has dedupe_key {key!r} (never sent, cancelled, or expired)")
    if marker.get(CANCELLED_ATTRIBUTE, {}).get("BOOL"):
        return Outcome(key, NOT_FOUND, f"dedupe_key {key!r} was cancelled; a send with it is deduplicated until its "
                                       "marker expires (due + the dedupe retention)")
    if not marker.get(CANCELLABLE_ATTRIBUTE, {}).get("BOOL"):
        return Outcome(key, NOT_CANCELLABLE, f"dedupe_key {key!r} was not sent with cancellable=True; it is delivered as sent")
    return None


def _refusals(error: Exception) -> list[Mapping[str, Any] | None]:
    """Per transaction entry, its condition's refusal (the reason, with the old item when asked) or None.

    [] when no condition refused it (a TransactionConflict with a concurrent write, throttling, any other
    error): nothing was written, and the caller raises the error.
    """
    reasons = error_response(error).get("CancellationReasons") or []
    refused = [reason if reason.get("Code") == "ConditionalCheckFailed" else None for reason in reasons]
    return refused if any(refused) else []


def _started_reason(key: str, message: DelayedMessage) -> str:
    """Why a cancellable message cannot go into a minute the delay dispatcher has started."""
    return (f"dedupe_key {key!r}: the delay dispatcher has already started minute {message.bucket}, when the message "
            f"would be due; a cancellable message must be stored before then (due more than "
            f"{CANCELLABLE_MIN_DELAY_SECONDS} s ahead by the dispatcher's clock): send it due later")


def _due_text(place: Mapping[str, Any]) -> str:
    """The due time a key's sort key names, as ISO 8601 UTC."""
    return format_due_at(int(place[SK]["S"].split("#", 1)[0]))


def _check_payload_life(key: str, message: DelayedMessage, due_ms: int) -> None:
    """MessageError when ``message``'s body is offloaded and ``due_ms`` is past the longest delay from its upload: the
    payload bucket's lifecycle keeps an object that long plus a message's life in the queues, and no longer, so a
    later reschedule would find the body gone (docs/large-payloads.md). Send it again instead: a new upload."""
    from worker_tier.core import payloads

    uploaded = payloads.uploaded_ms(message.body, message.attributes)
    latest = None if uploaded is None else uploaded + delay.MAX_DELAY_SECONDS * 1000
    if latest is not None and due_ms > latest:
        raise MessageError(
            f"dedupe_key {key!r}: its body is offloaded to S3 (uploaded {_iso(uploaded)}), and its object outlives a "
            f"delay of at most {delay.MAX_DELAY_SECONDS} s (366 days) from its upload: reschedule it to "
            f"{_iso(latest)} at the latest, or cancel it and send it again"
        )


def _iso(ms: int | None) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp((ms or 0) / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
