"""Exponential backoff with full jitter."""

import pytest

from worker_tier.core.backoff import backoff_ceiling_seconds, backoff_seconds
from worker_tier.core.limits import SQS_MAX_VISIBILITY_TIMEOUT_SECONDS


@pytest.mark.parametrize("attempt, ceiling", [(0, 2), (1, 2), (2, 4), (3, 8), (9, 512), (10, 900), (500, 900)])
def test_ceiling_doubles_from_the_base_until_the_cap(attempt, ceiling):
    assert backoff_ceiling_seconds(attempt, 2, 900) == ceiling


def test_ceiling_never_exceeds_sqs_maximum_visibility():
    assert backoff_ceiling_seconds(40, 2, 10**9) == SQS_MAX_VISIBILITY_TIMEOUT_SECONDS


def test_full_jitter_spans_zero_to_ceiling():
    # GIVEN the random source at its extremes  THEN the delay spans 0..ceiling inclusive
    assert backoff_seconds(4, 2, 900, random=lambda: 0.0) == 0
    assert backoff_seconds(4, 2, 900, random=lambda: 0.9999999) == 16


def test_jitter_is_spread_not_constant():
    import random

    rng = random.Random(7)
    delays = {backoff_seconds(6, 2, 900, random=rng.random) for _ in range(200)}
    assert min(delays) >= 0 and max(delays) <= 64 and len(delays) > 30
