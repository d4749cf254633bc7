"""Retry delays: exponential backoff with full jitter.

Full jitter spreads retries of a failed burst evenly over the window instead of
bunching them: https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/
"""

from __future__ import annotations

import math
import random as _random
from typing import Callable

from worker_tier.core import limits


def backoff_ceiling_seconds(attempt: int, base_seconds: int, cap_seconds: int) -> int:
    """The upper bound of the retry delay after the ``attempt``-th failed receive (1-based).

    Examples
    --------
    >>> [backoff_ceiling_seconds(n, 2, 900) for n in (1, 2, 3, 10, 11)]
    [2, 4, 8, 900, 900]
    """
    exponent = min(max(attempt, 1) - 1, 62)
    return min(base_seconds * (1 << exponent), cap_seconds, limits.SQS_MAX_VISIBILITY_TIMEOUT_SECONDS)


def backoff_seconds(
    attempt: int, base_seconds: int, cap_seconds: int, random: Callable[[], float] = _random.random
) -> int:
    """A full-jitter delay in whole seconds, uniform over 0..ceiling.

    Examples
    --------
    >>> backoff_seconds(3, 2, 900, random=lambda: 0.5)
    4
    """
    ceiling = backoff_ceiling_seconds(attempt, base_seconds, cap_seconds)
    return min(ceiling, math.floor(random() * (ceiling + 1)))
