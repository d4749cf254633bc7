"""The delay dispatcher function: ``worker_tier.handlers.dispatcher.lambda_handler``, run every minute."""

from __future__ import annotations

import os
from typing import Any

from worker_tier import delay
from worker_tier.handlers import PerProcess
from worker_tier.observability import logger, metrics
from worker_tier.dispatcher import DelayDispatcher

METRIC_DISPATCHED = "DelayedDispatched"
METRIC_DEAD_LETTERED = "DelayedDeadLettered"
METRIC_LAG = "SchedulerLag"
METRIC_LATENESS = "DelayedMaxLateness"
METRIC_BUCKETS = "DelayBucketsDispatched"
METRIC_REFILED = "DelayedRefiled"
METRIC_WATERMARK_AHEAD = "SchedulerWatermarkAhead"
METRIC_STATE_UNREADABLE = "SchedulerStateUnreadable"


def _new_dispatcher() -> DelayDispatcher:
    return DelayDispatcher(
        os.environ["WORKER_TIER_DELAY_TABLE"],
        os.environ["WORKER_TIER_STATE_TABLE"],
        os.environ["WORKER_TIER_QUEUE_URL"],
        dead_letter_queue_url=os.environ["WORKER_TIER_DLQ_URL"],
        # Only the local environment sets this, together with a lower long-delay threshold.
        horizon_seconds=int(os.environ.get("WORKER_TIER_DELAY_HORIZON", delay.DISPATCH_HORIZON_SECONDS)),
    )


dispatcher = PerProcess(_new_dispatcher)


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """One dispatch run; reports what it did and publishes lag, lateness and dead-lettered dispatches."""
    report = dispatcher.get().run(context.get_remaining_time_in_millis)
    if report.ran:
        metrics.add_metric(name=METRIC_DISPATCHED, unit="Count", value=report.sent)
        metrics.add_metric(name=METRIC_DEAD_LETTERED, unit="Count", value=report.dead_lettered)
        metrics.add_metric(name=METRIC_BUCKETS, unit="Count", value=report.buckets)
        metrics.add_metric(name=METRIC_LAG, unit="Seconds", value=report.lag_s)
        metrics.add_metric(name=METRIC_LATENESS, unit="Seconds", value=report.max_lateness_s)
        metrics.add_metric(name=METRIC_REFILED, unit="Count", value=report.refiled)
        metrics.add_metric(name=METRIC_WATERMARK_AHEAD, unit="Count", value=int(report.watermark_ahead_s > 0))
        metrics.add_metric(name=METRIC_STATE_UNREADABLE, unit="Count", value=int(bool(report.state_unreadable)))
    summary = {"ran": report.ran, "sent": report.sent, "dead_lettered": report.dead_lettered, "buckets": report.buckets,
               "watermark": report.watermark, "lag_s": report.lag_s, "max_lateness_s": report.max_lateness_s,
               "refiled": report.refiled, "watermark_ahead_s": report.watermark_ahead_s,
               "state_unreadable": report.state_unreadable, "stopped": report.stopped}
    trouble = report.watermark_ahead_s > 0 or report.state_unreadable
    (logger.warning if trouble else logger.info)("delay scheduler run", extra=summary)
    return summary
