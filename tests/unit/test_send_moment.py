"""The moment in the second to send a batch of delayed messages (worker_tier.delays.send_moment), over any due times and clock."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, strategies as st

from worker_tier.delays.send_moment import ALIGNED_ROUNDING_MS, LEAD_MS, MAX_SPREAD_MS, MAX_WAIT_MS, SECOND_MS, moment, wait_ms

BASE_MS = 1_800_000_000_000


def rounding_ms(due_ms: int, now_ms: float) -> float:
    """How much later than due SQS shows a message sent at ``now_ms`` with DelaySeconds = ceil(due − now)."""
    delay_s = math.ceil((due_ms - now_ms) / 1000)
    return now_ms + delay_s * 1000 - due_ms


close_batches = st.builds(
    lambda first, offsets: [first + offset for offset in offsets],
    st.integers(BASE_MS, BASE_MS + 10**7),
    st.lists(st.integers(0, MAX_SPREAD_MS), min_size=1, max_size=10),
)
ahead_ms = st.floats(LEAD_MS + 1, 900_000, allow_nan=False)


@given(close_batches, ahead_ms)
def test_a_close_batch_waits_at_most_max_wait_and_then_each_message_is_rounded_up_by_at_most_the_window(dues, ahead):
    now = min(dues) - ahead
    batch = moment(dues)
    assert batch is not None and batch.spread_ms <= MAX_SPREAD_MS
    wait = wait_ms(batch, now)
    assert 0 <= wait <= MAX_WAIT_MS
    when = now + wait
    if min(dues) - when > LEAD_MS:  # still aligned at its moment (else it goes then, as any due so soon)
        assert wait_ms(batch, when) == 0 or wait_ms(batch, when + 1e-3) == 0  # float rounding at the boundary
        at = when if wait_ms(batch, when) == 0 else when + 1e-3
        assert max(rounding_ms(due, at) for due in dues) <= ALIGNED_ROUNDING_MS + 1e-3


@given(close_batches, ahead_ms)
def test_whenever_a_batch_may_go_its_rounding_is_within_the_window(dues, ahead):
    now = min(dues) - ahead
    if wait_ms(moment(dues), now) == 0:
        assert max(rounding_ms(due, now) for due in dues) <= ALIGNED_ROUNDING_MS + 1e-6


@given(st.lists(st.integers(BASE_MS, BASE_MS + 10**7), min_size=1, max_size=10), ahead_ms)
def test_any_batch_waits_at_most_max_wait_and_a_wide_one_not_at_all(dues, ahead):
    now = min(dues) - ahead
    phases = sorted(due % SECOND_MS for due in dues)
    widest_gap = max([b - a for a, b in itertools.pairwise(phases)] + [phases[0] + SECOND_MS - phases[-1]])
    assert 0 <= wait_ms(moment(dues), now) <= MAX_WAIT_MS
    if SECOND_MS - widest_gap > MAX_SPREAD_MS:
        assert moment(dues) is None and wait_ms(None, now) == 0


@given(close_batches, st.floats(-5_000, LEAD_MS, allow_nan=False))
def test_a_batch_due_within_the_lead_goes_at_once(dues, ahead):
    assert wait_ms(moment(dues), min(dues) - ahead) == 0


def test_across_the_whole_second_the_arc_wraps():
    batch = moment([BASE_MS + 995, BASE_MS + 1_003])
    assert (batch.start_ms, batch.spread_ms) == (995, 8)
    assert wait_ms(batch, BASE_MS - 10_000 + 500) == 0  # rounded up by 505 and 497 ms
    assert wait_ms(batch, BASE_MS - 10_000 + 900) == 105  # by 905 and 897 ms: it waits until .003 comes round
