"""The delay dispatcher's records in the state table, read and written: one idea, the dispatcher's state.

Every item the delay dispatcher keeps under ``scheduler#`` has its key, its reading and its
writing (with the conditions that keep two runs apart) here, for the dispatcher that writes
them and for the safety net (``worker_tier.delays.delay_recovery``), cancellation, the CLI's
``status`` and ``delayed``, and the local environment that read them:

- the shard groups (``DispatchGroup``) and the layout that says how many there are (below);
- each group's lease (``state.Lease``), watermark with per-shard cursors, first-run Scan
  position and minute records (``started_ms``, ``finished_ms``), written by one run of the
  group at a time through ``GroupState``.


With ``dispatch_groups`` = G, group ``g`` reads the shards ``s`` with ``s % G == g`` of
every minute, in its own invocation each minute, with its own lease, watermark and
minute records. G = 1 is one group over every shard, under the keys the dispatcher
has always used (``scheduler#watermark``...); G > 1 keys carry ``G.g``
(``scheduler#4.1#watermark``).

The **layout** record (``LAYOUT_KEY``) holds G, an epoch counted up at each change,
and a *seed*: where a group of the new layout starts when it has no watermark of
this epoch. The first run of a new G computes the seed from the old layout's groups
before anything of the new layout is dispatched: the earliest of their watermarks (a
group without one counts as the old seed), with the cursors of the groups that stand
at exactly that minute. So a change of G loses nothing and sends nothing early:
whatever an old group had not dispatched when the seed was read lies after the seed;
what an old group dispatched after the seed is sent again (duplicates). The shards of
an old group with no position at all (no watermark, no seed; or unreadable) are the
layout's ``unknown_shards``: only the new groups that read one of them restart (as a
new stack does); the others take the seed of the known groups.

Without a layout record the layout is G = 1, epoch 0: a stack that never changed G
writes none. The epoch never goes back: the first change stamps the G = 1 watermark
with its epoch, so a layout item deleted later is recognised (``LayoutLostError``: the
delay dispatcher stops, the safety net retries) rather than read as "G = 1, epoch 0",
which would revive the G = 1 watermark of before the first change. The remedy is to
rewrite the layout with the deployed G and the epoch its groups' watermarks carry.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from worker_tier.delays import delay
from worker_tier.core.aws import LazyClient, is_condition_failure
from worker_tier.core.contract import DISPATCHER_KEY_PREFIX, STATE_PARTITION_KEY, STATE_TTL_ATTRIBUTE
from worker_tier.delays.delay import BUCKET_SECONDS
from worker_tier.core.errors import LayoutLostError, StateError
from worker_tier.core.state import Lease

LAYOUT_KEY = f"{DISPATCHER_KEY_PREFIX}layout"
GROUPS_ATTRIBUTE = "groups"
EPOCH_ATTRIBUTE = "epoch"  # on a layout, and on each watermark written under a layout with epoch > 0
SEED_ATTRIBUTE = "seed"  # the minute a group without a watermark of this epoch starts at
SEED_CURSORS_ATTRIBUTE = "seed_cursors"
UNKNOWN_ATTRIBUTE = "unknown_shards"  # shards whose old group had no position at the change: their new groups restart
CHANGED_MS_ATTRIBUTE = "changed_ms"  # when the layout was written: a group without a position is late since then
BUCKET_ATTRIBUTE = "bucket"
CURSORS_ATTRIBUTE = "cursors"  # {shard: the last sort key dispatched} for the watermark's minute
SCAN_EARLIEST_ATTRIBUTE = "earliest"
SCAN_NEXT_KEY_ATTRIBUTE = "next_key"  # the Scan's LastEvaluatedKey, as JSON
STARTED_MS_ATTRIBUTE = "started_ms"  # when the dispatcher first began to read the minute, epoch ms
FINISHED_MS_ATTRIBUTE = "finished_ms"  # when it had read every shard of the minute, just before passing it
MINUTE_RECORD_RETENTION_SECONDS = 3 * 24 * 60 * 60  # after the minute, set when the minute is finished
LEASE_SECONDS = 120
LEASE_RECORD_RETENTION_SECONDS = 24 * 60 * 60




@dataclass(frozen=True)
class DispatchGroup:
    """Group ``index`` of ``count``: the shards it reads and its state-table keys.

    Examples
    --------
    >>> DispatchGroup().watermark_key, DispatchGroup(1, 4).watermark_key, DispatchGroup(1, 4).shards
    ('scheduler#watermark', 'scheduler#4.1#watermark', (1, 5, 9, 13))
    """

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.count <= delay.MAX_SHARDS or not 0 <= self.index < self.count:
            raise ValueError(f"dispatch group {self.index} of {self.count} is not one: groups are 1..{delay.MAX_SHARDS} "
                             f"(one shard each at most), and the group 0..groups-1")

    def key(self, name: str) -> str:
        """The state-table key of this group's ``name`` item."""
        return f"{DISPATCHER_KEY_PREFIX}{name}" if self.count == 1 else f"{DISPATCHER_KEY_PREFIX}{self.count}.{self.index}#{name}"

    @property
    def lease_key(self) -> str:
        return self.key("lease")

    @property
    def watermark_key(self) -> str:
        return self.key("watermark")

    @property
    def scan_key(self) -> str:
        return self.key("scan")

    def minute_key(self, bucket: int) -> str:
        """The key of this group's record of minute ``bucket``."""
        return self.key(f"minute#{bucket}")

    @property
    def shards(self) -> tuple[int, ...]:
        return tuple(shard for shard in range(delay.MAX_SHARDS) if shard % self.count == self.index)

    def shard_for(self, shard: int) -> int:
        """The shard of this group nearest ``shard``: where a refile by this group goes, so this group reads it."""
        shard %= delay.MAX_SHARDS
        moved = shard - shard % self.count + self.index
        return moved if 0 <= moved < delay.MAX_SHARDS else self.index


def minute_keys(bucket: int, shard: int) -> list[str]:
    """The keys of every group count's record of minute ``bucket`` for the group that reads ``shard``, G = 1's first.

    Whichever layout read the shard in that minute, its record is among them.

    Examples
    --------
    >>> minute_keys(30_000_000, 15)[:2]
    ['scheduler#minute#30000000', 'scheduler#2.1#minute#30000000']
    """
    return list(dict.fromkeys(group_of(shard, count).minute_key(bucket) for count in range(1, delay.MAX_SHARDS + 1)))


def group_of(shard: int, count: int) -> DispatchGroup:
    """The group that reads ``shard`` (any whole number: a key no group reads still has a group for its decisions)."""
    return DispatchGroup(shard % count, count)


@dataclass(frozen=True)
class Layout:
    """How many groups, since which epoch, and where a group without a watermark of this epoch starts."""

    groups: int = 1
    epoch: int = 0
    seed: int | None = None
    seed_cursors: Mapping[int, str] = field(default_factory=dict)
    unknown_shards: frozenset[int] = frozenset()
    changed_ms: int | None = None

    def start(self, group: DispatchGroup) -> tuple[int, dict[int, str]] | None:
        """Where ``group`` starts without a watermark of this epoch: the seed with its shards' cursors.

        None without a seed, or when one of its shards had no known position at the change: the group restarts.
        """
        if self.seed is None or self.unknown_shards.intersection(group.shards):
            return None
        return self.seed, {shard: sk for shard, sk in self.seed_cursors.items() if shard in group.shards}

    def position(self, group: DispatchGroup, item: Mapping[str, Any] | None) -> tuple[int, dict[int, str]] | None:
        """The group's watermark and cursors from its item, if written in this epoch; else its start. StateError if unreadable.

        LayoutLostError when this is the epoch-0 layout of a missing item but the watermark carries a later epoch.
        """
        self.check_not_lost(item)
        if item is None or watermark_epoch(item) != self.epoch:
            return self.start(group)
        return parse_watermark(item)

    def check_not_lost(self, item: Mapping[str, Any] | None) -> None:
        """LayoutLostError when this layout is the fallback of a missing item (epoch 0) and ``item`` was written in a later epoch.

        The first change of G stamps the G = 1 watermark with the new epoch (``lost_marker_update``), so
        a deleted layout item is recognised instead of reviving the G = 1 watermark of before that change.
        """
        if self.epoch == 0 and item is not None and watermark_epoch(item) > 0:
            raise LayoutLostError(
                f"the layout item {LAYOUT_KEY} is missing, but {item.get('pk', {}).get('S', 'a watermark')} was written in "
                f"epoch {watermark_epoch(item)}: a layout existed, and the epoch never goes back; the delay dispatcher "
                f"stops until the layout is rewritten as {{{GROUPS_ATTRIBUTE}: the deployed G, {EPOCH_ATTRIBUTE}: the "
                f"epoch on the groups' watermarks}} (docs/delays.md)")

    def item(self) -> dict[str, Any]:
        """The layout as a state-table item."""
        item: dict[str, Any] = {STATE_PARTITION_KEY: {"S": LAYOUT_KEY}, GROUPS_ATTRIBUTE: {"N": str(self.groups)},
                                EPOCH_ATTRIBUTE: {"N": str(self.epoch)}}
        if self.seed is not None:
            item[SEED_ATTRIBUTE] = {"N": str(self.seed)}
            item[SEED_CURSORS_ATTRIBUTE] = {"M": {str(s): {"S": sk} for s, sk in sorted(self.seed_cursors.items())}}
        if self.unknown_shards:
            item[UNKNOWN_ATTRIBUTE] = {"L": [{"N": str(shard)} for shard in sorted(self.unknown_shards)]}
        if self.changed_ms is not None:
            item[CHANGED_MS_ATTRIBUTE] = {"N": str(self.changed_ms)}
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any] | None) -> Layout:
        """The layout an item holds; G = 1, epoch 0 without one. StateError if unreadable."""
        if item is None:
            return cls()
        try:
            seed = int(item[SEED_ATTRIBUTE]["N"]) if SEED_ATTRIBUTE in item else None
            cursors = {int(s): v["S"] for s, v in item.get(SEED_CURSORS_ATTRIBUTE, {"M": {}})["M"].items()}
            unknown = frozenset(int(v["N"]) for v in item.get(UNKNOWN_ATTRIBUTE, {"L": []})["L"])
            changed_ms = int(item[CHANGED_MS_ATTRIBUTE]["N"]) if CHANGED_MS_ATTRIBUTE in item else None
            groups, epoch = int(item[GROUPS_ATTRIBUTE]["N"]), int(item[EPOCH_ATTRIBUTE]["N"])
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise StateError(f"layout item {json.dumps(item, default=repr)[:200]} is unreadable ({type(error).__name__}: "
                             f"{error}); it needs {GROUPS_ATTRIBUTE} and {EPOCH_ATTRIBUTE} as numbers") from error
        if not 1 <= groups <= delay.MAX_SHARDS or epoch < 0:
            raise StateError(f"layout item {LAYOUT_KEY} has {GROUPS_ATTRIBUTE} {groups} and {EPOCH_ATTRIBUTE} {epoch}: "
                             f"{GROUPS_ATTRIBUTE} must be 1..{delay.MAX_SHARDS} and {EPOCH_ATTRIBUTE} 0 or more")
        return cls(groups, epoch, seed, cursors, unknown, changed_ms)

    def changed_to(self, groups: int, read: Callable[[str], Mapping[str, Any] | None], now_ms: int | None = None) -> Layout:
        """The layout of ``groups`` groups that follows this one, seeded from this one's groups (``read``: a consistent GetItem).

        The seed comes from the groups whose position is known; the shards of a group without one
        (no watermark and no seed, or an unreadable watermark) are ``unknown_shards``: only the new
        groups that read one of them restart as a new stack does. LayoutLostError passes through.
        """
        known: list[tuple[int, dict[int, str]]] = []
        unknown: set[int] = set()
        for index in range(self.groups):
            group = DispatchGroup(index, self.groups)
            try:
                position = self.position(group, read(group.watermark_key))
            except LayoutLostError:
                raise
            except StateError:  # an unreadable watermark: its shards restart from the records
                position = None
            if position is None:
                unknown.update(group.shards)
            else:
                known.append(position)
        if not known:
            return Layout(groups, self.epoch + 1, changed_ms=now_ms)
        seed = min(bucket for bucket, _ in known)
        cursors = {shard: sk for bucket, shard_cursors in known if bucket == seed for shard, sk in shard_cursors.items()}
        return Layout(groups, self.epoch + 1, seed, cursors, frozenset(unknown), now_ms)

    def lost_marker_update(self, table: str) -> dict[str, Any]:
        """The UpdateItem that stamps the G = 1 watermark with this (new) layout's epoch, after the first change of G.

        Creates the item when there is none (a stack that began with G > 1): without a layout item, a G = 1
        watermark with an epoch means the layout was lost (``check_not_lost``), never "G = 1, epoch 0".
        Unconditional: it follows the put of the first layout, which only one run can make.
        """
        return {"TableName": table, "Key": {STATE_PARTITION_KEY: {"S": DispatchGroup().watermark_key}},
                "UpdateExpression": "SET #epoch = :epoch",
                "ExpressionAttributeNames": {"#epoch": EPOCH_ATTRIBUTE},
                "ExpressionAttributeValues": {":epoch": {"N": str(self.epoch)}}}

    def group_positions(self, read: Callable[[str], Mapping[str, Any] | None]) -> GroupPositions:
        """Each group's position under this layout; unreadable watermarks are named, not raised."""
        result = GroupPositions(self)
        for index in range(self.groups):
            group = DispatchGroup(index, self.groups)
            try:
                result.positions[index] = self.position(group, read(group.watermark_key))
            except LayoutLostError:
                raise
            except StateError as error:
                result.unreadable[index] = str(error)
        return result


@dataclass
class GroupPositions:
    """Where each group of a layout stands: (minute, cursors), None when it has no position (has not run); and the unreadable."""

    layout: Layout
    positions: dict[int, tuple[int, dict[int, str]] | None] = field(default_factory=dict)
    unreadable: dict[int, str] = field(default_factory=dict)

    @property
    def not_run(self) -> list[int]:
        """The groups without a position: their watermark of this epoch is missing and there is no seed for them."""
        return [index for index, position in self.positions.items() if position is None]

    def shard_positions(self) -> dict[int, tuple[int, str]]:
        """{shard: (minute, cursor)} for the readable groups; minute -1 where the group has not run."""
        shards: dict[int, tuple[int, str]] = {}
        for index, position in self.positions.items():
            bucket, cursors = position if position is not None else (-1, {})
            shards.update({shard: (bucket, cursors.get(shard, "")) for shard in DispatchGroup(index, self.layout.groups).shards})
        return shards


def watermark_epoch(item: Mapping[str, Any]) -> int:
    """The epoch a watermark item was written in (0 when it has none: written before any layout)."""
    try:
        return int(item.get(EPOCH_ATTRIBUTE, {"N": "0"})["N"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return -1  # never a layout's: the item counts as stale


def parse_watermark(item: Mapping[str, Any]) -> tuple[int, dict[int, str]]:
    """The watermark item's minute and per-shard cursors; StateError when it is not as the dispatcher writes it.

    Examples
    --------
    >>> parse_watermark({"bucket": {"N": "30000016"}, "cursors": {"M": {"3": {"S": "1800000960000#m-1"}}}})
    (30000016, {3: '1800000960000#m-1'})
    """
    try:
        bucket = int(item[BUCKET_ATTRIBUTE]["N"])
        cursors = {int(shard): value["S"] for shard, value in item.get(CURSORS_ATTRIBUTE, {"M": {}})["M"].items()}
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise StateError(f"watermark item {json.dumps(item, default=repr)[:200]} is unreadable ({type(error).__name__}: "
                         f"{error}); it needs {BUCKET_ATTRIBUTE} as a number and {CURSORS_ATTRIBUTE} as a map of shard to "
                         "string sort key") from error
    return bucket, cursors


def shard_positions(read: Callable[[str], Mapping[str, Any] | None]) -> dict[int, tuple[int, str]]:
    """How far the delay dispatcher has come, per shard, under the current layout: {shard: (minute, cursor)}.

    A message of ``shard`` is sent when its minute is before the position's, or equal with a sort key at or
    before the cursor (``""``: none of that minute yet). Minute -1: its group has not run. ``read`` is a
    consistent GetItem by state-table key; StateError when the layout is unreadable. The shards of a group
    whose watermark is unreadable are left out (``read_positions`` names them).
    """
    return read_positions(read).shard_positions()


def read_positions(read: Callable[[str], Mapping[str, Any] | None]) -> GroupPositions:
    """Every group's position under the current layout; StateError when the layout is unreadable (or lost)."""
    return Layout.from_item(read(LAYOUT_KEY)).group_positions(read)


def state_reader(dynamodb: Any, state_table: str) -> Callable[[str], dict[str, Any] | None]:
    """A strongly consistent GetItem of the state table by key, as ``shard_positions`` and ``read_positions`` take it."""
    def read(key: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = dynamodb.get_item(
            TableName=state_table, Key={STATE_PARTITION_KEY: {"S": key}}, ConsistentRead=True
        ).get("Item")
        return item

    return read


# The keys of group 0 of 1, a dispatcher that never fanned out; each DispatchGroup has its own.
LEASE_KEY = DispatchGroup().lease_key
WATERMARK_KEY = DispatchGroup().watermark_key
SCAN_KEY = DispatchGroup().scan_key  # the first run's Scan, resumable: where it stopped and the earliest minute so far
MINUTE_KEY_PREFIX = DispatchGroup().minute_key(0).removesuffix("0")  # one record per minute, read by the safety net


def minute_key(bucket: int) -> str:
    """The state-table key of minute ``bucket``'s start record, for a dispatcher of one group (``DispatchGroup.minute_key``).

    Examples
    --------
    >>> minute_key(30_000_000)
    'scheduler#minute#30000000'
    """
    return f"{MINUTE_KEY_PREFIX}{bucket}"


class GroupState:
    """One dispatch group's records, as its runs write them: lease, layout, watermark with cursors, Scan, minute records.

    ``call`` runs each DynamoDB call (the run's retries and time checks); ``clock`` stamps the records.

    Examples
    --------
    >>> from tests.fake_dynamodb import FakeDynamoDB
    >>> dynamodb = FakeDynamoDB(); dynamodb.create_table("state", "pk")
    >>> state = GroupState(LazyClient("dynamodb", dynamodb), "state", DispatchGroup(), clock=lambda: 1_800_000_000.0, call=lambda do: do())
    >>> state.record_start(30_000_000); state.get(minute_key(30_000_000))[STARTED_MS_ATTRIBUTE]
    {'N': '1800000000000'}
    """

    def __init__(self, dynamodb: LazyClient, table: str, group: DispatchGroup, *, clock: Callable[[], float],
                 call: Callable[[Callable[[], Any]], Any]) -> None:
        self.table = table
        self.group = group
        self.layout = Layout()  # the run's, read before anything else
        self.watermark_found = False  # whether the run found its watermark (of this epoch): then it writes only over it
        self._dynamodb = dynamodb
        self._clock = clock
        self._call = call
        self._lease = Lease(table, group.lease_key, LEASE_SECONDS, LEASE_RECORD_RETENTION_SECONDS)

    # -- the lease ------------------------------------------------------------------------

    def acquire(self, holder: str) -> bool:
        """Claim the run's lease; False while another run holds it."""
        return self._lease.claim(self._dynamodb.get(), holder, int(self._clock())) is None

    def release(self, holder: str) -> None:
        """Give the lease back, if this run still holds it (else it was taken over after running out)."""
        self._lease.release(self._dynamodb.get(), holder)

    def get(self, key: str, consistent: bool = True) -> dict[str, Any] | None:
        """One state-table item, or None."""
        item: dict[str, Any] | None = self._call(lambda: self._dynamodb.get().get_item(
            TableName=self.table, Key={STATE_PARTITION_KEY: {"S": key}}, ConsistentRead=consistent
        )).get("Item")
        return item

    def _delete(self, key: str) -> None:
        self._call(lambda: self._dynamodb.get().delete_item(TableName=self.table, Key={STATE_PARTITION_KEY: {"S": key}}))

    # -- the layout -----------------------------------------------------------------------

    def change_layout(self, item: Mapping[str, Any] | None, layout: Layout) -> Layout | None:
        """Put the layout of this group's count that follows ``layout`` (read as ``item``); None when another run changed it first.

        The change is a conditional put over the layout read, so of two groups changing it
        at once one wins and the other takes the winner's (its seed was read as safely).
        """
        changed = layout.changed_to(self.group.count, self.get, int(self._clock() * 1000))
        condition = "attribute_not_exists(pk)" if item is None else "#epoch = :epoch"
        values = {} if item is None else {"ExpressionAttributeNames": {"#epoch": EPOCH_ATTRIBUTE},
                                          "ExpressionAttributeValues": {":epoch": {"N": str(layout.epoch)}}}
        try:
            self._call(functools.partial(
                self._dynamodb.get().put_item, TableName=self.table, Item=changed.item(), ConditionExpression=condition, **values))
        except Exception as error:
            if not is_condition_failure(error):
                raise
            return None
        if item is None:
            self._mark_first_change(changed)
        return changed

    def _mark_first_change(self, changed: Layout) -> None:
        """Stamp the G = 1 watermark with the first layout's epoch (``Layout.lost_marker_update``).

        If the run dies between the layout's put and this stamp, a later deleted layout goes unrecognised
        (the fall-back of before); the window is one call long.
        """
        self._call(lambda: self._dynamodb.get().update_item(**changed.lost_marker_update(self.table)))

    # -- the watermark with its cursors ---------------------------------------------------

    def read_watermark(self) -> tuple[tuple[int, dict[int, str]] | None, str]:
        """The group's position (watermark and cursors) under ``layout``, and what was wrong with an unreadable watermark.

        A watermark of an earlier layout's epoch, or an unreadable one, is deleted; the group then starts at the
        layout's seed (not after an unreadable one). None: no position, the group restarts. LayoutLostError passes.
        """
        item = self.get(self.group.watermark_key)
        self.layout.check_not_lost(item)
        stale = item is not None and watermark_epoch(item) != self.layout.epoch
        self.watermark_found = False
        unreadable = ""
        if item is not None and not stale:
            try:
                found = parse_watermark(item)
                self.watermark_found = True
                return found, unreadable
            except StateError as error:  # not ours: start again as if it were lost (the next write replaces it)
                unreadable = str(error)
        if item is not None:
            self._delete(self.group.watermark_key)
        return (self.layout.start(self.group) if item is None or stale else None), unreadable

    def write_watermark(self, bucket: int, cursors: dict[int, str], *, expected: int) -> None:
        """Put the watermark (minute and cursors), only over the minute and epoch this run found; else the condition failure.

        Over no item only when the run found none: a stalled run of an earlier epoch (of the same G, or the
        G = 1 run of before the first change, whose watermark that change stamped) can no longer write.
        """
        epoch = self._epoch_attribute()
        epoch_condition = "#epoch = :epoch" if epoch else "attribute_not_exists(#epoch)"
        condition = f"#bucket = :expected AND {epoch_condition}"
        item = {
            STATE_PARTITION_KEY: {"S": self.group.watermark_key},
            BUCKET_ATTRIBUTE: {"N": str(bucket)},
            CURSORS_ATTRIBUTE: {"M": {str(shard): {"S": sk} for shard, sk in sorted(cursors.items())}},
            **self._epoch_attribute(),
        }
        self._call(lambda: self._dynamodb.get().put_item(
            TableName=self.table,
            Item=item,
            ConditionExpression=condition if self.watermark_found else f"attribute_not_exists(pk) OR ({condition})",
            ExpressionAttributeNames={"#bucket": BUCKET_ATTRIBUTE, "#epoch": EPOCH_ATTRIBUTE},
            ExpressionAttributeValues={":expected": {"N": str(expected)}, **({":epoch": epoch[EPOCH_ATTRIBUTE]} if epoch else {})},
        ))
        self.watermark_found = True

    def _epoch_attribute(self) -> dict[str, Any]:
        """The layout's epoch as an item attribute; none in epoch 0, so a dispatcher that never changed G writes what it always did."""
        return {EPOCH_ATTRIBUTE: {"N": str(self.layout.epoch)}} if self.layout.epoch else {}

    # -- the first run's Scan -------------------------------------------------------------

    def read_scan(self) -> tuple[int, dict[str, Any]] | None:
        """Where the first run's unfinished Scan stopped: the earliest minute it found so far and its next key; None without one."""
        scan = self.get(self.group.scan_key)
        if scan is None:
            return None
        return int(scan[SCAN_EARLIEST_ATTRIBUTE]["N"]), json.loads(scan[SCAN_NEXT_KEY_ATTRIBUTE]["S"])

    def save_scan(self, earliest: int, next_key: dict[str, Any]) -> None:
        """Where the first run's Scan stopped, and the earliest minute it found so far."""
        self._call(lambda: self._dynamodb.get().put_item(TableName=self.table, Item={
            STATE_PARTITION_KEY: {"S": self.group.scan_key},
            SCAN_EARLIEST_ATTRIBUTE: {"N": str(earliest)},
            SCAN_NEXT_KEY_ATTRIBUTE: {"S": json.dumps(next_key, sort_keys=True)},
        }))

    def finish_scan(self) -> None:
        """The Scan is done: its record goes."""
        self._delete(self.group.scan_key)

    # -- minute records -------------------------------------------------------------------

    def finished(self, bucket: int) -> bool:
        """Whether minute ``bucket``'s record says every shard was read, in this layout's epoch (an eventually consistent read)."""
        record = self.get(self.group.minute_key(bucket), consistent=False)
        return record is not None and FINISHED_MS_ATTRIBUTE in record and watermark_epoch(record) == self.layout.epoch

    def record_start(self, bucket: int, *, continuing: bool = False) -> None:
        """Write minute ``bucket``'s start record unless one exists: the first start time is kept.

        Every run writes it before its first Query of the minute, so a cancel (``worker_tier.delays.cancellation``
        checks these records) never succeeds after a Query may have read its message. ``continuing``: the
        minute has cursors already (an earlier run, or a layout's seed from other groups) and this group has
        no record of when reading began, so the record says 0 ("unknown: any insert may have been missed"),
        the safety net's conservative reading. No TTL yet: however long the minute stays the watermark's,
        its record stays (the safety net needs it); ``record_finish`` sets the TTL.
        """
        started_ms = 0 if continuing else int(self._clock() * 1000)
        item = {
            STATE_PARTITION_KEY: {"S": self.group.minute_key(bucket)},
            STARTED_MS_ATTRIBUTE: {"N": str(started_ms)},
        }
        try:
            self._call(lambda: self._dynamodb.get().put_item(
                TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            ))
        except Exception as error:
            if not is_condition_failure(error):
                raise

    def record_finish(self, bucket: int) -> None:
        """Stamp minute ``bucket``'s record with the time every shard had been read (and the epoch, after a change of G)."""
        epoch = self._epoch_attribute()
        self._call(lambda: self._dynamodb.get().update_item(
            TableName=self.table,
            Key={STATE_PARTITION_KEY: {"S": self.group.minute_key(bucket)}},
            UpdateExpression="SET #finished = :finished, #expiration = :expiration" + (", #epoch = :epoch" if epoch else ""),
            ExpressionAttributeNames={"#finished": FINISHED_MS_ATTRIBUTE, "#expiration": STATE_TTL_ATTRIBUTE,
                                      **({"#epoch": EPOCH_ATTRIBUTE} if epoch else {})},
            ExpressionAttributeValues={
                ":finished": {"N": str(int(self._clock() * 1000))},
                ":expiration": {"N": str(bucket * BUCKET_SECONDS + MINUTE_RECORD_RETENTION_SECONDS)},
                **({":epoch": epoch[EPOCH_ATTRIBUTE]} if epoch else {}),
            },
        ))
