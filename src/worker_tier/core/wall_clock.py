"""The process's wall clock: what the runtime reads for "now" unless it is given a clock.

Every runtime class that reads the time takes a ``clock`` (seconds since the epoch); its default is
``now``, which reads ``time.time`` until a test harness puts its own clock in with ``use``. That one
seam lets ``worker_tier.testing.TaskWorld`` move the time of code it does not build, such as
``Client.from_env()`` in a task or in the app under test, without patching ``time.time`` for the
whole process. Durations and timeouts (``time.monotonic``) are real time and stay outside it.
"""

from __future__ import annotations

import time
from typing import Callable

_clock: Callable[[], float] = time.time


def now() -> float:
    """Seconds since the epoch on the process's wall clock: ``time.time()`` unless a harness set another.

    Examples
    --------
    >>> previous = use(lambda: 1_800_000_000.0)
    >>> now()
    1800000000.0
    >>> _ = use(previous)
    """
    return _clock()


def use(clock: Callable[[], float] | None) -> Callable[[], float]:
    """Make ``clock`` the process's wall clock (None: ``time.time``); return the one it replaces, to put back."""
    global _clock
    previous, _clock = _clock, clock or time.time
    return previous
