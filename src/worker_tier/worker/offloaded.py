"""The worker's side of large payloads: an offloaded message's body read from S3, its object deleted after it.

A record whose ``messageAttributes`` carry ``ExtendedPayloadSize`` (or the legacy ``SQSLargePayloadSize``) holds a
pointer, not its body (``worker_tier.core.payloads``). ``read_body`` fetches the body before the Task is built, so
a task, the app adapter and HTTP forwarding all see the real one; the record itself keeps the pointer, which is what
the DLQ copy, the forward to the container queue and a retry re-sent through the delay table carry.

An object is deleted only after its message: once a batch ends, ``delete_succeeded`` deletes the succeeded offloaded
messages itself (DeleteMessageBatch on the source queue), then the objects of those SQS confirmed. A message whose
delete failed keeps its object (it will run again and needs it); a dead-lettered, retried, forwarded or rescheduled
message keeps its object too, and the bucket's lifecycle rule removes what no message points at any more.

Only a batch holding an offloaded message imports this module: the ordinary path pays two dict lookups per message
(the size attribute's two names).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from worker_tier.core import contract, limits, observability
from worker_tier.core.aws import error_code
from worker_tier.core.errors import PayloadError
from worker_tier.core.message import safe_repr
from worker_tier.core.observability import logger
from worker_tier.core.payloads import PayloadStore, Pointer, is_offloaded, pointer_of
from worker_tier.core.retry import chunks

__all__ = ["delete_succeeded", "keep_for_new_life", "read_body"]


def read_body(store: PayloadStore | None, record: Mapping[str, Any]) -> tuple[str, Pointer]:
    """An offloaded record's real body and its pointer.

    PayloadError (dead-lettered at once) when the pointer cannot be honoured, or when this worker has no payload
    bucket; PayloadUnavailableError (retried) when S3 does not answer.
    """
    body = record.get("body") or ""
    if store is None:
        pointer = pointer_of(body, record["messageAttributes"])
        raise PayloadError(
            f"the message's body is offloaded to {pointer.uri}, but this worker has no payload bucket: "
            f"{contract.PAYLOAD_BUCKET_VARIABLE} is unset; deploy with large_payloads on (it sets the variable), "
            "or set it to the bucket's name"
        )
    return store.read(body, record["messageAttributes"])


def keep_for_new_life(store: PayloadStore | None, record: Mapping[str, Any]) -> None:
    """Restart the lifecycle clock of an offloaded record's object, whose message begins a new life (its DLQ copy, a
    retry re-sent through the delay table): the bucket's rule then counts that life's days from now. Never raises."""
    if store is None or not is_offloaded(record.get("messageAttributes") or {}):
        return
    try:
        store.refresh(pointer_of(record.get("body") or "", record["messageAttributes"]))
    except PayloadError:  # not a pointer: nothing to keep (its copy was dead-lettered for it)
        return


def delete_succeeded(
    sqs: Any,
    queue_url: str,
    store: PayloadStore,
    succeeded: Sequence[tuple[Mapping[str, Any], Pointer]],
    metrics: observability.BatchMetrics,
) -> None:
    """Delete the succeeded offloaded messages (10 per DeleteMessageBatch), then the objects of those SQS deleted.

    Counts ``PayloadsDeleted`` in ``metrics``. A message SQS did not delete keeps its object (logged); it was
    reported done all the same, and Lambda's own delete may still take it. Never raises.
    """
    deleted = _delete_messages(sqs, queue_url, [record for record, _ in succeeded])
    kept = []
    for record, pointer in succeeded:
        if record["messageId"] not in deleted:
            kept.append(pointer.uri)
        elif store.delete(pointer):
            metrics.count(contract.METRIC_PAYLOADS_DELETED)
    if kept:
        logger.warning("succeeded offloaded messages were not deleted: their objects are kept for their next run",
                       extra={"objects": kept})


def _delete_messages(sqs: Any, queue_url: str, records: Sequence[Mapping[str, Any]]) -> set[str]:
    """The ids of the records DeleteMessageBatch deleted; a failed call or entry is logged, never raised."""
    deleted: set[str] = set()
    for batch in chunks(list(records), limits.SQS_MAX_BATCH_ENTRIES):
        entries = [{"Id": str(i), "ReceiptHandle": r["receiptHandle"]} for i, r in enumerate(batch)]
        try:
            response = sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        except Exception as error:  # any AWS or network error: none of them counts as deleted
            logger.error("DeleteMessageBatch of succeeded offloaded messages failed",
                         extra={"code": error_code(error), "error": safe_repr(error)})
            continue
        failed = {str(f.get("Id")): f.get("Code") for f in response.get("Failed") or []}
        deleted.update(r["messageId"] for i, r in enumerate(batch) if str(i) not in failed)
        if failed:
            logger.error("SQS did not delete succeeded offloaded messages",
                         extra={"message_ids": [batch[int(i)]["messageId"] for i in failed if i.isdigit()],
                                "codes": sorted({str(c) for c in failed.values()})})
    return deleted
