"""Message priorities: the levels, the queue of each, and the attribute that keeps a message's level on every re-send.

SQS has no priorities, so each level is a queue of its own (the ``priorities`` setting makes the ``high`` and
``low`` ones beside the work queue, which is the ``normal`` level): a producer sends to its level's queue, and a
message of another level than ``normal`` carries ``contract.PRIORITY_ATTRIBUTE``, so that a copy sent again
(through the delay table, to the DLQ and back by ``worker-tier redrive``) goes back to its level's queue. On
Lambda each level's queue has its own event source and concurrency share; the container worker polls the levels
highest first (docs/priorities.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from worker_tier.core import limits
from worker_tier.core.contract import (
    DEFAULT_PRIORITY,
    PRIORITY_ATTRIBUTE,
    PRIORITY_HIGH,
    PRIORITY_LEVELS,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    PRIORITY_QUEUE_FIELDS,
    Resources,
)
from worker_tier.core.errors import MessageError

# The priorities setting's name, as the errors tell the fix.
SETTING = "priorities"


def check_level(level: Any) -> str:
    """``level`` if it is one of ``PRIORITY_LEVELS``; MessageError naming the value and the levels otherwise.

    >>> check_level("high")
    'high'
    """
    if not isinstance(level, str) or level not in PRIORITY_LEVELS:
        raise MessageError(f"priority must be one of {', '.join(map(repr, PRIORITY_LEVELS))}, got {level!r}")
    return level


def level_of(attributes: Mapping[str, Any] | None) -> str:
    """A message's level from its attributes (the SQS API's shape or a Lambda record's); ``normal`` when it has none.

    An unknown value reads as ``normal``: it came from outside Worker Tier, and the work queue takes anything.

    >>> level_of({PRIORITY_ATTRIBUTE: {"stringValue": "low", "dataType": "String"}})
    'low'
    """
    value = (attributes or {}).get(PRIORITY_ATTRIBUTE)
    if isinstance(value, Mapping):
        value = value.get("StringValue", value.get("stringValue"))
    return value if isinstance(value, str) and value in PRIORITY_LEVELS else DEFAULT_PRIORITY


def attribute(level: str) -> dict[str, dict[str, str]]:
    """The attribute a message of ``level`` carries (SQS API shape); none for ``normal``."""
    if level == DEFAULT_PRIORITY:
        return {}
    return {PRIORITY_ATTRIBUTE: {"DataType": "String", "StringValue": level}}


def queue_name(url_or_arn: str) -> str:
    """A queue's name from its URL (``https://.../123456789012/name``) or ARN (``arn:aws:sqs:region:account:name``)."""
    return url_or_arn.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]


@dataclass(frozen=True)
class PriorityQueues:
    """The work queue's URL for each level; ``high`` and ``low`` are None while priorities are off.

    >>> queues = PriorityQueues("https://q/work", high="https://q/work-high")
    >>> queues.url("high"), queues.url_for({PRIORITY_ATTRIBUTE: {"StringValue": "high"}})
    ('https://q/work-high', 'https://q/work-high')
    """

    normal: str
    high: str | None = None
    low: str | None = None

    @classmethod
    def from_resources(cls, resources: Resources, normal: str) -> PriorityQueues:
        """The levels' queues a process was given (``contract.PRIORITY_QUEUE_FIELDS``), ``normal`` being its work queue."""
        return cls(normal, **{level: getattr(resources, field) for level, field in PRIORITY_QUEUE_FIELDS.items()})

    @property
    def enabled(self) -> bool:
        """Whether any level besides ``normal`` has a queue (the priorities setting is on)."""
        return self.high is not None or self.low is not None

    def url(self, level: Any) -> str:
        """The queue of ``level``; MessageError naming the value and the fix when it is unknown or has no queue."""
        url: str | None = getattr(self, check_level(level))
        if url is None and self.normal.endswith(".fifo"):
            raise MessageError(
                f"priority {level!r} is for standard queues: a FIFO queue keeps each message group's order, which "
                "separate priority queues would break; send without priority"
            )
        if url is None:
            variable = Resources.variable(PRIORITY_QUEUE_FIELDS[level])
            raise MessageError(
                f"priority {level!r} needs its own queue, which exists only with the {SETTING} setting ({variable} is "
                f"not set): set {SETTING} true in the stack's worker_tier settings and deploy, or send without priority"
            )
        return url

    def url_for(self, attributes: Mapping[str, Any] | None) -> str:
        """The queue a copy of a message with ``attributes`` goes back to: its level's, or the work queue when that
        level has no queue here (priorities since turned off)."""
        return getattr(self, level_of(attributes)) or self.normal

    def levels(self) -> list[tuple[str, str]]:
        """(level, URL) of each level with a queue, highest first."""
        return [(level, url) for level in PRIORITY_LEVELS if (url := getattr(self, level)) is not None]

    def by_name(self) -> dict[str, str]:
        """Each level's queue URL by the queue's name (a Lambda record's eventSourceARN ends with it)."""
        return {queue_name(url): url for _, url in self.levels()}


def concurrency_shares(http_connections: int) -> dict[str, int]:
    """Each level's event source maximum concurrency on Lambda: high may use all of ``http_connections``, normal
    half and low a quarter, none below Lambda's minimum of 2 (``limits.LAMBDA_SQS_MIN_MAXIMUM_CONCURRENCY``).

    The shares add up to more than ``http_connections`` (7/4 of it): a backlog of low or normal work never takes
    the concurrency high work needs, since each level's poller scales on its own queue.

    >>> concurrency_shares(50)
    {'high': 50, 'normal': 25, 'low': 12}
    """
    minimum = limits.LAMBDA_SQS_MIN_MAXIMUM_CONCURRENCY
    return {PRIORITY_HIGH: http_connections, PRIORITY_NORMAL: max(minimum, http_connections // 2),
            PRIORITY_LOW: max(minimum, http_connections // 4)}
