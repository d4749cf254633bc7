"""The container worker: a long-running SQS consumer for tasks longer than Lambda's 15 minutes.

It runs the same registered tasks through the same ``Worker`` core as the Lambda
handler (routing, Task, backoff, RetryLater, NonRetryableError, DLQ with reason,
idempotency): each received message becomes a one-record Lambda-shaped event.
Heartbeats are always on. On SIGTERM it stops receiving, releases (visibility 0) what
it had not started, and lets running tasks finish within a grace period. A message
whose task is still running is never released: two workers would run it at once.
Instead the heartbeat keeps it hidden and the process exits, so the task dies with
it; the message returns when its last extension lapses (interval + margin). On ECS
it keeps task scale-in protection on while it holds work.

It receives no more messages than it has free threads, so none waits hidden behind a
long task, and the Worker counts SQS's 12 hours from each message's real receive.
Its metrics are printed (EMF) after each message and before it exits.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable

from worker_tier import limits, observability
from worker_tier.heartbeat import Heartbeat
from worker_tier.message import lambda_record, safe_repr
from worker_tier.observability import logger
from worker_tier.settings import DEFAULT_CONTAINER_CONCURRENCY, DEFAULT_CONTAINER_GRACE_SECONDS
from worker_tier.visibility import VisibilityChange, change_visibility
from worker_tier.worker import Worker

POLL_WAIT_SECONDS = 20
PROTECTION_MINUTES = 60
# EX_TEMPFAIL (sysexits.h): tasks were cut short by the shutdown; their messages return for a retry.
EXIT_CODE_TASKS_ABANDONED = 75


def exit_now(code: int) -> None:
    """Flush the logs and end the process now, non-daemon task threads and all (``sys.exit`` would wait for them)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


class TaskProtection:
    """ECS task scale-in protection through the agent's endpoint; a no-op outside ECS.

    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection-endpoint.html
    """

    def __init__(self, agent_uri: str | None = None, expires_minutes: int = PROTECTION_MINUTES) -> None:
        self.agent_uri = agent_uri if agent_uri is not None else os.environ.get("ECS_AGENT_URI")
        self.expires_minutes = expires_minutes
        self.enabled = False
        self._set_at = 0.0

    def hold(self, busy: bool) -> None:
        """Protect while busy (renewed at half its expiry), unprotect when idle."""
        if not self.agent_uri:
            return
        renew = busy and time.monotonic() - self._set_at > self.expires_minutes * 30
        if busy != self.enabled or renew:
            self._put(busy)

    def _put(self, enabled: bool) -> None:
        body: dict[str, Any] = {"ProtectionEnabled": enabled}
        if enabled:
            body["ExpiresInMinutes"] = self.expires_minutes
        request = urllib.request.Request(
            f"{self.agent_uri}/task-protection/v1/state",
            data=json.dumps(body).encode(),
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        try:
            urllib.request.urlopen(request, timeout=5).close()
        except OSError as error:  # protection is best effort: work goes on, the failure is logged
            logger.warning("task protection update failed", extra={"enabled": enabled, "error": repr(error)})
            return
        self.enabled, self._set_at = enabled, time.monotonic()


class Consumer:
    """Long-polls a queue and runs each message through ``Worker`` on a pool of threads."""

    def __init__(
        self,
        worker: Worker,
        sqs: Any,
        queue_url: str,
        *,
        concurrency: int = DEFAULT_CONTAINER_CONCURRENCY,
        grace_seconds: float = DEFAULT_CONTAINER_GRACE_SECONDS,
        poll_wait_seconds: int = POLL_WAIT_SECONDS,
        heartbeat_interval: float | None = None,
        heartbeat: Heartbeat | None = None,
        protection: TaskProtection | None = None,
        exit_process: Callable[[int], None] = exit_now,
    ) -> None:
        self.worker = worker
        self.sqs = sqs
        self.queue_url = queue_url
        self.concurrency = concurrency
        self.grace_seconds = grace_seconds
        self.poll_wait_seconds = poll_wait_seconds
        interval = heartbeat_interval if heartbeat_interval is not None else worker.settings.heartbeat_interval
        self.heartbeat = heartbeat if heartbeat is not None else Heartbeat(sqs, queue_url, interval_seconds=interval)
        self.protection = protection or TaskProtection()
        self._exit_process = exit_process
        self.stopping = threading.Event()
        self._queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self._region = self._queue_arn.split(":")[3]
        self._pending: dict[Future, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def run(self) -> None:
        """Consume until ``stopping`` is set, then drain within the grace period.

        If tasks still run after it, their messages stay held and the process exits
        (``exit_process``) with ``EXIT_CODE_TASKS_ABANDONED``.
        """
        self.heartbeat.start()
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="worker-tier-task")
        try:
            while not self.stopping.is_set():
                if self._in_flight() >= self.concurrency:
                    wait(list(self._pending), timeout=1, return_when="FIRST_COMPLETED")
                    continue
                self._receive_into(pool)
                self.protection.hold(self._in_flight() > 0)
        except Exception:  # logged here: an exit for abandoned tasks below would hide it
            logger.exception("container worker stopped consuming on an error")
            raise
        finally:
            observability.flush()
            still_running = self._drain(pool)
            if still_running:
                self._abandon(still_running)
            else:
                self.heartbeat.stop()
                self.protection.hold(False)

    def _receive_into(self, pool: ThreadPoolExecutor) -> None:
        """One long poll for as many messages as there are free threads; each is held by the heartbeat from its arrival."""
        free = min(self.concurrency - self._in_flight(), limits.SQS_MAX_BATCH_ENTRIES)
        messages = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=free,
            WaitTimeSeconds=self.poll_wait_seconds,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages") or []
        for message in messages:
            self.heartbeat.hold(message["MessageId"], message["ReceiptHandle"])
            future = pool.submit(self._process, message)
            with self._lock:
                self._pending[future] = message
            future.add_done_callback(self._done)

    def _process(self, message: dict[str, Any]) -> None:
        """Run one message through the shared Worker core; delete it unless it was reported failed.

        Whatever happens, the heartbeat stops holding it and the metrics are printed.
        """
        try:
            record = lambda_record(message, self._queue_arn, self._region)
            response = self.worker.handle({"Records": [record]}, None, heartbeat=self.heartbeat)
        finally:
            self.heartbeat.release(message["MessageId"])
            observability.flush()
        if not response["batchItemFailures"]:
            self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])

    def _done(self, future: Future) -> None:
        with self._lock:
            self._pending.pop(future, None)
        if not future.cancelled() and future.exception() is not None:
            logger.error("message processing crashed", extra={"error": safe_repr(future.exception())})

    def _in_flight(self) -> int:
        with self._lock:
            return len(self._pending)

    def _drain(self, pool: ThreadPoolExecutor) -> list[dict[str, Any]]:
        """Release what never started, give running work the grace period; return the messages still running."""
        with self._lock:
            pending = dict(self._pending)
        unstarted = [message for future, message in pending.items() if future.cancel()]
        running = [future for future in pending if not future.cancelled()]
        self._release(unstarted)
        _, still_running = wait(running, timeout=self.grace_seconds)
        pool.shutdown(wait=False, cancel_futures=True)
        return [pending[future] for future in still_running]

    def _abandon(self, messages: list[dict[str, Any]]) -> None:
        """Exit with the heartbeat still holding ``messages``: they return once its last extension lapses."""
        logger.warning(
            "tasks still running after the grace period: exiting without releasing their messages",
            extra={
                "count": len(messages),
                "message_ids": [m["MessageId"] for m in messages],
                "grace_seconds": self.grace_seconds,
                "visible_again_within_seconds": self.heartbeat.extension_seconds,
            },
        )
        self._exit_process(EXIT_CODE_TASKS_ABANDONED)

    def _release(self, messages: list[dict[str, Any]]) -> None:
        """Visibility 0: another worker takes them at once."""
        for message in messages:
            self.heartbeat.release(message["MessageId"])
        if messages:
            logger.info("released messages on shutdown", extra={"count": len(messages)})
            change_visibility(
                self.sqs, self.queue_url, [VisibilityChange(m["MessageId"], m["ReceiptHandle"], 0) for m in messages]
            )
