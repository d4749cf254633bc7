"""Periodic ticks: enqueue each (task, scheduled time) once, in EB's message shape.

A tick is claimed in the state table before its message is sent, so duplicate
invocations for the same tick (EventBridge delivers at least once, and a cron line
whose day fields are both restricted becomes two schedules that may fire together)
enqueue one message. A tick has three fates:

- **sent**: this invocation held the claim and SQS took the message.
- **duplicate**: another invocation already sent it.
- **retry**: the send failed (the claim is given back, ``TickNotEnqueuedError``), or
  another invocation still holds the claim after a short wait (``TickPendingError``).
  Either raises, so Lambda's asynchronous retries run the tick again; one that fails
  every attempt goes to the tick dead-letter queue (``PeriodicTasks``).

The claim is a lease held by one invocation: if the holder dies between the claim
and the send, a retry after the lease takes over. Once SQS has taken the message
the tick is sent, whatever follows: marking the claim sent is retried a few times,
only while this invocation still holds it, and a mark that still fails is logged
and counted (``TickMarkFailed``), never raised, since a raise would make Lambda send
the tick again. The duplicates left: a crash, or a mark that failed, after the send;
and a send whose answer was lost (a read timeout, a 5xx) although SQS took the
message, which looks like a failed send and is retried. On a FIFO queue the
deduplication id derived from the tick removes them too.

A tick too large for its queue (a cron.yaml body on a queue whose MaximumMessageSize is small) goes to the payload
bucket when the function has one (``payload_bucket``), as a producer's would (``worker_tier.producer.offload``): the
queue's limit is read once, only for a tick over the smallest limit a queue may have; while it cannot be read, such
a tick is offloaded. An object whose tick was not sent is deleted and counted (``PayloadOrphans``), kept when the
send's answer was lost.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from worker_tier.core import contract, limits, message, observability, priority, sqs_rules
from worker_tier.core import wall_clock
from worker_tier.core.aws import LazyClient, error_code, outcome_unknown
from worker_tier.core.contract import METRIC_PAYLOAD_ORPHANS, METRIC_PAYLOADS_OFFLOADED, METRIC_TICK_MARK_FAILED, TICK_KEY_PREFIX
from worker_tier.core.envelope import Envelope
from worker_tier.core.errors import WorkerTierError
from worker_tier.core.payloads import PayloadStore, Pointer, is_offloaded, size_attribute
from worker_tier.core.observability import logger
from worker_tier.core.retry import TICK_MARK
from worker_tier.core.state import Lease

TICK_RECORD_TTL_SECONDS = 3 * 24 * 60 * 60
# Longer than the cron function's timeout, shorter than Lambda's first asynchronous retry delay (1 min).
TICK_LEASE_SECONDS = 60
# A duplicate invocation waits this long for the holder to send before asking for a retry.
TICK_PENDING_POLLS = 10
TICK_PENDING_POLL_SECONDS = 1
STATUS_PENDING = "pending"
STATUS_SENT = "sent"
STATUS_ATTRIBUTE = "status"
# The term the lease's takeover and release conditions add: only a pending claim is taken over or given back.
_PENDING = "#status = :pending"
_STATUS_NAMES = {"#status": STATUS_ATTRIBUTE}
_PENDING_VALUES = {":pending": {"S": STATUS_PENDING}}
_EVENT_FIELDS = ("name", "url", "scheduled_time")


class TickNotEnqueuedError(WorkerTierError):
    """SendMessage failed for a tick; its claim was given back so a retry can send it."""


class TickPendingError(WorkerTierError):
    """Another invocation holds the tick's claim and has not sent it yet; retry later."""


@dataclass(frozen=True)
class Tick:
    """One firing of one cron.yaml entry."""

    name: str
    url: str
    scheduled_at: datetime
    body: str = contract.SCHEDULED_JOB_BODY
    priority: str = contract.DEFAULT_PRIORITY  # cron.yaml's priority key: the level whose queue takes the tick

    @property
    def key(self) -> str:
        """The state-table key of this tick.

        Examples
        --------
        >>> Tick("backup-job", "/backup", datetime(2026, 11, 22, 12, tzinfo=timezone.utc)).key
        'cron#backup-job#2026-11-22 12:00:00 UTC'
        """
        return f"{TICK_KEY_PREFIX}{self.name}#{message.format_scheduled_time(self.scheduled_at)}"

    def lease(self, state_table: str) -> Lease:
        """The claim on this tick in the state table: held by one invocation for ``TICK_LEASE_SECONDS``."""
        return Lease(state_table, self.key, TICK_LEASE_SECONDS, TICK_RECORD_TTL_SECONDS)

    @property
    def group_id(self) -> str:
        """The FIFO MessageGroupId: the task name, so one task's ticks stay in order."""
        return self.name

    def deduplication_id(self) -> str:
        """A stable FIFO deduplication id (SQS allows 128 characters)."""
        return hashlib.sha256(self.key.encode("utf-8")).hexdigest()

    def message_attributes(self) -> dict[str, dict[str, str]]:
        """EB's ``beanstalk.sqsd.*`` attributes in the SQS API shape."""
        return {
            contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": self.url},
            contract.TASK_NAME_ATTRIBUTE: {"DataType": "String", "StringValue": self.name},
            contract.SCHEDULED_TIME_ATTRIBUTE: {
                "DataType": "String",
                "StringValue": message.format_scheduled_time(self.scheduled_at),
            },
            **priority.attribute(self.priority),
        }


class TickEnqueuer:
    """Claims a tick in the state table, then sends its EB-shaped message."""

    def __init__(
        self,
        queue_url: str,
        state_table: str,
        *,
        sqs: Any = None,
        dynamodb: Any = None,
        clock: Callable[[], float] = wall_clock.now,
        sleep: Callable[[float], None] = time.sleep,
        payload_bucket: str | None = None,
        s3: Any = None,
        priority_queue_urls: Mapping[str, str] | None = None,
    ) -> None:
        self.queue_url = queue_url
        self.queues = priority.PriorityQueues(queue_url, **dict(priority_queue_urls or {}))  # each tick to its level's
        self.state_table = state_table
        self.fifo = queue_url.endswith(".fifo")
        self._sqs = LazyClient("sqs", sqs)
        self._dynamodb = LazyClient("dynamodb", dynamodb)
        self._clock = clock
        self._sleep = sleep
        self._payloads = PayloadStore(payload_bucket, s3) if payload_bucket else None
        self._maximum_message_size: int | None = None

    def enqueue(self, tick: Tick) -> bool:
        """Send the tick's message unless another invocation has; True when this call sent it.

        Raises ``TickNotEnqueuedError`` when the send fails and ``TickPendingError`` when
        another invocation keeps the claim without sending: both ask for a retry.
        """
        holder = uuid.uuid4().hex
        for poll in range(TICK_PENDING_POLLS):
            if poll:
                self._sleep(TICK_PENDING_POLL_SECONDS)
            status = self._claim(tick, holder)
            if status is None:
                self._send(tick, holder)
                return True
            if status == STATUS_SENT:
                return False
        raise TickPendingError(
            f"tick {tick.key!r} is claimed by another invocation that has not sent it after "
            f"{TICK_PENDING_POLLS * TICK_PENDING_POLL_SECONDS} s; a retry finds it sent, or takes over "
            f"once the {TICK_LEASE_SECONDS} s lease has run out"
        )

    def _claim(self, tick: Tick, holder: str) -> str | None:
        """Claim a new tick, or take over a pending one whose lease has run out.

        None when ``holder`` now holds the claim, else the status found (pending or sent).
        """
        found = tick.lease(self.state_table).claim(
            self._dynamodb.get(), holder, int(self._clock()), attributes={STATUS_ATTRIBUTE: {"S": STATUS_PENDING}},
            takeover_condition=_PENDING, names=_STATUS_NAMES, values=_PENDING_VALUES,
        )
        return None if found is None else found.get(STATUS_ATTRIBUTE, {}).get("S", STATUS_PENDING)

    def _send(self, tick: Tick, holder: str) -> None:
        """Send the claimed tick and mark it sent; on a failed send, give the claim back and raise."""
        envelope, pointer, call = Envelope(tick.body, tick.message_attributes()), None, "PutObject"
        try:
            pointer = self._offload(envelope)
            call = "SendMessage"
            self._sqs.get().send_message(**self._request(tick, envelope))
        except Exception as error:
            if pointer is not None and not outcome_unknown(error):  # not sent (after a lost answer SQS may have it)
                self._delete_orphan(pointer, error)
            failure = TickNotEnqueuedError(
                f"tick {tick.key!r} was not enqueued: {call} failed with {error_code(error)}: {error}; "
                "its claim is given back so a retry sends it"
            )
            self._release(tick, holder, failure)
            raise failure from error
        self._mark_sent(tick, holder)

    def _mark_sent(self, tick: Tick, holder: str) -> None:
        """Mark the claim sent while ``holder`` still has it (``retry.TICK_MARK``); never raises, since SQS already has the message."""
        for attempt in TICK_MARK.attempts_with_pauses(self._sleep):
            try:
                marked = tick.lease(self.state_table).update(
                    self._dynamodb.get(), holder, "SET #status = :sent",
                    names=_STATUS_NAMES, values={":sent": {"S": STATUS_SENT}},
                )
            except Exception as error:
                if attempt == TICK_MARK.attempts - 1:
                    self._mark_failed(tick, f"UpdateItem failed {TICK_MARK.attempts} times, last with {error_code(error)}: {error}")
                continue
            if not marked:
                self._mark_failed(tick, "the claim is no longer this invocation's (its lease ran out)")
            return

    def _mark_failed(self, tick: Tick, reason: str) -> None:
        """Log and count a sent tick whose claim is not marked sent (a later invocation may send it again)."""
        observability.count(METRIC_TICK_MARK_FAILED)
        logger.error(
            f"tick {tick.key!r} was sent but its claim was not marked sent: {reason}; "
            "a retry or duplicate invocation may send it again (a FIFO queue deduplicates it)",
            extra={"tick": tick.key},
        )

    def _release(self, tick: Tick, holder: str, failure: Exception) -> None:
        """Delete the claim if ``holder`` still has it pending; if that fails, the lease runs out instead."""
        try:
            tick.lease(self.state_table).release(self._dynamodb.get(), holder, condition=_PENDING, names=_STATUS_NAMES, values=_PENDING_VALUES)
        except Exception as error:
            failure.add_note(
                f"Giving the claim back failed too ({error_code(error)}): "
                f"a retry takes the tick over after the {TICK_LEASE_SECONDS} s lease."
            )

    def _request(self, tick: Tick, envelope: Envelope) -> dict[str, Any]:
        """SendMessage arguments: EB's body (or its pointer) and ``beanstalk.sqsd.*`` attributes."""
        if self.fifo:
            return envelope.request(self.queue_url, MessageGroupId=tick.group_id, MessageDeduplicationId=tick.deduplication_id())
        return envelope.request(self.queues.url(tick.priority))


    def _offload(self, envelope: Envelope) -> Pointer | None:
        """Put the tick's body in the payload bucket when the message is too large for the queue; its pointer, or None."""
        if self._payloads is None or is_offloaded(envelope.attributes):
            return None
        if envelope.size() <= limits.SQS_MIN_MAXIMUM_MESSAGE_SIZE_BYTES or envelope.size() <= self._queue_limit():
            return None
        pointer = self._payloads.put(envelope.body)
        observability.count(METRIC_PAYLOADS_OFFLOADED)
        envelope.body = pointer.body()
        envelope.attributes.update(size_attribute(pointer.size or 0))
        return pointer

    def _delete_orphan(self, pointer: Pointer, error: Exception) -> None:
        """Delete the object of a tick SQS refused, and count it (the retry puts the body again)."""
        observability.count(METRIC_PAYLOAD_ORPHANS)
        logger.warning(f"deleting the payload {pointer.uri}: its tick was not sent ({error_code(error)})")
        if self._payloads is not None:
            self._payloads.delete(pointer)

    def _queue_limit(self) -> int:
        """The queue's MaximumMessageSize, read once; the smallest a queue may have while it cannot be read."""
        if self._maximum_message_size is None:
            try:
                response = self._sqs.get().get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["MaximumMessageSize"])
                self._maximum_message_size = int(response["Attributes"]["MaximumMessageSize"])
            except Exception as error:
                logger.warning(f"could not read MaximumMessageSize of {self.queue_url} ({error_code(error)}: {error}); "
                               "a tick over the smallest a queue may have goes to the payload bucket")
                return limits.SQS_MIN_MAXIMUM_MESSAGE_SIZE_BYTES
        return self._maximum_message_size


def tick_from_event(event: Any) -> Tick:
    """The Tick a schedule's input describes; ValueError naming what is missing or malformed."""
    if not isinstance(event, Mapping):
        raise ValueError(
            f"cron event must be a JSON object with string fields name, url and scheduled_time, "
            f"got {type(event).__name__}: {event!r:.200}"
        )
    missing = [key for key in _EVENT_FIELDS if not isinstance(event.get(key), str)]
    if missing:
        raise ValueError(f"cron event needs string fields name, url and scheduled_time; missing {missing} in {event!r:.500}")
    body = event.get("body") or contract.SCHEDULED_JOB_BODY
    if not isinstance(body, str):
        raise ValueError(f"cron event body must be a string, got {type(body).__name__}: {body!r:.200}")
    level = event.get("priority") or contract.DEFAULT_PRIORITY
    if level not in contract.PRIORITY_LEVELS:
        raise ValueError(f"cron event priority must be one of {', '.join(contract.PRIORITY_LEVELS)}, got {level!r:.200}")
    tick = Tick(event["name"], event["url"], _scheduled_time(event["scheduled_time"]), body, level)
    problem = _send_problem(tick)
    if problem:
        raise ValueError(f"cron event would be refused by SQS: {problem}")
    return tick


def _scheduled_time(text: str) -> datetime:
    """An ISO-8601 time as an aware UTC datetime (UTC when it has no offset); ValueError naming the text."""
    try:
        scheduled = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"cron event scheduled_time must be ISO-8601, got {text!r:.200}") from None
    if scheduled.tzinfo is None:
        return scheduled.replace(tzinfo=timezone.utc)
    try:
        return scheduled.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError(
            f"cron event scheduled_time {text!r} is outside years 1-9999 once converted to UTC; "
            "a tick time must fall within them"
        ) from None


def _send_problem(tick: Tick) -> str | None:
    """The first reason SQS would refuse the tick's attributes or body (the checks synth runs on cron.yaml), or None."""
    attributes = tick.message_attributes()
    for name in (contract.TASK_NAME_ATTRIBUTE, contract.PATH_ATTRIBUTE):
        problem = sqs_rules.attribute_value_problem(name, attributes[name])
        if problem:
            return problem
    return sqs_rules.body_problem(tick.body)
