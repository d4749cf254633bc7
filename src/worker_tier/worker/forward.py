"""A long task's message, forwarded by the Lambda worker to the container worker's queue as it came.

Its body (an offloaded message's pointer, never the body read from S3), its attributes (those SQS would refuse
are left out, and said), its source message's id for the container's idempotency key, its trace header, and its
FIFO group; the middleware's ``on_send`` hooks see it before it goes.
"""

from __future__ import annotations

from typing import Any, Mapping

from worker_tier.core import contract, limits
from worker_tier.core.envelope import Envelope
from worker_tier.core.observability import logger
from worker_tier.core.task import Task
from worker_tier.pipeline import middleware


def forward_request(record: Mapping[str, Any], task: Task, queue_url: str, *, offloaded: bool = False) -> dict[str, Any]:
    """The SendMessage request that hands ``record`` to the container worker's queue at ``queue_url``.

    The body is the task's (unwrapped from its SNS envelope with ``via_sns``), but an ``offloaded`` message's is
    the record's own pointer, with its ``ExtendedPayloadSize``: the container worker reads the same object.
    """
    envelope, dropped = Envelope.from_record(record, body=None if offloaded else task.body)
    if dropped:
        logger.warning("attributes SQS would refuse were left out of the forward", extra={"dropped_attributes": dropped})
    _carry_source_id(envelope, task)
    trace_header = record["attributes"].get(contract.TRACE_HEADER_SYSTEM_ATTRIBUTE)
    if isinstance(trace_header, str):  # the trace goes on with it (a system attribute: outside SQS's 10 and the size)
        envelope.system_attributes = {contract.TRACE_HEADER_SYSTEM_ATTRIBUTE: {"DataType": "String", "StringValue": trace_header}}
    middleware.on_send(envelope)
    if task.group_id is None:
        request = envelope.request(queue_url)
    else:  # a FIFO queue: keep the group, and deduplicate on the source message
        request = envelope.request(queue_url, MessageGroupId=task.group_id, MessageDeduplicationId=task.message_id)
    return request


def _carry_source_id(envelope: Envelope, task: Task) -> None:
    """Add ``worker_tier.source_message_id`` to a forward's attributes (kept when it already has one), room permitting.

    The container's default idempotency key is this id, so a source message delivered twice runs once.
    """
    attributes = envelope.attributes
    if contract.SOURCE_MESSAGE_ID_ATTRIBUTE in attributes:
        return
    if envelope.room() < 1:
        logger.warning(
            "no room for the source message id on the forward: the container's default idempotency key is the "
            "forwarded message's own id",
            extra={"attribute_count": len(attributes), "limit": limits.SQS_MAX_MESSAGE_ATTRIBUTES},
        )
        return
    attributes[contract.SOURCE_MESSAGE_ID_ATTRIBUTE] = {"DataType": "String", "StringValue": task.message_id}

