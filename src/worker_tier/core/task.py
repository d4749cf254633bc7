"""``Task``: what a task handler receives, carrying what sqsd's HTTP headers carry."""

from __future__ import annotations

import json as _json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from typing import Any, Callable, Mapping, TypeVar

from worker_tier.core import contract, message
from worker_tier.core.errors import MalformedBodyError


@dataclass(eq=False)
class Task:
    """One message, as a task handler sees it.

    Field by field it mirrors sqsd's ``X-Aws-Sqsd-*`` headers: ``message_id``
    (Msgid), ``receive_count`` (Receive-Count), ``first_received_at``,
    ``sent_at``, ``queue`` (the queue's name), ``sender_id``, ``task_name`` and
    ``scheduled_at`` (periodic tasks), ``due_at`` (delayed messages), and ``attributes`` (``X-Aws-Sqsd-Attr-*``:
    String and Number attributes only, as sqsd drops Binary ones).

    Everything but the id, path and body is read from the Lambda SQS ``record``
    on first use: the success path of a batch then pays for none of it.

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
    record: Mapping[str, Any] = field(default_factory=dict, repr=False)
    payload: Any = None
    remaining_time_ms: Callable[[], int] | None = field(default=None, repr=False)
    lease: threading.Event | None = field(default=None, repr=False)

    def lease_expired(self) -> bool:
        """True once a heartbeat no longer holds this message: SQS's 12-hour cap released it for retry,
        SQS said it is no longer ours, or no extension succeeded within the extension window.
        The task should stop, as another worker may now run it."""
        return self.lease is not None and self.lease.is_set()

    @cached_property
    def attributes(self) -> Mapping[str, str]:
        """String and Number message attributes by name."""
        return message.task_attributes(self.record.get("messageAttributes") or {})

    @cached_property
    def receive_count(self) -> int:
        """How many times this message has been handed to its task, this time included.

        SQS's ApproximateReceiveCount, plus the receives of the earlier copies it
        replaces (``worker_tier.attempts``: a retry longer than SQS's visibility
        limit is re-sent as a delayed copy), so ``max_retries`` bounds the chain,
        unless it carries ``worker_tier.failure``: then it came back from the DLQ
        by a move that keeps attributes (StartMessageMoveTask) and starts afresh;
        less the receive a delayed message was held back on, not being due yet
        (SQS first handed it out before its ``worker_tier.due_at``).
        """
        count = _whole_number(self._system.get("ApproximateReceiveCount"), 1)
        attributes = self.record.get("messageAttributes")
        if (isinstance(attributes, dict) and contract.FAILURE_ATTRIBUTE not in attributes
                and (contract.ATTEMPTS_ATTRIBUTE in attributes or contract.DUE_AT_ATTRIBUTE in attributes)):
            count += max(0, _whole_number(self.attributes.get(contract.ATTEMPTS_ATTRIBUTE), 0)) - self._held_back_receives()
        return max(1, count)

    def _held_back_receives(self) -> int:
        """1 when SQS first handed the message out before it was due (the worker held it back then), else 0."""
        due_at, first = self.due_at, self.first_received_at
        return 1 if due_at is not None and first is not None and first < due_at else 0

    @cached_property
    def first_received_at(self) -> datetime | None:
        """When SQS first handed this message out."""
        return _from_epoch_ms(self._system.get("ApproximateFirstReceiveTimestamp"))

    @cached_property
    def sent_at(self) -> datetime | None:
        """When the producer sent this message."""
        return _from_epoch_ms(self._system.get("SentTimestamp"))

    @cached_property
    def queue(self) -> str:
        """The source queue's name."""
        return str(self.record.get("eventSourceARN", "")).rsplit(":", 1)[-1]

    @cached_property
    def sender_id(self) -> str | None:
        """The IAM identity that sent the message."""
        return self._system.get("SenderId")

    @cached_property
    def group_id(self) -> str | None:
        """The FIFO message group, or None on a standard queue."""
        return self._system.get("MessageGroupId")

    @cached_property
    def task_name(self) -> str | None:
        """The periodic task's name (``beanstalk.sqsd.task_name``)."""
        return self.attributes.get(contract.TASK_NAME_ATTRIBUTE)

    @cached_property
    def scheduled_at(self) -> datetime | None:
        """The periodic task's tick (``beanstalk.sqsd.scheduled_time``)."""
        return message.parse_scheduled_time(self.attributes.get(contract.SCHEDULED_TIME_ATTRIBUTE))

    @cached_property
    def due_at(self) -> datetime | None:
        """When a delayed message was due (``worker_tier.due_at``, set by the delay dispatcher), else None.

        An unreadable value counts as absent (and is logged): it never raises inside a task.
        """
        return message.parse_due_at(self.attributes.get(contract.DUE_AT_ATTRIBUTE), self.message_id)

    @property
    def _system(self) -> Mapping[str, Any]:
        system = self.record.get("attributes")
        return system if isinstance(system, dict) else {}

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
        lease: threading.Event | None = None,
    ) -> Task:
        """Build a Task from one record of a Lambda SQS event."""
        return cls(
            record["messageId"],
            message.record_path(record, default_path),
            record.get("body") or "",
            content_type,
            record,
            None,
            remaining_time_ms,
            lease,
        )


def _from_epoch_ms(value: Any) -> datetime | None:
    """An SQS epoch-milliseconds attribute as an aware UTC datetime; None when absent or unreadable."""
    milliseconds = _whole_number(value, None)
    if milliseconds is None:
        return None
    try:
        return datetime.fromtimestamp(milliseconds / 1000.0, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):  # out of the platform's range
        return None


_Default = TypeVar("_Default")


def _whole_number(value: Any, default: _Default) -> int | _Default:
    """``int(value)``, or ``default`` when the value is absent or not a whole number."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
