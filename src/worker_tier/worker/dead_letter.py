"""Dead-lettering by the worker: the original message plus the reason it died.

The body is always kept whole. The DLQ's size limit is its own ``MaximumMessageSize``
(``DeadLetterQueueSize``: read once per process with GetQueueAttributes; an imported EB
DLQ takes 256 KiB, a new queue 1 MiB). When body, attributes and reason exceed it, the
worker gives up, in order: the non-routing attributes (named in
the reason's ``dropped_attributes``), then the length of the reason's
``error_message``. If even a minimal reason cannot fit, the reason goes to the
DLQ as a small message of its own (a JSON body with the source message id, the
MD5 of the original's body, the reason and ``REASON_RECORD_NOTE``, plus the usual
``worker_tier.failure``) and the original follows with its routing attributes only
(the others named in the record's ``dropped_attributes``), without a reason
attribute: the reason always goes first, so the original never arrives alone.

A body too large for the DLQ even alone (a work queue's MaximumMessageSize above
the DLQ's) cannot be copied: each receive that would dead-letter it fails with a
one-line error naming both sizes (logged, ``DeadLetterFailed`` counted) and the
message backs off in the work queue until SQS's redrive policy moves it to the DLQ
as it came. Its reason record is written once, on its last receive before that
move (receive count ``Settings.redrive_max_receive_count``): no orphan record per
receive. Give the DLQ the work queue's MaximumMessageSize to avoid this. (When the
DLQ's size could not be read, the copy is tried anyway: the DLQ may be larger.) The
original's DLQ copy has a new message id and no room for anything more, so a reader
joins the two by ``body_md5`` (``reason_record``): the MD5 SQS reports as
``MD5OfBody``, computed here from the body's UTF-8.

A reason record is never work: a redrive that moves everything (StartMessageMoveTask,
the console's "Start DLQ redrive") carries it into the work queue, where the worker
recognises it (``reason_record``) and drops it unrun.

Delivery of a reason record is at-least-once: when the original's send fails after
its reason record went out, the message backs off and the next attempt sends a new
reason record (its ``attempts`` and ``failed_at`` are that attempt's). A standard DLQ
can then hold several reason records for one message; read them by
``source_message_id``. A FIFO DLQ drops the repeat within SQS's deduplication
window, as the reason record's deduplication id is stable (``<message id>-reason``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Mapping

from worker_tier.core import contract, limits, message
from worker_tier.core.aws import error_code
from worker_tier.core.envelope import Envelope, body_md5, dead_letter_attributes, message_bytes
from worker_tier.core.errors import DeadLetterError
from worker_tier.core.observability import logger

# The reason record's "note": what a reader of the DLQ finds next to it.
REASON_RECORD_NOTE = "the message was too large to carry its reason; it follows in this queue as it came, without a reason attribute"
# Suffix of the reason record's MessageDeduplicationId on a FIFO DLQ (the original's uses the source message id).
REASON_DEDUPLICATION_SUFFIX = "-reason"


# The DLQ's size limit when its MaximumMessageSize cannot be read: SQS's default until August 2025, what an EB
# queue has and below any new queue's 1 MiB. A larger DLQ then only gets a reason record more often; a smaller one
# refuses the copy, the message backs off, and the next dead-letter reads the limit again.
FALLBACK_DEAD_LETTER_QUEUE_BYTES = limits.SQS_FORMER_DEFAULT_MAXIMUM_MESSAGE_SIZE_BYTES


class DeadLetterQueueSize:
    """A DLQ's ``MaximumMessageSize``, read with GetQueueAttributes on first use and kept for the process.

    A read that fails is logged and not kept (the next dead-letter reads again); meanwhile the copy is sized
    against ``FALLBACK_DEAD_LETTER_QUEUE_BYTES``. The worker's role (and the container worker's) is granted
    ``sqs:GetQueueAttributes`` on the DLQ for it.
    """

    def __init__(self) -> None:
        self._known: dict[str, int] = {}

    def of(self, sqs: Any, queue_url: str) -> int:
        """The queue's MaximumMessageSize in bytes; ``FALLBACK_DEAD_LETTER_QUEUE_BYTES`` when it cannot be read."""
        known = self._known.get(queue_url)
        if known is not None:
            return known
        try:
            response = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["MaximumMessageSize"])
            size = int(response["Attributes"]["MaximumMessageSize"])
        except Exception as error:  # denied, throttled, a network error: size the copy for the common smallest queue
            logger.warning(
                "could not read the dead-letter queue's MaximumMessageSize: sizing the copy for "
                f"{FALLBACK_DEAD_LETTER_QUEUE_BYTES} bytes; grant sqs:GetQueueAttributes on it",
                extra={"queue": queue_url, "code": error_code(error), "error": message.safe_repr(error)},
            )
            return FALLBACK_DEAD_LETTER_QUEUE_BYTES
        self._known[queue_url] = size
        return size

    def known(self, queue_url: str) -> bool:
        """Whether the queue's MaximumMessageSize was read (``of`` gave it, not the fallback)."""
        return queue_url in self._known


def send_to_dead_letter_queue(
    sqs: Any,
    queue_url: str,
    record: Mapping[str, Any],
    error: BaseException,
    *,
    attempts: int,
    path: str,
    now: datetime,
    max_message_bytes: int = limits.SQS_MAX_MESSAGE_BYTES,
    last_receive: bool = False,
    size_known: bool = True,
) -> str:
    """Send a Lambda SQS record to the DLQ with ``worker_tier.failure``; return the new message id.

    Raises DeadLetterError when SQS refuses it, or when the body cannot fit the DLQ at all, so the caller keeps
    the source copy. ``last_receive``: the message's last receive before SQS's redrive policy moves it, the one
    receive on which the reason record of a body too large for the DLQ is written. ``size_known``: False when
    ``max_message_bytes`` is the fallback for a DLQ whose size could not be read, so a larger copy is still tried.
    """
    received, invalid = Envelope.from_record(record)
    body, original = received.body, received.attributes
    reason = message.failure_reason(error, attempts=attempts, path=path, failed_at=now)
    if invalid:
        reason["dropped_attributes"] = invalid
    attributes = fit_reason(body, original, reason, max_message_bytes)
    source = record.get("messageId")
    if attributes is not None:
        return _send(sqs, queue_url, record, Envelope(body, attributes), source)
    # No reason fits beside the body: the copy keeps only its routing attributes (named in the record's reason).
    routing_only = Envelope(body, {k: v for k, v in original.items() if k in contract.KEPT_ATTRIBUTES})
    shed = [k for k in original if k not in routing_only.attributes]
    if shed:
        reason["dropped_attributes"] = [*reason.get("dropped_attributes", []), *shed]
    reason_copy = Envelope.dead_letter(_reason_record(record, reason), {}, reason)
    reason_source = f"{source} (its reason record)"
    size = routing_only.size()
    if size > max_message_bytes and size_known:
        if last_receive:  # once: the receive after which SQS's redrive policy moves the message here as it came
            _send(sqs, queue_url, record, reason_copy, reason_source, REASON_DEDUPLICATION_SUFFIX)
        raise DeadLetterError(
            f"message {source} is {size} bytes, over the dead-letter queue's MaximumMessageSize of {max_message_bytes}: "
            "it stays in the work queue until SQS's redrive policy moves it; raise the dead-letter queue's "
            "MaximumMessageSize to the work queue's"
        )
    _send(sqs, queue_url, record, reason_copy, reason_source, REASON_DEDUPLICATION_SUFFIX)
    return _send(sqs, queue_url, record, routing_only, source)


def fit_reason(
    body: str, original: Mapping[str, Mapping[str, Any]], reason: dict[str, Any], max_message_bytes: int
) -> dict[str, dict[str, Any]] | None:
    """The DLQ copy's attributes within ``max_message_bytes``, shedding what it must; None if no reason fits."""
    attributes = dead_letter_attributes(original, reason)
    if message_bytes(body, attributes) <= max_message_bytes:
        return attributes
    # Keep the body whole: shed the non-routing attributes, and name them in the reason.
    routing_only = {k: v for k, v in original.items() if k in contract.KEPT_ATTRIBUTES}
    shed = [k for k in original if k not in routing_only]
    reason = {**reason, "dropped_attributes": [*reason.get("dropped_attributes", []), *shed]}
    attributes = dead_letter_attributes(routing_only, reason)
    if message_bytes(body, attributes) <= max_message_bytes:
        return attributes
    # Then shorten the error message to what is left beside a reason with an empty one.
    bare = dead_letter_attributes(routing_only, {**reason, "error_message": ""})
    spare = max_message_bytes - message_bytes(body, bare)
    if spare < 0:
        return None
    shortened = _longest_prefix(reason["error_message"], spare)
    return dead_letter_attributes(routing_only, {**reason, "error_message": shortened})


def _longest_prefix(text: str, spare_bytes: int) -> str:
    """The longest ``text[:n] + '...'`` whose JSON spelling (ASCII, escaped) takes at most ``spare_bytes``."""
    def spelled(candidate: str) -> int:
        return len(json.dumps(candidate)) - 2  # ASCII: characters are bytes; less the quotes

    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if spelled(text[:middle] + "...") <= spare_bytes:
            low = middle
        else:
            high = middle - 1
    return text[:low] + "..." if spelled(text[:low] + "...") <= spare_bytes else ""


def _reason_record(record: Mapping[str, Any], reason: Mapping[str, Any]) -> str:
    """The body of the small DLQ message that carries a reason its message had no room for."""
    return json.dumps(
        {"source_message_id": record.get("messageId"), "body_md5": body_md5(record.get("body") or ""),
         "reason": reason, "note": REASON_RECORD_NOTE},
        separators=(",", ":"),
    )


def reason_record(body: str, attributes: Mapping[str, Any]) -> dict[str, Any] | None:
    """The parsed reason record when a message is one (a ``worker_tier.failure`` attribute and a body of
    ``_reason_record``'s shape, its note ``REASON_RECORD_NOTE``), else None. ``attributes`` is either spelling
    (Lambda's or the SQS API's): only the name is looked at."""
    if contract.FAILURE_ATTRIBUTE not in attributes or REASON_RECORD_NOTE not in body:
        return None
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or parsed.get("note") != REASON_RECORD_NOTE or "source_message_id" not in parsed:
        return None
    return parsed


def _request(queue_url: str, record: Mapping[str, Any], envelope: Envelope, dedupe_suffix: str = "") -> dict[str, Any]:
    """A SendMessage request for the DLQ; a FIFO source keeps its message group."""
    system = record.get("attributes")
    group_id = system.get("MessageGroupId") if isinstance(system, Mapping) else None
    if group_id is None:
        return envelope.request(queue_url)
    return envelope.request(queue_url, MessageGroupId=group_id, MessageDeduplicationId=f"{record['messageId']}{dedupe_suffix}")


def _send(sqs: Any, queue_url: str, record: Mapping[str, Any], copy: Envelope, message_id: Any, dedupe_suffix: str = "") -> str:
    """One SendMessage of ``copy`` to the DLQ; DeadLetterError when SQS refuses it.

    Not through the middleware's on_send hooks: a hook that breaks or bloats the copy would keep every message
    from the DLQ, and its reason with it. Middleware hears of it in ``on_dead_letter``.
    """
    try:
        return str(sqs.send_message(**_request(queue_url, record, copy, dedupe_suffix))["MessageId"])
    except Exception as failure:  # any AWS or network error: keep the source copy
        raise DeadLetterError(f"dead-letter queue refused message {message_id}: {failure}") from failure
