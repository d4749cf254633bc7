"""``status``: the queues' counts (GetQueueAttributes) and the delay dispatcher's watermark and lag.

SQS gives counts only; the age of the oldest message is CloudWatch's ApproximateAgeOfOldestMessage
metric, on the stack's dashboard and alarms.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from worker_tier.contract import STATE_PARTITION_KEY
from worker_tier.dispatch_group import StateError, shard_positions

QUEUE_COUNTS = {
    "visible": "ApproximateNumberOfMessages",
    "in_flight": "ApproximateNumberOfMessagesNotVisible",
    "delayed": "ApproximateNumberOfMessagesDelayed",
}
SECONDS_PER_MINUTE = 60


def queue_counts(sqs: Any, queue_url: str) -> dict[str, int]:
    """A queue's visible, in-flight and delayed message counts."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=list(QUEUE_COUNTS.values()))["Attributes"]
    return {name: int(attributes.get(attribute, 0)) for name, attribute in QUEUE_COUNTS.items()}


def watermark(dynamodb: Any, state_table: str, now: float) -> dict[str, Any]:
    """The delay dispatcher's watermark minute (ISO; the earliest of its groups'), and its lag behind ``now`` in minutes;
    None when absent."""
    def read(key: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = dynamodb.get_item(
            TableName=state_table, Key={STATE_PARTITION_KEY: {"S": key}}, ConsistentRead=True
        ).get("Item")
        return item

    try:
        minute = min(bucket for bucket, _ in shard_positions(read).values())
    except StateError as error:
        return {"watermark": None, "lag_minutes": None, "note": str(error)}
    if minute < 0:
        return {"watermark": None, "lag_minutes": None, "note": "no watermark yet: the delay dispatcher has not run"}
    stamp = datetime.fromtimestamp(minute * SECONDS_PER_MINUTE, timezone.utc).isoformat().replace("+00:00", "Z")
    return {"watermark": stamp, "lag_minutes": int(now // SECONDS_PER_MINUTE) - minute, "note": ""}
