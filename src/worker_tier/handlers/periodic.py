"""The periodic-task function: ``worker_tier.handlers.periodic.lambda_handler``, invoked by EventBridge Scheduler."""

from __future__ import annotations

from typing import Any

from worker_tier.core import contract
from worker_tier.core.contract import (
    METRIC_TICKS_DUPLICATE,
    METRIC_TICKS_ENQUEUED,
    METRIC_TICKS_RETRIED,
)
from worker_tier.handlers import PerProcess
from worker_tier.core.observability import logger, metrics
from worker_tier.periodic.ticks import TickEnqueuer, tick_from_event

# The payload bucket takes a tick too large for the queue (a long cron.yaml body on a queue with a small maximum).
# With priorities, the levels' queues: a cron.yaml entry's priority names its ticks' queue.
NEEDS = contract.Needs("the periodic-task function", required=("queue_url", "state_table"),
                       optional=("payload_bucket", *contract.PRIORITY_QUEUE_FIELDS.values()))


def _new_enqueuer() -> TickEnqueuer:
    resources = NEEDS.read()
    levels = {level: url for level, field in contract.PRIORITY_QUEUE_FIELDS.items() if (url := getattr(resources, field))}
    return TickEnqueuer(resources.named("queue_url"), resources.named("state_table"), payload_bucket=resources.payload_bucket,
                        priority_queue_urls=levels)


enqueuer = PerProcess(_new_enqueuer)


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Enqueue the tick in ``event`` ({name, url, body, scheduled_time}) once.

    Anything raised fails the invocation, so Lambda retries it asynchronously and
    then sends it to the tick dead-letter queue.
    """
    tick = tick_from_event(event)
    try:
        sent = enqueuer.get().enqueue(tick)
    except Exception:
        metrics.add_metric(name=METRIC_TICKS_RETRIED, unit="Count", value=1)
        logger.exception("tick not enqueued; the invocation fails so Lambda retries it", extra={"tick": tick.key})
        raise
    metrics.add_metric(name=METRIC_TICKS_ENQUEUED if sent else METRIC_TICKS_DUPLICATE, unit="Count", value=1)
    logger.info("tick enqueued" if sent else "tick already enqueued", extra={"tick": tick.key})
    return {"tick": tick.key, "enqueued": sent}
