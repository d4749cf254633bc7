"""Dead-lettering by the worker: the original message plus the reason it died."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from worker_tier import limits, message


class DeadLetterError(Exception):
    """The dead-letter queue did not accept a message; it must not be deleted from the source queue."""


def send_to_dead_letter_queue(
    sqs: Any,
    queue_url: str,
    record: Mapping[str, Any],
    error: BaseException,
    *,
    attempts: int,
    path: str,
    now: datetime,
) -> str:
    """Send a Lambda SQS record to the DLQ with ``worker_tier.failure``; return the new message id.

    Raises DeadLetterError when SQS refuses it, so the caller keeps the source copy.
    """
    body = record.get("body") or ""
    original = message.sqs_attributes(record.get("messageAttributes") or {})
    reason = message.failure_reason(error, attempts=attempts, path=path, failed_at=now)
    attributes = message.dead_letter_attributes(original, reason)
    if message.message_bytes(body, attributes) > limits.SQS_MAX_MESSAGE_BYTES:
        # Keep the body whole: shed the non-routing attributes, and name them in the reason.
        routing_only = {k: v for k, v in original.items() if k in message.ROUTING_ATTRIBUTES}
        shed = [k for k in original if k not in routing_only]
        attributes = message.dead_letter_attributes(routing_only, {**reason, "dropped_attributes": shed})
    request: dict[str, Any] = {"QueueUrl": queue_url, "MessageBody": body, "MessageAttributes": attributes}
    group_id = (record.get("attributes") or {}).get("MessageGroupId")
    if group_id is not None:
        request["MessageGroupId"] = group_id
        request["MessageDeduplicationId"] = record["messageId"]
    try:
        return sqs.send_message(**request)["MessageId"]
    except Exception as failure:  # any AWS or network error: keep the source copy
        raise DeadLetterError(f"dead-letter queue refused message {record.get('messageId')}: {failure}") from failure
