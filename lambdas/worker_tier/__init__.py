"""Worker Tier: the Elastic Beanstalk worker tier, on Lambda.

Examples
--------
>>> from worker_tier import task, Task
>>> @task("/hello")
... def hello(t: Task) -> None:
...     print(t.body)
"""

from worker_tier.client import Client, OutgoingMessage, SendResult
from worker_tier.errors import (
    MalformedBodyError,
    MessageError,
    NonRetryableError,
    RetryLater,
    SendError,
    SettingsError,
    UnknownPathError,
    WorkerTierError,
)
from worker_tier.registry import task
from worker_tier.task import Task

__all__ = [
    "Client",
    "MalformedBodyError",
    "MessageError",
    "NonRetryableError",
    "OutgoingMessage",
    "RetryLater",
    "SendError",
    "SendResult",
    "SettingsError",
    "Task",
    "UnknownPathError",
    "WorkerTierError",
    "task",
]
