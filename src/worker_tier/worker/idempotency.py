"""Opt-in task idempotency: Powertools idempotency on the stack's shared state table.

Powertools (and through it boto3) is imported only when an idempotent task
runs, so handlers without one pay nothing at cold start.

Every record's key starts with ``IDEMPOTENCY_KEY_PREFIX`` (then the task's path and
the key's hash), so the worker's role can be limited to those items of the shared
state table (``dynamodb:LeadingKeys``). Only the path's length varies: an idempotency
key of any length is hashed, and registration refuses a path that would make the key
longer than DynamoDB's 2,048 bytes (``registry.MAX_IDEMPOTENT_PATH_BYTES``). A key that
is None or empty would be shared by unrelated messages, so it dead-letters the message
(``MalformedBodyError``) rather than run it once and skip the rest as done.

A record stays INPROGRESS while its task runs, until Powertools' in-progress
expiry: the invocation's remaining time. The container worker has no Lambda
context, so it passes a ``LeaseContext`` whose remaining time is the message's
lease (the heartbeat's extension window): when a worker crashes mid-task, the
record's in-progress expiry has passed by the time its message is visible again,
and the retry runs. While the task lives, each successful heartbeat moves the
record's in-progress expiry on by the same window (``extend_in_progress``), so a
duplicate message with the same key never runs beside a task that is still alive.

Powertools deletes a record whose handler raised only for an ``Exception``: a
``BaseException`` from the task is raised on as ``TaskAbortedError`` (its cause),
so the key is freed for the retry.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Callable

from worker_tier.core import contract
from worker_tier.core.aws import is_condition_failure
from worker_tier.core.errors import TaskAbortedError, WorkerTierError
from worker_tier.worker.registry import TaskDefinition
from worker_tier.core.contract import IDEMPOTENCY_KEY_PREFIX
from worker_tier.core.task_keys import task_key
from worker_tier.core.task import Task

# The state table's key layout is worker_tier.core.contract's; these names stay importable from here.
STATE_TABLE_PARTITION_KEY = contract.STATE_PARTITION_KEY
STATE_TABLE_TTL_ATTRIBUTE = contract.STATE_TTL_ATTRIBUTE

# Powertools' DynamoDB attribute names and in-progress status (DynamoDBPersistenceLayer defaults).
IN_PROGRESS_EXPIRY_ATTRIBUTE = "in_progress_expiration"
STATUS_ATTRIBUTE = "status"
STATUS_IN_PROGRESS = "INPROGRESS"
STATUS_COMPLETED = "COMPLETED"


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

    def __init__(
        self, table_name: str | None, dynamodb_factory: Callable[[], Any], clock: Callable[[], float] = time.time
    ) -> None:
        self._table_name = table_name
        self._dynamodb_factory = dynamodb_factory
        self._clock = clock
        self._runners: dict[str, Callable[..., Any]] = {}

    def run(
        self,
        definition: TaskDefinition,
        task: Task,
        lambda_context: Any = None,
        on_lease: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        """Call the task's handler unless its key already completed.

        ``on_lease``: given the callback that moves this record's in-progress expiry on by the
        lease (``lambda_context``'s remaining time), to call after each renewal of the lease.
        """
        runner = self._runners.get(definition.path) or self._build(definition)
        self._runners[definition.path] = runner
        if lambda_context is not None:
            runner.config.register_lambda_context(lambda_context)  # type: ignore[attr-defined]  # set by _build
        data = {"path": definition.path, "key": idempotency_key(definition, task)}
        if on_lease is not None and lambda_context is not None:
            key, lease_ms = record_key(definition.path, data), lambda_context.get_remaining_time_in_millis()
            on_lease(lambda: self.extend_in_progress(key, lease_ms))
        runner(data=data, task=task, handler=definition.handler)

    def completed(self, definition: TaskDefinition, task: Task) -> bool:
        """True when ``task``'s key has a completed, unexpired record: an earlier copy of it succeeded.

        Read strongly consistent, so a copy that succeeded a moment ago counts.
        """
        key = record_key(definition.path, {"path": definition.path, "key": idempotency_key(definition, task)})
        item = self._dynamodb_factory().get_item(
            TableName=self._table_name, Key={STATE_TABLE_PARTITION_KEY: {"S": key}}, ConsistentRead=True,
        ).get("Item") or {}
        expiry = item.get(contract.STATE_TTL_ATTRIBUTE, {}).get("N")
        return item.get(STATUS_ATTRIBUTE, {}).get("S") == STATUS_COMPLETED and expiry is not None and int(expiry) > self._clock()

    def extend_in_progress(self, key: str, lease_ms: int) -> None:
        """Move an INPROGRESS record's expiry to ``lease_ms`` from now; a record no longer in progress is left alone."""
        expiry_ms = int(self._clock() * 1000) + lease_ms
        try:
            self._dynamodb_factory().update_item(
                TableName=self._table_name,
                Key={STATE_TABLE_PARTITION_KEY: {"S": key}},
                UpdateExpression="SET #expiry = :expiry",
                ConditionExpression="#status = :in_progress",
                ExpressionAttributeNames={"#expiry": IN_PROGRESS_EXPIRY_ATTRIBUTE, "#status": STATUS_ATTRIBUTE},
                ExpressionAttributeValues={":expiry": {"N": str(expiry_ms)}, ":in_progress": {"S": STATUS_IN_PROGRESS}},
            )
        except Exception as error:  # completed or deleted meanwhile (ConditionalCheckFailed): nothing to extend
            if not is_condition_failure(error):
                raise

    def _build(self, definition: TaskDefinition) -> Callable[..., Any]:
        """The Powertools-wrapped call for one task definition."""
        if not self._table_name:
            raise IdempotencyConfigurationError(
                f"task {definition.path!r} is idempotent but no state table is configured "
                f"(set {contract.STATE_TABLE_VARIABLE}; the stack sets it for you)"
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

        def run_task(data: dict[str, str], task: Task, handler: Callable[[Task], object]) -> None:
            try:
                handler(task)
            except Exception:
                raise
            except BaseException as error:  # Powertools frees the key only after an Exception
                raise TaskAbortedError(f"task {task.path!r} raised {type(error).__name__}") from error

        wrapped = idempotent_function(
            run_task, data_keyword_argument="data", persistence_store=persistence, config=config, key_prefix=key_prefix(definition.path)
        )
        wrapped.config = config  # for run() to register each invocation's Lambda context
        runner: Callable[..., Any] = wrapped
        return runner


def record_key(path: str, data: dict[str, str]) -> str:
    """The state table key Powertools gives the record of ``data`` (its default md5 of the sorted JSON).

    Examples
    --------
    >>> record_key("/charge", {"path": "/charge", "key": "A-1"})
    'idempotency#/charge#83a8ab64bfbdb84af17c79f01a0e71a0'
    """
    digest = hashlib.md5(json.dumps(data, sort_keys=True).encode()).hexdigest()  # MD5: Powertools' own key hash, not a security use
    return f"{key_prefix(path)}#{digest}"


def idempotency_key(definition: TaskDefinition, task: Task) -> str:
    """The task's key: its own callable, a JMESPath into the JSON body, or the message id.

    The message id of a forwarded message is its source's (``worker_tier.source_message_id``), so the
    container runs a source message delivered twice once, as the Lambda worker would.
    """
    key = definition.idempotency_key
    if key is None:
        return task.attributes.get(contract.SOURCE_MESSAGE_ID_ATTRIBUTE) or task.message_id
    return task_key(key, task, "idempotency_key", definition.path, "each after the first skipped as done")
