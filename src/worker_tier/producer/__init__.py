"""The producer: ``Client`` checks and sends messages, now or delayed, cancellable (``client``; the checks in ``outgoing``).

Exports ``Client``, ``OutgoingMessage`` and ``SendResult``, imported on first use.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker_tier.producer.client import Client, OutgoingMessage, SendResult

__all__ = ["Client", "OutgoingMessage", "SendResult"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from worker_tier.producer import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
