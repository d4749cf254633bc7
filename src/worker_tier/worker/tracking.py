"""The worker's side of tracked jobs (docs/jobs.md): running, succeeded, retrying and dead-lettered, written to the job's
record for messages that carry ``contract.JOB_ATTRIBUTE`` only.

The worker calls in here only for such a message (one dict lookup tells it), so an untracked message costs no call
and no import: this module is imported with the first tracked message. Where each change is written:

- running: innermost, just before the task's handler (or the app's delivery), so a message a flow limit holds back or
  an idempotent duplicate that is skipped writes nothing;
- succeeded: once the task returned (its return value is the result: JSON, capped by ``job_result_max_bytes``; a larger
  one goes to the payload bucket under ``results/``, else it is recorded as dropped with its size; never a failure);
- retrying, rescheduled (read as retrying, with its next try) and dead-lettered (with the reason): where ``fates``
  decides them (``Fates._emit``).

A write that fails is logged and the message's fate stands: tracking never fails nor retries a task.
"""

from __future__ import annotations

import json
import os
import socket
from typing import TYPE_CHECKING, Any, Callable, Mapping

from worker_tier.core import contract, jobs
from worker_tier.core.message import safe_repr
from worker_tier.core.observability import logger

if TYPE_CHECKING:
    from worker_tier.core.task import Task
    from worker_tier.worker.fates import Fates, _Invocation

# A task's return value and whether its handler ran here, kept on its Task (its __dict__) until its fate is written.
RESULT_KEY = "_worker_tier_job_result"
RAN_KEY = "_worker_tier_job_ran"
_FATE_STATES = {"retrying": contract.JOB_RETRYING, "rescheduled": contract.JOB_RETRYING,
                "dead_lettered": contract.JOB_DEAD_LETTERED}


def job_of(task: Task) -> str | None:
    """The job id a message carries, or None (untracked, or not a job id)."""
    attribute = (task.record.get("messageAttributes") or {}).get(contract.JOB_ATTRIBUTE)
    value = attribute.get("stringValue") if isinstance(attribute, Mapping) else None
    return value if isinstance(value, str) and jobs.JOB_ID_PATTERN.match(value) else None


class JobTracker:
    """Writes a worker's job changes to its state table, on its clock and settings."""

    def __init__(self, worker: Fates) -> None:
        self._worker = worker

    def run(self, invocation: _Invocation, task: Task, handler: Callable[[Task], Any]) -> None:
        """Record running, run ``handler`` with the job as the parent of tracked sends from it, keep its return value."""
        from worker_tier.producer.jobs import current_job

        job_id = self.running(invocation, task)
        token = current_job.set(job_id)
        try:
            task.__dict__[RESULT_KEY] = handler(task)
        finally:
            current_job.reset(token)

    def running(self, invocation: _Invocation, task: Task) -> str | None:
        """Record that the message's task starts here, with the worker; the job id."""
        job_id = job_of(task)
        if job_id is None:
            return None
        task.__dict__[RAN_KEY] = True
        self._write(jobs.Transition(job_id, contract.JOB_RUNNING, self._now_ms(), self._retention(),
                                    fields={"attempt": task.receive_count, "worker": _worker_of(invocation),
                                            "next_try_at": None},
                                    details={"attempt": task.receive_count, "message_id": task.message_id}))
        return job_id

    def succeeded(self, task: Task) -> None:
        """Record the result of a task that ran here (a skipped duplicate, or a forward, writes nothing)."""
        job_id = job_of(task)
        if job_id is None or not task.__dict__.get(RAN_KEY):
            return
        fields: dict[str, Any] = {"result": None, "result_object": None, "result_dropped": None, "next_try_at": None}
        fields.update(self._kept_result(job_id, task.__dict__.get(RESULT_KEY)))
        kept: dict[str, Any] = fields.get("result_object") or fields.get("result_dropped") or {}
        details = {"result_bytes": kept.get("bytes")}
        self._write(jobs.Transition(job_id, contract.JOB_SUCCEEDED, self._now_ms(), self._retention(), fields=fields,
                                    details=details if details["result_bytes"] is not None else {}))

    def fate(self, task: Task, status: str, detail: str, visibility: int | None) -> None:
        """Record a retry (its attempt and next try) or a dead-letter (its reason)."""
        job_id, state = job_of(task), _FATE_STATES.get(status)
        if job_id is None or state is None:
            return
        now_ms = self._now_ms()
        if state == contract.JOB_DEAD_LETTERED:
            reason = detail[:jobs.REASON_MAX_CHARS]
            fields: dict[str, Any] = {"reason": reason, "attempt": task.receive_count, "next_try_at": None}
            details: dict[str, Any] = {"reason": reason, "attempt": task.receive_count}
        else:
            next_try = now_ms + (visibility or 0) * 1000
            fields = {"attempt": task.receive_count, "next_try_at": next_try}
            details = {"attempt": task.receive_count, "next_try_at": next_try, "error": detail}
        self._write(jobs.Transition(job_id, state, now_ms, self._retention(), fields=fields, details=details,
                                    expires_from_ms=fields.get("next_try_at")))

    def _kept_result(self, job_id: str, value: Any) -> dict[str, Any]:
        """The result's fields: in the record, in the payload bucket, or dropped with its size and why."""
        try:
            text = json.dumps(value, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError) as error:
            return {"result_dropped": {"bytes": None, "reason": f"the result is not JSON ({type(error).__name__}: "
                                                                 f"{str(error)[:200]})"}}
        size, limit = len(text.encode("utf-8")), self._worker.settings.job_result_max_bytes
        if size <= limit:
            return {"result": text}
        store = getattr(self._worker, "payloads", None)
        if store is None:
            return {"result_dropped": {"bytes": size, "reason": f"{size} bytes is over job_result_max_bytes ({limit}) "
                                                                "and there is no payload bucket (large_payloads) to keep it"}}
        key = f"{contract.JOB_RESULT_KEY_PREFIX}{job_id}.json"
        try:
            store.put_at(key, text)
        except Exception as error:
            return {"result_dropped": {"bytes": size, "reason": f"the payload bucket did not take it ({safe_repr(error)[:200]})"}}
        return {"result_object": {"bucket": store.bucket, "key": key, "bytes": size}}

    def _write(self, transition: jobs.Transition) -> None:
        table = getattr(self._worker, "_state_table", None)
        if not table:
            logger.warning("a tracked message's job cannot be recorded: this worker has no state table",
                           extra={"job_id": transition.job_id})
            return
        try:
            if not jobs.apply(self._worker._dynamodb.get(), table, transition):
                logger.info("job change not written: its record is gone, final, or has a newer change",
                            extra={"job_id": transition.job_id, "job_state": transition.state})
        except Exception as error:  # the fate stands: tracking never fails a task
            logger.warning("job change could not be written", extra={"job_id": transition.job_id,
                                                                     "job_state": transition.state, "error": safe_repr(error)})

    def _now_ms(self) -> int:
        return int(self._worker._clock() * 1000)

    def _retention(self) -> int:
        return int(self._worker.settings.job_retention)


def _worker_of(invocation: _Invocation) -> dict[str, Any]:
    """Where the task runs: the Lambda function, its log stream and request; or the container's host and process."""
    context = invocation.context
    name = getattr(context, "function_name", None)
    if name is not None:
        return {"function": name, "log_stream": getattr(context, "log_stream_name", None),
                "request_id": getattr(context, "aws_request_id", None)}
    return {"host": socket.gethostname(), "pid": os.getpid()}
