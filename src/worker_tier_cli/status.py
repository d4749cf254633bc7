"""``status``: what an on-call person asks first, each number from the API that knows it.

- The queues' counts: SQS GetQueueAttributes (visible, in flight, delayed).
- The age of each queue's oldest message: CloudWatch's ``ApproximateAgeOfOldestMessage`` (SQS's attributes
  give counts only); None where CloudWatch has no datapoint (a new queue, or the local environment).
- The delay table's backlog by hour for the next 24 h: one Scan of the table (keys only), counting the
  messages due after the delay dispatcher's watermark; the table holds dispatched items until their TTL,
  which the watermark tells apart.
- The delay dispatcher's watermark and its lag: the state table (the earliest among the groups that have run;
  the note names each group that has not run, and each whose watermark is unreadable).
- The alarms in ALARM: CloudWatch DescribeAlarms, filtered to names starting with the stack's name
  (CloudFormation names the alarms it creates ``<stack>-<logical id>-<suffix>``).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from worker_tier.delays import delay
from worker_tier.delays.dispatch_state import read_positions, state_reader
from worker_tier.core.errors import StateError

QUEUE_COUNTS = {
    "visible": "ApproximateNumberOfMessages",
    "in_flight": "ApproximateNumberOfMessagesNotVisible",
    "delayed": "ApproximateNumberOfMessagesDelayed",
}
SECONDS_PER_MINUTE = 60
SECONDS_PER_HOUR = 3600
BACKLOG_HOURS = 24
# CloudWatch publishes SQS metrics every minute; the last few minutes hold the latest datapoint.
AGE_LOOKBACK_SECONDS = 5 * 60
AGE_PERIOD_SECONDS = 60
SQS_METRICS_NAMESPACE = "AWS/SQS"
AGE_METRIC = "ApproximateAgeOfOldestMessage"


def queue_counts(sqs: Any, queue_url: str) -> dict[str, int]:
    """A queue's visible, in-flight and delayed message counts."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=list(QUEUE_COUNTS.values()))["Attributes"]
    return {name: int(attributes.get(attribute, 0)) for name, attribute in QUEUE_COUNTS.items()}


def oldest_age_seconds(cloudwatch: Any, queue_url: str, now: float) -> int | None:
    """The latest ApproximateAgeOfOldestMessage of the queue (Maximum over a minute), or None without data."""
    end = datetime.fromtimestamp(now, timezone.utc)
    response = cloudwatch.get_metric_statistics(
        Namespace=SQS_METRICS_NAMESPACE, MetricName=AGE_METRIC,
        Dimensions=[{"Name": "QueueName", "Value": queue_url.rstrip("/").rsplit("/", 1)[-1]}],
        StartTime=end - timedelta(seconds=AGE_LOOKBACK_SECONDS), EndTime=end, Period=AGE_PERIOD_SECONDS,
        Statistics=["Maximum"],
    )
    points = sorted(response.get("Datapoints") or [], key=lambda point: point["Timestamp"])
    return int(points[-1]["Maximum"]) if points else None


def watermark(dynamodb: Any, state_table: str, now: float) -> dict[str, Any]:
    """The delay dispatcher's watermark (the earliest of its groups'): its minute (ISO and number), its lag behind
    ``now`` in minutes and how many minutes ahead of ``now`` it dispatches (one of the two is 0)."""
    read = state_reader(dynamodb, state_table)

    try:
        groups = read_positions(read)
    except StateError as error:
        return {"watermark": None, "minute": None, "lag_minutes": None, "ahead_minutes": None, "note": str(error)}
    count = groups.layout.groups
    notes = [f"group {index} of {count} has not run (no watermark of epoch {groups.layout.epoch})" for index in groups.not_run]
    notes += [f"group {index} of {count}: {error}" for index, error in sorted(groups.unreadable.items())]
    minutes = [position[0] for position in groups.positions.values() if position is not None]
    if not minutes:
        return {"watermark": None, "minute": None, "lag_minutes": None, "ahead_minutes": None,
                "note": "; ".join(notes) if count > 1 or groups.unreadable else "no watermark yet: the delay dispatcher has not run"}
    minute = min(minutes)
    behind = int(now // SECONDS_PER_MINUTE) - minute  # negative: it dispatches ahead, within SQS's 15-minute DelaySeconds
    return {"watermark": _iso(minute * SECONDS_PER_MINUTE), "minute": minute, "lag_minutes": max(0, behind),
            "ahead_minutes": max(0, -behind), "note": "; ".join(notes)}


def delay_backlog(dynamodb: Any, delay_table: str, now: float, watermark_minute: int | None) -> dict[str, Any]:
    """Messages in the delay table not yet dispatched: those overdue, then by hour for the next 24 h, and beyond.

    Not yet dispatched means due in a minute after the watermark (every minute when there is none).
    """
    hours = [0] * BACKLOG_HOURS
    overdue = later = 0
    for minute in _undispatched_minutes(dynamodb, delay_table, watermark_minute):
        offset = minute * SECONDS_PER_MINUTE - now
        if offset < -SECONDS_PER_MINUTE:
            overdue += 1
        elif offset < BACKLOG_HOURS * SECONDS_PER_HOUR:
            hours[max(0, int(offset // SECONDS_PER_HOUR))] += 1
        else:
            later += 1
    start = int(now // SECONDS_PER_HOUR) * SECONDS_PER_HOUR
    return {"overdue": overdue, "later": later,
            "by_hour": [{"hour": _iso(start + SECONDS_PER_HOUR * i), "count": c} for i, c in enumerate(hours)]}


def _undispatched_minutes(dynamodb: Any, delay_table: str, watermark_minute: int | None) -> list[int]:
    """The due minute of each message item after the watermark (a keys-only Scan, every page)."""
    minutes: list[int] = []
    request: dict[str, Any] = {"TableName": delay_table, "ProjectionExpression": "#pk",
                               "ExpressionAttributeNames": {"#pk": delay.PK}}
    while True:
        page = dynamodb.scan(**request)
        for item in page.get("Items") or []:
            parsed = delay.parse_bucket_key(item[delay.PK]["S"])
            if parsed is not None and (watermark_minute is None or parsed[0] > watermark_minute):
                minutes.append(parsed[0])
        if "LastEvaluatedKey" not in page:
            return minutes
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def alarms_in_alarm(cloudwatch: Any, stack_name: str) -> list[dict[str, Any]]:
    """The stack's alarms in ALARM (metric and composite): name, reason and since when."""
    return [{key: alarm[key] for key in ("name", "reason", "since", "description")}
            for alarm in stack_alarms(cloudwatch, stack_name, "ALARM")]


def stack_alarms(cloudwatch: Any, stack_name: str, state: str | None = None) -> list[dict[str, Any]]:
    """The stack's alarms (metric and composite), in ``state`` only when given: name, state, reason, since when."""
    found: list[dict[str, Any]] = []
    request: dict[str, Any] = {"AlarmNamePrefix": stack_name, "AlarmTypes": ["MetricAlarm", "CompositeAlarm"]}
    if state is not None:
        request["StateValue"] = state
    for page in cloudwatch.get_paginator("describe_alarms").paginate(**request):
        alarms = [*(page.get("MetricAlarms") or []), *(page.get("CompositeAlarms") or [])]
        for alarm in (a for a in alarms if state is None or a.get("StateValue") == state):  # moto ignores StateValue with a prefix
            since = alarm.get("StateUpdatedTimestamp")
            found.append({"name": alarm["AlarmName"], "state": alarm.get("StateValue", ""),
                          "reason": alarm.get("StateReason", ""), "since": since.isoformat() if since else None,
                          "description": alarm.get("AlarmDescription", "")})
    return found


def _iso(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, timezone.utc).isoformat().replace("+00:00", "Z")


def flow_limits(dynamodb: Any, state_table: str, now: float) -> list[dict[str, Any]]:
    """Each flow-control limit the workers have used (``worker_tier.flow``), with how busy it is and how many messages
    wait on it now: one Scan of the state table, filtered to the ``flow#`` items (a Scan reads, and is billed for, the
    whole table, idempotency records included).

    A rate shows how far ahead its next free turn is (``booked_ahead_seconds``); a concurrency key how many of its
    slots are held now. ``waiting``: messages given back for the limit whose wait has not ended yet.
    """
    from worker_tier.core.contract import FLOW_KEY_PREFIX, STATE_PARTITION_KEY
    from worker_tier.flow import limiter

    items = _scan_prefix(dynamodb, state_table, FLOW_KEY_PREFIX)
    waiting: dict[str, int] = {}
    for item in items:
        if item[STATE_PARTITION_KEY]["S"].startswith(limiter.WAITS_KEY_PREFIX) and _number(item, limiter.WAIT_UNTIL_ATTRIBUTE) > now:
            name = item.get(limiter.LIMITER_ATTRIBUTE, {}).get("S", "")
            waiting[name] = waiting.get(name, 0) + 1
    limits: list[dict[str, Any]] = []
    for item in items:
        key = item[STATE_PARTITION_KEY]["S"]
        common = {"path": item.get(limiter.PATH_ATTRIBUTE, {}).get("S", ""),
                  "key": item.get(limiter.KEY_ATTRIBUTE, {}).get("S", "") or None, "waiting": waiting.pop(key, 0)}
        if key.startswith(limiter.RATE_KEY_PREFIX):
            ahead = max(0.0, _number(item, limiter.TAT_ATTRIBUTE) / 1_000_000 - now)
            limits.append({"kind": "rate", "limit": item.get(limiter.RATE_ATTRIBUTE, {}).get("S", ""), **common,
                           "booked_ahead_seconds": round(ahead, 3), "held": None})
        elif key.startswith(limiter.SLOTS_KEY_PREFIX):
            size = int(_number(item, limiter.LIMIT_ATTRIBUTE))
            held = sum(1 for i in range(size) if _number(item, f"u{i}") / 1_000_000 > now)
            limits.append({"kind": "concurrency", "limit": str(size), **common, "booked_ahead_seconds": None, "held": held})
    for name, count in waiting.items():  # waits whose limit item is gone (its TTL), or recorded without one (a release)
        limits.append({"kind": "released" if not name.startswith(FLOW_KEY_PREFIX) else "unknown", "limit": name, "path": "",
                       "key": None, "waiting": count, "booked_ahead_seconds": None, "held": None})
    return sorted(limits, key=lambda row: (row["path"], row["kind"], row["key"] or ""))


def _scan_prefix(dynamodb: Any, table: str, prefix: str) -> list[dict[str, Any]]:
    """Every item of ``table`` whose partition key starts with ``prefix`` (a filtered Scan, every page)."""
    from worker_tier.core.contract import STATE_PARTITION_KEY

    request: dict[str, Any] = {"TableName": table, "FilterExpression": "begins_with(#pk, :prefix)",
                               "ExpressionAttributeNames": {"#pk": STATE_PARTITION_KEY},
                               "ExpressionAttributeValues": {":prefix": {"S": prefix}}}
    items: list[dict[str, Any]] = []
    while True:
        page = dynamodb.scan(**request)
        items.extend(page.get("Items") or [])
        if "LastEvaluatedKey" not in page:
            return items
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _number(item: dict[str, Any], name: str) -> float:
    try:
        return float(item.get(name, {}).get("N", 0))
    except ValueError:
        return 0.0
