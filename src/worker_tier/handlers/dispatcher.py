"""The delay dispatcher function: ``worker_tier.handlers.dispatcher.lambda_handler``, run every minute."""

from __future__ import annotations

from typing import Any

from worker_tier import contract, delay
from worker_tier.contract import (
    METRIC_BUCKETS_DISPATCHED,
    METRIC_DISPATCH_DEAD_LETTERED,
    METRIC_DISPATCH_LATENESS,
    METRIC_DISPATCHED,
    METRIC_DISPATCHER_LAG,
    METRIC_DISPATCHER_STATE_UNREADABLE,
    METRIC_DISPATCHER_WATERMARK_AHEAD,
    METRIC_REFILED,
)
from worker_tier.handlers import PerProcess
from worker_tier.observability import logger, metrics
from worker_tier.dispatcher import DelayDispatcher, RunReport

# The horizon is optional: only the local environment sets it, together with a lower long-delay threshold.
NEEDS = contract.Needs("the delay dispatcher", required=("delay_table", "state_table", "queue_url", "dlq_url"),
                       optional=("delay_horizon_seconds",))


def _new_dispatcher() -> DelayDispatcher:
    resources = NEEDS.read()
    return DelayDispatcher(
        resources.named("delay_table"),
        resources.named("state_table"),
        resources.named("queue_url"),
        dead_letter_queue_url=resources.named("dlq_url"),
        horizon_seconds=delay.DISPATCH_HORIZON_SECONDS if resources.delay_horizon_seconds is None else resources.delay_horizon_seconds,
    )


dispatcher = PerProcess(_new_dispatcher)


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """One dispatch run; reports what it did and publishes lag, lateness and dead-lettered dispatches."""
    report = dispatcher.get().run(context.get_remaining_time_in_millis)
    if report.ran:
        metrics.add_metric(name=METRIC_DISPATCHED, unit="Count", value=report.sent)
        metrics.add_metric(name=METRIC_DISPATCH_DEAD_LETTERED, unit="Count", value=report.dead_lettered)
        metrics.add_metric(name=METRIC_BUCKETS_DISPATCHED, unit="Count", value=report.buckets)
        metrics.add_metric(name=METRIC_DISPATCHER_LAG, unit="Seconds", value=report.lag_s)
        metrics.add_metric(name=METRIC_DISPATCH_LATENESS, unit="Seconds", value=report.max_lateness_s)
        metrics.add_metric(name=METRIC_REFILED, unit="Count", value=report.refiled)
        metrics.add_metric(name=METRIC_DISPATCHER_WATERMARK_AHEAD, unit="Count", value=int(report.watermark_ahead_s > 0))
        metrics.add_metric(name=METRIC_DISPATCHER_STATE_UNREADABLE, unit="Count", value=int(bool(report.state_unreadable)))
    summary = {"ran": report.ran, "sent": report.sent, "dead_lettered": report.dead_lettered, "buckets": report.buckets,
               "watermark": report.watermark, "lag_s": report.lag_s, "max_lateness_s": report.max_lateness_s,
               "refiled": report.refiled, "watermark_ahead_s": report.watermark_ahead_s,
               "state_unreadable": report.state_unreadable, "stopped": report.stopped}
    (logger.warning if is_trouble(report) else logger.info)("delay dispatcher run", extra=summary)
    return summary


def is_trouble(report: RunReport) -> bool:
    """A run worth a WARNING: it stopped before the horizon (for time or a failure), or found its state wrong.

    A run that did not start because another holds the lease is not trouble.
    """
    return report.ran and bool(report.stopped or report.watermark_ahead_s > 0 or report.state_unreadable)
