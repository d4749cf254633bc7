"""Exceptions raised by and to Worker Tier."""

from __future__ import annotations

import math
from typing import Any


class WorkerTierError(Exception):
    """Base class of every exception Worker Tier defines (``tests/unit/test_errors.py`` walks the package to keep it so).

    Those that callers may also catch as ``ValueError`` (bad settings, input or stored data) keep it as a second base.
    """


class SettingsError(WorkerTierError, ValueError):
    """A setting is missing, of the wrong type or out of range."""


class NonRetryableError(WorkerTierError):
    """Raise from a task to send its message to the dead-letter queue at once, with this reason.

    Examples
    --------
    >>> raise NonRetryableError("image is not a JPEG")  # doctest: +SKIP
    """


class RetryLater(WorkerTierError):  # noqa: N818 - the public name docs/design.md promises
    """Raise from a task to retry its message after ``delay`` seconds, without backoff.

    Examples
    --------
    >>> RetryLater(30).delay_seconds
    30
    """

    def __init__(self, delay: float, reason: str = "") -> None:
        seconds = delay.total_seconds() if hasattr(delay, "total_seconds") else delay
        if not _finite_non_negative(seconds):
            shown = repr(delay) if len(repr(delay)) <= 80 else repr(delay)[:77] + "..."
            raise ValueError(f"RetryLater delay must be a finite, non-negative number of seconds or a timedelta, got {shown}")
        self.delay_seconds = math.ceil(seconds)
        super().__init__(reason or f"retry requested in {self.delay_seconds} s")


def _finite_non_negative(seconds: object) -> bool:
    """True for an int or float that is finite and >= 0 (an int past a float's range is not)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return False
    try:
        return seconds >= 0 and math.isfinite(seconds)
    except OverflowError:  # math.isfinite(10**400)
        return False


class ThrottledError(WorkerTierError):
    """A task's flow control (``@task(rate_limit=, concurrency=)``) holds its message back: it waits ``wait_seconds``
    and comes back, and the wait is not an attempt (``worker_tier.flow``)."""

    def __init__(self, wait_seconds: float, reason: str, limit: str = "") -> None:
        self.wait_seconds = wait_seconds
        self.limit = limit  # the limit's state-table key, which the wait is counted under for `worker-tier status`
        super().__init__(reason)


class TaskAbortedError(WorkerTierError):
    """A task raised a BaseException (SystemExit, KeyboardInterrupt, GeneratorExit...); it is the ``__cause__``.

    Raised in its place inside the idempotency layer, which cleans up only after an Exception.
    """


class UnknownPathError(NonRetryableError):
    """No task is registered for the message's path."""


class MalformedBodyError(NonRetryableError):
    """The message body could not be parsed as the task declared."""


class MalformedEventError(WorkerTierError, ValueError):
    """The worker was given something that is not a Lambda SQS event (a mapping with a ``Records`` list)."""


class TaskRegistrationError(WorkerTierError, ValueError):
    """A ``@task`` registration is invalid (bad path, duplicate, bad option)."""


class MessageError(WorkerTierError, ValueError):
    """A message given to ``Client`` breaks an SQS rule (size, attributes, delay)."""


class MissingResourceError(MessageError):
    """A send needs a resource the Client was not given (``resource``: ``delay_table`` or ``state_table``)."""

    def __init__(self, message: str, resource: str) -> None:
        super().__init__(message)
        self.resource = resource


class PayloadError(NonRetryableError):
    """An offloaded message's body cannot be read from S3 as its pointer says (missing, another bucket, not UTF-8,
    over ``payload_max_bytes``): dead-lettered at once with this reason, which names the bucket and the key."""


class PayloadMissingError(PayloadError):
    """An offloaded message's object is not in its bucket (deleted after an earlier copy succeeded, expired, never put)."""


class PayloadUnavailableError(WorkerTierError):
    """S3 did not answer for an offloaded body (throttling, 5xx, a network error) after the retry budget: retried."""


class SendError(WorkerTierError):
    """SQS refused a message, after retries where the failure was retryable."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class AppLoadError(SettingsError):
    """The ``app`` setting names an app that cannot be imported or is not a WSGI or ASGI callable."""


class AppStatusError(WorkerTierError):
    """The app answered something other than 200 (sqsd's only success): a failure that backs off, then dead-letters.

    ``status`` and ``response_body`` (its first KiB) go in the dead-letter reason as ``app_status`` and
    ``app_response``.
    """

    def __init__(self, request: Any, status: int, response_body: bytes) -> None:
        self.status = status
        self.response_body = response_body
        shown = response_body[:80].decode("utf-8", errors="replace")
        super().__init__(
            f"the app answered {status} to {request.method} {request.path}; only 200 deletes a message (sqsd's rule). "
            f"Its body starts {shown!r}"
        )


class AppExceptionError(WorkerTierError):
    """The app raised while handling a message; its message carries the app's traceback (innermost call first)."""


class RetentionExpiredError(NonRetryableError):
    """The message was first received longer ago than ``retention_period``: dead-lettered, not delivered to the app."""


class ConfigurationError(WorkerTierError, ValueError):
    """A deployment's configuration is invalid: a construct's props, task code, a requirements file, ``cron.yaml``.

    Raised at synth (the CDK constructs' own errors derive from it) and by the tools that read the same files; it
    is a ``ValueError`` too, as these errors always were.
    """


class QueueConfigurationError(WorkerTierError):
    """A queue call (GetQueueAttributes at start, ReceiveMessage) was refused in a way no retry fixes (access denied, no
    such queue): at start before any message is taken, else raised after the drain."""


class UnsendableRequestError(NonRetryableError):
    """A message attribute cannot become the POST's header or path (a control character, or a path that is no
    request target): dead-lettered at once, the reason naming the attribute, as no retry can change it."""


class DeadLetterError(WorkerTierError):
    """The dead-letter queue did not accept a message; it must not be deleted from the source queue."""


class UnreadableItemError(WorkerTierError, ValueError):
    """A delay-table item is not a delayed message as the producer writes one; the text says what is wrong."""


class DispatchIncompleteError(WorkerTierError):
    """Some messages were neither accepted by SQS nor dead-lettered, after retries; the run stops there."""


class DispatchRefusedError(WorkerTierError):
    """The work queue refused a delayed message for a sender fault: the reason it was dead-lettered."""


class StateError(WorkerTierError, ValueError):
    """A dispatcher state item (the watermark) is not as the dispatcher writes it."""


class LayoutLostError(StateError):
    """The layout item is missing, yet a layout was written (the G = 1 watermark carries its epoch): never fall back to epoch 0."""

class CronConfigError(ConfigurationError):
    """cron.yaml is malformed; the message names the file, the line, the entry and the rule."""

class LeaseLostError(WorkerTierError):
    """Another run moved the watermark: this run no longer holds its lease on the state table.

    Not ``worker_tier.worker.fates.HeartbeatLeaseLostError``, a message whose visibility the heartbeat lost.
    """

class MiddlewareError(ConfigurationError):
    """The ``middleware`` setting, or a task's ``middleware`` option, names something that is not a middleware."""


class TaskImportError(ConfigurationError):
    """A module of the ``task_modules`` setting raised ImportError (or, at synth, exited or hung at import); the message
    names it, the missing name or the exit, and the line.

    ``file``: the file that raised it, relative to its ``sys.path`` entry (``tasks/billing.py``), or "" if unknown.
    """

    def __init__(self, message: str, file: str = "") -> None:
        super().__init__(message)
        self.file = file


class JobNotFoundError(WorkerTierError, LookupError):
    """No job record has this id: never tracked, or older than the ``job_retention`` setting (docs/jobs.md)."""


class JobFailedError(WorkerTierError):
    """``Client.wait``: the job was dead-lettered; ``reason`` is why, ``status`` its JobStatus."""

    def __init__(self, message: str, reason: str | None = None, status: Any = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status


class JobCancelledError(WorkerTierError):
    """``Client.wait``: the job's delayed message was cancelled (``Client.cancel``); ``status`` its JobStatus."""

    def __init__(self, message: str, status: Any = None) -> None:
        super().__init__(message)
        self.status = status


class JobResultUnavailableError(WorkerTierError):
    """``Client.wait``: the job succeeded but its result was not kept or cannot be read (``reason``: its size over
    ``job_result_max_bytes`` without a payload bucket, not JSON, or its kept object gone); ``status`` its JobStatus."""

    def __init__(self, message: str, reason: str | None = None, status: Any = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status


class JobWaitTimeout(WorkerTierError, TimeoutError):  # noqa: N818 - the public name docs/jobs.md promises
    """``Client.wait``: the job reached no final state within the timeout; ``status`` is the last one read."""

    def __init__(self, message: str, status: Any = None) -> None:
        super().__init__(message)
        self.status = status
