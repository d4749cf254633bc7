"""``MemoryQueues``: in-memory SQS queues on an injected clock, for ``TaskWorld``.

What it models, from the SQS Developer Guide and API reference: a message sent with ``DelaySeconds`` is
hidden until then (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-delay-queues.html);
a received message is hidden for the queue's visibility timeout, or the time a ChangeMessageVisibility call
sets counted from that call (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html);
each receive counts in ``ApproximateReceiveCount`` and gets a new receipt handle, the old one no longer changing
it; and a message received ``maxReceiveCount`` times goes to the redrive policy's dead-letter queue instead of a
further receive. The calls: SendMessage, SendMessageBatch, ReceiveMessage, DeleteMessage(Batch),
ChangeMessageVisibility(Batch), GetQueueAttributes and GetQueueUrl. Standard queues only: no FIFO ordering.
Each call's answer, its errors and the attributes it returns were checked against moto and the API reference
(tests/functional/test_testing_stand_ins.py); where moto is laxer than the reference, the reference wins.
"""

from __future__ import annotations

import hashlib
import json
import itertools
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from botocore.exceptions import ClientError

from worker_tier.core import limits
from worker_tier.testing.tables import client_error

REGION = "us-east-1"
ACCOUNT = "123456789012"
SENDER_ID = "AIDAWORKERTIERTESTING"
# SQS's default retention, four days: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html
DEFAULT_RETENTION_SECONDS = 4 * 24 * 60 * 60
# ReceiveMessage's MaxNumberOfMessages: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html
MAX_RECEIVE_MESSAGES = 10
SYSTEM_ATTRIBUTES = ("ApproximateReceiveCount", "SentTimestamp", "ApproximateFirstReceiveTimestamp", "SenderId", "AWSTraceHeader")
_BATCH = "AWS.SimpleQueueService."


@dataclass
class Stored:
    """One message in a queue, and when it is next visible (seconds on the queues' clock)."""

    message_id: str
    body: str
    attributes: dict[str, Any]
    system_attributes: dict[str, Any]
    sent_at: float
    visible_at: float
    receive_count: int = 0
    first_received_at: float | None = None
    received_at: float | None = None
    receipt_handle: str = ""


@dataclass
class Queue:
    """A queue's messages, its visibility timeout and where its redrive policy sends a message."""

    name: str
    visibility_timeout_seconds: int
    dead_letter_queue: Queue | None = None
    max_receive_count: int | None = None
    messages: dict[str, Stored] = field(default_factory=dict)
    handles: set[str] = field(default_factory=set)  # every receipt handle it gave: others are malformed

    @property
    def url(self) -> str:
        return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{self.name}"

    @property
    def arn(self) -> str:
        return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{self.name}"


class MemoryQueues:
    """SQS queues in memory, reading the time from ``clock`` (seconds since the epoch)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.queues: dict[str, Queue] = {}
        self._handles = itertools.count(1)

    def create(self, name: str, visibility_timeout_seconds: int, dead_letter_queue: Queue | None = None,
               max_receive_count: int | None = None) -> Queue:
        """A new empty queue; with ``dead_letter_queue``, a redrive policy of ``max_receive_count`` receives."""
        queue = Queue(name, visibility_timeout_seconds, dead_letter_queue, max_receive_count)
        self.queues[queue.url] = queue
        return queue

    # -- the SQS API (boto3's names and shapes) ---------------------------------------------

    def send_message(self, QueueUrl: str, MessageBody: str, DelaySeconds: int = 0,
                     MessageAttributes: dict[str, Any] | None = None,
                     MessageSystemAttributes: dict[str, Any] | None = None, **_: Any) -> dict[str, Any]:
        queue = self._queue(QueueUrl)
        problem = _send_problem(MessageBody, DelaySeconds)
        if problem:
            raise client_error("InvalidParameterValue", "SendMessage", message=problem)
        stored = self._store(queue, MessageBody, DelaySeconds, MessageAttributes, MessageSystemAttributes)
        return _sent(stored)

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        queue = self._queue(QueueUrl)
        _check_batch("SendMessageBatch", Entries)
        successful, failed = [], []
        for entry in Entries:
            problem = _send_problem(entry["MessageBody"], entry.get("DelaySeconds", 0))
            if problem:
                failed.append(_failure(entry["Id"], "InvalidParameterValue", problem))
                continue
            stored = self._store(queue, entry["MessageBody"], entry.get("DelaySeconds", 0), entry.get("MessageAttributes"),
                                 entry.get("MessageSystemAttributes"))
            successful.append({"Id": entry["Id"], **_sent(stored)})
        return {"Successful": successful, "Failed": failed}

    def receive_message(self, QueueUrl: str, MaxNumberOfMessages: int = 1, VisibilityTimeout: int | None = None,
                        AttributeNames: list[str] | None = None, MessageSystemAttributeNames: list[str] | None = None,
                        MessageAttributeNames: list[str] | None = None, **_: Any) -> dict[str, Any]:
        """Up to ``MaxNumberOfMessages`` visible messages, with the system and message attributes asked for by name."""
        queue, now = self._queue(QueueUrl), self.clock()
        if not 1 <= MaxNumberOfMessages <= MAX_RECEIVE_MESSAGES:
            raise client_error("InvalidParameterValue", "ReceiveMessage",
                               message=f"MaxNumberOfMessages must be 1..{MAX_RECEIVE_MESSAGES}, got {MaxNumberOfMessages}")
        hidden = queue.visibility_timeout_seconds if VisibilityTimeout is None else VisibilityTimeout
        _check_visibility("ReceiveMessage", hidden)
        wanted = _Wanted([*(AttributeNames or []), *(MessageSystemAttributeNames or [])], MessageAttributeNames or [])
        received: list[dict[str, Any]] = []
        visible = (message for message in queue.messages.values() if message.visible_at <= now)
        for stored in sorted(visible, key=lambda message: message.sent_at):  # oldest first: SQS's best-effort order
            if len(received) >= MaxNumberOfMessages:
                break
            if queue.max_receive_count is not None and stored.receive_count >= queue.max_receive_count:
                self._redrive(queue, stored)
                continue
            received.append(wanted.message(self._receive(queue, stored, now, hidden)))
        return {"Messages": received} if received else {}

    def delete_message(self, QueueUrl: str, ReceiptHandle: str, **_: Any) -> dict[str, Any]:
        """Delete the message whose current handle this is; a handle no longer current is answered but deletes nothing.

        AWS: with an old handle "the request succeeds, but the message might not be deleted"
        (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html); moto deletes it.
        """
        queue = self._queue(QueueUrl)
        if ReceiptHandle not in queue.handles:
            raise client_error("ReceiptHandleIsInvalid", "DeleteMessage", message=f"the receipt handle {ReceiptHandle!r} is not valid")
        for stored in list(queue.messages.values()):
            if stored.receipt_handle == ReceiptHandle:
                del queue.messages[stored.message_id]
        return {}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        self._queue(QueueUrl)
        _check_batch("DeleteMessageBatch", Entries)
        return _each(Entries, lambda entry: self.delete_message(QueueUrl, entry["ReceiptHandle"]))

    def change_message_visibility(self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int, **_: Any) -> dict[str, Any]:
        queue = self._queue(QueueUrl)
        stored = next((m for m in queue.messages.values() if m.receipt_handle == ReceiptHandle), None)
        if stored is None:
            raise client_error("ReceiptHandleIsInvalid", "ChangeMessageVisibility",
                               message=f"the receipt handle {ReceiptHandle!r} is not a message's current one")
        now = self.clock()
        _check_visibility("ChangeMessageVisibility", VisibilityTimeout + now - (stored.received_at or now))
        stored.visible_at = now + VisibilityTimeout
        return {}

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        self._queue(QueueUrl)
        _check_batch("ChangeMessageVisibilityBatch", Entries)
        return _each(Entries, lambda entry: self.change_message_visibility(QueueUrl, entry["ReceiptHandle"], entry["VisibilityTimeout"]))

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str] | None = None, **_: Any) -> dict[str, Any]:
        """The attributes asked for by name (``All``: every one this queue models)."""
        attributes = self._attributes(self._queue(QueueUrl))
        names = AttributeNames or []
        unknown = [name for name in names if name != "All" and name not in attributes]
        if unknown:
            raise client_error("InvalidAttributeName", "GetQueueAttributes", message=f"unknown attribute names: {unknown}")
        chosen = {name: value for name, value in attributes.items() if "All" in names or name in names}
        return {"Attributes": chosen} if chosen else {}

    def get_queue_url(self, QueueName: str, **_: Any) -> dict[str, Any]:
        for queue in self.queues.values():
            if queue.name == QueueName:
                return {"QueueUrl": queue.url}
        raise client_error("AWS.SimpleQueueService.NonExistentQueue", "GetQueueUrl")

    # -- helpers ----------------------------------------------------------------------------

    def _queue(self, url: str) -> Queue:
        if url not in self.queues:
            raise client_error("AWS.SimpleQueueService.NonExistentQueue", "SQS")
        return self.queues[url]

    def _attributes(self, queue: Queue) -> dict[str, str]:
        """Every attribute of ``queue`` this models, as GetQueueAttributes gives them (strings)."""
        now = self.clock()
        visible = sum(1 for m in queue.messages.values() if m.visible_at <= now)
        in_flight = sum(1 for m in queue.messages.values() if m.visible_at > now and m.receive_count)
        attributes = {"QueueArn": queue.arn, "VisibilityTimeout": str(queue.visibility_timeout_seconds),
                      "MaximumMessageSize": str(limits.SQS_MAX_MESSAGE_BYTES), "DelaySeconds": "0",
                      "MessageRetentionPeriod": str(DEFAULT_RETENTION_SECONDS), "ReceiveMessageWaitTimeSeconds": "0",
                      "ApproximateNumberOfMessages": str(visible), "ApproximateNumberOfMessagesNotVisible": str(in_flight),
                      "ApproximateNumberOfMessagesDelayed": str(len(queue.messages) - visible - in_flight)}
        if queue.dead_letter_queue is not None:
            attributes["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": queue.dead_letter_queue.arn,
                                                      "maxReceiveCount": queue.max_receive_count})
        return attributes

    def _store(self, queue: Queue, body: str, delay_seconds: int, attributes: dict[str, Any] | None,
               system_attributes: dict[str, Any] | None) -> Stored:
        now = self.clock()
        stored = Stored(str(uuid.uuid4()), body, dict(attributes or {}), dict(system_attributes or {}), now, now + delay_seconds)
        queue.messages[stored.message_id] = stored
        return stored

    def _receive(self, queue: Queue, stored: Stored, now: float, hidden_seconds: int) -> dict[str, Any]:
        """The message as ReceiveMessage returns it, with every attribute; hidden from now on."""
        stored.receive_count += 1
        stored.first_received_at = stored.first_received_at or now
        stored.received_at = now
        stored.receipt_handle = f"{stored.message_id}#{next(self._handles)}"
        queue.handles.add(stored.receipt_handle)
        stored.visible_at = now + hidden_seconds
        attributes = {
            "ApproximateReceiveCount": str(stored.receive_count),
            "SentTimestamp": str(int(stored.sent_at * 1000)),
            "ApproximateFirstReceiveTimestamp": str(int(stored.first_received_at * 1000)),
            "SenderId": SENDER_ID,
        }
        if "AWSTraceHeader" in stored.system_attributes:
            attributes["AWSTraceHeader"] = stored.system_attributes["AWSTraceHeader"]["StringValue"]
        return {"MessageId": stored.message_id, "ReceiptHandle": stored.receipt_handle, "Body": stored.body,
                "MD5OfBody": _md5(stored.body), "Attributes": attributes, "MessageAttributes": dict(stored.attributes)}

    def _redrive(self, queue: Queue, stored: Stored) -> None:
        """SQS's own move to the dead-letter queue: the message as it was, without a reason or a handle."""
        del queue.messages[stored.message_id]
        if queue.dead_letter_queue is not None:
            stored.visible_at, stored.receipt_handle = self.clock(), ""
            queue.dead_letter_queue.messages[stored.message_id] = stored


class _Wanted:
    """The attribute names a ReceiveMessage asked for: ``All``, names, and for message attributes ``prefix.*``."""

    def __init__(self, system: list[str], message: list[str]) -> None:
        self.system, self.names = system, message

    def message(self, full: dict[str, Any]) -> dict[str, Any]:
        """``full`` with only the attributes asked for; their keys left out when none is."""
        answer = {key: value for key, value in full.items() if key not in ("Attributes", "MessageAttributes")}
        system = {k: v for k, v in full["Attributes"].items() if "All" in self.system or k in self.system}
        chosen = {k: v for k, v in full["MessageAttributes"].items() if self._message_attribute(k)}
        if system:
            answer["Attributes"] = system
        if chosen:
            answer["MessageAttributes"], answer["MD5OfMessageAttributes"] = chosen, md5_of_attributes(chosen)
        return answer

    def _message_attribute(self, name: str) -> bool:
        return any(w in ("All", ".*", name) or (w.endswith(".*") and name.startswith(w[:-1])) for w in self.names)


def _sent(stored: Stored) -> dict[str, Any]:
    """SendMessage's answer (and a batch entry's, without its Id)."""
    answer = {"MessageId": stored.message_id, "MD5OfMessageBody": _md5(stored.body)}
    if stored.attributes:
        answer["MD5OfMessageAttributes"] = md5_of_attributes(stored.attributes)
    return answer


def _send_problem(body: str, delay_seconds: int) -> str:
    """Why SQS refuses a message of ``body`` delayed ``delay_seconds``, or ""."""
    if not 0 <= delay_seconds <= limits.SQS_MAX_DELAY_SECONDS:
        return f"DelaySeconds must be 0..{limits.SQS_MAX_DELAY_SECONDS}, got {delay_seconds}"
    if len(body.encode("utf-8")) > limits.SQS_MAX_MESSAGE_BYTES:
        return f"the message must be at most {limits.SQS_MAX_MESSAGE_BYTES} bytes, got {len(body.encode('utf-8'))}"
    return ""


def _check_visibility(operation: str, seconds: float) -> None:
    """SQS refuses a visibility timeout past 12 hours from the receive (or below 0)."""
    if not 0 <= seconds <= limits.SQS_MAX_VISIBILITY_TIMEOUT_SECONDS:
        raise client_error("InvalidParameterValue", operation,
                           message=f"VisibilityTimeout must end within {limits.SQS_MAX_VISIBILITY_TIMEOUT_SECONDS} s of the receive")


def _check_batch(operation: str, entries: list[dict[str, Any]]) -> None:
    """A batch's own rules (the API reference's errors for each batch call): 1..10 entries, distinct Ids."""
    if not entries:
        raise client_error(f"{_BATCH}EmptyBatchRequest", operation)
    if len(entries) > limits.SQS_MAX_BATCH_ENTRIES:
        raise client_error(f"{_BATCH}TooManyEntriesInBatchRequest", operation,
                           message=f"at most {limits.SQS_MAX_BATCH_ENTRIES} entries, got {len(entries)}")
    if len({entry["Id"] for entry in entries}) != len(entries):
        raise client_error(f"{_BATCH}BatchEntryIdsNotDistinct", operation)


def _each(entries: list[dict[str, Any]], call: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """A batch's answer: each entry's ``call``, its ClientError a Failed entry (the sender's fault)."""
    successful, failed = [], []
    for entry in entries:
        try:
            call(entry)
        except ClientError as error:
            failed.append(_failure(entry["Id"], error.response["Error"]["Code"], error.response["Error"]["Message"]))
        else:
            successful.append({"Id": entry["Id"]})
    return {"Successful": successful, "Failed": failed}


def _failure(entry_id: str, code: str, message: str) -> dict[str, Any]:
    return {"Id": entry_id, "Code": code, "SenderFault": True, "Message": message}


def md5_of_attributes(attributes: dict[str, Any]) -> str:
    """SQS's MD5OfMessageAttributes: each attribute by name, its name, type and value length-prefixed.

    https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html#sqs-attributes-md5-message-digest-calculation
    """
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        attribute = attributes[name]
        binary = "BinaryValue" in attribute
        value = attribute["BinaryValue"] if binary else attribute["StringValue"].encode("utf-8")
        for part in (name.encode("utf-8"), attribute["DataType"].encode("utf-8")):
            digest.update(struct.pack("!I", len(part)) + part)
        digest.update(bytes([2 if binary else 1]) + struct.pack("!I", len(value)) + value)
    return digest.hexdigest()


def _md5(body: str) -> str:
    return hashlib.md5(body.encode("utf-8"), usedforsecurity=False).hexdigest()
