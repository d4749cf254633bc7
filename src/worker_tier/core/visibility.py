"""Batched visibility changes: every change a batch needs, in ChangeMessageVisibilityBatch calls of 10."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from worker_tier.core import limits
from worker_tier.core.aws import error_code
from worker_tier.core.retry import chunks

_log = logging.getLogger(__name__)

# Entry codes meaning the receipt handle no longer holds the message: it was deleted, or its
# visibility ran out and another receive took it (so only the new receipt handle works).
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html#API_ChangeMessageVisibility_Errors
LOST_CODES = ("ReceiptHandleIsInvalid", "MessageNotInflight")
# SQS also answers InvalidParameterValue "... for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
_LOST_PARAMETER_WORDS = ("receipthandle", "receipt handle")


@dataclass(frozen=True)
class VisibilityChange:
    """Set one received message's visibility timeout."""

    message_id: str
    receipt_handle: str
    timeout_seconds: int


@dataclass(frozen=True)
class VisibilityRefusal:
    """A visibility change SQS did not make: the message keeps its current timeout.

    ``sender_fault`` is False for a call that failed as a whole (network, throttling):
    those are transient and worth trying again.
    """

    change: VisibilityChange
    code: str
    message: str = ""
    sender_fault: bool = True

    @property
    def message_id(self) -> str:
        """The id of the message whose visibility was not changed."""
        return self.change.message_id

    def lost(self) -> bool:
        """True when the message is gone or no longer ours (deleted, or received again elsewhere)."""
        code = self.code.rsplit(".", 1)[-1]  # the query protocol spells it AWS.SimpleQueueService.MessageNotInflight
        if code in LOST_CODES:
            return True
        return code == "InvalidParameterValue" and any(w in self.message.lower() for w in _LOST_PARAMETER_WORDS)


def change_visibility(sqs: Any, queue_url: str, changes: list[VisibilityChange]) -> list[VisibilityRefusal]:
    """Apply changes in batches of 10; return the changes SQS did not make, with their codes.

    A change that fails is not fatal: that message simply becomes visible again
    when its current visibility timeout ends. It is logged and returned, and the
    caller decides what it means (count it, or treat the message as lost).
    """
    refused: list[VisibilityRefusal] = []
    for chunk in chunks(changes, limits.SQS_MAX_BATCH_ENTRIES):
        refused.extend(_change_chunk(sqs, queue_url, list(chunk)))
    return refused


def _change_chunk(sqs: Any, queue_url: str, chunk: list[VisibilityChange]) -> list[VisibilityRefusal]:
    """One ChangeMessageVisibilityBatch call; failed entries and call errors are logged and returned."""
    entries = [
        {"Id": str(i), "ReceiptHandle": c.receipt_handle, "VisibilityTimeout": c.timeout_seconds}
        for i, c in enumerate(chunk)
    ]
    try:
        response = sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
    except Exception as error:  # any AWS or network error: the messages keep their current timeout
        _log.warning("ChangeMessageVisibilityBatch failed for %d messages: %s", len(chunk), error)
        return [VisibilityRefusal(c, error_code(error), str(error), sender_fault=False) for c in chunk]
    refused = []
    for entry in response.get("Failed") or []:
        change = chunk[int(entry["Id"])]
        refusal = VisibilityRefusal(change, entry.get("Code") or "", entry.get("Message") or "", bool(entry.get("SenderFault", True)))
        _log.warning(
            "visibility of message %s not changed to %d s (%s: %s); it keeps its current timeout",
            change.message_id, change.timeout_seconds, refusal.code, refusal.message,
        )
        refused.append(refusal)
    return refused
