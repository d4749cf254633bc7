"""Batched visibility changes: every change a batch needs, in ChangeMessageVisibilityBatch calls of 10."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from worker_tier import limits

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VisibilityChange:
    """Set one received message's visibility timeout."""

    message_id: str
    receipt_handle: str
    timeout_seconds: int


def change_visibility(sqs: Any, queue_url: str, changes: list[VisibilityChange]) -> list[str]:
    """Apply changes in batches of 10; return the message ids SQS did not change.

    A change that fails is not fatal: that message simply becomes visible again
    when its current visibility timeout ends, so it is logged, not raised.
    """
    unchanged: list[str] = []
    for start in range(0, len(changes), limits.SQS_MAX_BATCH_ENTRIES):
        chunk = changes[start : start + limits.SQS_MAX_BATCH_ENTRIES]
        unchanged.extend(_change_chunk(sqs, queue_url, chunk))
    return unchanged


def _change_chunk(sqs: Any, queue_url: str, chunk: list[VisibilityChange]) -> list[str]:
    """One ChangeMessageVisibilityBatch call; failed entries and call errors are logged and returned."""
    entries = [
        {"Id": str(i), "ReceiptHandle": c.receipt_handle, "VisibilityTimeout": c.timeout_seconds}
        for i, c in enumerate(chunk)
    ]
    try:
        response = sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
    except Exception as error:  # any AWS or network error: the messages keep their current timeout
        _log.warning("ChangeMessageVisibilityBatch failed for %d messages: %s", len(chunk), error)
        return [c.message_id for c in chunk]
    failed = response.get("Failed") or []
    for entry in failed:
        change = chunk[int(entry["Id"])]
        _log.warning(
            "visibility of message %s not changed to %d s (%s: %s); it retries after its current timeout",
            change.message_id, change.timeout_seconds, entry.get("Code"), entry.get("Message"),
        )
    return [chunk[int(entry["Id"])].message_id for entry in failed]
