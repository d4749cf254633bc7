"""When in the second to send a batch of delayed messages, so that rounding DelaySeconds up adds little lateness.

SQS delays a message by whole seconds, and the dispatcher rounds ``due − now`` up so nothing
shows early (``delivery.delay_seconds``): a message is shown ``(now − due) mod 1 s`` after its
due time, whatever the delay. That rounding depends only on where in the second the send falls
against where the due time falls. Sent at any moment it averages half a second and reaches
a whole one; sent just after the moment the due times' fractions of a second come round,
it is near zero.

The dispatcher sends up to ``DISPATCH_HORIZON_SECONDS`` ahead, so a batch can wait for its
moment without being late for it: a batch whose due times fall within ``MAX_SPREAD_MS`` of the
same fraction of a second (every batch of a busy minute: 10 neighbours in due order) is sent
only while the rounding of each of its messages is at most ``ALIGNED_ROUNDING_MS``; the wait
for that is at most ``MAX_WAIT_MS``. A batch spread wider (a quiet minute) has no such moment
and goes at once, as one due within ``LEAD_MS`` does: waiting could not make it earlier.

Only the moment moves: DelaySeconds is still computed from the clock read just before each call,
so a send that starts later than planned (a busy CPU) is rounded from its own start, never early.

Examples
--------
>>> batch = moment([1_800_000_100_250, 1_800_000_100_270])
>>> batch
Moment(start_ms=250, spread_ms=20, earliest_due_ms=1800000100250)
>>> wait_ms(batch, 1_800_000_000_100.0)  # the fractions come round at .270 (and a guard of 2 ms)
172.0
>>> wait_ms(batch, 1_800_000_000_300.0)  # sent now, rounded up by 50 ms at most
0.0
>>> wait_ms(moment([1_800_000_100_000, 1_800_000_100_600]), 1_800_000_000_100.0)  # spread too wide: at once
0.0
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

SECOND_MS = 1000
# A batch sent on its moment has each message rounded up by at most this. The margin to a whole second is for
# what passes between the wave's clock read and SQS receiving each call: one CPU builds the wave's calls in turn.
ALIGNED_ROUNDING_MS = 800
# The due times of a batch timed to its moment fall within this of the same fraction of a second.
MAX_SPREAD_MS = 50
# A moment starts this long after the last due time's fraction: sent exactly on it, float error in due − now can round
# a whole second up.
GUARD_MS = 2
# A wait this short counts as none (a sleep may end a hair early): under GUARD_MS, so still after the last due time's fraction.
READY_WITHIN_MS = 1
# The longest a batch waits for its moment: the part of the second outside its window.
MAX_WAIT_MS = SECOND_MS - (ALIGNED_ROUNDING_MS - MAX_SPREAD_MS - GUARD_MS)
# A batch with a message due within this of now goes at once: waiting would only make that message later.
LEAD_MS = SECOND_MS


@dataclass(frozen=True)
class Moment:
    """Where a batch's due times fall in the second: from ``start_ms`` over ``spread_ms`` (wrapping past 1,000)."""

    start_ms: int
    spread_ms: int
    earliest_due_ms: int


def moment(due_ms: list[int]) -> Moment | None:
    """The batch's place in the second, or None when its due times spread wider than ``MAX_SPREAD_MS`` (no moment suits all).

    The shortest arc of the second holding every due time's fraction: the circle less its largest gap.

    Examples
    --------
    >>> moment([1_800_000_000_990, 1_800_000_001_010])  # across a whole second: 20 ms from .990
    Moment(start_ms=990, spread_ms=20, earliest_due_ms=1800000000990)
    >>> moment([5_000, 5_400]) is None
    True
    """
    if not due_ms:
        return None
    phases = sorted(due % SECOND_MS for due in due_ms)
    gap, start = phases[0] + SECOND_MS - phases[-1], phases[0]  # the gap across the whole second
    for before, after in itertools.pairwise(phases):
        if after - before > gap:
            gap, start = after - before, after
    spread = SECOND_MS - gap
    if spread > MAX_SPREAD_MS:
        return None
    return Moment(start, spread, min(due_ms))


def wait_ms(batch: Moment | None, now_ms: float) -> float:
    """How long the batch should wait for its moment from ``now_ms``: 0 when it goes now; at most ``MAX_WAIT_MS``.

    Now suits it when every message would be rounded up by at most ``ALIGNED_ROUNDING_MS``:
    the send falls after the last due time's fraction and within the window after the first's.
    """
    if batch is None or batch.earliest_due_ms - now_ms <= LEAD_MS:
        return 0.0
    since_start = (now_ms - batch.start_ms) % SECOND_MS  # the rounding of the arc's first message, if sent now
    if batch.spread_ms + GUARD_MS <= since_start <= ALIGNED_ROUNDING_MS:
        return 0.0
    left = (batch.start_ms + batch.spread_ms + GUARD_MS - now_ms) % SECOND_MS
    return 0.0 if left <= READY_WITHIN_MS else left  # a sleep that ends a hair short (float error) is on time
