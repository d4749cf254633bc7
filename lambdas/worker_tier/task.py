"""``Task``: what a task handler receives, carrying what sqsd's HTTP headers carry."""

from __future__ import annotations

import json as _json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from worker_tier import message
from worker_tier.errors import MalformedBodyError


@dataclass(frozen=True)
class Task:
    """One message, as a task handler sees it.

    Field by field it mirrors sqsd's ``X-Aws-Sqsd-*`` headers: ``message_id``
    (Msgid), ``receive_count`` (Receive-Count), ``first_received_at``,
    ``sent_at``, ``queue`` (the queue's name), ``sender_id``, ``task_name`` and
    ``scheduled_at`` (periodic tasks), and ``attributes`` (``X-Aws-Sqsd-Attr-*``:
    String and Number attributes only, as sqsd drops Binary ones).

    Examples
    --------
    >>> t = Task(message_id="m1", path="/resize", body='{"w": 64}')
    >>> t.json()["w"]
    64
    """

    message_id: str
    path: str
    body: str
    content_type: str = "application/json"
    attributes: Mapping[str, str] = field(default_factory=dict)
    receive_count: int = 1
    first_received_at: datetime | None = None
    sent_at: datetime | None = None
    queue: str = ""
    sender_id: str | None = None
    group_id: str | None = None
    task_name: str | None = None
    scheduled_at: datetime | None = None
    payload: Any = None
    remaining_time_ms: Callable[[], int] | None = field(default=None, repr=False, compare=False)

    def json(self) -> Any:
        """The body parsed as JSON; MalformedBodyError (which dead-letters) when it is not JSON."""
        try:
            return _json.loads(self.body)
        except ValueError as error:
            raise MalformedBodyError(
                f"message {self.message_id} for {self.path} has a body that is not JSON ({error}); "
                f"body starts {self.body[:80]!r}"
            ) from None

    def remaining_seconds(self) -> float | None:
        """Seconds the invocation has left, or None outside an invocation."""
        return None if self.remaining_time_ms is None else self.remaining_time_ms() / 1000.0

    @classmethod
    def from_record(
        cls,
        record: Mapping[str, Any],
        *,
        default_path: str,
        content_type: str,
        remaining_time_ms: Callable[[], int] | None = None,
    ) -> Task:
        """Build a Task from one record of a Lambda SQS event."""
        event_attributes = record.get("messageAttributes") or {}
        attributes = message.task_attributes(event_attributes)
        system = record.get("attributes") or {}
        return cls(
            message_id=record["messageId"],
            path=attributes.get(message.PATH_ATTRIBUTE) or default_path,
            body=record.get("body") or "",
            content_type=content_type,
            attributes=attributes,
            receive_count=int(system.get("ApproximateReceiveCount", 1)),
            first_received_at=_from_epoch_ms(system.get("ApproximateFirstReceiveTimestamp")),
            sent_at=_from_epoch_ms(system.get("SentTimestamp")),
            queue=str(record.get("eventSourceARN", "")).rsplit(":", 1)[-1],
            sender_id=system.get("SenderId"),
            group_id=system.get("MessageGroupId"),
            task_name=attributes.get(message.TASK_NAME_ATTRIBUTE),
            scheduled_at=message.parse_scheduled_time(attributes.get(message.SCHEDULED_TIME_ATTRIBUTE)),
            remaining_time_ms=remaining_time_ms,
        )


def _from_epoch_ms(value: Any) -> datetime | None:
    """An SQS epoch-milliseconds attribute as an aware UTC datetime."""
    if value in (None, ""):
        return None
    return datetime.fromtimestamp(int(value) / 1000.0, tz=timezone.utc)
