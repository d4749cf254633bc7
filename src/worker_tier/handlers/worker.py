"""The SQS worker function: ``worker_tier.handlers.worker.lambda_handler``."""

from __future__ import annotations

from typing import Any

from worker_tier.handlers import PerProcess
from worker_tier.observability import logger, metrics
from worker_tier.worker import Worker

worker = PerProcess(Worker.from_environment)


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Process an SQS event; report failed records in ``batchItemFailures``."""
    return worker.get().handle(event, context)
