"""The delay dispatcher function: ``worker_tier.handlers.dispatcher.lambda_handler``, run every minute."""

from __future__ import annotations

import os
from typing import Any, Mapping

from worker_tier.core import contract
from worker_tier.delays import delay
from worker_tier.core.contract import (
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
from worker_tier.core.observability import logger, metrics
from worker_tier.delays.dispatch_state import DispatchGroup
from worker_tier.delays.dispatcher import DelayDispatcher
from worker_tier.delays.minute import RunReport
from worker_tier.core.errors import WorkerTierError
from worker_tier.core.settings import Settings

# The horizon is optional: only the local environment sets it, together with a lower long-delay threshold.
NEEDS = contract.Needs("the delay dispatcher", required=("delay_table", "state_table", "queue_url", "dlq_url"),
                       optional=("delay_horizon_seconds", *contract.PRIORITY_QUEUE_FIELDS.values()))


GROUP_FIELD = contract.DISPATCH_GROUP_FIELD  # each minute's schedule for group g passes {"group": g}; none: group 0


class DispatchEventError(WorkerTierError, ValueError):
    """The event names no group of this dispatcher's ``dispatch_groups``."""


def _new_dispatcher() -> DelayDispatcher:
    """Group 0 of ``dispatch_groups``; its siblings share its clients (``DelayDispatcher.for_group``)."""
    resources = NEEDS.read()
    groups = Settings.from_environment({name: value for name, value in os.environ.items()
                                        if name == contract.DISPATCH_GROUPS_VARIABLE}).dispatch_groups
    return DelayDispatcher(
        resources.named("delay_table"),
        resources.named("state_table"),
        resources.named("queue_url"),
        dead_letter_queue_url=resources.named("dlq_url"),
        horizon_seconds=delay.DISPATCH_HORIZON_SECONDS if resources.delay_horizon_seconds is None else resources.delay_horizon_seconds,
        group=DispatchGroup(0, groups),
        priority_queue_urls=_level_urls(resources),
    )


def _level_urls(resources: contract.Resources) -> dict[str, str]:
    """The priority levels' queues the dispatcher was given (none while priorities are off)."""
    return {level: url for level, field in contract.PRIORITY_QUEUE_FIELDS.items() if (url := getattr(resources, field))}


def group_index(event: Any, groups: int) -> int:
    """The group an event names (0 when it names none); DispatchEventError when it is not one of ``groups``.

    >>> group_index({"group": 3}, 4), group_index({}, 1)
    (3, 0)
    """
    index = event.get(GROUP_FIELD, 0) if isinstance(event, Mapping) else 0
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < groups:
        raise DispatchEventError(f"event field {GROUP_FIELD!r} must be a whole number 0..{groups - 1} ({contract.DISPATCH_GROUPS_VARIABLE}"
                                 f" is {groups}), got {index!r}")
    return index


dispatcher = PerProcess(_new_dispatcher)


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """One dispatch run; reports what it did and publishes lag, lateness and dead-lettered dispatches."""
    first = dispatcher.get()
    report = first.for_group(group_index(event, first.group.count)).run(context.get_remaining_time_in_millis)
    if report.ran:
        metrics.add_metric(name=METRIC_DISPATCHED, unit="Count", value=report.sent)
        metrics.add_metric(name=METRIC_DISPATCH_DEAD_LETTERED, unit="Count", value=report.dead_lettered)
        metrics.add_metric(name=METRIC_BUCKETS_DISPATCHED, unit="Count", value=report.buckets)
        metrics.add_metric(name=METRIC_DISPATCHER_LAG, unit="Seconds", value=report.lag_s)
        metrics.add_metric(name=METRIC_DISPATCH_LATENESS, unit="Seconds", value=report.max_lateness_s)
        metrics.add_metric(name=METRIC_REFILED, unit="Count", value=report.refiled)
        metrics.add_metric(name=METRIC_DISPATCHER_WATERMARK_AHEAD, unit="Count", value=int(report.watermark_ahead_s > 0))
        metrics.add_metric(name=METRIC_DISPATCHER_STATE_UNREADABLE, unit="Count", value=int(bool(report.state_unreadable)))
    summary = {"group": report.group, "ran": report.ran, "sent": report.sent, "dead_lettered": report.dead_lettered, "buckets": report.buckets,
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
