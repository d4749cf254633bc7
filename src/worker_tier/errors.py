"""Exceptions raised by and to Worker Tier."""

from __future__ import annotations

import math


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


class SendError(WorkerTierError):
    """SQS refused a message, after retries where the failure was retryable."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code
