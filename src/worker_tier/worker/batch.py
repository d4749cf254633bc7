"""The processing core: routes each message of a batch to its task and decides its fate.

Every record ends in exactly one of:

- succeeded: reported done, so the event source deletes it;
- dead-lettered: copied to the DLQ with ``worker_tier.failure``, then reported done;
- retrying: reported failed, its visibility set to the backoff (or ``RetryLater``) delay;
- rescheduled: its retry delay is longer than SQS lets this receive stay invisible, so a
  delayed copy goes through the delay table (``worker_tier.attempts`` carries its receives)
  and the original is reported done;
- held back: not due yet (its ``worker_tier.due_at`` is ahead of this clock, as when the
  dispatcher's clock runs fast); not run, reported failed, visibility set to the time left;
  not a failure, and its receive does not count against ``max_retries`` (``Task.receive_count``);
- released: not started (timeout guard, FIFO group stopped), reported failed with visibility 0;
- lease lost: its heartbeat lost the message before its task started (another consumer may
  hold it now); not run, reported failed, its visibility left alone (``LeaseLostBeforeStart``).

A message whose path no task is registered for goes to the EB worker app, when the worker has one
(``app_target``): sqsd's POST of it, its answer judged by sqsd's rules (``worker_tier.app.sqsd``); a
failure meets the same fates as a task's.

The decisions themselves live in ``worker_tier.worker.fates`` (``Fates``, which ``Worker`` extends).
All visibility changes of a batch go out together, 10 per ChangeMessageVisibilityBatch call;
those SQS refuses are counted (``VisibilityChangesRefused``) and logged with their message ids.

Anything a task raises is its message's failure, ``BaseException`` included
(``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``): it is never re-raised,
since killing the runtime mid-batch would re-run the batch's succeeded messages and
lose every decision. The exception is a task's forked child (``os.fork``) that comes back
here, raising (``sys.exit`` too) or returning: it ends at once with the status Python would
give it, and never decides its message's fate nor runs the rest of the batch. Errors are logged through ``message.safe_repr`` (an error's
``__repr__`` can raise), and if deciding a fate raises all the same, the message
backs off (never visibility 0), unless it already went to the DLQ. A record
without a usable ``messageId`` cannot be named in ``batchItemFailures`` (Lambda
always names its records: only a hand-built event lacks one); it is logged with
what it has and, when it has a receipt handle, backed off. A named record the batch
loop or the heartbeat cannot read (no receipt handle, ``attributes`` or
``messageAttributes`` that are not objects) is reported failed and backed off
before either sees it.
"""

from __future__ import annotations

import dataclasses
import os
import random as _random
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Mapping, NoReturn

from worker_tier.core import contract, limits, message
from worker_tier.worker import fates
from worker_tier.app import sqsd
from worker_tier.app import target_from_settings
from worker_tier.app.app_target import AppTarget
from worker_tier.core.aws import LazyClient, new_heartbeat_client
from worker_tier.core.errors import MalformedBodyError, TaskAbortedError, UnknownPathError, WorkerTierError
from worker_tier.worker.dead_letter import DeadLetterQueueSize
from worker_tier.core.envelope import Envelope
from worker_tier.worker.fates import (
    OUTCOME_SUCCEEDED,
    Fates,
    _describe,
    _Invocation,
    _listeners,
)
from worker_tier.core.message import safe_repr
from worker_tier.core.observability import logger, running_record
from worker_tier.core.registry import DEFAULT_REGISTRY, Registry, TaskDefinition
from worker_tier.core.settings import Settings
from worker_tier.core.task import Task
from worker_tier.core.visibility import change_visibility

# The shortest time an app is given for a message that started (the invocation's end may leave less).
MIN_APP_TIMEOUT_SECONDS = 1.0

if TYPE_CHECKING:
    from worker_tier.producer.client import Client
    from worker_tier.worker.heartbeat import Heartbeat
    from worker_tier.worker.idempotency import IdempotentRunner

class InvocationEndingError(WorkerTierError):
    """The invocation's remaining time fell below the safety margin before this record started."""


class HeldBackError(WorkerTierError):
    """The message is not due yet; it goes back until it is (not a failure)."""


class TaskFailedError(WorkerTierError):
    """Marks a record failed for the batch loop; the task's own error (any BaseException) is its cause."""


class Worker(Fates):
    """Processes Lambda SQS events against a task registry.

    Examples
    --------
    >>> worker = Worker(Settings(), queue_url="https://sqs.example/q", dead_letter_queue_url="https://sqs.example/dlq")
    >>> worker.handle({"Records": []}, None)
    {'batchItemFailures': []}
    """

    def __init__(
        self,
        settings: Settings,
        *,
        queue_url: str | None,
        dead_letter_queue_url: str | None,
        state_table: str | None = None,
        registry: Registry = DEFAULT_REGISTRY,
        sqs: Any = None,
        dynamodb: Any = None,
        clock: Callable[[], float] = time.time,
        random: Callable[[], float] = _random.random,
        container_queue_url: str | None = None,
        delay_table: str | None = None,
        app_target: AppTarget | None = None,
    ) -> None:
        self.settings = settings
        # An EB worker app that gets the messages no @task path claims (``worker_tier.app.sqsd``); None: no app.
        self.app_target = app_target
        self._container_queue_url = container_queue_url
        self.registry = registry
        self._queue_url = queue_url
        self._dead_letter_queue_url = dead_letter_queue_url
        self._dead_letter_queue_size = DeadLetterQueueSize()  # read on the first dead-letter, kept for the process
        self._delay_table = delay_table
        self._sqs = LazyClient("sqs", sqs)
        # Heartbeats need calls that end within their margin; an injected client (tests) serves both.
        self._heartbeat_sqs = LazyClient("sqs", sqs, factory=new_heartbeat_client)
        self._dynamodb = LazyClient("dynamodb", dynamodb)
        self._state_table = state_table
        self._idempotency: IdempotentRunner | None = None  # built with the first idempotent task
        self._clock = clock
        self._random = random
        self._producer: Client | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ, **overrides: Any) -> Worker:
        """A Worker configured by ``WORKER_TIER_*`` variables, with its task modules imported and its app target built."""
        settings = Settings.from_environment(environ)
        registry = overrides.pop("registry", DEFAULT_REGISTRY)
        registry.import_modules(settings.task_modules.split(","))
        if "app_target" not in overrides:
            overrides["app_target"] = target_from_settings(settings)
        resources = contract.Resources.from_environment(environ)
        return cls(
            settings,
            queue_url=resources.queue_url,
            dead_letter_queue_url=resources.dlq_url,
            state_table=resources.state_table,
            container_queue_url=resources.container_queue_url,
            delay_table=resources.delay_table,
            registry=registry,
            **overrides,
        )

    def handle(self, event: Mapping[str, Any], context: Any, heartbeat: Heartbeat | None = None) -> dict[str, Any]:
        """Process one Lambda SQS event; return ``{"batchItemFailures": [...]}``.

        ``heartbeat``: one the caller runs and already holds the messages in (the
        container worker); without it, the batch gets its own when asked for.
        Raises MalformedEventError for anything that is not an SQS event.
        """
        named, nameless = message.split_records(event)
        invocation = _Invocation(context, self.settings.timeout_margin * 1000, self._clock() - self._receive_lag_seconds())
        self._count_batch(named, invocation)
        self._back_off_nameless(nameless, invocation)
        records, set_aside = self._set_aside_unreadable(named, invocation)
        self._hold(records, invocation, heartbeat)
        try:
            failures, succeeded = self._process_all(records, invocation)
        finally:
            running_record.set(None)
            if heartbeat is None and invocation.heartbeat is not None:
                invocation.heartbeat.stop()  # before the batch's own visibility changes go out
        self._count_succeeded(succeeded, invocation)
        if failures:
            self._release_undecided(records, failures, invocation)
        failures.extend(set_aside)
        self._flush(named, invocation)
        invocation.metrics.publish()
        return {"batchItemFailures": failures}

    def _process_all(self, records: list[Any], invocation: _Invocation) -> tuple[list[dict[str, str]], int]:
        """Run each record; return the failure items and how many records were reported done.

        A record is reported failed when processing it raises an ``Exception`` (a task's own
        failure arrives here as TaskFailedError). On a FIFO queue, a failure stops the rest of its
        message group, as Lambda requires of a partial batch response:
        https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html
        Those records are reported failed unstarted, and ``_release_undecided`` gives them back.
        """
        failures: list[dict[str, str]] = []
        fifo = self.settings.fifo
        stopped_groups: set[str] = set()
        for record in records:
            group = record["attributes"].get("MessageGroupId") if fifo else None
            if group is not None and group in stopped_groups:
                failures.append({"itemIdentifier": record["messageId"]})
                continue
            try:
                self._process_record(record, invocation)
            except Exception:  # the record's fate is decided and logged; here it is only reported
                failures.append({"itemIdentifier": record["messageId"]})
                if group:
                    stopped_groups.add(group)
        return failures, len(records) - len(failures)

    def _receive_lag_seconds(self) -> float:
        """How long before this invocation its messages may have been received (Lambda path).

        The poller waits up to the batching window, then retries a throttled invoke
        until the messages' visibility timeout runs out, so a batch can start that much
        after its receive:
        https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html
        """
        return self.settings.visibility_timeout + self.settings.max_batching_window

    def sqs(self) -> Any:
        """The SQS client this worker uses (created on first use)."""
        return self._sqs.get()

    def _hold(self, records: list[Any], invocation: _Invocation, heartbeat: Heartbeat | None) -> None:
        """Use the caller's heartbeat (and its lease as the idempotency expiry), or start the batch's own."""
        if heartbeat is None:
            self._start_heartbeat(records, invocation)
            return
        invocation.heartbeat = heartbeat
        invocation.leases = {r["messageId"]: lease for r in records if (lease := heartbeat.lease(r["messageId"]))}
        # The container worker's path: kept off the Lambda cold start.
        from worker_tier.worker.idempotency import LeaseContext

        invocation.lease_context = LeaseContext(heartbeat.extension_seconds)
        # The caller received them: count SQS's 12 hours from its receive, however long they waited since.
        ages = [age for r in records if (age := heartbeat.held_for(r["messageId"])) is not None]
        invocation.received_at = self._clock() - max(ages, default=0.0)

    def _start_heartbeat(self, records: list[Any], invocation: _Invocation) -> None:
        """Hold every message of the batch while it runs, when the setting or one of its tasks asks.

        Succeeded messages stay held too: the event source deletes them only after the
        invocation returns, and until then they must not reach another consumer.
        """
        if not records or not (self.settings.heartbeat or self.registry.any_heartbeat()):
            return
        wanted = self.settings.heartbeat or any(
            getattr(self.registry.get(message.record_path(r, self.settings.http_path)), "heartbeat", False) for r in records
        )
        if not wanted:
            return
        from worker_tier.worker.heartbeat import Heartbeat

        heartbeat = Heartbeat(
            self._heartbeat_sqs.get(), self._resolve_queue_url(records), interval_seconds=self.settings.heartbeat_interval
        )
        # Received up to the receive lag before the invocation started: count the cap from then.
        received_at = time.monotonic() - self._receive_lag_seconds()
        for record in records:
            invocation.leases[record["messageId"]] = heartbeat.hold(record["messageId"], record["receiptHandle"], received_at).expired
        invocation.heartbeat = heartbeat
        heartbeat.start()

    def _process_record(self, record: Mapping[str, Any], invocation: _Invocation) -> None:
        """Run one record with its message id and path on every log line written meanwhile.

        ``Task.from_record`` and ``message.record_path``, inlined: this is the hot path of every
        message. Its ``messageAttributes`` is a dict (``_split_unreadable`` set aside the others).
        """
        message_id = record["messageId"]
        attributes = record["messageAttributes"]
        routing = attributes.get(contract.PATH_ATTRIBUTE)
        path = routing.get("stringValue") if isinstance(routing, dict) else None
        body = record.get("body") or ""
        if self.settings.via_sns:  # the task or app sees the SNS envelope's Message; the DLQ copy keeps the envelope
            body = sqsd.unwrap_sns(body)
        task = Task(
            message_id, path if path and isinstance(path, str) else self.settings.http_path, body,
            self.settings.mime_type, record, None, invocation.remaining_ms,
            invocation.leases.get(message_id) if invocation.leases else None,
        )
        running_record.set(task)
        self._run(record, task, attributes, invocation)

    def _run(self, record: Mapping[str, Any], task: Task, attributes: dict[str, Any], invocation: _Invocation) -> None:
        """Route, run and decide; raising marks the record failed for the batch loop."""
        remaining_ms = invocation.remaining_ms
        if remaining_ms is not None and remaining_ms() < invocation.margin_ms:
            self._release(record, task, invocation, "invocation ending")
            raise InvocationEndingError(f"less than {invocation.margin_ms} ms left, the safety margin")
        if task.lease is not None and task.lease.is_set():
            raise self._lease_lost(task, invocation)
        if contract.FAILURE_ATTRIBUTE in attributes and _is_reason_record(task):
            return
        if contract.DUE_AT_ATTRIBUTE in attributes and self._held_back(record, task, invocation):
            raise HeldBackError(f"message {task.message_id} is due at {task.due_at}")
        try:
            definition = self.registry.get(task.path)  # a registered path wins; the app, if any, gets the rest
            if definition is None:
                self._deliver(task, invocation)
            elif definition.container and self._container_queue_url:
                self._forward(record, task, invocation, self._container_queue_url)
                return
            else:
                if definition.parser is not None:
                    self._parse(definition.parser, task)
                self._call(definition, task, invocation)
        except BaseException as error:  # a task's failure, whatever its type (SystemExit, GeneratorExit included)
            if isinstance(error, TaskAbortedError) and error.__cause__ is not None:
                error = error.__cause__  # the idempotency layer's wrapper of a BaseException: decide on the original
            if fates.ThisProcess.pid != invocation.pid:
                _end_forked_child(error)
            if self._fail_safely(record, task, invocation, error):
                raise TaskFailedError(_describe(error)) from error
        else:
            if fates.ThisProcess.pid != invocation.pid:
                _end_forked_child(None)
            if _listeners:
                self._emit(OUTCOME_SUCCEEDED, task)

    def _forward(self, record: Mapping[str, Any], task: Task, invocation: _Invocation, queue_url: str) -> None:
        """Hand a long task to the container worker's queue, as it came; an error retries it here."""
        envelope, dropped = Envelope.from_record(record, body=task.body)
        if dropped:
            logger.warning("attributes SQS would refuse were left out of the forward", extra={"dropped_attributes": dropped})
        _carry_source_id(envelope, task)
        if task.group_id is None:
            request = envelope.request(queue_url)
        else:  # a FIFO queue: keep the group, and deduplicate on the source message
            request = envelope.request(queue_url, MessageGroupId=task.group_id, MessageDeduplicationId=task.message_id)
        self._sqs.get().send_message(**request)
        invocation.metrics.count(contract.METRIC_FORWARDED)
        if _listeners:
            self._emit(OUTCOME_SUCCEEDED, task, "forwarded to the container worker")

    def _deliver(self, task: Task, invocation: _Invocation) -> None:
        """POST the message to the app as sqsd would and judge its answer by sqsd's rules; UnknownPathError without an app."""
        target = self.app_target
        if target is None:
            self._unknown_path(task)
        now = self._clock()
        sqsd.check_retention(task, self.settings, now)
        request = dataclasses.replace(sqsd.request_for(task, self.settings), timeout_seconds=self._app_timeout(invocation))
        started = time.perf_counter()
        try:
            response = target.deliver(request)
        finally:
            invocation.metrics.task_duration((time.perf_counter() - started) * 1000)
        sqsd.check_response(request, response, now)

    def _app_timeout(self, invocation: _Invocation) -> float:
        """How long the app may take: ``inactivity_timeout`` (sqsd's bound), never past the invocation's remaining
        time less ``timeout_margin``, so one hung message leaves the batch time to record the others' decisions."""
        limit = float(self.settings.inactivity_timeout)
        if invocation.remaining_ms is not None:
            limit = min(limit, (invocation.remaining_ms() - invocation.margin_ms) / 1000)
        return max(limit, MIN_APP_TIMEOUT_SECONDS)

    def _unknown_path(self, task: Task) -> NoReturn:
        """Raise UnknownPathError: no task is registered for the message's path."""
        raise UnknownPathError(
            f"no task is registered for path {task.path!r}; registered paths: {', '.join(self.registry.paths()) or 'none'}"
        )

    @staticmethod
    def _parse(parser: Callable[[str], Any], task: Task) -> None:
        """Set ``task.payload`` with the task's declared parser; MalformedBodyError when it refuses."""
        try:
            task.payload = parser(task.body)
        except Exception as error:
            name = getattr(parser, "__qualname__", None) or safe_repr(parser)
            raise MalformedBodyError(
                f"parser {name} of task {task.path!r} rejected the body of message {task.message_id}: "
                f"{_describe(error)}"
            ) from error

    def _call(self, definition: TaskDefinition, task: Task, invocation: _Invocation) -> None:
        """Run the handler, through the idempotency layer when the task asks for it."""
        started = time.perf_counter()
        try:
            if definition.idempotent:
                handler = _ending_forked_child(definition.handler, invocation.pid)
                self._run_idempotent(definition, handler, task, invocation)
            else:
                definition.handler(task)  # a forked child coming back ends in _run, as nothing wraps it here
        finally:
            invocation.metrics.task_duration((time.perf_counter() - started) * 1000)

    def _run_idempotent(
        self, definition: TaskDefinition, handler: Callable[[Task], object], task: Task, invocation: _Invocation
    ) -> None:
        """Run ``handler`` through the idempotency layer; with the caller's heartbeat, the record's expiry follows the lease."""
        runner = self._idempotent_runner()
        definition = dataclasses.replace(definition, handler=handler)
        if invocation.context is not None or invocation.heartbeat is None:
            runner.run(definition, task, invocation.context)
            return
        heartbeat = invocation.heartbeat
        runner.run(
            definition, task, invocation.lease_context, on_lease=lambda extend: heartbeat.on_extended(task.message_id, extend)
        )

    def _idempotent_runner(self) -> IdempotentRunner:
        """The idempotency layer, imported and built on first use: a function without idempotent tasks never pays for it."""
        if self._idempotency is None:
            from worker_tier.worker.idempotency import IdempotentRunner

            self._idempotency = IdempotentRunner(self._state_table, self._dynamodb.get)
        return self._idempotency

    def _count_batch(self, records: list[Any], invocation: _Invocation) -> None:
        """Processed count, and the age of the batch's oldest message when the batch starts."""
        invocation.metrics.count(contract.METRIC_PROCESSED, len(records))
        oldest_ms = _oldest_sent_ms(records)
        if oldest_ms is not None:
            invocation.metrics.message_age(max(0.0, self._clock() * 1000 - oldest_ms))

    def _count_succeeded(self, reported_done: int, invocation: _Invocation) -> None:
        """Succeeded: reported done, less those reported done because they were dead-lettered or replaced."""
        counts = invocation.metrics.counts
        replaced = counts.get(contract.METRIC_DEAD_LETTERED, 0) + counts.get(contract.METRIC_RESCHEDULED, 0)
        invocation.metrics.count(contract.METRIC_SUCCEEDED, reported_done - replaced)

    def _back_off_nameless(self, nameless: list[tuple[int, Any]], invocation: _Invocation) -> None:
        """Log records with no usable messageId and back off those with a receipt handle (they cannot be reported)."""
        for index, record in nameless:
            shown = {k: str(v)[:80] for k, v in record.items()} if isinstance(record, Mapping) else repr(record)[:200]
            logger.error("record without a usable messageId: logged and backed off", extra={"index": index, "record": shown})
            invocation.metrics.count(contract.METRIC_MALFORMED_RECORDS)
            if isinstance(record, Mapping):
                invocation.set_visibility(record, self._backoff_first(), key=f"record #{index} (no messageId)")

    def _set_aside_unreadable(self, named: list[Any], invocation: _Invocation) -> tuple[list[Any], list[dict[str, str]]]:
        """The records to process, and failure items for those set aside before the batch loop and heartbeat see them.

        Unreadable records are logged and backed off; on a FIFO queue, the later records of
        their groups (of every group, when an unreadable record's group cannot be read) are
        released, as the batch loop stops a group after a failure.
        """
        records, unreadable = _split_unreadable(named)
        if not unreadable:
            return records, []
        for record in unreadable:
            shown = {k: str(v)[:80] for k, v in record.items()}
            logger.error("record the worker cannot read: reported failed and backed off", extra={"record": shown})
            invocation.metrics.count(contract.METRIC_MALFORMED_RECORDS)
            if type(record.get("receiptHandle")) is str:
                invocation.set_visibility(record, self._backoff_first())
        stopped = _fifo_stopped(named, unreadable) if self.settings.fifo else []
        for record in stopped:
            task = Task.from_record(record, default_path=self.settings.http_path, content_type=self.settings.mime_type)
            self._release(record, task, invocation, "an earlier message of its group could not be read")
        kept = {id(r) for r in stopped}
        failures = [{"itemIdentifier": record["messageId"]} for record in unreadable + stopped]
        return [r for r in records if id(r) not in kept], failures

    def _release_undecided(self, records: list[Any], failures: list[dict[str, str]], invocation: _Invocation) -> None:
        """Failed records with no decision of ours (a stopped FIFO group) return at once."""
        failed = {item["itemIdentifier"] for item in failures}
        for record in records:
            message_id = record["messageId"]
            if message_id in failed and message_id not in invocation.changes and message_id not in invocation.left_alone:
                task = Task.from_record(record, default_path=self.settings.http_path, content_type=self.settings.mime_type)
                self._release(record, task, invocation, "an earlier message of its group failed")

    def _flush(self, records: list[Any], invocation: _Invocation) -> None:
        """Send every visibility change of the batch, 10 per call; count and log those SQS refuses."""
        if not invocation.changes:
            return
        refused = change_visibility(self._sqs.get(), self._resolve_queue_url(records), list(invocation.changes.values()))
        if refused:
            invocation.metrics.count(contract.METRIC_VISIBILITY_REFUSED, len(refused))
            shown = [{"message_id": r.message_id, "seconds": r.change.timeout_seconds, "code": r.code} for r in refused]
            logger.warning("visibility changes refused: those messages keep their current timeout", extra={"refused": shown})

    def _resolve_queue_url(self, records: list[Any]) -> str:
        """The source queue's URL: configured, or looked up once from the event source ARN."""
        if self._queue_url is None:
            _, _, _, _, account, name = records[0]["eventSourceARN"].split(":", 5)
            self._queue_url = self._sqs.get().get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
        return self._queue_url



def _ending_forked_child(handler: Callable[[Task], object], pid: int) -> Callable[[Task], object]:
    """``handler``, ending a forked child of it right where the child comes back from it: before any wrapper (the
    idempotency layer, which would delete the parent's INPROGRESS record with the inherited client) sees its end."""

    def run(task: Task) -> object:
        try:
            result = handler(task)
        except BaseException as error:
            if fates.ThisProcess.pid != pid:
                _end_forked_child(error)
            raise
        if fates.ThisProcess.pid != pid:
            _end_forked_child(None)
        return result

    return run


def _end_forked_child(error: BaseException | None) -> NoReturn:
    """End a task's forked child that came back to the worker (it returned, or raised: ``sys.exit`` too) as Python
    would end it, there and then: it must not decide its message's fate, nor run the rest of the batch.

    ``sys.exit(code)`` gives ``code`` (None: 0; any other object is printed and gives 1), as does a SystemExit an app's
    failure carries; any other exception is printed with its traceback and gives 1; returning gives 0.
    """
    cause = error.__cause__ if error is not None and not isinstance(error, SystemExit) else None
    if isinstance(cause, SystemExit):
        error = cause
    status = 0
    if isinstance(error, SystemExit):
        if isinstance(error.code, int):
            status = error.code
        elif error.code is not None:
            print(error.code, file=sys.stderr)
            status = 1
    elif error is not None:
        traceback.print_exception(error)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


def _carry_source_id(envelope: Envelope, task: Task) -> None:
    """Add ``worker_tier.source_message_id`` to a forward's attributes (kept when it already has one), room permitting.

    The container's default idempotency key is this id, so a source message delivered twice runs once.
    """
    attributes = envelope.attributes
    if contract.SOURCE_MESSAGE_ID_ATTRIBUTE in attributes:
        return
    if envelope.room() < 1:
        logger.warning(
            "no room for the source message id on the forward: the container's default idempotency key is the "
            "forwarded message's own id",
            extra={"attribute_count": len(attributes), "limit": limits.SQS_MAX_MESSAGE_ATTRIBUTES},
        )
        return
    attributes[contract.SOURCE_MESSAGE_ID_ATTRIBUTE] = {"DataType": "String", "StringValue": task.message_id}


def _oldest_sent_ms(records: list[Any]) -> int | None:
    """The batch's oldest SentTimestamp (epoch ms); None when no record has a readable one.

    SQS writes them as digit strings, all of one length (13 digits until the year 2286), and
    among those text order is number order: one ``int`` per batch rather than one per record.
    """
    try:  # Lambda gives every record its SentTimestamp
        stamps = [r["attributes"]["SentTimestamp"] for r in records]
        if len(set(map(len, stamps))) == 1:
            return int(min(stamps))
        return min(map(int, stamps))
    except (AttributeError, KeyError, TypeError, ValueError):  # a hand-built or malformed record: read each with care
        sent = [ms for r in records if (ms := message.sent_timestamp_ms(r)) is not None]
        return min(sent) if sent else None


def _split_unreadable(records: list[Any]) -> tuple[list[Any], list[Any]]:
    """Records the batch loop and the heartbeat can read, and those they cannot (no receipt handle, or
    ``attributes`` / ``messageAttributes`` that are not objects): those must not reach either."""
    none = _NO_ATTRIBUTES  # ``.__class__ is`` rather than type(): this runs for every record of every batch
    unreadable = [
        r for r in records
        if r.get("receiptHandle").__class__ is not str
        or r.get("attributes", none).__class__ is not dict
        or r.get("messageAttributes", none).__class__ is not dict
    ]
    if not unreadable:
        return records, unreadable
    kept = {id(r) for r in unreadable}
    return [r for r in records if id(r) not in kept], unreadable


_NO_ATTRIBUTES: dict[str, Any] = {}


def _fifo_stopped(named: list[Any], unreadable: list[Any]) -> list[Any]:
    """Readable records that follow an unreadable one of their FIFO group (any group, when its group is unknown)."""
    unreadable_ids = {id(r) for r in unreadable}
    stopped_groups: set[str | None] = set()  # None: a record whose group is unknown
    every_group = False
    stopped = []
    for record in named:
        system = record.get("attributes")
        group = system.get("MessageGroupId") if isinstance(system, dict) else None
        if id(record) in unreadable_ids:
            every_group = every_group or group is None
            stopped_groups.add(group)
        elif every_group or group in stopped_groups:
            stopped.append(record)
    return stopped


def _is_reason_record(task: Task) -> bool:
    """Whether a message is a DLQ reason record moved into the work queue by a redrive that moves everything
    (StartMessageMoveTask): logged and dropped (reported done, so deleted), never run nor dead-lettered again.
    Its message was moved with it and runs; the record only described why that message died."""
    from worker_tier.worker.dead_letter import reason_record  # only a message from the DLQ gets here

    record = reason_record(task.body, task.record.get("messageAttributes") or {})
    if record is None:
        return False
    logger.warning("a DLQ reason record arrived as work (a redrive moved it from the DLQ); dropped, not run",
                   extra={"reason_record_for": record.get("source_message_id")})
    return True
