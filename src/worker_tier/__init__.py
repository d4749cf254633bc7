"""Worker Tier: the Elastic Beanstalk worker tier, on Lambda.

Examples
--------
>>> from worker_tier import task, Task
>>> @task("/hello")
... def hello(t: Task) -> None:
...     print(t.body)
"""

from typing import TYPE_CHECKING, Any

from worker_tier.core.errors import (
    AppExceptionError,
    AppLoadError,
    AppStatusError,
    ConfigurationError,
    CronConfigError,
    DeadLetterError,
    DispatchIncompleteError,
    DispatchRefusedError,
    JobCancelledError,
    JobFailedError,
    JobNotFoundError,
    JobResultUnavailableError,
    JobWaitTimeout,
    LayoutLostError,
    LeaseLostError,
    MalformedBodyError,
    MalformedEventError,
    MessageError,
    MissingResourceError,
    MiddlewareError,
    NonRetryableError,
    PayloadError,
    PayloadMissingError,
    PayloadUnavailableError,
    QueueConfigurationError,
    RetentionExpiredError,
    RetryLater,
    SendError,
    SettingsError,
    StateError,
    TaskAbortedError,
    ThrottledError,
    TaskImportError,
    TaskRegistrationError,
    UnknownPathError,
    UnreadableItemError,
    UnsendableRequestError,
    WorkerTierError,
)
from worker_tier.worker.registry import task
from worker_tier.core.task import Task

if TYPE_CHECKING:
    from worker_tier.core.jobs import JobStatus
    from worker_tier.producer.client import Client, OutgoingMessage, SendResult

_CLIENT_NAMES = ("Client", "OutgoingMessage", "SendResult")


def __getattr__(name: str) -> Any:
    """Import the producer on first use: a worker function that never sends does not pay for it."""
    if name in _CLIENT_NAMES:
        from worker_tier.producer import client

        return getattr(client, name)
    if name == "JobStatus":  # a tracked job's status (docs/jobs.md), imported with its first use
        from worker_tier.core.jobs import JobStatus

        return JobStatus
    raise AttributeError(f"module 'worker_tier' has no attribute {name!r}")


__all__ = [
    "AppExceptionError",
    "AppLoadError",
    "AppStatusError",
    "Client",
    "ConfigurationError",
    "CronConfigError",
    "DeadLetterError",
    "DispatchIncompleteError",
    "DispatchRefusedError",
    "JobCancelledError",
    "JobFailedError",
    "JobNotFoundError",
    "JobResultUnavailableError",
    "JobStatus",
    "JobWaitTimeout",
    "LayoutLostError",
    "LeaseLostError",
    "MalformedBodyError",
    "MalformedEventError",
    "MessageError",
    "MiddlewareError",
    "MissingResourceError",
    "NonRetryableError",
    "OutgoingMessage",
    "PayloadError",
    "PayloadMissingError",
    "PayloadUnavailableError",
    "QueueConfigurationError",
    "RetentionExpiredError",
    "RetryLater",
    "SendError",
    "SendResult",
    "SettingsError",
    "StateError",
    "Task",
    "TaskAbortedError",
    "TaskImportError",
    "TaskRegistrationError",
    "ThrottledError",
    "UnknownPathError",
    "UnreadableItemError",
    "UnsendableRequestError",
    "WorkerTierError",
    "task",
]
