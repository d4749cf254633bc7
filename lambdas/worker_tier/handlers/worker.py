"""The SQS worker function: ``worker_tier.handlers.worker.lambda_handler``."""

from __future__ import annotations

from typing import Any

from worker_tier.observability import logger, metrics
from worker_tier.worker import Worker

_worker: Worker | None = None


def _get_worker() -> Worker:
    """The process's Worker, built from the environment on the first invocation."""
    global _worker
    if _worker is None:
        _worker = Worker.from_environment()
    return _worker


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Process an SQS event; report failed records in ``batchItemFailures``."""
    return _get_worker().handle(event, context)


def reset_worker() -> None:
    """Rebuild the Worker from the environment on the next invocation (the local environment changes it)."""
    global _worker
    _worker = None
