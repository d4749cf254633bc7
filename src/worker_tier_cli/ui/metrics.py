"""The worker's throughput and failure rate over the last hour, from its CloudWatch metrics (EMF, ``service`` dimension).

None when CloudWatch holds no datapoint of them in the hour (a quiet hour, or the local environment, which
publishes no metrics): the page says so rather than show zeros.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from worker_tier.core import contract

WINDOW_SECONDS = 3600
COUNTED = {"processed": contract.METRIC_PROCESSED, "succeeded": contract.METRIC_SUCCEEDED,
           "failed": contract.METRIC_FAILED, "retried": contract.METRIC_RETRIED,
           "dead_lettered": contract.METRIC_DEAD_LETTERED}


def last_hour(cloudwatch: Any, now: float) -> dict[str, Any] | None:
    """Each count's Sum over the hour before ``now``, and ``failure_rate`` (failed attempts / processed); None without data."""
    end = datetime.fromtimestamp(now, timezone.utc)
    sums: dict[str, float | None] = {}
    for name, metric in COUNTED.items():
        points = cloudwatch.get_metric_statistics(
            Namespace=contract.METRICS_NAMESPACE, MetricName=metric,
            Dimensions=[{"Name": "service", "Value": contract.SERVICE_NAME}],
            StartTime=end - timedelta(seconds=WINDOW_SECONDS), EndTime=end, Period=WINDOW_SECONDS, Statistics=["Sum"],
        ).get("Datapoints") or []
        sums[name] = sum(float(point["Sum"]) for point in points) if points else None
    if all(value is None for value in sums.values()):
        return None
    counts = {name: int(value or 0) for name, value in sums.items()}
    processed = counts["processed"]
    return {**counts, "failure_rate": counts["failed"] / processed if processed else None,
            "window_seconds": WINDOW_SECONDS}
