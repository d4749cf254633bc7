"""The processing core: routes each message of a batch to its task and decides its fate.

One idea, kept whole: a batch's records, each through its task (or the app) to exactly one fate.

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

An offloaded message (``ExtendedPayloadSize``: AWS's Extended Client format) has its body read from S3
before its Task is built; one that cannot be read meets the fates of a failed task (``worker_tier.worker.offloaded``),
and once a succeeded one is deleted, so is its object.

A message whose path no task is registered for goes to the EB worker app, when the worker has one
(``app_target``): sqsd's POST of it, its answer judged by sqsd's rules (``worker_tier.app.sqsd``); a
failure meets the same fates as a task's.

The decisions themselves live in ``worker_tier.worker.fates`` (``Fates``, which ``Worker`` extends).
Each batch and message goes through the worker's middleware pipeline (``worker_tier.pipeline.middleware``):
logging keys, metrics, heartbeats and idempotency are its built-in middleware
(``worker_tier.worker.builtin_middleware``), then the ``middleware`` setting's and a task's own.
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
import functools
import os
import random as _random
from typing import TYPE_CHECKING, Any, Callable, Mapping, NoReturn, Sequence

from worker_tier.core import contract, message, priority
from worker_tier.core import observability, wall_clock
from worker_tier.worker import fates
from worker_tier.app import sqsd
from worker_tier.app import target_from_settings
from worker_tier.app.app_target import AppTarget
from worker_tier.pipeline import middleware as _middleware
from worker_tier.core.aws import LazyClient, new_heartbeat_client
from worker_tier.worker.builtin_middleware import BatchMetricsPublisher, Heartbeats, Idempotency
from worker_tier.flow.control import FlowControl
from worker_tier.core.errors import (
    MalformedBodyError,
    PayloadError,
    PayloadMissingError,
    PayloadUnavailableError,
    TaskAbortedError,
    UnknownPathError,
    WorkerTierError,
)
from worker_tier.worker.dead_letter import DeadLetterQueueSize
from worker_tier.worker.fates import (
    OUTCOME_SUCCEEDED,
    Fates,
    _describe,
    _Invocation,
    _listeners,
    _MessageHooks,
)
from worker_tier.core.message import safe_repr
from worker_tier.pipeline.middleware import Middleware, Pipeline
from worker_tier.core.observability import logger, running_record
from worker_tier.worker.registry import DEFAULT_REGISTRY, Registry, TaskDefinition
from worker_tier.core.settings import Settings
from worker_tier.core.task import Task
from worker_tier.core.visibility import change_visibility
from worker_tier.worker.forked_child import end_forked_child, innermost_call
from worker_tier.worker.forward import forward_request
from worker_tier.worker.records import all_readable, is_reason_record, fifo_stopped, split_unreadable

# The shortest time an app is given for a message that started (the invocation's end may leave less).
MIN_APP_TIMEOUT_SECONDS = 1.0

if TYPE_CHECKING:
    from worker_tier.core.payloads import PayloadStore, Pointer
    from worker_tier.producer.client import Client
    from worker_tier.worker.heartbeat import Heartbeat

# The attributes that mark an offloaded message (``payloads.is_offloaded``), read here on every message.
_PAYLOAD_SIZE = contract.PAYLOAD_SIZE_ATTRIBUTE
_LEGACY_PAYLOAD_SIZE = contract.LEGACY_PAYLOAD_SIZE_ATTRIBUTE
# The other attributes every message is looked up by, and what the hot path reads per message, bound once.
_PATH = contract.PATH_ATTRIBUTE
_FAILURE = contract.FAILURE_ATTRIBUTE
_DUE_AT = contract.DUE_AT_ATTRIBUTE
_JOB = contract.JOB_ATTRIBUTE
_ThisProcess = fates.ThisProcess
_running = running_record.running  # the thread-local that ``running_record.set`` writes

# (hooks if not the starting ones, forwarded, parser, chain, own before_task hooks, heard by after_task)
_Route = tuple["_MessageHooks | None", bool, Any, Callable[[Any, Task], None], tuple[Callable[..., None], ...], bool]


class InvocationEndingError(WorkerTierError):
    """The invocation's remaining time fell below the safety margin before this record started."""


class HeldBackError(WorkerTierError):
    """The message is not due yet; it goes back until it is (not a failure)."""


class TaskFailedError(WorkerTierError):
    """Marks a record failed for the batch loop; the task's own error (any BaseException) is its cause."""


@dataclasses.dataclass(frozen=True)
class HandledBatch:
    """What ``Worker.handle_batch`` did: Lambda's answer, and the succeeded offloaded messages whose objects wait."""

    response: dict[str, Any]  # {"batchItemFailures": [...]}, as ``handle`` returns it
    payloads: dict[str, Pointer]  # message id → pointer: delete_payload(pointer) once that message's delete is confirmed


class Worker(Fates):
    """Processes Lambda SQS events against a task registry.

    Examples
    --------
    >>> worker = Worker(Settings(), queue_url="https://sqs.example/q", dead_letter_queue_url="https://sqs.example/dlq")
    >>> worker.handle({"Records": []}, None)
    {'batchItemFailures': []}
    """

    # The priority levels' queue URLs by queue name (``from_environment`` sets them): a record from one of them has
    # its visibility changes, deletes and heartbeats sent there.
    level_queue_urls: Mapping[str, str] = {}

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
        clock: Callable[[], float] = wall_clock.now,
        random: Callable[[], float] = _random.random,
        container_queue_url: str | None = None,
        delay_table: str | None = None,
        app_target: AppTarget | None = None,
        middleware: Sequence[Middleware] | None = None,
        payloads: PayloadStore | None = None,
    ) -> None:
        self.settings = settings
        # The payload bucket offloaded bodies are read from (None: an offloaded message is dead-lettered, saying so).
        self.payloads = payloads
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
        self._clock = clock
        self._random = random
        self._producers: dict[str, Client] = {}  # by source queue: a copy goes back to its own record's queue
        # Built once: the built-in middleware, then the caller's (None: the middleware setting's); Idempotency innermost.
        if middleware is None:
            middleware = _middleware.load(settings.middleware.split(","))
        self._idempotency = Idempotency(self)
        self.flow_control = FlowControl(self)
        self.pipeline = Pipeline([BatchMetricsPublisher(clock), Heartbeats(self), self.flow_control, *middleware])
        self._unrouted = _MessageHooks.of(self.pipeline)
        self._before_task = self.pipeline.before_task
        # id(definition) → (definition, its hooks, forwarded to the container worker, its parser)
        self._routes: dict[int, tuple[TaskDefinition | None, _MessageHooks, bool, Any]] = {}
        # A registered path's route, unpacked for the hot path (``_routed``), until the registry changes.
        self._task_routes: dict[str, _Route] = {}
        self._routes_generation = -1

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ, **overrides: Any) -> Worker:
        """A Worker configured by ``WORKER_TIER_*`` variables, with its task modules imported and its app target built.

        The payload bucket's variable (``contract.PAYLOAD_BUCKET_VARIABLE``) gives it a PayloadStore
        (``payload_max_bytes``), on ``s3=`` when given.
        """
        settings = Settings.from_environment(environ)
        registry = overrides.pop("registry", DEFAULT_REGISTRY)
        registry.import_modules(settings.task_modules.split(","))
        if "app_target" not in overrides:
            overrides["app_target"] = target_from_settings(settings)
        resources = contract.Resources.from_environment(environ)
        s3 = overrides.pop("s3", None)
        if "payloads" not in overrides and resources.payload_bucket:
            from worker_tier.core.payloads import PayloadStore

            overrides["payloads"] = PayloadStore(resources.payload_bucket, s3, max_bytes=settings.payload_max_bytes)
        worker = cls(
            settings,
            queue_url=resources.queue_url,
            dead_letter_queue_url=resources.dlq_url,
            state_table=resources.state_table,
            container_queue_url=resources.container_queue_url,
            delay_table=resources.delay_table,
            registry=registry,
            **overrides,
        )
        if resources.queue_url:  # priorities: a record's own level queue takes its visibility changes and re-sends
            worker.level_queue_urls = priority.PriorityQueues.from_resources(resources, resources.queue_url).by_name()
        return worker

    def handle(self, event: Mapping[str, Any], context: Any, heartbeat: Heartbeat | None = None) -> dict[str, Any]:
        """Process one Lambda SQS event; return ``{"batchItemFailures": [...]}``.

        ``heartbeat``: one the caller runs and already holds the messages in (the
        container worker); without it, the batch gets its own when asked for.
        Raises MalformedEventError for anything that is not an SQS event.

        Succeeded offloaded messages are deleted here, after the batch (DeleteMessageBatch), and then their objects:
        Lambda deletes the messages reported done only after the invocation returns, and an object must not go
        before its message (``worker_tier.worker.offloaded``). A caller that deletes messages itself uses
        ``handle_batch``.
        """
        return self._handle(event, context, heartbeat, None)

    def handle_batch(self, event: Mapping[str, Any], context: Any, heartbeat: Heartbeat | None = None) -> HandledBatch:
        """``handle``, for a caller that deletes the messages reported done itself (the container worker).

        The worker deletes neither the succeeded offloaded messages nor their objects: ``HandledBatch.payloads``
        names each such message's pointer, and the caller passes it to ``delete_payload`` once SQS confirmed that
        message's delete (never before, and not when the delete failed: the message runs again and needs its
        object). A dead-lettered, retried or rescheduled message is not named: its object stays with it. This way
        each succeeded message is deleted once, by the caller, and its object once, after it.
        """
        payloads: dict[str, Pointer] = {}
        return HandledBatch(self._handle(event, context, heartbeat, payloads), payloads)

    def delete_payload(self, pointer: Pointer) -> bool:
        """Delete a succeeded message's object after the caller deleted the message (``handle_batch``); count it.

        False (logged) when S3 did not delete it: the bucket's lifecycle rule will.
        """
        if self.payloads is None or not self.payloads.delete(pointer):
            return False
        observability.count_shared(contract.METRIC_PAYLOADS_DELETED)  # the container's delete thread: under the lock
        return True

    def _handle(
        self, event: Mapping[str, Any], context: Any, heartbeat: Heartbeat | None, payloads: dict[str, Pointer] | None
    ) -> dict[str, Any]:
        """The batch; succeeded offloaded messages are deleted with their objects, or named in ``payloads``."""
        readable = all_readable(event)  # the usual batch: every record named and readable, in one pass
        named, nameless = (readable, []) if readable is not None else message.split_records(event)
        invocation = _Invocation(context, self.settings.timeout_margin * 1000, self._clock() - self._receive_lag_seconds())
        invocation.received, invocation.caller_heartbeat = named, heartbeat
        set_aside: list[dict[str, str]] = []
        if readable is not None:
            records = readable
        else:
            self._back_off_nameless(nameless, invocation)
            records, set_aside = self._set_aside_unreadable(named, invocation)
        invocation.records = records
        sending = _middleware.sending_through(self.pipeline)
        try:
            failures = self._run_batch(records, invocation)
            failures.extend(set_aside)
            self._flush(named, invocation)
            if invocation.succeeded_payloads:
                self._settle_payloads(named, invocation, payloads)
        finally:
            fates.told(self.pipeline.after_batch, "after_batch", invocation)
            _middleware.reset_sending(sending)
        return {"batchItemFailures": failures}

    def _settle_payloads(self, records: list[Any], invocation: _Invocation, payloads: dict[str, Pointer] | None) -> None:
        """Delete the succeeded offloaded messages, then their objects; or name them for the caller (``payloads``)."""
        succeeded = invocation.succeeded_payloads
        if payloads is not None:
            payloads.update((record["messageId"], pointer) for record, pointer in succeeded)
            return
        from worker_tier.worker import offloaded

        heartbeat = invocation.heartbeat
        if heartbeat is not None:  # the batch's own: no extension may go out for a message about to be deleted
            for record, _ in succeeded:
                heartbeat.release(record["messageId"])
        try:
            offloaded.delete_succeeded(self._sqs.get(), self._resolve_queue_url(records), self.payloads,  # type: ignore[arg-type]
                                       succeeded, invocation.metrics)
        except Exception as error:  # the queue's URL could not be looked up: the messages and objects stay
            logger.error("succeeded offloaded messages could not be deleted: their objects are kept",
                         extra={"error": _describe(error)})

    def _run_batch(self, records: list[Any], invocation: _Invocation) -> list[dict[str, str]]:
        """The before_batch hooks, then every record (each fails with a before_batch hook's error); the failure items."""
        try:
            for hook in self.pipeline.before_batch:
                hook(invocation)
        except BaseException as error:  # a middleware's bug: every message of the batch fails with it, nothing is lost
            logger.error("middleware before_batch hook raised; every message of the batch fails with its error",
                         extra={"hook": getattr(hook, "__qualname__", safe_repr(hook)), "error": _describe(error)})
            return self._fail_all(records, invocation, error)
        try:
            failures, invocation.reported_done = self._process_all(records, invocation)
        finally:
            running_record.set(None)
        if failures:
            self._release_undecided(records, failures, invocation)
        return failures

    def _fail_all(self, records: list[Any], invocation: _Invocation, error: BaseException) -> list[dict[str, str]]:
        """Every record failed with ``error`` (retried, or dead-lettered with it); the failure items."""
        failures = []
        for record in records:
            task = Task.from_record(record, default_path=self.settings.http_path, content_type=self.settings.mime_type)
            if self._fail_safely(record, task, invocation, error):
                failures.append({"itemIdentifier": record["messageId"]})
        invocation.reported_done = len(records) - len(failures)
        return failures

    def _process_all(self, records: list[Any], invocation: _Invocation) -> tuple[list[dict[str, str]], int]:
        """Run each record; return the failure items and how many records were reported done.

        A record is reported failed when processing it raises an ``Exception`` (a task's own
        failure arrives here as TaskFailedError). On a FIFO queue, a failure stops the rest of its
        message group, as Lambda requires of a partial batch response:
        https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html
        Those records are reported failed unstarted, and ``_release_undecided`` gives them back.
        """
        failures: list[dict[str, str]] = []
        process = self._process_record
        if not self.settings.fifo:  # a standard queue: no group to stop
            for record in records:
                try:
                    process(record, invocation)
                except Exception:  # the record's fate is decided and logged; here it is only reported
                    failures.append({"itemIdentifier": record["messageId"]})
            return failures, len(records) - len(failures)
        stopped_groups: set[str] = set()
        for record in records:
            group = record["attributes"].get("MessageGroupId")
            if group is not None and group in stopped_groups:
                failures.append({"itemIdentifier": record["messageId"]})
                continue
            try:
                process(record, invocation)
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

    def _process_record(self, record: Mapping[str, Any], invocation: _Invocation) -> None:
        """Run one record with its message id and path on every log line written meanwhile: route, run and decide;
        raising marks the record failed for the batch loop.

        ``Task.from_record`` and ``message.record_path``, inlined: this is the hot path of every
        message. Its ``messageAttributes`` is a dict (``split_unreadable`` set aside the others).
        An offloaded message's body is read from S3 first; when its task succeeds, its object is deleted after the message.
        """
        message_id = record["messageId"]
        attributes = record["messageAttributes"]
        routing = attributes.get(_PATH)
        path = routing.get("stringValue") if isinstance(routing, dict) else None
        body = record.get("body") or ""
        settings = self.settings
        pointer = None
        if _PAYLOAD_SIZE in attributes or _LEGACY_PAYLOAD_SIZE in attributes:  # the body is in S3
            read = self._offloaded_body(record, path, invocation)
            if read is None:
                return
            body, pointer = read
        if settings.via_sns:  # the task or app sees the SNS envelope's Message; the DLQ copy keeps the envelope
            body = sqsd.unwrap_sns(body)
        if not path or not isinstance(path, str):
            path = settings.http_path
        remaining_ms = invocation.remaining_ms
        lease = invocation.leases.get(message_id) if invocation.leases else None
        task = Task(message_id, path, body, settings.mime_type, record, None, remaining_ms, lease)
        _running.task = task  # ``running_record.set(task)``: every log line from here on names the message
        invocation.hooks = self._unrouted
        before = self._before_task
        if before:
            try:
                for hook in before:
                    hook(invocation, task)
            except BaseException as error:  # a middleware's failure is this message's: retried, or dead-lettered with it
                if self._fail_safely(record, task, invocation, error):
                    raise TaskFailedError(_describe(error)) from error
                return
            message_id, path, lease = task.message_id, task.path, task.lease  # as a hook left them: routing follows
        if remaining_ms is not None and remaining_ms() < invocation.margin_ms:
            if self.release_unstarted(record, task, invocation, "invocation ending"):
                return  # a fresh copy took its place: done
            self._release(record, task, invocation, "invocation ending")
            raise InvocationEndingError(f"less than {invocation.margin_ms} ms left, the safety margin")
        if lease is not None and lease.is_set():
            raise self._lease_lost(task, invocation)
        if _FAILURE in attributes and is_reason_record(task):
            return
        if _DUE_AT in attributes and self._held_back(record, task, invocation):
            raise HeldBackError(f"message {message_id} is due at {task.due_at}")
        try:
            if self.registry.generation != self._routes_generation:  # a task registered since: work routes out again
                self._task_routes.clear()
                self._routes_generation = self.registry.generation
            hooks, forwarded, parser, call, before, hears = self._task_routes.get(path) or self._routed(path)
            if forwarded:
                self._forward(record, task, invocation, self._container_queue_url, pointer is not None)  # type: ignore[arg-type]
                return
            if hooks is not None:
                invocation.hooks = hooks
            if parser is not None:
                self._parse(parser, task)
            if before:
                for hook in before:
                    hook(invocation, task)
            call(invocation, task)
        except BaseException as error:  # a task's failure, whatever its type (SystemExit, GeneratorExit included)
            if isinstance(error, TaskAbortedError) and error.__cause__ is not None:
                error = error.__cause__  # the idempotency layer's wrapper of a BaseException: decide on the original
            if _ThisProcess.pid != invocation.pid:
                end_forked_child(error)
            if self._fail_safely(record, task, invocation, error):
                raise TaskFailedError(_describe(error)) from error
        else:
            if _ThisProcess.pid != invocation.pid:
                end_forked_child(None)
            if pointer is not None:
                invocation.succeeded_payloads.append((record, pointer))
            if _JOB in attributes:  # a tracked message: its result (worker_tier.worker.tracking)
                self.job_tracker(invocation).succeeded(task)
            if hears or _listeners:
                self._emit(invocation, OUTCOME_SUCCEEDED, task)

    def _offloaded_body(self, record: Mapping[str, Any], path: Any, invocation: _Invocation) -> tuple[str, Pointer] | None:
        """An offloaded message's body, read from S3, and its pointer.

        When it cannot be read, the message fails with the Task built on its pointer body: None when it was
        dead-lettered (PayloadError: at once), TaskFailedError when it stays for a retry (PayloadUnavailableError).
        """
        from worker_tier.worker import offloaded

        try:
            read = offloaded.read_body(self.payloads, record)
        except (PayloadError, PayloadUnavailableError) as error:
            if isinstance(error, PayloadMissingError) and self._succeeded_before(record, path):
                logger.info("duplicate of a message that succeeded: its object was deleted after it; skipped",
                            extra={"error": _describe(error)})
                return None
            message_id = record["messageId"]
            task = Task(
                message_id, path if path and isinstance(path, str) else self.settings.http_path, record.get("body") or "",
                self.settings.mime_type, record, None, invocation.remaining_ms,
                invocation.leases.get(message_id) if invocation.leases else None,
            )
            running_record.set(task)
            invocation.hooks = self._unrouted
            logger.warning("the message's body could not be read from S3", extra={"error": _describe(error)})
            if self._fail_safely(record, task, invocation, error):
                raise TaskFailedError(_describe(error)) from error
            return None
        invocation.metrics.count(contract.METRIC_PAYLOADS_OFFLOADED)
        return read

    def _succeeded_before(self, record: Mapping[str, Any], path: Any) -> bool:
        """True when an offloaded message whose object is gone is a duplicate of a copy that succeeded: its task is
        idempotent, keyed without the body (by message id), and the key's record is completed. SQS's standard queues
        deliver at least once, and the first copy's success deleted the object; the duplicate is then skipped, as an
        ordinary message's would be, not dead-lettered."""
        definition = self.registry.get(path if path and isinstance(path, str) else self.settings.http_path)
        if definition is None or not definition.idempotent or definition.idempotency_key is not None:
            return False
        task = Task(record["messageId"], definition.path, "", self.settings.mime_type, record, None, None, None)
        try:
            return self._idempotency.runner().completed(definition, task)
        except Exception as error:  # the state table did not answer: the missing object is dead-lettered, as it says
            logger.warning("could not read the idempotency record of a message whose object is gone",
                           extra={"error": _describe(error)})
            return False

    def _forward(
        self, record: Mapping[str, Any], task: Task, invocation: _Invocation, queue_url: str, offloaded: bool = False
    ) -> None:
        """Hand a long task to the container worker's queue, as it came (an offloaded one with its pointer, keeping
        its object); an error retries it here."""
        self._sqs.get().send_message(**forward_request(record, task, queue_url, offloaded=offloaded))
        invocation.metrics.count(contract.METRIC_FORWARDED)
        if _listeners or self._unrouted.after_task:
            self._emit(invocation, OUTCOME_SUCCEEDED, task, "forwarded to the container worker")

    def _routed(self, path: str) -> _Route:
        """A path's route: a registered path wins (kept by path); the app, if any, gets the rest (one route for all).

        Unpacked for ``_process_record``: the hooks when they differ from those every message starts with (else None), whether
        it is forwarded, its parser, its chain, its own middleware's before_task hooks, whether after_task hooks hear it.
        """
        definition = self.registry.get(path)
        route = self._routes.get(id(definition))
        if route is None or route[0] is not definition:
            route = self._route(definition)
        _, hooks, forwarded, parser = route
        unrouted = self._unrouted
        same = hooks.after_task == unrouted.after_task and hooks.on_dead_letter == unrouted.on_dead_letter
        unpacked = (None if same else hooks, forwarded, parser, hooks.call, hooks.before_task, bool(hooks.after_task))
        if definition is not None:
            self._task_routes[path] = unpacked  # type: ignore[assignment]
        return unpacked  # type: ignore[return-value]

    def _route(self, definition: TaskDefinition | None) -> tuple[TaskDefinition | None, _MessageHooks, bool, Any]:
        """How a task's messages run (``definition`` None: the app's), worked out on its first message and kept:
        its hooks, whether it is forwarded to the container worker, its parser."""
        pipeline = self.pipeline.extended(definition.middleware) if definition is not None else self.pipeline
        innermost = self._deliver if definition is None else innermost_call(definition, pipeline, self._idempotency, self.job_tracker)
        if self._idempotency.wraps(definition):  # innermost of all, so a skipped duplicate meets every other middleware
            innermost = functools.partial(self._idempotency.around_task, call_next=innermost)
        call = pipeline.chain(definition, innermost)
        own = Pipeline(definition.middleware) if definition is not None and definition.middleware else None
        hooks = _MessageHooks.of(pipeline, call, own)
        forwarded = definition is not None and definition.container and bool(self._container_queue_url)
        route = self._routes[id(definition)] = (definition, hooks, forwarded, definition.parser if definition else None)
        return route

    def _deliver(self, invocation: _Invocation, task: Task) -> None:
        """POST the message to the app as sqsd would and judge its answer by sqsd's rules; UnknownPathError without an app."""
        target = self.app_target
        if target is None:
            self._unknown_path(task)
        attributes = task.record.get("messageAttributes")
        if attributes and _JOB in attributes:  # a tracked message: running; an app's job has no result (docs/jobs.md)
            self.job_tracker(invocation).running(invocation, task)
        now = self._clock()
        sqsd.check_retention(task, self.settings, now)
        request = dataclasses.replace(sqsd.request_for(task, self.settings), timeout_seconds=self._app_timeout(invocation))
        response = target.deliver(request)
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
        records, unreadable = split_unreadable(named)
        if not unreadable:
            return records, []
        for record in unreadable:
            shown = {k: str(v)[:80] for k, v in record.items()}
            logger.error("record the worker cannot read: reported failed and backed off", extra={"record": shown})
            invocation.metrics.count(contract.METRIC_MALFORMED_RECORDS)
            if type(record.get("receiptHandle")) is str:
                invocation.set_visibility(record, self._backoff_first())
        stopped = fifo_stopped(named, unreadable) if self.settings.fifo else []
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
        """The source queue's URL: a priority level's by the event source ARN, configured, or looked up once from it."""
        level_url = self.level_queue_urls.get(priority.queue_name(records[0].get("eventSourceARN") or "")) if records else None
        if level_url is not None:
            return level_url
        if self._queue_url is None:
            _, _, _, _, account, name = records[0]["eventSourceARN"].split(":", 5)
            self._queue_url = self._sqs.get().get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
        return self._queue_url
