"""The SQS worker function: ``worker_tier.handlers.worker.lambda_handler``."""

from __future__ import annotations

from typing import Any

from worker_tier.core import contract
from worker_tier.handlers import PerProcess
from worker_tier.core.observability import log_metrics, logger
from worker_tier.worker.batch import Worker

# The state table only for idempotent tasks; the delay table for retries past SQS's limit (none on FIFO);
# the container worker's queue only where there is one. Task code's Client.from_env reads the producer's.
NEEDS = contract.Needs(
    "the Lambda worker", required=("queue_url", "dlq_url"),
    optional=("state_table", "delay_table", "container_queue_url"), settings=True,
) | contract.PRODUCER_NEEDS


def _new_worker() -> Worker:
    NEEDS.check()
    return Worker.from_environment()


worker = PerProcess(_new_worker)


@log_metrics  # metrics.log_metrics, flushed for less (observability.flush_invocation)
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Process an SQS event; report failed records in ``batchItemFailures``."""
    return worker.get().handle(event, context)
