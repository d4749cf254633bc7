"""The producer: ``Client.send`` and ``Client.send_batch``.

One idea, kept whole: turning a send into SQS calls (now, delayed through the table, or at a moment).

Every message is checked against SQS's rules (``worker_tier.core.sqs_rules``) before
anything is sent or stored, so a message the delay table keeps for later is one
SQS will take at dispatch. A ``dedupe_key`` means one thing on every queue type
and at every delay: at most one accepted message per key (the rule for standard
queues is in ``worker_tier.delays.dedupe``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Mapping

from worker_tier.delays import cancellation, dedupe, delay
from worker_tier.core import contract, limits, message, priority
from worker_tier.core import wall_clock
from worker_tier.pipeline import middleware
from worker_tier.producer import offload
from worker_tier.producer import outgoing as checks
from worker_tier.core.aws import OUTCOME_UNKNOWN_CODE as _OUTCOME_UNKNOWN, LazyClient, error_code, outcome_unknown
from worker_tier.delays.delay import DelayedMessage
from worker_tier.core.envelope import Envelope
from worker_tier.core.limits import attribute_room
from worker_tier.core.errors import MessageError, MissingResourceError, PayloadUnavailableError, SendError
from worker_tier.core import jobs
from worker_tier.core.jobs import JobStatus
from worker_tier.core.settings import DEFAULT_JOB_RETENTION_SECONDS, DEFAULT_PAYLOAD_MAX_BYTES, MAX_JOB_RETENTION_SECONDS
from worker_tier.producer.jobs import DEFAULT_POLL_SECONDS, JobRecords
from worker_tier.producer.outgoing import OutgoingMessage, due_in_seconds
from worker_tier.core.retry import SEND_ENTRIES, batches

__all__ = ["Client", "OutgoingMessage", "SendResult", "due_in_seconds"]

_log = logging.getLogger(__name__)

# The dispatcher adds worker_tier.due_at at dispatch: "YYYY-MM-DDTHH:MM:SS.mmmZ", 24 characters.
DUE_AT_ATTRIBUTE_BYTES = len(contract.DUE_AT_ATTRIBUTE) + len("String") + len("2026-01-01T00:00:00.000Z")
QUEUE_LIMIT_UNKNOWN_CODE = "QueueLimitUnknown"
# A send whose answer was lost (read timeout, closed connection, 5xx): SQS (or the delay table) may have the message.
OUTCOME_UNKNOWN_CODE = _OUTCOME_UNKNOWN
# A message of send_batch that failed a check before anything was sent (Client.send raises it as MessageError).
MESSAGE_ERROR_CODE = "MessageError"



@dataclass(frozen=True)
class SendResult:
    """What became of one message of ``send_batch``: its message id, or why it was refused."""

    index: int
    message_id: str | None = None
    error: str | None = None
    code: str | None = None
    job_id: str | None = None  # a tracked message's job (docs/jobs.md): when sent, or when its send's outcome is unknown

    @property
    def ok(self) -> bool:
        """True when SQS (or the delay table) accepted the message."""
        return self.message_id is not None


class Client:
    """Sends work to a Worker Tier queue.

    ``maximum_message_size`` is the queue's MaximumMessageSize in bytes. When it
    is not given, the Client reads it with GetQueueAttributes the first time a
    message goes to the delay table (a message sent straight to SQS is checked by
    SQS itself), and keeps it. A failed read is logged and never kept: the next
    send tries again, and meanwhile a delayed message over
    ``limits.SQS_FORMER_DEFAULT_MAXIMUM_MESSAGE_SIZE_BYTES`` (256 KiB) comes back with
    the retryable code ``QueueLimitUnknown``; a smaller one is stored.

    ``payload_bucket`` (``s3``: its client) is where a body too large for the queue goes, as AWS's SQS Extended
    Client would put it (``worker_tier.producer.offload``, docs/large-payloads.md): over the queue's
    MaximumMessageSize, over ``payload_threshold`` when it is not 0, or over the delay table's item limit. With a
    bucket, a message sent now that is larger than the smallest queue SQS allows (1 KiB) needs the queue's limit,
    read as above (once); while it cannot be read, anything over 256 KiB is offloaded. A body over
    ``payload_max_bytes`` is refused; ``payload_orphans`` counts the objects deleted because their message was not sent.

    Examples
    --------
    >>> client = Client("https://sqs.us-east-1.amazonaws.com/123456789012/work")  # doctest: +SKIP
    >>> client.send("/resize", '{"key": "cat.jpg"}', delay=timedelta(seconds=30))  # doctest: +SKIP
    '5fea7756-0ea4-451a-a703-a558b933e274'
    """

    def __init__(
        self,
        queue_url: str | None = None,
        delay_table: str | None = None,
        *,
        sqs: Any = None,
        dynamodb: Any = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        delay_shards: int = delay.DEFAULT_SHARDS,
        long_delay_threshold: int = delay.LONG_DELAY_THRESHOLD_SECONDS,
        maximum_message_size: int | None = None,
        state_table: str | None = None,
        payload_bucket: str | None = None,
        s3: Any = None,
        payload_threshold: int = 0,
        payload_max_bytes: int = DEFAULT_PAYLOAD_MAX_BYTES,
        priority_queue_urls: Mapping[str, str] | None = None,
        track: bool = False,
        job_retention: int = DEFAULT_JOB_RETENTION_SECONDS,
    ) -> None:
        if not queue_url or not isinstance(queue_url, str):
            raise MessageError(f"Client needs a queue_url string (or use Client.from_env() with {contract.QUEUE_URL_VARIABLE} set), "
                               f"got {checks.shown(queue_url)}")
        checks.check_settings(delay_shards, maximum_message_size)
        if not isinstance(track, bool):
            raise MessageError(f"track must be True or False, got {checks.shown(track)}")
        checks.check_job_retention(job_retention)
        # send(track=None) follows this default: a Client made for one kind of work can track all of it (docs/jobs.md)
        self.track, self.job_retention = track, job_retention
        self.queue_url = queue_url
        # Each priority level's queue (the priorities setting); queue_url is the normal level's.
        self.queues = priority.PriorityQueues(queue_url, **_level_urls(priority_queue_urls))
        self.delay_table = delay_table
        self.state_table = state_table  # the delay dispatcher's records: cancellable sends, cancel and reschedule check them
        self.fifo = queue_url.endswith(".fifo")
        self._sqs = LazyClient("sqs", sqs)
        self._dynamodb = LazyClient("dynamodb", dynamodb)
        self._s3 = LazyClient("s3", s3)  # a tracked job's result kept in the payload bucket is read with it
        self._clock = clock or wall_clock.now
        self._sleep = sleep
        self._delay_shards = delay_shards
        # Delays above this go to the delay table; only the local environment lowers it (with the horizon).
        self._long_delay_threshold = long_delay_threshold
        self._maximum_message_size = maximum_message_size
        self._payloads = offload.Offloader(payload_bucket, s3, threshold=payload_threshold, max_bytes=payload_max_bytes,
                                           kept_codes=frozenset({OUTCOME_UNKNOWN_CODE}), clock=self._clock)
        self.payload_bucket, self.payload_threshold, self.payload_max_bytes = payload_bucket, payload_threshold, payload_max_bytes

    @property
    def payload_orphans(self) -> int:
        """How many uploaded bodies were deleted because their message was not sent or stored."""
        return self._payloads.orphans

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **kwargs: Any) -> Client:
        """A Client for the work queue and, when set, the delay table, the payload bucket and their settings
        (delay_shards, payload_threshold, payload_max_bytes).

        The work queue is the send queue (``contract.SEND_QUEUE_URL_VARIABLE``) where a process consumes
        another queue (the container worker consumes its own queue, but its tasks' follow-ups go to the
        work queue), else the queue (``contract.QUEUE_URL_VARIABLE``); with the priorities setting, the high and
        low levels' queues too; see ``contract.PRODUCER_NEEDS``.
        """
        shards = environ.get(contract.DELAY_SHARDS_VARIABLE)
        if shards is not None:
            kwargs.setdefault("delay_shards", checks.whole_number(contract.DELAY_SHARDS_VARIABLE, shards, delay.MAX_SHARDS))
        for name, value in offload.settings_from_env(environ).items():
            kwargs.setdefault(name, value)
        resources = contract.PRODUCER_NEEDS.read(environ)
        kwargs.setdefault("state_table", environ.get(contract.STATE_TABLE_VARIABLE))
        retention = environ.get(contract.JOB_RETENTION_VARIABLE)
        if retention is not None:
            kwargs.setdefault("job_retention", checks.whole_number(contract.JOB_RETENTION_VARIABLE, retention, MAX_JOB_RETENTION_SECONDS))
        kwargs.setdefault("payload_bucket", resources.payload_bucket)
        kwargs.setdefault("priority_queue_urls", {level: url for level, field in contract.PRIORITY_QUEUE_FIELDS.items()
                                                  if (url := getattr(resources, field)) is not None})
        return cls(resources.send_queue_url or resources.queue_url, resources.delay_table, **kwargs)

    def send(
        self,
        path: str,
        body: Any,
        *,
        delay: timedelta | float | None = None,
        at: datetime | None = None,
        attributes: Mapping[str, Any] | None = None,
        dedupe_key: str | None = None,
        group_id: str | None = None,
        cancellable: bool = False,
        priority: str = contract.DEFAULT_PRIORITY,
        track: bool | None = None,
    ) -> str:
        """Send one message to the task at ``path``; return its message id, or its job id when tracked.

        Parameters
        ----------
        path
            The task's path; it travels in the ``beanstalk.sqsd.path`` attribute.
        body
            Sent exactly as given when a string; anything else is JSON-encoded.
        delay, at
            Seconds (or a timedelta), or an aware datetime (one in the past means
            now). Up to SQS's 15 minutes through DelaySeconds; beyond that, up to
            366 days, through the delay table.
        attributes
            Up to 9 (8 with ``at=`` in the future or a delay past 15 minutes,
            which carry ``worker_tier.due_at``): str → String, int, float or
            Decimal → Number (a Decimal keeps its digits), bytes → Binary. Names
            starting with ``worker_tier.`` or ``beanstalk.sqsd.`` are Worker Tier's
            and sqsd's own and are refused.
        dedupe_key
            At most one message per key is accepted, and a repeated send returns
            the first one's id and sends nothing; 1 to 128 ASCII letters, digits
            and punctuation, and at most once per ``send_batch``. On a FIFO queue it
            is SQS's MessageDeduplicationId (SQS's 5 minutes); on a standard queue
            it needs the delay table and follows ``worker_tier.delays.dedupe``'s rule,
            whose retryable ``DedupeKeyInFlight`` means another send holds the key.
        group_id
            FIFO only, and required there: the MessageGroupId.
        cancellable
            Store it in the delay table whatever its delay, so ``cancel`` and
            ``reschedule`` can reach it by its ``dedupe_key`` (required) until the
            delay dispatcher starts its minute; it must be due more than
            ``cancellation.CANCELLABLE_MIN_DELAY_SECONDS`` (840 s) ahead, and it
            needs the state table (``worker_tier.delays.cancellation``).
        priority
            ``"high"``, ``"normal"`` (the default) or ``"low"``: the level's queue, which exists with the
            ``priorities`` setting (docs/priorities.md). A high or low message carries
            ``worker_tier.priority``, one of SQS's 10 attributes, so it may carry one attribute fewer of its
            own; a delayed one keeps its level and is delivered to its level's queue.
        track
            Record the message's life as a job in the state table (docs/jobs.md) and return its job id (32 hex digits)
            for ``status`` and ``wait``; None: the Client's ``track`` default. The id travels in
            ``worker_tier.job``, one of SQS's 10 attributes, so the message may carry one attribute fewer of its own;
            needs the state table. With a ``dedupe_key`` the job id comes from the key: a repeated send is the same job.

        Without a ``dedupe_key``, a FIFO message gets a random
        MessageDeduplicationId, kept across the Client's own retries, so two
        different messages are never deduplicated (the stack's FIFO queues have
        content-based deduplication, which hashes the body only, off).

        Raises MessageError for input SQS would refuse, naming the value and the
        rule, and SendError (with the code) when the message was not sent or
        stored: SQS or the delay table refused it, or a retryable condition held.
        """
        outgoing = OutgoingMessage(path, body, delay, at, attributes, dedupe_key, group_id, cancellable, priority, track)
        result = self.send_batch([outgoing])[0]
        if result.code == MESSAGE_ERROR_CODE:
            raise MessageError(result.error or "")
        if result.message_id is None:  # not result.ok
            also = f"; its job {result.job_id} may still run (the send's answer was lost)" if result.job_id else ""
            raise SendError(f"the message for {path} was not sent ({result.code}): {result.error}{also}", result.code or "")
        return result.job_id or result.message_id

    def send_batch(
        self,
        messages: Iterable[OutgoingMessage],
        *,
        _internal_attributes: Mapping[int, Mapping[str, str]] | None = None,
    ) -> list[SendResult]:
        """Send many messages in SendMessageBatch calls; return one SendResult per message, in order.

        Each message is checked before anything is sent or stored, and one that
        fails a check (a rule ``Client.send`` raises MessageError for, or a
        dedupe key another message of the batch carries too) comes back with
        ``ok`` False, code ``MESSAGE_ERROR_CODE`` and the check's message as its
        error, while the others are sent. Entries SQS fails on its side are
        retried with backoff; entries that still fail, or that SQS refuses as the
        sender's fault, come back with ``ok`` False, the reason and the code, and
        so does each message the delay table did not store. Only a call that is
        wrong as a whole raises MessageError: ``messages`` not an iterable of
        OutgoingMessage, or bad ``_internal_attributes``; and a Client lacking a
        table a message needs (a long delay or ``dedupe_key`` without
        ``delay_table``, ``cancellable`` without ``state_table``) raises
        MissingResourceError, before anything is sent.

        Examples
        --------
        >>> results = client.send_batch([OutgoingMessage("/hello", "hi"), OutgoingMessage("/hello", "")])  # doctest: +SKIP
        >>> [(r.ok, r.code) for r in results]  # doctest: +SKIP
        [(True, None), (False, 'MessageError')]

        ``_internal_attributes`` is for Worker Tier itself (the worker re-sending
        a message with ``worker_tier.attempts``), never for users: message index →
        extra String attributes named ``worker_tier.*``, exempt from the
        reserved-name rule but not from SQS's rules.
        """
        messages = checks.outgoing_messages(messages)
        internal = checks.internal_by_index(_internal_attributes or {}, len(messages))
        tracked = self._job_ids(messages, internal)
        results: dict[int, SendResult] = {}
        uploads = self._payloads.uploads()  # bodies put in S3: each one whose message is not sent is deleted
        created: set[int] = set()
        try:
            now = self._clock()
            routed = self._route(messages, now, internal, uploads)
            results.update({r.index: r for r in routed if isinstance(r, SendResult)})
            if tracked:
                routed, created = self._write_first_records(messages, routed, tracked, now, results, uploads)
            # Delayed ones first: each was routed as due more than 900 s after the clock read above, so it must be
            # written before the direct sends' retries and backoff can eat into that margin (delay.py's invariant).
            results.update(self._store_delayed([r for r in routed if isinstance(r, tuple)], uploads))
            entries = [r for r in routed if isinstance(r, dict)]
            direct = self._claim_dedupe_keys(entries, results)
            for held in {e["Id"] for e in entries} - {e["Id"] for e in direct}:
                uploads.unsent(int(held))
            for queue_url, level_entries in _by_queue(direct, self.queue_url).items():
                for chunk in _chunks(level_entries, self._maximum_message_size or limits.SQS_MAX_MESSAGE_BYTES):
                    results.update(self._send_chunk(chunk, queue_url))
            self._settle_dedupe_keys(direct, results)
        except Exception as error:
            uploads.settle(results, f"{type(error).__name__}: {error}")
            if created:
                self.jobs().forget([tracked[i] for i in created])
            raise
        uploads.settle(results)
        if tracked:
            self._settle_jobs(tracked, created, results)
        return [results[index] for index in range(len(messages))]

    def _job_ids(self, messages: list[OutgoingMessage], internal: dict[int, Mapping[str, str]]) -> dict[int, str]:
        """Each tracked message's job id (index → id), also put among its internal attributes; a copy the worker
        re-sends keeps the id it carries. MissingResourceError without the state table."""
        tracked: dict[int, str] = {}
        for index, outgoing in enumerate(messages):
            track = self.track if outgoing.track is None else outgoing.track
            if not isinstance(track, bool):
                raise MessageError(f"track must be True, False or None, got {checks.shown(track)}")
            if track and contract.JOB_ATTRIBUTE not in internal.get(index, {}):
                tracked[index] = jobs.new_job_id(outgoing.dedupe_key if isinstance(outgoing.dedupe_key, str) else None)
                internal[index] = {**internal.get(index, {}), contract.JOB_ATTRIBUTE: tracked[index]}
        if tracked and not self.state_table:
            raise MissingResourceError("track=True records the job in the state table; pass state_table "
                                       f"(or set {contract.STATE_TABLE_VARIABLE})", "state_table")
        return tracked

    def _write_first_records(
        self, messages: list[OutgoingMessage], routed: list[Any], tracked: dict[int, str], now: float,
        results: dict[int, SendResult], uploads: offload.Uploads,
    ) -> tuple[list[Any], set[int]]:
        """Write the tracked messages' first records before any is sent; a message whose record was not written is
        not sent (its result says why). The routes left to send, and the indexes whose record this call created."""
        from worker_tier.producer.jobs import current_job

        parent = current_job.get()
        items: dict[int, dict[str, Any]] = {}
        for route in routed:
            index = route.index if isinstance(route, SendResult) else route[0] if isinstance(route, tuple) else int(route["Id"])
            if index not in tracked or isinstance(route, SendResult):
                continue
            outgoing = messages[index]
            seconds = due_in_seconds(outgoing.delay, outgoing.at, now)
            due_ms = math.ceil((now + seconds) * 1000) if seconds > 0 else None
            items[index] = jobs.first_item(tracked[index], outgoing.path, int(now * 1000), due_ms, parent, self.job_retention)
        keyed = {i for i in items if messages[i].dedupe_key is not None}
        failures, created = self.jobs().write_first(items, keyed)
        for index, (code, reason) in failures.items():
            results[index] = SendResult(index, error=reason, code=code)
            uploads.unsent(index)
        left = [r for r in routed if not isinstance(r, SendResult) and
                (r[0] if isinstance(r, tuple) else int(r["Id"])) not in failures]
        return left, created

    def _settle_jobs(self, tracked: dict[int, str], created: set[int], results: dict[int, SendResult]) -> None:
        """Give each tracked result its job id (sent, or maybe sent); delete the records of messages surely not sent."""
        unsent = []
        for index, job_id in tracked.items():
            result = results[index]
            if result.ok or result.code == OUTCOME_UNKNOWN_CODE:
                results[index] = dataclasses.replace(result, job_id=job_id)
            elif index in created:
                unsent.append(job_id)
        if unsent:
            self.jobs().forget(unsent)

    def jobs(self) -> JobRecords:
        """The job records (docs/jobs.md) in the state table; MissingResourceError without it."""
        if not self.state_table:
            raise MissingResourceError("job status needs the state table; pass state_table "
                                       f"(or set {contract.STATE_TABLE_VARIABLE})", "state_table")
        return JobRecords(self.state_table, self._dynamodb.get(), self._clock, self.job_retention, self._s3.get, self._sleep,
                          bucket=self.payload_bucket)

    def status(self, job_id: str) -> JobStatus:
        """The tracked job ``job_id`` (``send(track=True)``'s return): its state, result, reason and history.

        Raises JobNotFoundError (a LookupError) when no record has that id: never tracked, or older than
        ``job_retention``; MessageError when ``job_id`` is not a job id.

        Examples
        --------
        >>> job_id = client.send("/report", {"month": "2026-01"}, track=True)  # doctest: +SKIP
        >>> client.status(job_id).state  # doctest: +SKIP
        'queued'
        """
        return self.jobs().status(job_id)

    def wait(self, job_id: str, timeout: float = 60.0, poll_seconds: float = DEFAULT_POLL_SECONDS) -> Any:
        """Block until the job ``job_id`` is final; return its result (decoded JSON) when it succeeded.

        Polls ``status`` every 0.1 s at first, each pause 1.5 times the last, up to ``poll_seconds``. Raises
        JobFailedError (dead-lettered: ``.reason``, ``.status``), JobCancelledError, or JobWaitTimeout (a
        TimeoutError, with the last ``.status``) after ``timeout`` seconds.

        Examples
        --------
        >>> client.wait(client.send("/add", [1, 2], track=True), timeout=30)  # doctest: +SKIP
        3
        """
        return self.jobs().wait(job_id, timeout, poll_seconds)

    def _route(self, messages: list[OutgoingMessage], now: float, internal: Mapping[int, Mapping[str, str]],
               uploads: offload.Uploads) -> list[Any]:
        """Each message's entry, delayed message or early SendResult (a failed ``MESSAGE_ERROR_CODE`` one when it fails a check)."""
        queue_limit = self._queue_limit_reader()
        repeated = dedupe.repeated_keys([m.dedupe_key for m in messages])
        routed: list[Any] = []
        for index, outgoing in enumerate(messages):
            try:
                if index in repeated:
                    raise MessageError(repeated[index])
                routed.append(self._build_entry(index, outgoing, now, internal.get(index, {}), queue_limit, uploads))
            except MissingResourceError:  # the Client's configuration, not this message: the same for every one
                raise
            except MessageError as error:
                routed.append(SendResult(index, error=str(error), code=MESSAGE_ERROR_CODE))
            except PayloadUnavailableError as error:  # S3 did not take its body: not sent, retryable
                routed.append(SendResult(index, error=str(error), code=offload.PAYLOAD_UNAVAILABLE_CODE))
        return routed

    def _build_entry(
        self, index: int, outgoing: OutgoingMessage, now: float, internal: Mapping[str, str],
        queue_limit: Callable[[], tuple[int | None, str]], uploads: offload.Uploads,
    ) -> Any:
        """Check one message and route it: a SendMessageBatch entry, (index, DelayedMessage), or a SendResult when it cannot go yet."""
        if not isinstance(outgoing.path, str) or not outgoing.path.startswith("/"):
            raise MessageError(f"path must be a string starting with '/', got {checks.shown(outgoing.path)}")
        # With a bucket, SQS's character rule waits until it is known whether SQS or S3 carries the body.
        characters = self.payload_bucket is None
        envelope = middleware.on_send(Envelope(checks.body_text(outgoing.body, characters=characters),
                                               checks.message_attributes(outgoing, internal)))
        checks.check_ids(outgoing)
        queue_url = self._queue_of(outgoing, internal)
        if not isinstance(outgoing.cancellable, bool):
            raise MessageError(f"cancellable must be True or False, got {checks.shown(outgoing.cancellable)}")
        seconds = due_in_seconds(outgoing.delay, outgoing.at, now)
        if math.ceil(seconds) > self._long_delay_threshold or outgoing.cancellable is True:
            return self._delayed(index, outgoing, envelope, now, seconds, queue_limit, uploads)  # the table keeps no system attributes
        if outgoing.at is not None and seconds > 0 and not self.fifo:
            envelope.attributes = _with_due_at(envelope.attributes, math.ceil((now + seconds) * 1000))
        options = self._queue_options(outgoing, math.ceil(seconds), now + seconds)
        self._payloads.fit(envelope, self._direct_limit(queue_limit), uploads, index)
        checks.check_characters(envelope)
        size = envelope.checked_size(self._maximum_message_size or limits.SQS_MAX_MESSAGE_BYTES)
        return envelope.entry(str(index), **options, _size=size, _queue_url=queue_url)

    def _queue_of(self, outgoing: OutgoingMessage, internal: Mapping[str, str]) -> str:
        """The queue of the message's level: the one it was sent with (MessageError when that level has no queue here),
        or, for Worker Tier's own re-send of a message (its level in ``internal``), that level's, else the work queue."""
        if outgoing.priority != contract.DEFAULT_PRIORITY or contract.PRIORITY_ATTRIBUTE not in internal:
            return self.queues.url(outgoing.priority)
        return self.queues.url_for({contract.PRIORITY_ATTRIBUTE: {"StringValue": internal[contract.PRIORITY_ATTRIBUTE]}})

    def _direct_limit(self, queue_limit: Callable[[], tuple[int | None, str]]) -> Callable[[], int]:
        """The queue's limit for a message sent now: without a bucket, as given (SQS checks the rest); with one, read
        once (offloading needs it), and while it cannot be read the smallest limit queues commonly have, 256 KiB."""
        if self.payload_bucket is None:
            return lambda: self._maximum_message_size or limits.SQS_MAX_MESSAGE_BYTES
        return lambda: queue_limit()[0] or limits.SQS_FORMER_DEFAULT_MAXIMUM_MESSAGE_SIZE_BYTES

    def _delayed(
        self, index: int, outgoing: OutgoingMessage, envelope: Envelope, now: float, seconds: float,
        queue_limit: Callable[[], tuple[int | None, str]], uploads: offload.Uploads,
    ) -> tuple[int, DelayedMessage] | SendResult:
        """A message for the delay table, checked against what the table and the dispatch can carry."""
        self._check_delay_table_use(outgoing, math.ceil(seconds), len(envelope.attributes))
        if outgoing.cancellable is True:
            self._check_cancellable(outgoing, seconds)
        maximum, failure = queue_limit()
        what = f"with {contract.DUE_AT_ATTRIBUTE} (added at dispatch)"
        message_id = delay.new_message_id(outgoing.dedupe_key)
        cancellable = outgoing.cancellable is True
        shard = delay.CANCELLABLE_SHARD if cancellable else delay.shard_of(message_id, self._delay_shards)

        def stored() -> DelayedMessage:
            return DelayedMessage(message_id, math.ceil((now + seconds) * 1000), envelope.body, envelope.attributes, shard,
                                  outgoing.dedupe_key, cancellable)

        # Unknown, the queue's limit is taken as 256 KiB when a larger message could go to S3 instead of failing.
        limit = maximum or (limits.SQS_FORMER_DEFAULT_MAXIMUM_MESSAGE_SIZE_BYTES if self.payload_bucket else limits.SQS_MAX_MESSAGE_BYTES)
        self._payloads.fit(envelope, lambda: limit, uploads, index, extra=DUE_AT_ATTRIBUTE_BYTES, reserved=1, delayed=True,
                           item_too_large=lambda: delay.item_bytes(stored().to_item()) > delay.MAX_ITEM_BYTES, what=what)
        checks.check_characters(envelope)
        size = envelope.checked_size(maximum or limits.SQS_MAX_MESSAGE_BYTES, extra=DUE_AT_ATTRIBUTE_BYTES, what=what)
        delayed = stored()
        item_bytes = delay.item_bytes(delayed.to_item())
        if item_bytes > delay.MAX_ITEM_BYTES:
            raise MessageError(
                f"a delayed message is stored as one DynamoDB item, which Worker Tier keeps to {delay.MAX_ITEM_BYTES} bytes "
                f"(DynamoDB's {limits.DYNAMODB_MAX_ITEM_BYTES} less a {delay.ITEM_SIZE_MARGIN_BYTES}-byte margin); this one needs "
                f"{item_bytes}: shorten its body or attributes by {item_bytes - delay.MAX_ITEM_BYTES} bytes, "
                f"or {offload.BUCKET_FIX}"
            )
        if maximum is None and size > limits.SQS_FORMER_DEFAULT_MAXIMUM_MESSAGE_SIZE_BYTES:
            return SendResult(index, error=_limit_unknown_reason(size, failure), code=QUEUE_LIMIT_UNKNOWN_CODE)
        return index, delayed

    def _check_delay_table_use(self, outgoing: OutgoingMessage, wait: int, attribute_count: int) -> None:
        """MessageError when a long delay cannot go through the delay table."""
        if self.fifo:
            raise MessageError(
                f"a delay of {wait} s needs the delay table, which does not serve FIFO queues yet "
                "(SQS has no per-message delay on FIFO); send it without a delay or to a standard queue"
            )
        if not self.delay_table:
            raise MissingResourceError(
                f"a delay of {wait} s is over SQS's {limits.SQS_MAX_DELAY_SECONDS} s maximum and needs the delay table; "
                f"pass delay_table (or set {contract.DELAY_TABLE_VARIABLE})", "delay_table"
            )
        if wait > delay.MAX_DELAY_SECONDS:
            raise MessageError(f"a delay of {wait} s is beyond the {delay.MAX_DELAY_SECONDS} s (366 days) maximum")
        if outgoing.group_id is not None:
            raise MessageError("group_id applies to FIFO queues (a queue URL ending in .fifo)")
        if attribute_room(attribute_count, reserved=1) < 0:  # worker_tier.due_at, added at dispatch
            level = 0 if outgoing.priority == contract.DEFAULT_PRIORITY else 1
            also = f", and {contract.PRIORITY_ATTRIBUTE} one more" if level else ""
            raise MessageError(
                f"a delayed message may carry at most {attribute_room(0, reserved=2 + level)} attributes of its own "
                f"(the path and {contract.DUE_AT_ATTRIBUTE} take two of SQS's {limits.SQS_MAX_MESSAGE_ATTRIBUTES}{also}), "
                f"got {attribute_count - 1 - level}"
            )

    def _check_cancellable(self, outgoing: OutgoingMessage, seconds: float) -> None:
        """MessageError when a cancellable message lacks its key or the state table, or is due too soon to cancel."""
        if outgoing.dedupe_key is None:
            raise MessageError("cancellable=True needs a dedupe_key: cancel and reschedule find the message by it")
        if not self.state_table:
            raise MissingResourceError("cancellable=True needs the state table, where the delay dispatcher records the "
                                       f"minutes it has started; pass state_table (or set {contract.STATE_TABLE_VARIABLE})",
                                       "state_table")
        cancellation.check_delay(seconds)

    def cancel(self, dedupe_key: str) -> bool:
        """Cancel the delayed message sent with ``dedupe_key`` and ``cancellable=True``; True only if it will never be delivered.

        False when it was not found, was not sent cancellable, or the delay dispatcher
        has started its minute (the race is settled by DynamoDB, never by a clock:
        ``worker_tier.delays.cancellation``); the message is then delivered exactly as sent.
        A cancelled key's marker stays until due + the dedupe retention, so a retried send
        with it is deduplicated (as after a delivery). A DynamoDB error (a transaction conflict,
        throttling) raises, having changed nothing: retrying is safe.

        Examples
        --------
        >>> client.send("/remind", "{}", delay=timedelta(days=7), dedupe_key="remind-7", cancellable=True)  # doctest: +SKIP
        >>> client.cancel("remind-7")  # doctest: +SKIP
        True
        """
        return self.cancel_outcome(dedupe_key).done

    def cancel_outcome(self, dedupe_key: str) -> cancellation.Outcome:
        """``cancel``, with its outcome and reason (the command line's ``delayed cancel``).

        A cancelled message is never delivered, so its offloaded body's object is deleted too (best effort: the
        bucket's lifecycle rule removes one S3 did not delete).
        """
        outcome = self.cancellations().cancel(dedupe_key)
        if outcome.done and outcome.message is not None:
            self._payloads.delete_cancelled(outcome.message.body, outcome.message.attributes)
            job = _job_of(outcome.message)
            if job is not None:
                try:
                    self.jobs().cancelled(job)
                except Exception as error:  # the message is cancelled all the same; its job reads delayed, then queued
                    _log.warning("cancelled job %s could not be marked cancelled (%s: %s)", job, error_code(error), error)
        return outcome

    def reschedule(self, dedupe_key: str, *, at: datetime | None = None, delay: timedelta | float | None = None) -> bool:
        """Move the cancellable message with ``dedupe_key`` to ``at`` (or ``delay`` from now) in one transaction.

        True: it is delivered once, at the new time. False: it lost the race (or was
        not found, or not cancellable) and is delivered as sent. Never two copies, never
        none. MessageError when the new time is within the cancel window's 840 s or beyond
        the 366-day maximum, or ``dedupe_key`` is not a str.
        """
        return self.reschedule_outcome(dedupe_key, at=at, delay=delay).done

    def reschedule_outcome(self, dedupe_key: str, *, at: datetime | None = None,
                           delay: timedelta | float | None = None) -> cancellation.Outcome:
        """``reschedule``, with its outcome and reason (the command line's and the dashboard's); a tracked message's
        job reads delayed until its new due time (docs/jobs.md)."""
        now = self._clock()  # read once: the due time is exactly the one named
        seconds = due_in_seconds(delay, at, now)
        due_ms = math.ceil((now + seconds) * 1000) if at is None else max(math.ceil(at.timestamp() * 1000),
                                                                          math.ceil(now * 1000))
        outcome = self.cancellations().reschedule(dedupe_key, due_ms)
        job = _job_of(outcome.message) if outcome.done else None
        if job is not None:
            try:
                self.jobs().rescheduled(job, due_ms)
            except Exception as error:  # the message is moved all the same; its job reads queued from the old due time
                _log.warning("rescheduled job %s could not be moved (%s: %s)", job, error_code(error), error)
        return outcome

    def cancellations(self) -> cancellation.Cancellations:
        """Cancel and reschedule with their outcome and reason (the command line's ``delayed cancel``)."""
        if not self.delay_table or not self.state_table:
            raise MissingResourceError(
                "cancel and reschedule need the delay table and the state table; pass delay_table and state_table "
                f"(or set {contract.DELAY_TABLE_VARIABLE} and {contract.STATE_TABLE_VARIABLE})",
                "state_table" if self.delay_table else "delay_table")
        # The cancelled item is read first (one GetItem): its offloaded body's object and its job (docs/jobs.md) go with it.
        return cancellation.Cancellations(self.delay_table, self.state_table, self._dynamodb.get(), self._clock,
                                          read_cancelled=True)

    def _queue_limit_reader(self) -> Callable[[], tuple[int | None, str]]:
        """The queue's MaximumMessageSize for one send_batch call: as given or read before, else read at most once now.

        A failed read gives (None, why) and is never kept: the next call reads again.
        """

        @functools.lru_cache(maxsize=1)
        def read() -> tuple[int | None, str]:
            if self._maximum_message_size is None:
                try:
                    response = self._sqs.get().get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["MaximumMessageSize"])
                    self._maximum_message_size = int(response["Attributes"]["MaximumMessageSize"])
                except Exception as error:
                    _log.warning("could not read MaximumMessageSize of %s (%s: %s)", self.queue_url, error_code(error), error)
                    return None, f"{error_code(error)}: {error}"
            return self._maximum_message_size, ""

        return read

    def _store_delayed(self, delayed: list[tuple[int, DelayedMessage]], uploads: offload.Uploads) -> dict[int, SendResult]:
        """Write delayed messages; each one not stored is reported with its own code and reason, the others as sent
        (a deduplicated one with the earlier send's id, its upload marked unsent)."""
        if not delayed:
            return {}
        failures: Mapping[str, tuple[str, str]] = {}
        deduplicated: set[str] = set()
        try:
            dynamodb = self._dynamodb.get()
            markers = dedupe.DedupeMarkers(self.delay_table or "", dynamodb, self._clock, deduplicated=deduplicated)
            keyed_write: delay.KeyedWrite = markers.store_delayed
            if any(m.cancellable for _, m in delayed):
                cancellations = self.cancellations()
                cancellations.deduplicated = deduplicated
                keyed_write = _keyed_write(cancellations, markers.store_delayed)
            store = delay.DelayStore(self.delay_table or "", dynamodb, self._delay_shards, self._sleep, keyed_write=keyed_write)
            store.put_many([m for _, m in delayed])
        except delay.DelayStoreError as error:
            failures = error.failures
        except Exception as error:  # no DynamoDB client: nothing was stored
            failures = {m.message_id: (error_code(error), str(error)) for _, m in delayed}
        for index, stored in delayed:
            if stored.message_id in deduplicated:
                uploads.unsent(index)
        return {
            i: SendResult(i, error=failures[m.message_id][1], code=failures[m.message_id][0])
            if m.message_id in failures
            else SendResult(i, message_id=m.message_id)
            for i, m in delayed
        }

    def _queue_options(self, outgoing: OutgoingMessage, delay_seconds: int, due: float) -> dict[str, Any]:
        """DelaySeconds and a standard queue's dedupe key, or FIFO's group and deduplication ids."""
        if not self.fifo:
            if outgoing.group_id is not None:
                raise MessageError("group_id applies to FIFO queues (a queue URL ending in .fifo)")
            options: dict[str, Any] = {"DelaySeconds": delay_seconds} if delay_seconds else {}
            if outgoing.dedupe_key is not None:
                if not self.delay_table:
                    raise MissingResourceError(
                        f"dedupe_key {outgoing.dedupe_key!r} on a standard queue needs the delay table, which keeps "
                        f"the key; pass delay_table (or set {contract.DELAY_TABLE_VARIABLE})", "delay_table"
                    )
                options.update(_dedupe_key=outgoing.dedupe_key, _due=due)
            return options
        if delay_seconds:
            raise MessageError(
                f"a FIFO queue has no per-message delay (SQS rejects DelaySeconds on FIFO messages), got a delay of {delay_seconds} s"
            )
        if outgoing.group_id is None:
            raise MessageError("group_id is required for a FIFO queue")
        # Never left to content-based deduplication, which hashes the body only (two paths, one body: one message).
        dedupe_id = outgoing.dedupe_key if outgoing.dedupe_key is not None else uuid.uuid4().hex
        return {"MessageGroupId": outgoing.group_id, "MessageDeduplicationId": dedupe_id}

    def _claim_dedupe_keys(self, entries: list[dict[str, Any]], results: dict[int, SendResult]) -> list[dict[str, Any]]:
        """Claim each standard-queue dedupe key (``worker_tier.delays.dedupe``); the entries to send, the others reported."""
        keyed = [e for e in entries if "_dedupe_key" in e]
        if not keyed:
            return entries
        markers, held = dedupe.DedupeMarkers(self.delay_table or "", self._dynamodb.get(), self._clock), set()
        for entry in keyed:
            index, claim = int(entry["Id"]), markers.claim(entry["_dedupe_key"], entry["_due"])
            if claim.outcome == dedupe.CLAIMED:
                entry["_claimed_ms"] = claim.now_ms
                continue
            held.add(index)
            failure = claim.failure()
            results[index] = SendResult(index, error=failure[1], code=failure[0]) if failure else SendResult(index, message_id=claim.message_id)
        return [e for e in entries if int(e["Id"]) not in held]

    def _settle_dedupe_keys(self, sent: list[dict[str, Any]], results: dict[int, SendResult]) -> None:
        """Mark each claimed key sent, or give it back so a retry sends; report the key's id for accepted ones."""
        keyed = [e for e in sent if "_dedupe_key" in e]
        if not keyed:
            return
        markers = dedupe.DedupeMarkers(self.delay_table or "", self._dynamodb.get(), self._clock)
        for entry in keyed:
            index, key = int(entry["Id"]), entry["_dedupe_key"]
            result = results[index]
            if result.code == OUTCOME_UNKNOWN_CODE:
                continue  # maybe sent: the key stays held unsent, so a retry waits out the lease rather than sending twice
            markers.settle(key, entry["_due"], entry["_claimed_ms"], result.message_id)
            if result.ok:
                results[index] = SendResult(index, message_id=delay.new_message_id(key))

    def _send_chunk(self, chunk: list[dict[str, Any]], queue_url: str) -> dict[int, SendResult]:
        """One batch, retrying entries that failed on SQS's side (``retry.SEND_ENTRIES``); no call for a dedupe claim past its send window."""
        results: dict[int, SendResult] = {}
        claims = {e["Id"]: (e["_dedupe_key"], e["_claimed_ms"]) for e in chunk if "_claimed_ms" in e}
        pending = [{k: v for k, v in entry.items() if not k.startswith("_")} for entry in chunk]
        for _ in SEND_ENTRIES.attempts_with_pauses(self._sleep):
            pending = self._inside_send_window(pending, claims, results)
            if not pending:
                break
            try:
                response = self._sqs.get().send_message_batch(QueueUrl=queue_url, Entries=pending)
            except Exception as error:  # botocore already retried call-level throttling
                code, text = error_code(error), str(error)
                if outcome_unknown(error):  # SQS may have taken them: a dedupe key stays held (see _settle_dedupe_keys)
                    code, text = OUTCOME_UNKNOWN_CODE, f"SQS may have taken the message; its answer was lost ({code}: {text})"
                return {**results, **{int(e["Id"]): SendResult(int(e["Id"]), error=text, code=code) for e in pending}}
            retry_ids = self._read_batch_response(response, results)
            pending = [e for e in pending if e["Id"] in retry_ids]
            if not pending:
                break
        return results

    @staticmethod
    def _read_batch_response(response: Mapping[str, Any], results: dict[int, SendResult]) -> set[str]:
        """Record a SendMessageBatch response's outcomes; the ids of entries worth retrying (not the sender's fault)."""
        for ok in response.get("Successful") or []:
            results[int(ok["Id"])] = SendResult(int(ok["Id"]), message_id=ok["MessageId"])
        retry_ids = set()
        for failed in response.get("Failed") or []:
            index = int(failed["Id"])
            results[index] = SendResult(index, error=failed.get("Message") or failed["Code"], code=failed["Code"])
            if not failed.get("SenderFault"):
                retry_ids.add(failed["Id"])
        return retry_ids

    def _inside_send_window(
        self, pending: list[dict[str, Any]], claims: Mapping[str, tuple[str, int]], results: dict[int, SendResult]
    ) -> list[dict[str, Any]]:
        """Leave out entries whose dedupe claim is too old for one more call to end inside its lease; they fail, retryably."""
        late = dedupe.late_claims({e["Id"]: claims[e["Id"]] for e in pending if e["Id"] in claims}, int(self._clock() * 1000))
        results.update({int(i): SendResult(int(i), error=reason, code=dedupe.LEASE_OVER_CODE) for i, reason in late.items()})
        return [e for e in pending if e["Id"] not in late]


def _with_due_at(attributes: dict[str, Any], due_ms: int) -> dict[str, Any]:
    """A direct ``at=`` send's attributes plus ``worker_tier.due_at``, so a worker holds it back if the producer's
    clock ran ahead (DelaySeconds comes from that clock); MessageError when there is no attribute left for it."""
    if attribute_room(len(attributes), reserved=1) < 0:
        level = int(contract.PRIORITY_ATTRIBUTE in attributes)  # a prioritized message's level takes one more
        also = f", and {contract.PRIORITY_ATTRIBUTE} one more" if level else ""
        raise MessageError(
            f"a message sent with at= carries {contract.DUE_AT_ATTRIBUTE}, so it is never delivered early whatever this "
            f"clock says: it may carry at most {attribute_room(0, reserved=2 + level)} attributes of its own "
            f"(the path and {contract.DUE_AT_ATTRIBUTE} take two of SQS's {limits.SQS_MAX_MESSAGE_ATTRIBUTES}{also}), "
            f"got {len(attributes) - 1 - level}"
        )
    return {**attributes, contract.DUE_AT_ATTRIBUTE: {"DataType": "String", "StringValue": message.format_due_at(due_ms)}}


def _keyed_write(cancellations: cancellation.Cancellations, plain: delay.KeyedWrite) -> delay.KeyedWrite:
    """The DelayStore's write of a keyed message: a cancellable one with its minute's check, any other as ``plain``."""
    return lambda message: cancellations.store(message) if message.cancellable else plain(message)


def _limit_unknown_reason(size: int, failure: str) -> str:
    """The retryable error of a delayed message too big to store while the queue's maximum is unknown."""
    return (
        f"could not read the queue's MaximumMessageSize ({failure}); this delayed message is {size} bytes with "
        f"{contract.DUE_AT_ATTRIBUTE}, over the {limits.SQS_FORMER_DEFAULT_MAXIMUM_MESSAGE_SIZE_BYTES} bytes any queue takes, "
        "so it was not stored: retry"
    )


def _level_urls(urls: Mapping[str, str] | None) -> dict[str, str]:
    """``priority_queue_urls`` checked: the high and low levels only (the normal level's is ``queue_url``)."""
    wrong = sorted(set(urls or {}) - set(contract.PRIORITY_QUEUE_FIELDS))
    if wrong:
        raise MessageError(f"priority_queue_urls takes the levels {', '.join(map(repr, contract.PRIORITY_QUEUE_FIELDS))} "
                           f"(the normal level's is queue_url), got {wrong[0]!r}")
    # An empty URL (a variable set to "") is no queue: that level's sends are refused, never sent to the work queue.
    return {level: url for level, url in (urls or {}).items() if url}


def _by_queue(entries: list[dict[str, Any]], default: str) -> dict[str, list[dict[str, Any]]]:
    """Entries grouped by their level's queue, highest level's first as the batch gave them."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        grouped.setdefault(entry.get("_queue_url") or default, []).append(entry)
    return grouped


def _chunks(entries: list[dict[str, Any]], max_bytes: int) -> Iterable[list[dict[str, Any]]]:
    """Split entries into SendMessageBatch calls: at most 10 entries and ``max_bytes`` each."""
    return batches(entries, lambda entry: int(entry["_size"]), max_count=limits.SQS_MAX_BATCH_ENTRIES, max_bytes=max_bytes)


def _job_of(message: DelayedMessage | None) -> str | None:
    """The job id a delayed message carries (docs/jobs.md), or None."""
    job = ((message.attributes if message is not None else {}).get(contract.JOB_ATTRIBUTE) or {}).get("StringValue")
    return job if isinstance(job, str) else None
