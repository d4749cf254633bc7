"""The middleware pipeline: the hooks a worker runs each message through and a producer's sends pass (``middleware``), and the middleware no one subsystem owns (``tracing``).

Exports ``Middleware``, the base class to write one (docs/middleware.md), imported on first use.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker_tier.pipeline.middleware import Middleware

__all__ = ["Middleware"]


def __getattr__(name: str) -> Any:
    if name == "Middleware":
        from worker_tier.pipeline.middleware import Middleware

        return Middleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
