"""The delay table's safety net: ``worker_tier.handlers.recovery.lambda_handler``, fed by the table's stream."""

from __future__ import annotations

from typing import Any, Mapping

from worker_tier.core import contract
from worker_tier.core.contract import (
    METRIC_LATE_WRITES,
    METRIC_RECOVERED_FROM_TTL,
    METRIC_RECOVERY_DEAD_LETTERED,
    METRIC_RECOVERY_WATERMARK_AHEAD,
    METRIC_REFILED,
)
from worker_tier.delays.delay_recovery import DelayRecovery, RecoveryReport
from worker_tier.core.errors import WorkerTierError
from worker_tier.handlers import PerProcess
from worker_tier.core.observability import count, logger, metrics

# The delay table is optional: without it, each record's eventSourceARN names it.
NEEDS = contract.Needs("delay recovery", required=("state_table", "queue_url", "dlq_url"),
                       optional=("delay_table", *contract.PRIORITY_QUEUE_FIELDS.values()))


class StreamEventError(WorkerTierError, ValueError):
    """The event is not a DynamoDB stream batch."""


def _new_recovery() -> DelayRecovery:
    resources = NEEDS.read()
    return DelayRecovery(resources.named("state_table"), resources.named("queue_url"), resources.named("dlq_url"),
                         delay_table=resources.delay_table,
                         priority_queue_urls={level: url for level, field in contract.PRIORITY_QUEUE_FIELDS.items()
                                              if (url := getattr(resources, field))})


recovery = PerProcess(_new_recovery)


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """One stream batch: deliver what the delay dispatcher missed; report where to retry from, if anywhere."""
    records = event.get("Records") if isinstance(event, Mapping) else None
    if not isinstance(records, list):
        raise StreamEventError(f"a DynamoDB stream event is a mapping with a 'Records' list, got {type(event).__name__} "
                               f"{str(event)[:80]!r}")
    report = recovery.get().process(records)
    _publish(report)
    failures = [] if report.failed_sequence_number is None else [{"itemIdentifier": report.failed_sequence_number}]
    return {"batchItemFailures": failures}


def _publish(report: RecoveryReport) -> None:
    """Once per batch: the counts, and a log line."""
    count(METRIC_LATE_WRITES, report.late_writes)
    count(METRIC_RECOVERED_FROM_TTL, report.recovered_from_ttl)
    count(METRIC_RECOVERY_DEAD_LETTERED, report.dead_lettered)
    count(METRIC_REFILED, report.refiled)
    count(METRIC_RECOVERY_WATERMARK_AHEAD, report.watermark_ahead)
    summary = {
        "records": report.records, "skipped": report.skipped, "late_writes": report.late_writes,
        "recovered_from_ttl": report.recovered_from_ttl, "dead_lettered": report.dead_lettered,
        "refiled": report.refiled, "watermark_ahead": report.watermark_ahead,
        "state_unreadable": report.state_unreadable, "retry_from": report.failed_sequence_number,
    }
    if report.watermark_ahead or report.state_unreadable:
        logger.warning("delay recovery left messages to a watermark it cannot trust", extra=summary)
    else:
        logger.info("delay recovery batch", extra=summary)
