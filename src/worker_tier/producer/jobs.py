"""The producer's side of tracked jobs (docs/jobs.md): the first records, written before the sends, and the reads.

``JobRecords.write_first`` writes each tracked message's first record before anything is sent: unkeyed ones 25 per
BatchWriteItem, a message with a ``dedupe_key`` (whose job id comes from its key) by a conditional PutItem, so a
repeated send of a key never resets the job it already is. A message that is then definitely not sent has its record
deleted (``forget``): nobody was given its id, and a record that claimed queued forever would mislead; one whose
send's answer was lost (SQS may have it) keeps its record. ``status`` reads a record (and a result kept in the payload
bucket), ``wait`` polls it with backoff until a final state.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import time
from typing import Any, Callable, Mapping

from worker_tier.core import contract, jobs, limits
from worker_tier.core.aws import error_code, is_condition_failure
from worker_tier.core.errors import (
    JobCancelledError,
    JobFailedError,
    JobNotFoundError,
    JobResultUnavailableError,
    JobWaitTimeout,
    MessageError,
)
from worker_tier.core.jobs import JobStatus
from worker_tier.core.retry import STATE_CALLS, chunks
from worker_tier.core.settings import DEFAULT_JOB_RETENTION_SECONDS

# The job of the task running on this thread (set by the worker for a tracked message): a tracked send from it
# records it as its parent.
current_job: contextvars.ContextVar[str | None] = contextvars.ContextVar("worker_tier_current_job", default=None)

# Client.wait's polls: the first after this, each next one 1.5 times longer, at most the interval given.
FIRST_POLL_SECONDS = 0.1
POLL_GROWTH = 1.5
DEFAULT_POLL_SECONDS = 2.0


class JobRecords:
    """A Client's job records in the state table (``table``), its clock and, for results kept in S3, its bucket."""

    def __init__(self, table: str, dynamodb: Any, clock: Callable[[], float],
                 retention_seconds: int = DEFAULT_JOB_RETENTION_SECONDS, s3: Callable[[], Any] | None = None,
                 sleep: Callable[[float], None] = time.sleep, bucket: str | None = None) -> None:
        self.table = table
        self._dynamodb = dynamodb
        self._clock = clock
        self._retention = retention_seconds
        self._s3 = s3
        self._sleep = sleep
        self._bucket = bucket  # the payload bucket: the only one a kept result is read from

    def write_first(self, items: Mapping[int, dict[str, Any]], keyed: set[int]) -> tuple[dict[int, tuple[str, str]], set[int]]:
        """Write the first records (message index → item); the failures (index → (code, reason)) and the indexes
        whose record this call created (a keyed job that existed already is not one of them)."""
        failures: dict[int, tuple[str, str]] = {}
        created: set[int] = set()
        for index in keyed & set(items):
            try:
                self._dynamodb.put_item(TableName=self.table, Item=items[index],
                                        ConditionExpression=f"attribute_not_exists({contract.STATE_PARTITION_KEY})")
                created.add(index)
            except Exception as error:
                if not is_condition_failure(error):  # else: the key's job exists, a repeated send is the same job
                    failures[index] = (error_code(error), f"the job record was not written: {error}")
        plain = [i for i in items if i not in keyed]
        for chunk in chunks(plain, limits.DYNAMODB_MAX_BATCH_WRITE_ITEMS):
            unwritten = self._batch_write({i: {"PutRequest": {"Item": items[i]}} for i in chunk})
            failures.update(unwritten)
            created.update(i for i in chunk if i not in unwritten)
        return failures, created

    def forget(self, job_ids: list[str]) -> None:
        """Delete the records of messages that were not sent (best effort: a record left reads queued until its TTL)."""
        for chunk in chunks(job_ids, limits.DYNAMODB_MAX_BATCH_WRITE_ITEMS):
            with contextlib.suppress(Exception):  # the send's own failure is what the caller hears
                self._batch_write({i: {"DeleteRequest": {"Key": jobs.job_key(job_id)}} for i, job_id in enumerate(chunk)})

    def _batch_write(self, requests: dict[int, dict[str, Any]]) -> dict[int, tuple[str, str]]:
        """BatchWriteItem with its unprocessed items retried (``retry.STATE_CALLS``); those never written, with why."""
        pending = dict(requests)
        by_key = {json.dumps(r, sort_keys=True, default=str): i for i, r in requests.items()}
        try:
            for _ in STATE_CALLS.attempts_with_pauses(self._sleep):
                response = self._dynamodb.batch_write_item(RequestItems={self.table: list(pending.values())})
                left = (response.get("UnprocessedItems") or {}).get(self.table) or []
                pending = {by_key[json.dumps(r, sort_keys=True, default=str)]: r for r in left}
                if not pending:
                    return {}
        except Exception as error:
            return {i: (error_code(error), f"the job record was not written: {error}") for i in pending}
        return dict.fromkeys(pending, ("ProvisionedThroughputExceededException",
                                       "the job record was not written: DynamoDB left it unprocessed after every retry"))

    def status(self, job_id: str) -> JobStatus:
        """The job's JobStatus; JobNotFoundError when there is no record (never tracked, or past its retention)."""
        jobs.checked_job_id(job_id)
        item = self._dynamodb.get_item(TableName=self.table, Key=jobs.job_key(job_id), ConsistentRead=True).get("Item")
        if not item:
            raise JobNotFoundError(f"no job {job_id} in state table {self.table}: it was never sent with track=True, or "
                                   f"its record is older than its retention (the job_retention setting)")
        status = JobStatus.from_item(item, int(self._clock() * 1000))
        if status.result_object and self._s3 is not None:
            status = self._with_kept_result(status)
        return status

    def _with_kept_result(self, status: JobStatus) -> JobStatus:
        """The status with its result read from the payload bucket; the object gone, its result_dropped says so.

        Only ``results/<job id>.json`` of this Client's payload bucket is read, whatever the record names: a record
        any producer may write must not make an operator's credentials fetch another object.
        """
        import dataclasses

        where = status.result_object or {}
        key = f"{contract.JOB_RESULT_KEY_PREFIX}{status.job_id}.json"
        if not self._bucket or where.get("bucket") != self._bucket or where.get("key") != key:
            reason = (f"the record names s3://{where.get('bucket')}/{where.get('key')}, not {key} in the payload bucket "
                      f"({self._bucket or 'none is configured'}): not read")
            return dataclasses.replace(status, result_dropped={"bytes": where.get("bytes"), "reason": reason})
        try:
            body = self._s3().get_object(Bucket=self._bucket, Key=key)["Body"].read()  # type: ignore[misc]
            return dataclasses.replace(status, result=json.loads(body))
        except Exception as error:
            reason = f"the result kept at s3://{where.get('bucket')}/{where.get('key')} could not be read ({error_code(error)})"
            return dataclasses.replace(status, result_dropped={"bytes": where.get("bytes"), "reason": reason})

    def wait(self, job_id: str, timeout: float, poll_seconds: float) -> Any:
        """Poll until a final state: the result when succeeded; JobFailedError, JobCancelledError, JobWaitTimeout, or
        JobResultUnavailableError for a success whose result was not kept."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise MessageError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        if isinstance(poll_seconds, bool) or not isinstance(poll_seconds, (int, float)) or not poll_seconds > 0:
            raise MessageError(f"poll_seconds must be a number of seconds > 0, got {poll_seconds!r}")
        deadline = self._clock() + timeout
        pause = min(FIRST_POLL_SECONDS, poll_seconds)
        while True:
            status = self.status(job_id)
            if status.state == contract.JOB_SUCCEEDED:
                if status.result_dropped:
                    reason = status.result_dropped.get("reason")
                    raise JobResultUnavailableError(f"job {job_id} ({status.path}) succeeded, but its result is not "
                                                    f"available: {reason}", reason, status)
                return status.result
            if status.state == contract.JOB_DEAD_LETTERED:
                raise JobFailedError(f"job {job_id} ({status.path}) was dead-lettered: {status.reason}", status.reason, status)
            if status.state == contract.JOB_CANCELLED:
                raise JobCancelledError(f"job {job_id} ({status.path}) was cancelled", status)
            left = deadline - self._clock()
            if left <= 0:
                raise JobWaitTimeout(f"job {job_id} ({status.path}) is still {status.state} after {timeout} s", status)
            self._sleep(min(pause, left))
            pause = min(pause * POLL_GROWTH, poll_seconds)

    def cancelled(self, job_id: str) -> bool:
        """Mark a delayed job cancelled (its message was cancelled); False when its record is not delayed."""
        now_ms = int(self._clock() * 1000)
        transition = jobs.Transition(job_id, contract.JOB_CANCELLED, now_ms, self._retention, only_from=contract.JOB_DELAYED)
        return jobs.apply(self._dynamodb, self.table, transition)

    def rescheduled(self, job_id: str, due_ms: int) -> bool:
        """Move a delayed job's due time (its message was rescheduled), kept for the retention after it; False when
        its record is not delayed."""
        now_ms = int(self._clock() * 1000)
        transition = jobs.Transition(job_id, contract.JOB_DELAYED, now_ms, self._retention, fields={"due_at": due_ms},
                                     details={"due_at": due_ms}, only_from=contract.JOB_DELAYED, expires_from_ms=due_ms)
        return jobs.apply(self._dynamodb, self.table, transition)
