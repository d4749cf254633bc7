"""The worker: runs a batch of messages through their tasks and decides each one's fate (``batch``, ``fates``), with heartbeats, idempotency and dead letters.

Exports ``Worker`` and the outcome API (``Outcome``, ``add_outcome_listener``, ``remove_outcome_listener``), imported on first use.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker_tier.worker.batch import Worker
    from worker_tier.worker.fates import Outcome, OutcomeListener, add_outcome_listener, remove_outcome_listener

_HOMES = {
    "Worker": "batch",
    "Outcome": "fates",
    "OutcomeListener": "fates",
    "add_outcome_listener": "fates",
    "remove_outcome_listener": "fates",
}
__all__ = ["Outcome", "OutcomeListener", "Worker", "add_outcome_listener", "remove_outcome_listener"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
