"""Sending delayed messages to SQS, shared by the dispatcher and the safety net: one entry shape, one refusal rule.

A delayed message leaves the delay table in one shape (``entry``: its body, its
attributes plus ``worker_tier.due_at``, ``DelaySeconds`` = ceil(due − now) in
0..900, so it is never visible early). ``send_batch`` sorts SQS's answer into
accepted, refused for what a message holds (never retried: the caller
dead-letters it with the reason), and neither (transient: the caller retries or
stops). ``refile`` moves an item the dispatcher would not read where it is into the
minute and shard it reads. ``Delivery`` is the dispatcher's use of them: batches
retried until each entry is accepted or refused, and a refused message (or an
unreadable item) dead-lettered with its ``worker_tier.failure`` reason, or as a
pointer to its delay-table item when the DLQ refuses the copy.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from worker_tier.core import contract, limits, sqs_rules
from worker_tier.core import wall_clock
from worker_tier.delays import delay, send_moment
from worker_tier.core.aws import error_code
from worker_tier.delays.delay import DelayedMessage
from worker_tier.core.contract import PATH_ATTRIBUTE
from worker_tier.core.errors import DispatchIncompleteError, DispatchRefusedError, UnreadableItemError
from worker_tier.core.envelope import Envelope
from worker_tier.core.message import failure_reason
from worker_tier.core.priority import PriorityQueues
from worker_tier.core.retry import BATCH_ENTRIES

# SQS errors that refuse a whole SendMessageBatch call because of what a message holds (botocore may
# prefix them "AWS.SimpleQueueService."). Any other raised error (throttling, access, a missing queue) is
# transient: messages are never dead-lettered for a fault of the queue.
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
MESSAGE_CONTENT_ERROR_CODES = frozenset(
    {"BatchRequestTooLong", "InvalidMessageContents", "InvalidParameterValue", "InvalidAttributeName",
     "InvalidAttributeValue", "MissingParameter"}
)
_SQS_CODE_PREFIX = "AWS.SimpleQueueService."
# What a failed call to AWS raises: an answer (ClientError), no answer (botocore's connection and timeout errors),
# or the socket's own error. Anything else (a TypeError, a KeyError) is a fault of this code: never retried, it propagates.
AWS_CALL_ERRORS: tuple[type[BaseException], ...] = (ClientError, BotoCoreError, OSError)
POINTER_BODY_HEAD_BYTES = 1024


@dataclass
class Sent:
    """What a sequence of SendMessageBatch attempts achieved, by entry id."""

    accepted: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)  # id -> "Code: message"
    sent_at: dict[str, float] = field(default_factory=dict)  # accepted id -> the clock read just before its call
    last_error: str = ""  # the last transient failure, "Code: message"
    out_of_time: bool = False  # retries stopped because the run's time ran low

    def unsent(self, attempts: int) -> str:
        """Why entries are in neither set: how many attempts, and the last transient failure."""
        tries = "before its time ran low" if self.out_of_time else f"after {attempts} attempts"
        return f"{tries}; last: {self.last_error or 'no answer for them'}"


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


def entry(entry_id: str, message: DelayedMessage, now: float, attributes: dict[str, Any] | None = None) -> dict[str, Any]:
    """A SendMessageBatch entry for a delayed message: never visible before it is due.

    ``attributes`` are its attributes with ``worker_tier.due_at`` (``delay.with_due_at``), when the caller has them.

    Examples
    --------
    >>> entry("0", DelayedMessage("m-1", 1_800_000_090_500, "hi", {}), 1_800_000_000.0)["DelaySeconds"]
    91
    """
    envelope = Envelope(message.body, delay.with_due_at(message) if attributes is None else attributes)
    return envelope.entry(entry_id, DelaySeconds=delay_seconds(message.due_ms, now))


def delay_seconds(due_ms: int, now: float) -> int:
    """ceil(due − now) in 0..``SQS_MAX_DELAY_SECONDS``: a message sent at ``now`` is never visible before it is due.

    Examples
    --------
    >>> delay_seconds(1_800_000_090_500, 1_800_000_000.0)
    91
    """
    return max(0, min(limits.SQS_MAX_DELAY_SECONDS, math.ceil(due_ms / 1000 - now)))


# Where a delivery goes: one queue, or the work queue's priority levels, each entry to its level's queue
# (``worker_tier.core.priority``: its worker_tier.priority attribute, which the delay table kept).
Destination = str | PriorityQueues


def send_batch(sqs: Any, queue_url: Destination, entries: list[dict[str, Any]]) -> tuple[set[str], dict[str, str]]:
    """One SendMessageBatch (one per level with ``PriorityQueues``): (accepted ids, refused id -> "Code: message");
    ids in neither failed transiently.

    A call refused as a whole for content is split into single sends, to find the entry at fault.
    """
    accepted, refused, _ = send_batch_explained(sqs, queue_url, entries)
    return accepted, refused


def send_batch_explained(sqs: Any, queue_url: Destination, entries: list[dict[str, Any]]) -> tuple[set[str], dict[str, str], str]:
    """``send_batch``, and the last transient failure as "Code: message" ("" when none).

    Only an AWS call's errors (``AWS_CALL_ERRORS``) are transient; any other exception propagates.
    """
    if isinstance(queue_url, PriorityQueues):
        return _send_by_level(sqs, queue_url, entries)
    try:
        response = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    except AWS_CALL_ERRORS as error:  # botocore already retried throttling
        if not is_content_error(error):
            return set(), {}, f"{error_code(error)}: {error}"
        if len(entries) == 1:
            return set(), {entries[0]["Id"]: f"{error_code(error)}: {error}"}, ""
        return _send_singly(sqs, queue_url, entries)
    accepted = {success["Id"] for success in response.get("Successful") or []}
    failed = response.get("Failed") or []
    refused = {failure["Id"]: _described(failure) for failure in failed if failure.get("SenderFault")}
    transient = [_described(failure) for failure in failed if not failure.get("SenderFault")]
    return accepted, refused, transient[-1] if transient else ""


def _send_by_level(sqs: Any, queues: PriorityQueues, entries: list[dict[str, Any]]) -> tuple[set[str], dict[str, str], str]:
    """Each level's entries to its own queue, highest level first; one level's failure does not hold back another's."""
    by_queue: dict[str, list[dict[str, Any]]] = {url: [] for _, url in queues.levels()}
    for one in entries:
        by_queue.setdefault(queues.url_for(one.get("MessageAttributes")), []).append(one)
    accepted: set[str] = set()
    refused: dict[str, str] = {}
    last = ""
    for url, level_entries in by_queue.items():
        if level_entries:
            got, lost, failure = send_batch_explained(sqs, url, level_entries)
            accepted |= got
            refused.update(lost)
            last = failure or last
    return accepted, refused, last


def _described(failure: Mapping[str, Any]) -> str:
    """A Failed entry of SendMessageBatch's answer as "Code: message"."""
    return f"{failure.get('Code')}: {failure.get('Message', '')}"


def _send_singly(sqs: Any, queue_url: str, entries: list[dict[str, Any]]) -> tuple[set[str], dict[str, str], str]:
    """Each entry in its own SendMessageBatch call."""
    accepted: set[str] = set()
    refused: dict[str, str] = {}
    last = ""
    for one in entries:
        got, lost, failure = send_batch_explained(sqs, queue_url, [one])
        accepted |= got
        refused.update(lost)
        last = failure or last
    return accepted, refused, last


def acceptable_attributes(attributes: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Split attributes into those SQS accepts and, for the rest, why not (name -> problem)."""
    problems = {n: sqs_rules.attribute_name_problem(n) or sqs_rules.attribute_value_problem(n, v) for n, v in attributes.items()}
    return {n: v for n, v in attributes.items() if not problems[n]}, {n: p for n, p in problems.items() if p}


# DynamoDB refusals of an item itself (too large, bad key): retrying never helps.
PERMANENT_WRITE_ERROR_CODES = frozenset({"ValidationException", "ItemCollectionSizeLimitExceededException"})


def is_permanent_write_error(error: BaseException) -> bool:
    """True when DynamoDB refused a write for what the item is, so it must be given up with a reason."""
    return isinstance(error, ParamValidationError) or error_code(error) in PERMANENT_WRITE_ERROR_CODES


def refile(dynamodb: Any, table: str, item: Mapping[str, Any], bucket: int, shard: int) -> str:
    """Move a message item to ``bucket_key(bucket, shard % MAX_SHARDS)``, same sort key; return the new pk.

    PutItem of the copy first, then DeleteItem of the old key: a crash between them
    leaves two copies (a duplicate), never none. The delete is a user delete, which the
    safety net ignores; the copy's INSERT reaches it like any write.
    """
    pk = delay.bucket_key(bucket, shard % delay.MAX_SHARDS)
    copy = {**item, contract.DELAY_PARTITION_KEY: {"S": pk}}
    due_s = int(item["due_ms"]["N"]) // 1000 if "due_ms" in item else None
    if due_s is not None:  # the copy keeps its TTL at least as long after its due time as the producer's
        expiration = max(int((item.get(contract.DELAY_TTL_ATTRIBUTE) or {}).get("N", 0)), due_s + delay.DISPATCHED_RETENTION_SECONDS)
        copy[contract.DELAY_TTL_ATTRIBUTE] = {"N": str(expiration)}
    dynamodb.put_item(TableName=table, Item=copy)
    if item[contract.DELAY_PARTITION_KEY]["S"] != pk:
        dynamodb.delete_item(TableName=table, Key={contract.DELAY_PARTITION_KEY: item[contract.DELAY_PARTITION_KEY], contract.DELAY_SORT_KEY: item[contract.DELAY_SORT_KEY]})
    return pk


class Delivery:
    """The dispatcher's sends: batches retried until accepted or refused, and dead letters with their reasons."""

    def __init__(self, sqs: Any, dead_letter_queue_url: str, delay_table: str, *,
                 clock: Callable[[], float] = wall_clock.now, sleep: Callable[[float], None] = time.sleep) -> None:
        self._sqs = sqs  # a worker_tier.core.aws.LazyClient
        self.dead_letter_queue_url = dead_letter_queue_url
        self.delay_table = delay_table
        self._clock = clock
        self._sleep = sleep

    def deliver(self, queue_url: Destination, entries: list[dict[str, Any]], due_ms: Mapping[str, int] | None = None,
                time_low: Callable[[], bool] | None = None) -> Sent:
        """Send one batch until each entry is accepted or refused for a sender fault, or ``BATCH_ENTRIES`` runs out.

        Entries in neither set kept failing transiently. An entry whose id is in ``due_ms``
        gets its ``DelaySeconds`` from the clock read just before each call (``entry``); a retry of
        such entries waits for their moment in the second (``worker_tier.delays.send_moment``).
        No retry starts once ``time_low()`` (then ``out_of_time``).
        """
        sent = Sent()
        batches = [entries]
        for attempt in BATCH_ENTRIES.attempts_with_pauses(self._sleep):
            if attempt and time_low is not None and time_low():
                sent.out_of_time = True
                break
            if attempt and due_ms:  # a retry, too, goes at the moment in the second that rounds its delays least
                wait_ms = send_moment.wait_ms(send_moment.moment(
                    [due_ms[entry["Id"]] for batch in batches for entry in batch if entry["Id"] in due_ms]), self._clock() * 1000)
                if wait_ms:
                    self._sleep(wait_ms / 1000)
            batches = [again for batch in batches for again in self._send_batch(queue_url, batch, sent, due_ms or {})]
            if not batches:
                break
        return sent

    def _send_batch(self, queue_url: Destination, batch: list[dict[str, Any]], sent: Sent,
                    due_ms: Mapping[str, int]) -> list[list[dict[str, Any]]]:
        """One SendMessageBatch, recorded in ``sent``; returns the batches to try again."""
        sqs = self._sqs.get()
        now = self._clock()
        timed = [{**one, "DelaySeconds": delay_seconds(due_ms[one["Id"]], now)} if one["Id"] in due_ms else one for one in batch]
        accepted, refused, failure = send_batch_explained(sqs, queue_url, timed)
        sent.accepted |= accepted
        sent.refused.update(refused)
        sent.sent_at.update(dict.fromkeys(accepted, now))
        sent.last_error = failure or sent.last_error
        again = [entry for entry in batch if entry["Id"] not in sent.accepted and entry["Id"] not in sent.refused]
        return [again] if again else []

    def dead_letter(self, message: DelayedMessage, refusal: str, time_low: Callable[[], bool] | None = None) -> None:
        """Send a message the work queue refused to the DLQ with its reason; a pointer if the DLQ refuses the copy.

        Raises DispatchIncompleteError when the DLQ takes neither (the run stops; the message is retried).
        """
        error = DispatchRefusedError(f"the work queue refused delayed message {message.message_id} at dispatch: {refusal}")
        path = str(message.attributes.get(PATH_ATTRIBUTE, {}).get("StringValue", ""))
        reason = self._reason(error, path)
        attributes, refused_attributes = acceptable_attributes(delay.with_due_at(message))
        if refused_attributes:
            reason["refused_attributes"] = refused_attributes
        copy = Envelope.dead_letter(message.body, attributes, reason).entry("0")
        sent = self.deliver(self.dead_letter_queue_url, [copy], time_low=time_low)
        if not sent.accepted and sent.refused:
            sent = self.deliver(self.dead_letter_queue_url, [self._pointer(message, reason, sent.refused["0"])], time_low=time_low)
        if not sent.accepted:
            raise DispatchIncompleteError(
                f"dead-letter queue {self.dead_letter_queue_url} did not take message {message.message_id} "
                f"(refused by the work queue: {refusal}): {sent.refused.get('0') or sent.unsent(BATCH_ENTRIES.attempts)}"
            )

    def dead_letter_unreadable(self, item: dict[str, Any], problem: str, time_low: Callable[[], bool] | None = None) -> None:
        """Send the DLQ a pointer to an item that is not a delayed message; it stays in the table until its TTL.

        Raises DispatchIncompleteError when the DLQ does not take it (no retry starts once ``time_low()``).
        """
        pk, sk = item[contract.DELAY_PARTITION_KEY]["S"], item[contract.DELAY_SORT_KEY]["S"]
        reason = self._reason(UnreadableItemError(
            f"delay-table item {pk} / {sk} is not a delayed message ({problem}); it is kept in delay table "
            f"{self.delay_table} until its TTL ({contract.DELAY_TTL_ATTRIBUTE})"
        ), "")
        body = {"delay_table": self.delay_table, contract.DELAY_PARTITION_KEY: pk, contract.DELAY_SORT_KEY: sk, "reason": reason,
                "item_head": json.dumps(item, default=repr)[:POINTER_BODY_HEAD_BYTES]}
        entry = Envelope.dead_letter(json.dumps(body), {}, reason).entry("0")
        sent = self.deliver(self.dead_letter_queue_url, [entry], time_low=time_low)
        if not sent.accepted:
            raise DispatchIncompleteError(
                f"dead-letter queue {self.dead_letter_queue_url} did not take the pointer to unreadable item {pk} / {sk}: "
                f"{sent.refused.get('0') or sent.unsent(BATCH_ENTRIES.attempts)}"
            )

    def _reason(self, error: Exception, path: str) -> dict[str, Any]:
        """The ``worker_tier.failure`` fields for a dispatch that never reached a worker."""
        return failure_reason(error, attempts=0, path=path, failed_at=datetime.fromtimestamp(self._clock(), timezone.utc))

    def _pointer(self, message: DelayedMessage, reason: dict[str, Any], copy_refusal: str) -> dict[str, Any]:
        """A small DLQ entry naming the delay-table item of a message whose full copy the DLQ refused."""
        reason = {
            **reason,
            "copy_refused": f"the dead-letter queue refused the full copy ({copy_refusal}); the message is kept in "
            f"delay table {self.delay_table} under this pk and sk until its TTL ({contract.DELAY_TTL_ATTRIBUTE})",
        }
        key = message.key
        body = {
            "delay_table": self.delay_table,
            contract.DELAY_PARTITION_KEY: key[contract.DELAY_PARTITION_KEY]["S"],
            contract.DELAY_SORT_KEY: key[contract.DELAY_SORT_KEY]["S"],
            "message_id": message.message_id,
            "reason": reason,
            "body_head": message.body.encode("utf-8", "replace")[:POINTER_BODY_HEAD_BYTES].decode("utf-8", "ignore"),
        }
        routing, _ = acceptable_attributes({k: v for k, v in message.attributes.items() if k == PATH_ATTRIBUTE})
        return Envelope.dead_letter(json.dumps(body), routing, reason).entry("0")
