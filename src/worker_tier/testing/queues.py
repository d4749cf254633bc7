"""``MemoryQueues``: in-memory SQS queues on an injected clock, for ``TaskWorld``.

What it models, from the SQS Developer Guide and API reference: a message sent with ``DelaySeconds`` is
hidden until then (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-delay-queues.html);
a received message is hidden for the queue's visibility timeout, or the time a ChangeMessageVisibility call
sets counted from that call (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html);
each receive counts in ``ApproximateReceiveCount`` and gets a new receipt handle, the old one no longer changing
it; and a message received ``maxReceiveCount`` times goes to the redrive policy's dead-letter queue instead of a
further receive. The calls: SendMessage, SendMessageBatch, ReceiveMessage, DeleteMessage(Batch),
ChangeMessageVisibility(Batch), GetQueueAttributes and GetQueueUrl. Standard queues only: no FIFO ordering.
"""

from __future__ import annotations

import hashlib
import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from worker_tier.core import limits
from worker_tier.testing.tables import client_error

REGION = "us-east-1"
ACCOUNT = "123456789012"
SENDER_ID = "AIDAWORKERTIERTESTING"


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
    receipt_handle: str = ""


@dataclass
class Queue:
    """A queue's messages, its visibility timeout and where its redrive policy sends a message."""

    name: str
    visibility_timeout_seconds: int
    dead_letter_queue: Queue | None = None
    max_receive_count: int | None = None
    messages: dict[str, Stored] = field(default_factory=dict)

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
        stored = self._store(self._queue(QueueUrl), MessageBody, DelaySeconds, MessageAttributes, MessageSystemAttributes)
        return {"MessageId": stored.message_id, "MD5OfMessageBody": _md5(MessageBody)}

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        queue = self._queue(QueueUrl)
        successful = []
        for entry in Entries:
            stored = self._store(queue, entry["MessageBody"], entry.get("DelaySeconds", 0), entry.get("MessageAttributes"),
                                 entry.get("MessageSystemAttributes"))
            successful.append({"Id": entry["Id"], "MessageId": stored.message_id, "MD5OfMessageBody": _md5(stored.body)})
        return {"Successful": successful, "Failed": []}

    def receive_message(self, QueueUrl: str, MaxNumberOfMessages: int = 1, VisibilityTimeout: int | None = None,
                        **_: Any) -> dict[str, Any]:
        queue, now = self._queue(QueueUrl), self.clock()
        received: list[dict[str, Any]] = []
        for stored in sorted(queue.messages.values(), key=lambda message: (message.visible_at, message.sent_at)):
            if len(received) >= MaxNumberOfMessages or stored.visible_at > now:
                break
            if queue.max_receive_count is not None and stored.receive_count >= queue.max_receive_count:
                self._redrive(queue, stored)
                continue
            hidden = queue.visibility_timeout_seconds if VisibilityTimeout is None else VisibilityTimeout
            received.append(self._receive(stored, now, hidden))
        return {"Messages": received} if received else {}

    def delete_message(self, QueueUrl: str, ReceiptHandle: str, **_: Any) -> dict[str, Any]:
        queue = self._queue(QueueUrl)
        for stored in list(queue.messages.values()):
            if stored.receipt_handle == ReceiptHandle:
                del queue.messages[stored.message_id]
        return {}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        for entry in Entries:
            self.delete_message(QueueUrl, entry["ReceiptHandle"])
        return {"Successful": [{"Id": entry["Id"]} for entry in Entries], "Failed": []}

    def change_message_visibility(self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int, **_: Any) -> dict[str, Any]:
        if not self._change(self._queue(QueueUrl), ReceiptHandle, VisibilityTimeout):
            raise client_error("ReceiptHandleIsInvalid", "ChangeMessageVisibility")
        return {}

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        queue, successful, failed = self._queue(QueueUrl), [], []
        for entry in Entries:
            if self._change(queue, entry["ReceiptHandle"], entry["VisibilityTimeout"]):
                successful.append({"Id": entry["Id"]})
            else:
                failed.append({"Id": entry["Id"], "Code": "ReceiptHandleIsInvalid", "SenderFault": True,
                               "Message": "the receipt handle is not the message's current one"})
        return {"Successful": successful, "Failed": failed}

    def get_queue_attributes(self, QueueUrl: str, **_: Any) -> dict[str, Any]:
        queue = self._queue(QueueUrl)
        attributes = {"QueueArn": queue.arn, "VisibilityTimeout": str(queue.visibility_timeout_seconds),
                      "MaximumMessageSize": str(limits.SQS_MAX_MESSAGE_BYTES),
                      "ApproximateNumberOfMessages": str(len(queue.messages))}
        return {"Attributes": attributes}

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

    def _store(self, queue: Queue, body: str, delay_seconds: int, attributes: dict[str, Any] | None,
               system_attributes: dict[str, Any] | None) -> Stored:
        now = self.clock()
        stored = Stored(str(uuid.uuid4()), body, dict(attributes or {}), dict(system_attributes or {}), now, now + delay_seconds)
        queue.messages[stored.message_id] = stored
        return stored

    def _receive(self, stored: Stored, now: float, hidden_seconds: int) -> dict[str, Any]:
        """The message as ReceiveMessage returns it, with every attribute; hidden from now on."""
        stored.receive_count += 1
        stored.first_received_at = stored.first_received_at or now
        stored.receipt_handle = f"{stored.message_id}#{next(self._handles)}"
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

    def _change(self, queue: Queue, receipt_handle: str, seconds: int) -> bool:
        for stored in queue.messages.values():
            if stored.receipt_handle == receipt_handle:
                stored.visible_at = self.clock() + seconds
                return True
        return False

    def _redrive(self, queue: Queue, stored: Stored) -> None:
        """SQS's own move to the dead-letter queue: the message as it was, without a reason."""
        del queue.messages[stored.message_id]
        if queue.dead_letter_queue is not None:
            stored.visible_at = self.clock()
            queue.dead_letter_queue.messages[stored.message_id] = stored


def _md5(body: str) -> str:
    return hashlib.md5(body.encode("utf-8"), usedforsecurity=False).hexdigest()
