"""The worker: runs a batch of messages through their tasks and decides each one's fate (``batch``, ``fates``), with heartbeats, idempotency and dead letters.

Exports ``Worker`` and the outcome API (``Outcome``, its ``OUTCOME_*`` statuses, ``add_outcome_listener``,
``remove_outcome_listener``), imported on first use.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker_tier.worker.batch import Worker
    from worker_tier.worker.fates import (
        OUTCOME_DEAD_LETTERED,
        OUTCOME_HELD_BACK,
        OUTCOME_RELEASED,
        OUTCOME_RESCHEDULED,
        OUTCOME_RETRYING,
        OUTCOME_SUCCEEDED,
        OUTCOME_THROTTLED,
        Outcome,
        OutcomeListener,
        add_outcome_listener,
        remove_outcome_listener,
    )

_HOMES = {
    "Worker": "batch",
    "OUTCOME_DEAD_LETTERED": "fates",
    "OUTCOME_HELD_BACK": "fates",
    "OUTCOME_RELEASED": "fates",
    "OUTCOME_RESCHEDULED": "fates",
    "OUTCOME_RETRYING": "fates",
    "OUTCOME_SUCCEEDED": "fates",
    "OUTCOME_THROTTLED": "fates",
    "Outcome": "fates",
    "OutcomeListener": "fates",
    "add_outcome_listener": "fates",
    "remove_outcome_listener": "fates",
}
__all__ = [
    "OUTCOME_DEAD_LETTERED",
    "OUTCOME_HELD_BACK",
    "OUTCOME_RELEASED",
    "OUTCOME_RESCHEDULED",
    "OUTCOME_RETRYING",
    "OUTCOME_SUCCEEDED",
    "OUTCOME_THROTTLED",
    "Outcome", "OutcomeListener", "Worker", "add_outcome_listener", "remove_outcome_listener"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
