"""Batched deletes of succeeded messages, for the container worker (``worker_tier.container.consumer``).

A succeeded message is deleted in a DeleteMessageBatch shared with other messages, and the
heartbeat holds it until SQS answers, so no delete ever outlives its message's visibility.
On a standard queue its thread hands the delete over and takes new work at once
(``BackgroundDeletions``): one sender thread sends a batch when 10 wait or the first has
waited ``BACKGROUND_DELETE_LINGER_SECONDS``, so batches fill across receives, and at most
``MAX_PENDING_DELETES`` wait (two batches: the heartbeat's extensions stay a few calls per
beat) before task threads stop to let them out. On a FIFO queue the next message of a group
must not start before the previous one is gone, so its thread waits for its own entry's
answer (``Deletions``): a batch goes out as soon as every running task waits on a delete, or
10 wait, or the first has waited ``DELETE_LINGER_SECONDS``. A delete that fails is logged:
the message returns and runs again. What must follow a confirmed delete (an offloaded message's object) is the
caller's on a FIFO queue (``Deletions.delete`` answers True), and ``hand_off``'s ``then`` on a standard one.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

from worker_tier.core import limits
from worker_tier.core.aws import error_code
from worker_tier.core.errors import WorkerTierError
from worker_tier.core.observability import logger

# A succeeded message's delete waits at most this long for others to share its DeleteMessageBatch (FIFO: its
# thread waits with it; standard: the heartbeat holds it meanwhile, and its thread has moved on).
DELETE_LINGER_SECONDS = 0.05
BACKGROUND_DELETE_LINGER_SECONDS = 0.25
# Deletes that may wait (one batch sending, one filling) before task threads stop to let them out: behind a slow or
# hanging DeleteMessageBatch the heartbeat holds at most this many succeeded messages beside the running ones.
MAX_PENDING_DELETES = 2 * limits.SQS_MAX_BATCH_ENTRIES


@dataclass
class _Deletion:
    """One succeeded message waiting for its delete; ``result`` fails with ``MessageNotDeletedError``."""

    message: dict[str, Any]
    added_at: float
    result: Future[None]
    then: Callable[[], Any] | None = None  # run once SQS confirmed the delete (never when it failed)


class MessageNotDeletedError(WorkerTierError):
    """DeleteMessageBatch did not delete a succeeded message; it returns and runs again."""


class Deletions:
    """Deletes succeeded messages in DeleteMessageBatch calls of up to 10, sent by the task threads that wait on them."""

    def __init__(
        self, sqs: Any, queue_url: str, busy: Callable[[], int], linger_seconds: float, clock: Callable[[], float]
    ) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._busy = busy
        self._linger_seconds = linger_seconds
        self._clock = clock
        self._unsent: list[_Deletion] = []
        self._waiting = 0
        self._changed = threading.Condition()

    def delete(self, message: dict[str, Any]) -> bool:
        """Delete a succeeded message in a shared batch; True once SQS confirms, False (logged) if it did not."""
        entry = _Deletion(message, self._clock(), Future())
        with self._changed:
            self._unsent.append(entry)
            self._waiting += 1
            self._changed.notify_all()
        try:
            while batch := self._next_batch(entry):
                self._send(batch)
        finally:
            with self._changed:
                self._waiting -= 1
        try:
            entry.result.result()
        except MessageNotDeletedError:
            return False
        return True

    def _next_batch(self, entry: _Deletion) -> list[_Deletion]:
        """Wait until ``entry`` has its answer (empty list) or a batch is due, for this thread to send."""
        with self._changed:
            while not entry.result.done():
                if entry not in self._unsent:  # in another thread's batch: wait for its answer
                    self._changed.wait()
                    continue
                left = self._due_in()
                if left <= 0:
                    batch = self._unsent[: limits.SQS_MAX_BATCH_ENTRIES]
                    del self._unsent[: limits.SQS_MAX_BATCH_ENTRIES]
                    return batch
                self._changed.wait(left)
            return []

    def _due_in(self) -> float:
        """Seconds until the unsent deletes are due: now if 10 wait, or every busy thread waits on a delete."""
        if len(self._unsent) >= limits.SQS_MAX_BATCH_ENTRIES or self._waiting >= self._busy():
            return 0.0
        return self._unsent[0].added_at + self._linger_seconds - self._clock()

    def _send(self, batch: list[_Deletion]) -> None:
        """One DeleteMessageBatch; every entry gets its answer, whatever is raised."""
        _send_deletes(self._sqs, self._queue_url, batch, self._changed)


def _send_deletes(sqs: Any, queue_url: str, batch: list[_Deletion], changed: threading.Condition) -> None:
    """One DeleteMessageBatch; every entry gets its answer (and ``changed`` is notified), whatever is raised."""
    entries = [{"Id": str(i), "ReceiptHandle": d.message["ReceiptHandle"]} for i, d in enumerate(batch)]
    failed = {e["Id"]: "NotSent" for e in entries}
    try:
        response = sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        failed = {str(f["Id"]): str(f.get("Code", "")) for f in response.get("Failed") or []}
    except Exception as error:  # any AWS or network error, or an answer we cannot read: none counts as deleted
        failed = {e["Id"]: error_code(error) or type(error).__name__ for e in entries}
    finally:
        _answer_deletes(batch, failed, changed)


def _answer_deletes(batch: list[_Deletion], failed: dict[str, str], changed: threading.Condition) -> None:
    """Resolve each entry's result and wake the threads waiting on them; then log the failures."""
    with changed:
        for i, deletion in enumerate(batch):
            code = failed.get(str(i))
            if code is None:
                deletion.result.set_result(None)
            else:
                deletion.result.set_exception(MessageNotDeletedError(f"DeleteMessageBatch failed with {code}"))
        changed.notify_all()
    if failed:
        logger.error(
            "succeeded messages were not deleted: they will run again when they return",
            extra={
                "message_ids": [d.message["MessageId"] for i, d in enumerate(batch) if str(i) in failed],
                "codes": sorted(set(failed.values())),
            },
        )


class BackgroundDeletions:
    """Deletes a standard queue's succeeded messages in DeleteMessageBatch calls of up to 10, from one sender thread.

    ``settled(message_id, receipt_handle)`` is called once each delete has its answer, deleted or not (the
    heartbeat lets that receive go: deleted, or visible again when its last extension lapses, to run again).
    """

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        settled: Callable[[str, str], None],
        linger_seconds: float,
        clock: Callable[[], float],
        max_pending: int = MAX_PENDING_DELETES,
    ) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._settled = settled
        self._linger_seconds = linger_seconds
        self._max_pending = max(limits.SQS_MAX_BATCH_ENTRIES, max_pending)
        self._hurry = False
        self._clock = clock
        self._unsent: list[_Deletion] = []
        self._sending: list[_Deletion] = []
        self._closing = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def hand_off(self, message: dict[str, Any], then: Callable[[], Any] | None = None) -> None:
        """Queue a succeeded message's delete; waits only while ``max_pending`` deletes wait already.

        ``then`` runs on the sender thread once SQS confirmed this delete (not when it failed), before ``close``
        counts the delete done: a succeeded offloaded message's object is deleted after its message, once.
        """
        with self._changed:
            while len(self._unsent) + len(self._sending) >= self._max_pending and not self._closing:
                self._changed.wait()
            self._unsent.append(_Deletion(message, self._clock(), Future(), then))
            if self._thread is None or not self._thread.is_alive():
                thread = threading.Thread(target=self._run, name="worker-tier-deletes", daemon=True)
                thread.start()
                self._thread = thread
            self._changed.notify_all()

    def pending(self) -> int:
        """Deletes handed over and not yet answered."""
        with self._changed:
            return len(self._unsent) + len(self._sending)

    def hurry(self) -> None:
        """From now on, send each delete without lingering (the stop)."""
        with self._changed:
            self._hurry = True
            self._changed.notify_all()

    def close(self, timeout: float) -> list[dict[str, Any]]:
        """Send every waiting delete at once; return the messages whose delete is still unanswered after ``timeout``."""
        with self._changed:
            self._closing = self._hurry = True
            self._changed.notify_all()
            deadline = self._clock() + max(0.0, timeout)
            while (self._unsent or self._sending) and (left := deadline - self._clock()) > 0:
                self._changed.wait(left)
            return [d.message for d in self._sending + self._unsent if not d.result.done()]

    def _run(self) -> None:
        while batch := self._next_batch():
            try:
                _send_deletes(self._sqs, self._queue_url, batch, self._changed)
            except BaseException:  # a bug, not an SQS error (those are answers): logged; the sender goes on
                logger.exception("the delete sender failed on a batch: its messages return and run again")
            finally:
                self._settle(batch)

    def _settle(self, batch: list[_Deletion]) -> None:
        """Let the heartbeat go of each answered receive, run the ``then`` of each deleted one; the batch is then
        no longer pending."""
        try:
            try:
                for deletion in batch:
                    self._settled(deletion.message["MessageId"], deletion.message["ReceiptHandle"])
            except Exception:  # the heartbeat's own failure: logged; the rest stay held until the exit
                logger.exception("the heartbeat could not let go of deleted messages")
            for deletion in batch:
                if deletion.then is not None and deletion.result.done() and deletion.result.exception() is None:
                    _then(deletion)
        finally:
            with self._changed:
                self._sending = []
                self._changed.notify_all()

    def _next_batch(self) -> list[_Deletion]:
        """Wait until 10 deletes wait, the first has lingered long enough, or closing; [] once closed and empty."""
        with self._changed:
            while True:
                if self._unsent:
                    left = self._unsent[0].added_at + self._linger_seconds - self._clock()
                    if self._hurry or len(self._unsent) >= limits.SQS_MAX_BATCH_ENTRIES or left <= 0:
                        self._sending = self._unsent[: limits.SQS_MAX_BATCH_ENTRIES]
                        del self._unsent[: limits.SQS_MAX_BATCH_ENTRIES]
                        self._changed.notify_all()
                        return self._sending
                    self._changed.wait(left)
                elif self._closing:
                    self._thread = None
                    return []
                else:
                    self._changed.wait()


def _then(deletion: _Deletion) -> None:
    """Run what follows a confirmed delete; its failure is logged (an offloaded message's object is then kept)."""
    try:
        deletion.then()  # type: ignore[misc]
    except Exception:
        logger.exception("what follows a confirmed delete failed", extra={"message_id": deletion.message["MessageId"]})
