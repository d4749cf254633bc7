"""The delay dispatcher's fan-out: shard groups, their state-table keys, and the layout that says how many there are.

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
what an old group dispatched after the seed is sent again (duplicates). Without a
layout record the layout is G = 1, epoch 0: a stack that never changed G writes none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from worker_tier import delay
from worker_tier.contract import DISPATCHER_KEY_PREFIX, STATE_PARTITION_KEY
from worker_tier.errors import WorkerTierError

LAYOUT_KEY = f"{DISPATCHER_KEY_PREFIX}layout"
GROUPS_ATTRIBUTE = "groups"
EPOCH_ATTRIBUTE = "epoch"  # on a layout, and on each watermark written under a layout with epoch > 0
SEED_ATTRIBUTE = "seed"  # the minute a group without a watermark of this epoch starts at
SEED_CURSORS_ATTRIBUTE = "seed_cursors"
BUCKET_ATTRIBUTE = "bucket"
CURSORS_ATTRIBUTE = "cursors"  # {shard: the last sort key dispatched} for the watermark's minute


class StateError(WorkerTierError, ValueError):
    """A dispatcher state item (the watermark) is not as the dispatcher writes it."""


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

    def start(self, group: DispatchGroup) -> tuple[int, dict[int, str]] | None:
        """Where ``group`` starts without a watermark of this epoch: the seed with its shards' cursors; None without a seed."""
        if self.seed is None:
            return None
        return self.seed, {shard: sk for shard, sk in self.seed_cursors.items() if shard in group.shards}

    def position(self, group: DispatchGroup, item: Mapping[str, Any] | None) -> tuple[int, dict[int, str]] | None:
        """The group's watermark and cursors from its item, if written in this epoch; else its start. StateError if unreadable."""
        if item is None or watermark_epoch(item) != self.epoch:
            return self.start(group)
        return parse_watermark(item)

    def item(self) -> dict[str, Any]:
        """The layout as a state-table item."""
        item: dict[str, Any] = {STATE_PARTITION_KEY: {"S": LAYOUT_KEY}, GROUPS_ATTRIBUTE: {"N": str(self.groups)},
                                EPOCH_ATTRIBUTE: {"N": str(self.epoch)}}
        if self.seed is not None:
            item[SEED_ATTRIBUTE] = {"N": str(self.seed)}
            item[SEED_CURSORS_ATTRIBUTE] = {"M": {str(s): {"S": sk} for s, sk in sorted(self.seed_cursors.items())}}
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any] | None) -> Layout:
        """The layout an item holds; G = 1, epoch 0 without one. StateError if unreadable."""
        if item is None:
            return cls()
        try:
            seed = int(item[SEED_ATTRIBUTE]["N"]) if SEED_ATTRIBUTE in item else None
            cursors = {int(s): v["S"] for s, v in item.get(SEED_CURSORS_ATTRIBUTE, {"M": {}})["M"].items()}
            return cls(int(item[GROUPS_ATTRIBUTE]["N"]), int(item[EPOCH_ATTRIBUTE]["N"]), seed, cursors)
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise StateError(f"layout item {json.dumps(item, default=repr)[:200]} is unreadable ({type(error).__name__}: "
                             f"{error}); it needs {GROUPS_ATTRIBUTE} and {EPOCH_ATTRIBUTE} as numbers") from error

    def changed_to(self, groups: int, read: Callable[[str], Mapping[str, Any] | None]) -> Layout:
        """The layout of ``groups`` groups that follows this one, seeded from this one's groups (``read``: a consistent GetItem)."""
        positions = []
        for index in range(self.groups):
            group = DispatchGroup(index, self.groups)
            try:
                positions.append(self.position(group, read(group.watermark_key)))
            except StateError:  # an unreadable watermark: that group restarts from its records; so does the new layout
                positions.append(None)
        known = [p for p in positions if p is not None]
        if len(known) < len(positions):  # a group whose position is unknown: the new groups restart as a new stack does
            return Layout(groups, self.epoch + 1)
        seed = min(bucket for bucket, _ in known)
        cursors = {shard: sk for bucket, shard_cursors in known if bucket == seed for shard, sk in shard_cursors.items()}
        return Layout(groups, self.epoch + 1, seed, cursors)


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
    consistent GetItem by state-table key; StateError when the layout or a watermark is unreadable.
    """
    layout = Layout.from_item(read(LAYOUT_KEY))
    positions: dict[int, tuple[int, str]] = {}
    for index in range(layout.groups):
        group = DispatchGroup(index, layout.groups)
        position = layout.position(group, read(group.watermark_key))
        bucket, cursors = position if position is not None else (-1, {})
        positions.update({shard: (bucket, cursors.get(shard, "")) for shard in group.shards})
    return positions
