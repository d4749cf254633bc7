"""Sending delayed messages to SQS, shared by the scheduler and the safety net: one entry shape, one refusal rule.

A delayed message leaves the delay table in one shape (``entry``: its body, its
attributes plus ``worker_tier.due_at``, ``DelaySeconds`` = ceil(due − now) in
0..900, so it is never visible early). ``send_batch`` sorts SQS's answer into
accepted, refused for what a message holds (never retried: the caller
dead-letters it with the reason), and neither (transient: the caller retries or
stops). ``refile`` moves an item the scheduler would not read where it is into the
minute and shard it reads.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from botocore.exceptions import ParamValidationError

from worker_tier import delay, limits, sqs_rules
from worker_tier.aws import error_code
from worker_tier.delay import DelayedMessage

# SQS errors that refuse a whole SendMessageBatch call because of what a message holds (botocore may
# prefix them "AWS.SimpleQueueService."). Any other raised error (throttling, access, a missing queue) is
# transient: messages are never dead-lettered for a fault of the queue.
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
MESSAGE_CONTENT_ERROR_CODES = frozenset(
    {"BatchRequestTooLong", "InvalidMessageContents", "InvalidParameterValue", "InvalidAttributeName",
     "InvalidAttributeValue", "MissingParameter"}
)
_SQS_CODE_PREFIX = "AWS.SimpleQueueService."


def is_content_error(error: BaseException) -> bool:
    """True when a call was refused for what a message holds: by SQS, or by botocore's own parameter check.

    botocore validates parameters before sending and raises ParamValidationError, which
    has no error code; it is never transient.

    Examples
    --------
    >>> is_content_error(ParamValidationError(report="Unknown parameter in MessageAttributes"))
    True
    """
    if isinstance(error, ParamValidationError):
        return True
    return error_code(error).removeprefix(_SQS_CODE_PREFIX) in MESSAGE_CONTENT_ERROR_CODES


def entry(entry_id: str, message: DelayedMessage, now: float) -> dict[str, Any]:
    """A SendMessageBatch entry for a delayed message: never visible before it is due.

    Examples
    --------
    >>> entry("0", DelayedMessage("m-1", 1_800_000_090_500, "hi", {}), 1_800_000_000.0)["DelaySeconds"]
    91
    """
    wait = math.ceil(message.due_ms / 1000 - now)
    return {
        "Id": entry_id,
        "MessageBody": message.body,
        "MessageAttributes": delay.with_due_at(message),
        "DelaySeconds": max(0, min(limits.SQS_MAX_DELAY_SECONDS, wait)),
    }


def send_batch(sqs: Any, queue_url: str, entries: list[dict[str, Any]]) -> tuple[set[str], dict[str, str]]:
    """One SendMessageBatch: (accepted ids, refused id -> "Code: message"); ids in neither failed transiently.

    A call refused as a whole for content is split into single sends, to find the entry at fault.
    """
    try:
        response = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    except Exception as error:  # botocore already retried throttling
        if not is_content_error(error):
            return set(), {}
        if len(entries) == 1:
            return set(), {entries[0]["Id"]: f"{error_code(error)}: {error}"}
        return _send_singly(sqs, queue_url, entries)
    accepted = {success["Id"] for success in response.get("Successful") or []}
    refused = {failure["Id"]: f"{failure.get('Code')}: {failure.get('Message', '')}"
               for failure in response.get("Failed") or [] if failure.get("SenderFault")}
    return accepted, refused


def _send_singly(sqs: Any, queue_url: str, entries: list[dict[str, Any]]) -> tuple[set[str], dict[str, str]]:
    """Each entry in its own SendMessageBatch call."""
    accepted: set[str] = set()
    refused: dict[str, str] = {}
    for one in entries:
        got, lost = send_batch(sqs, queue_url, [one])
        accepted |= got
        refused.update(lost)
    return accepted, refused


def acceptable_attributes(attributes: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Split attributes into those SQS accepts and, for the rest, why not (name -> problem)."""
    problems = {n: sqs_rules.attribute_name_problem(n) or sqs_rules.attribute_value_problem(n, v) for n, v in attributes.items()}
    return {n: v for n, v in attributes.items() if not problems[n]}, {n: p for n, p in problems.items() if p}


def refile(dynamodb: Any, table: str, item: Mapping[str, Any], bucket: int, shard: int) -> str:
    """Move a message item to ``bucket_key(bucket, shard % MAX_SHARDS)``, same sort key; return the new pk.

    PutItem of the copy first, then DeleteItem of the old key: a crash between them
    leaves two copies (a duplicate), never none. The delete is a user delete, which the
    safety net ignores; the copy's INSERT reaches it like any write.
    """
    pk = delay.bucket_key(bucket, shard % delay.MAX_SHARDS)
    dynamodb.put_item(TableName=table, Item={**item, delay.PK: {"S": pk}})
    if item[delay.PK]["S"] != pk:
        dynamodb.delete_item(TableName=table, Key={delay.PK: item[delay.PK], delay.SK: item[delay.SK]})
    return pk
