"""The container worker: a long-running consumer that runs the same ``Worker`` on each message (``consumer``), with batched deletes (``deletions``) and ECS task scale-in protection (``protection``). ``python -m worker_tier worker`` starts it.

Exports ``Consumer``, imported on first use.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker_tier.container.consumer import Consumer

__all__ = ["Consumer"]


def __getattr__(name: str) -> Any:
    if name == "Consumer":
        from worker_tier.container.consumer import Consumer

        return Consumer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
