"""Opt-in task idempotency: Powertools idempotency on the stack's shared state table.

Powertools (and through it boto3) is imported only when an idempotent task
runs, so handlers without one pay nothing at cold start.

Every record's key starts with ``IDEMPOTENCY_KEY_PREFIX`` (then the task's path and
the key's hash), so the worker's role can be limited to those items of the shared
state table (``dynamodb:LeadingKeys``).

A record stays INPROGRESS while its task runs, until Powertools' in-progress
expiry: the invocation's remaining time. The container worker has no Lambda
context, so it passes a ``LeaseContext`` whose remaining time is the message's
lease (the heartbeat's extension window): when a worker crashes mid-task, the
record's in-progress expiry has passed by the time its message is visible again,
and the retry runs.
"""

from __future__ import annotations

from typing import Any, Callable

from worker_tier.errors import MalformedBodyError, WorkerTierError
from worker_tier.registry import TaskDefinition
from worker_tier.task import Task

# The state table's key and TTL attribute; infra creates the table with the same names.
STATE_TABLE_PARTITION_KEY = "pk"
STATE_TABLE_TTL_ATTRIBUTE = "expiration"
# Prefix of every idempotency record's key (the table's other items belong to the scheduler and cron).
IDEMPOTENCY_KEY_PREFIX = "idempotency#"


class IdempotencyConfigurationError(WorkerTierError):
    """An idempotent task ran where no state table is configured."""


class LeaseContext:
    """A stand-in Lambda context whose remaining time is a message's lease, for Powertools' in-progress expiry.

    Examples
    --------
    >>> LeaseContext(40).get_remaining_time_in_millis()
    40000
    """

    def __init__(self, lease_seconds: float) -> None:
        self.lease_ms = int(lease_seconds * 1000)

    def get_remaining_time_in_millis(self) -> int:
        """The lease, in milliseconds: how long a crashed holder keeps the message from others."""
        return self.lease_ms


def key_prefix(path: str) -> str:
    """The key prefix of a task's idempotency records.

    Examples
    --------
    >>> key_prefix("/charge")
    'idempotency#/charge'
    """
    return f"{IDEMPOTENCY_KEY_PREFIX}{path}"


class IdempotentRunner:
    """Runs idempotent tasks at most once per key, remembering keys in the state table."""

    def __init__(self, table_name: str | None, dynamodb_factory: Callable[[], Any]) -> None:
        self._table_name = table_name
        self._dynamodb_factory = dynamodb_factory
        self._runners: dict[str, Callable[..., Any]] = {}

    def run(self, definition: TaskDefinition, task: Task, lambda_context: Any = None) -> None:
        """Call the task's handler unless its key already completed."""
        runner = self._runners.get(definition.path) or self._build(definition)
        self._runners[definition.path] = runner
        if lambda_context is not None:
            runner.config.register_lambda_context(lambda_context)  # type: ignore[attr-defined]
        runner(data={"path": definition.path, "key": idempotency_key(definition, task)}, task=task, handler=definition.handler)

    def _build(self, definition: TaskDefinition) -> Callable[..., Any]:
        """The Powertools-wrapped call for one task definition."""
        if not self._table_name:
            raise IdempotencyConfigurationError(
                f"task {definition.path!r} is idempotent but no state table is configured "
                "(set WORKER_TIER_STATE_TABLE; the stack sets it for you)"
            )
        from aws_lambda_powertools.utilities.idempotency import (
            DynamoDBPersistenceLayer,
            IdempotencyConfig,
            idempotent_function,
        )

        persistence = DynamoDBPersistenceLayer(
            table_name=self._table_name,
            key_attr=STATE_TABLE_PARTITION_KEY,
            expiry_attr=STATE_TABLE_TTL_ATTRIBUTE,
            boto3_client=self._dynamodb_factory(),
        )
        config = IdempotencyConfig(expires_after_seconds=definition.idempotency_expiry)

        @idempotent_function(
            data_keyword_argument="data", persistence_store=persistence, config=config, key_prefix=key_prefix(definition.path)
        )
        def run_task(data: dict[str, str], task: Task, handler: Callable[[Task], None]) -> None:
            handler(task)

        run_task.config = config  # type: ignore[attr-defined]
        return run_task


def idempotency_key(definition: TaskDefinition, task: Task) -> str:
    """The task's key: its own callable, a JMESPath into the JSON body, or the message id."""
    key = definition.idempotency_key
    if key is None:
        return task.message_id
    if callable(key):
        return str(key(task))
    import jmespath

    value = jmespath.search(key, task.json())
    if value is None:
        raise MalformedBodyError(
            f"idempotency_key {key!r} of task {definition.path!r} found nothing in the body of message {task.message_id}"
        )
    return str(value)
