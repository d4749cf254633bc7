"""Periodic ticks: enqueue each (task, scheduled time) once, in EB's message shape.

A tick is claimed in the state table before its message is sent, so duplicate
invocations for the same tick (EventBridge delivers at least once, and a cron line
whose day fields are both restricted becomes two schedules that may fire together)
enqueue one message. The claim is a lease: if the invocation dies between the claim
and the send, a retry after the lease takes over. The one duplicate left is a crash
after the send and before the claim is marked sent; on a FIFO queue the
deduplication id derived from the tick removes that one too.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from worker_tier import message
from worker_tier.aws import LazyClient, is_condition_failure
from worker_tier.idempotency import STATE_TABLE_PARTITION_KEY, STATE_TABLE_TTL_ATTRIBUTE

TICK_RECORD_TTL_SECONDS = 3 * 24 * 60 * 60
TICK_LEASE_SECONDS = 60
STATUS_PENDING = "pending"
STATUS_SENT = "sent"


@dataclass(frozen=True)
class Tick:
    """One firing of one cron.yaml entry."""

    name: str
    url: str
    scheduled_at: datetime
    body: str = message.SCHEDULED_JOB_BODY

    @property
    def key(self) -> str:
        """The state-table key of this tick."""
        return f"cron#{self.name}#{message.format_scheduled_time(self.scheduled_at)}"

    def deduplication_id(self) -> str:
        """A stable FIFO deduplication id (SQS allows 128 characters)."""
        return hashlib.sha256(self.key.encode("utf-8")).hexdigest()


class TickEnqueuer:
    """Claims a tick in the state table, then sends its EB-shaped message."""

    def __init__(
        self,
        queue_url: str,
        state_table: str,
        *,
        sqs: Any = None,
        dynamodb: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.queue_url = queue_url
        self.state_table = state_table
        self.fifo = queue_url.endswith(".fifo")
        self._sqs = LazyClient("sqs", sqs)
        self._dynamodb = LazyClient("dynamodb", dynamodb)
        self._clock = clock

    def enqueue(self, tick: Tick) -> bool:
        """Send the tick's message unless another invocation has; True when this call sent it."""
        if not self._claim(tick):
            return False
        self._sqs.get().send_message(**self._request(tick))
        self._dynamodb.get().update_item(
            TableName=self.state_table,
            Key={STATE_TABLE_PARTITION_KEY: {"S": tick.key}},
            UpdateExpression="SET #status = :sent",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={":sent": {"S": STATUS_SENT}},
        )
        return True

    def _claim(self, tick: Tick) -> bool:
        """Conditional put: a new tick, or a pending one whose lease has run out."""
        now = int(self._clock())
        try:
            self._dynamodb.get().put_item(
                TableName=self.state_table,
                Item={
                    STATE_TABLE_PARTITION_KEY: {"S": tick.key},
                    "status": {"S": STATUS_PENDING},
                    "lease_until": {"N": str(now + TICK_LEASE_SECONDS)},
                    STATE_TABLE_TTL_ATTRIBUTE: {"N": str(now + TICK_RECORD_TTL_SECONDS)},
                },
                ConditionExpression="attribute_not_exists(#pk) OR (#status = :pending AND lease_until < :now)",
                ExpressionAttributeNames={"#pk": STATE_TABLE_PARTITION_KEY, "#status": "status"},
                ExpressionAttributeValues={":pending": {"S": STATUS_PENDING}, ":now": {"N": str(now)}},
            )
        except Exception as error:
            if is_condition_failure(error):
                return False
            raise
        return True

    def _request(self, tick: Tick) -> dict[str, Any]:
        """SendMessage arguments: EB's body and ``beanstalk.sqsd.*`` attributes."""
        request: dict[str, Any] = {
            "QueueUrl": self.queue_url,
            "MessageBody": tick.body,
            "MessageAttributes": {
                message.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": tick.url},
                message.TASK_NAME_ATTRIBUTE: {"DataType": "String", "StringValue": tick.name},
                message.SCHEDULED_TIME_ATTRIBUTE: {
                    "DataType": "String",
                    "StringValue": message.format_scheduled_time(tick.scheduled_at),
                },
            },
        }
        if self.fifo:
            request["MessageGroupId"] = tick.name
            request["MessageDeduplicationId"] = tick.deduplication_id()
        return request


def tick_from_event(event: dict[str, Any]) -> Tick:
    """The Tick a schedule's input describes; ValueError naming what is missing or malformed."""
    missing = [key for key in ("name", "url", "scheduled_time") if not isinstance(event.get(key), str)]
    if missing:
        raise ValueError(f"cron event needs string fields name, url and scheduled_time; missing {missing} in {event!r}")
    try:
        scheduled = datetime.fromisoformat(event["scheduled_time"].replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"cron event scheduled_time must be ISO-8601, got {event['scheduled_time']!r}") from None
    if scheduled.tzinfo is None:
        scheduled = scheduled.replace(tzinfo=timezone.utc)
    return Tick(event["name"], event["url"], scheduled, event.get("body") or message.SCHEDULED_JOB_BODY)
