"""``FastQueue``: one standard SQS queue in memory, thread-safe and O(1) per message, for throughput benchmarks.

1,000 messages a second through moto would measure moto (and this 2-core machine), not the worker; and
``worker_tier.testing.queues.MemoryQueues`` scans and sorts every message on each receive and is not
thread-safe, while the container worker receives, deletes and extends visibility from different threads.
This stand-in keeps the calls the container worker makes, with SQS's documented behaviour:

- ReceiveMessage (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html):
  ``MaxNumberOfMessages`` 1..10; ``WaitTimeSeconds`` 0..20, a long poll answered as soon as a message is
  visible, else empty after the wait; each receive hides the message for ``VisibilityTimeout`` (or the queue's),
  counts in ``ApproximateReceiveCount`` and gives a new receipt handle; system attributes and message attributes
  only when asked for (``All`` or by name).
- DeleteMessage(Batch) (API_DeleteMessage.html): a handle SQS never gave is ``ReceiptHandleIsInvalid`` (a Failed
  entry in a batch); an earlier handle of a message received again is answered but deletes nothing
  ("the request succeeds, but the message might not be deleted").
- ChangeMessageVisibility(Batch) (API_ChangeMessageVisibility.html): 0..43,200 s, counted from the call; only
  the current handle of a message in flight (else ``ReceiptHandleIsInvalid`` / ``MessageNotInflight``).
- Batches (API_DeleteMessageBatch.html): 1..10 entries with distinct ``Id`` s, else the batch's own error.
- GetQueueAttributes: ``QueueArn``, ``MaximumMessageSize``, ``VisibilityTimeout`` and the approximate counts.
- SendMessageBatch (API_SendMessageBatch.html): 1..10 entries, ``DelaySeconds`` 0..900 (hidden until then).
- A redrive policy (``dead_letter_queue`` and ``max_receive_count``; SQS Developer Guide, "Using dead-letter queues"):
  "when the ReceiveCount for a message exceeds the maxReceiveCount", SQS moves it to the dead-letter queue as it is,
  without a reason: a message received ``max_receive_count`` times goes there on its next receive instead of
  being delivered. ``redriven`` counts those moves.

It answers at once (no network time): the benchmark measures the worker's forwarding, not SQS's latency.
``close()`` ends every long poll at once (the benchmark's stop), and ``drained`` is set when the last message
is deleted.
"""

from __future__ import annotations

import collections
import hashlib
import heapq
import itertools
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from botocore.exceptions import ClientError

from worker_tier.testing.queues import _check_batch, _each  # the batch rules, as the testing stand-in keeps them

REGION = "us-east-1"
ACCOUNT = "123456789012"
SENDER_ID = "AIDAWORKERTIERBENCH"
MAX_RECEIVE_MESSAGES = 10
MAX_WAIT_SECONDS = 20
MAX_VISIBILITY_SECONDS = 12 * 60 * 60
MAXIMUM_MESSAGE_SIZE = 256 * 1024
MAX_DELAY_SECONDS = 15 * 60  # SendMessage's DelaySeconds


def _error(code: str, operation: str, message: str = "") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message or code}, "ResponseMetadata": {"HTTPStatusCode": 400}},
                       operation)


@dataclass
class _Message:
    message_id: str
    body: str
    attributes: dict[str, Any]
    sent_ms: int
    visible_at: float = 0.0
    receive_count: int = 0
    first_received_ms: int | None = None
    handle: str = ""
    md5: str = field(default="")


class FastQueue:
    """One standard queue named ``name``; ``clock`` gives monotonic seconds for visibility."""

    def __init__(self, name: str = "bench-forwarding", visibility_timeout: int = 30,
                 clock: Callable[[], float] = time.monotonic, dead_letter_queue: FastQueue | None = None,
                 max_receive_count: int | None = None) -> None:
        if (dead_letter_queue is None) != (max_receive_count is None):
            raise ValueError("a redrive policy needs both dead_letter_queue and max_receive_count, got only one")
        self.dead_letter_queue, self.max_receive_count = dead_letter_queue, max_receive_count
        self.redriven = 0
        self.name = name
        self.url = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"
        self.arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
        self.visibility_timeout = visibility_timeout
        self.clock = clock
        self.drained = threading.Event()
        self.calls: collections.Counter[str] = collections.Counter()
        self._messages: dict[str, _Message] = {}
        self._visible: collections.deque[str] = collections.deque()
        self._hidden: list[tuple[float, int, str, str]] = []  # (visible_at, seq, message id, handle), lazily invalidated
        self._given: set[str] = set()  # every handle ever given: any other is malformed
        self._sequence = itertools.count()
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._closed = False

    # -- the benchmark's own -----------------------------------------------------------------

    def fill(self, bodies: list[str], attributes: dict[str, Any] | None = None) -> None:
        """Put messages in (as SendMessageBatch would), visible at once."""
        self.put(self.stage(bodies, attributes))

    @staticmethod
    def stage(bodies: list[str], attributes: dict[str, Any] | None = None) -> list[_Message]:
        """Messages made ready to ``put``, so that putting them in costs next to nothing."""
        sent_ms = int(time.time() * 1000)
        return [_Message(str(uuid.uuid4()), body, dict(attributes or {}), sent_ms,
                         md5=hashlib.md5(body.encode(), usedforsecurity=False).hexdigest()) for body in bodies]

    def put(self, messages: list[_Message]) -> None:
        """Make staged messages visible at once."""
        with self._lock:
            for message in messages:
                self._messages[message.message_id] = message
                self._visible.append(message.message_id)
            if self._messages:
                self.drained.clear()
            self._arrived.notify_all()

    def close(self) -> None:
        """End every long poll now; later receives answer empty at once."""
        with self._lock:
            self._closed = True
            self._arrived.notify_all()

    def __len__(self) -> int:
        with self._lock:
            return len(self._messages)

    # -- the SQS API (boto3's names and shapes) ----------------------------------------------

    def receive_message(self, QueueUrl: str, MaxNumberOfMessages: int = 1, WaitTimeSeconds: int = 0,
                        VisibilityTimeout: int | None = None, AttributeNames: list[str] | None = None,
                        MessageSystemAttributeNames: list[str] | None = None,
                        MessageAttributeNames: list[str] | None = None, **_: Any) -> dict[str, Any]:
        self._check_url(QueueUrl)
        self.calls["ReceiveMessage"] += 1
        if not 1 <= MaxNumberOfMessages <= MAX_RECEIVE_MESSAGES:
            raise _error("InvalidParameterValue", "ReceiveMessage", f"MaxNumberOfMessages must be 1..{MAX_RECEIVE_MESSAGES}")
        if not 0 <= WaitTimeSeconds <= MAX_WAIT_SECONDS:
            raise _error("InvalidParameterValue", "ReceiveMessage", f"WaitTimeSeconds must be 0..{MAX_WAIT_SECONDS}")
        hidden = self.visibility_timeout if VisibilityTimeout is None else VisibilityTimeout
        if not 0 <= hidden <= MAX_VISIBILITY_SECONDS:
            raise _error("InvalidParameterValue", "ReceiveMessage", f"VisibilityTimeout must be 0..{MAX_VISIBILITY_SECONDS}")
        system = set(AttributeNames or []) | set(MessageSystemAttributeNames or [])
        wanted = MessageAttributeNames or []
        deadline = self.clock() + WaitTimeSeconds
        with self._lock:
            while True:
                now = self.clock()
                self._reveal(now)
                taken = self._take(MaxNumberOfMessages, now, hidden)
                if taken or self._closed or now >= deadline:
                    break
                wake = deadline if not self._hidden else min(deadline, self._hidden[0][0])
                self._arrived.wait(max(0.0, wake - now))
            answer = [self._answer(message, system, wanted) for message in taken]
        return {"Messages": answer} if answer else {}

    def delete_message(self, QueueUrl: str, ReceiptHandle: str, **_: Any) -> dict[str, Any]:
        self._check_url(QueueUrl)
        self.calls["DeleteMessage"] += 1
        with self._lock:
            self._delete(ReceiptHandle, "DeleteMessage")
        return {}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        self._check_url(QueueUrl)
        self.calls["DeleteMessageBatch"] += 1
        _check_batch("DeleteMessageBatch", Entries)
        with self._lock:
            return _each(Entries, lambda entry: self._delete(entry["ReceiptHandle"], "DeleteMessageBatch"))

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        self._check_url(QueueUrl)
        self.calls["SendMessageBatch"] += 1
        _check_batch("SendMessageBatch", Entries)
        successful, failed = [], []
        for entry in Entries:
            delay = entry.get("DelaySeconds", 0)
            if not 0 <= delay <= MAX_DELAY_SECONDS:
                failed.append({"Id": entry["Id"], "SenderFault": True, "Code": "InvalidParameterValue",
                               "Message": f"DelaySeconds must be 0..{MAX_DELAY_SECONDS}, got {delay}"})
                continue
            [message] = self.stage([entry["MessageBody"]], entry.get("MessageAttributes"))
            with self._lock:
                self._messages[message.message_id] = message
                self.drained.clear()
                if delay:
                    self._hide(message, self.clock() + delay)
                else:
                    self._visible.append(message.message_id)
                self._arrived.notify_all()
            successful.append({"Id": entry["Id"], "MessageId": message.message_id, "MD5OfMessageBody": message.md5})
        return {"Successful": successful, "Failed": failed}

    def change_message_visibility(self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int, **_: Any) -> dict[str, Any]:
        self._check_url(QueueUrl)
        self.calls["ChangeMessageVisibility"] += 1
        with self._lock:
            self._change(ReceiptHandle, VisibilityTimeout, "ChangeMessageVisibility")
        return {}

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        self._check_url(QueueUrl)
        self.calls["ChangeMessageVisibilityBatch"] += 1
        _check_batch("ChangeMessageVisibilityBatch", Entries)
        with self._lock:
            return _each(Entries, lambda entry: self._change(entry["ReceiptHandle"], entry["VisibilityTimeout"],
                                                             "ChangeMessageVisibilityBatch"))

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str] | None = None, **_: Any) -> dict[str, Any]:
        self._check_url(QueueUrl)
        self.calls["GetQueueAttributes"] += 1
        with self._lock:
            now = self.clock()
            self._reveal(now)
            visible = sum(1 for message in self._messages.values() if message.visible_at <= now)
            attributes = {"QueueArn": self.arn, "MaximumMessageSize": str(MAXIMUM_MESSAGE_SIZE),
                          "VisibilityTimeout": str(self.visibility_timeout), "ApproximateNumberOfMessages": str(visible),
                          "ApproximateNumberOfMessagesNotVisible": str(len(self._messages) - visible)}
        names = AttributeNames or []
        unknown = [name for name in names if name != "All" and name not in attributes]
        if unknown:
            raise _error("InvalidAttributeName", "GetQueueAttributes", f"unknown attribute names: {unknown}")
        chosen = {name: value for name, value in attributes.items() if "All" in names or name in names}
        return {"Attributes": chosen} if chosen else {}

    # -- helpers (called with the lock held) -----------------------------------------------

    def _check_url(self, url: str) -> None:
        if url != self.url:
            raise _error("AWS.SimpleQueueService.NonExistentQueue", "SQS", f"no queue {url}")

    def _reveal(self, now: float) -> None:
        """Messages whose visibility lapsed become visible again (entries of an older handle or time are dropped)."""
        while self._hidden and self._hidden[0][0] <= now:
            visible_at, _, message_id, handle = heapq.heappop(self._hidden)
            message = self._messages.get(message_id)
            if message is not None and message.handle == handle and message.visible_at == visible_at:
                self._visible.append(message_id)

    def _take(self, count: int, now: float, hidden: float) -> list[_Message]:
        taken: list[_Message] = []
        while self._visible and len(taken) < count:
            message = self._messages.get(self._visible.popleft())
            if message is None or message.visible_at > now:
                continue  # deleted, or hidden again meanwhile
            if self.max_receive_count is not None and message.receive_count >= self.max_receive_count:
                self._redrive(message)
                continue
            message.receive_count += 1
            message.first_received_ms = message.first_received_ms or int(time.time() * 1000)
            message.handle = f"{message.message_id}#{next(self._sequence)}"
            self._given.add(message.handle)
            self._hide(message, now + hidden)
            taken.append(message)
        return taken

    def _redrive(self, message: _Message) -> None:
        """SQS's own move to the dead-letter queue: the message as it was, without a reason."""
        del self._messages[message.message_id]
        self.redriven += 1
        if not self._messages:
            self.drained.set()
        assert self.dead_letter_queue is not None  # set with max_receive_count
        self.dead_letter_queue.put([_Message(message.message_id, message.body, message.attributes, message.sent_ms,
                                             receive_count=message.receive_count, md5=message.md5)])

    def _hide(self, message: _Message, until: float) -> None:
        message.visible_at = until
        heapq.heappush(self._hidden, (until, next(self._sequence), message.message_id, message.handle))

    def _answer(self, message: _Message, system: set[str], wanted: list[str]) -> dict[str, Any]:
        answer: dict[str, Any] = {"MessageId": message.message_id, "ReceiptHandle": message.handle, "Body": message.body,
                                  "MD5OfBody": message.md5}
        every = {"ApproximateReceiveCount": str(message.receive_count), "SentTimestamp": str(message.sent_ms),
                 "ApproximateFirstReceiveTimestamp": str(message.first_received_ms), "SenderId": SENDER_ID}
        attributes = {key: value for key, value in every.items() if "All" in system or key in system}
        if attributes:
            answer["Attributes"] = attributes
        chosen = {name: value for name, value in message.attributes.items()
                  if any(w in ("All", ".*", name) or (w.endswith(".*") and name.startswith(w[:-1])) for w in wanted)}
        if chosen:
            answer["MessageAttributes"] = chosen
        return answer

    def _message_of(self, handle: str, operation: str) -> _Message | None:
        """The message whose current handle this is; None for an earlier handle; ReceiptHandleIsInvalid for any other."""
        if handle not in self._given:
            raise _error("ReceiptHandleIsInvalid", operation, f"the receipt handle {handle!r} is not valid")
        message = self._messages.get(handle.split("#", 1)[0])
        return message if message is not None and message.handle == handle else None

    def _delete(self, handle: str, operation: str) -> None:
        message = self._message_of(handle, operation)
        if message is None:
            return
        del self._messages[message.message_id]
        self._given.discard(handle)
        if not self._messages:
            self.drained.set()

    def _change(self, handle: str, seconds: int, operation: str) -> None:
        if not 0 <= seconds <= MAX_VISIBILITY_SECONDS:
            raise _error("InvalidParameterValue", operation, f"VisibilityTimeout must be 0..{MAX_VISIBILITY_SECONDS}")
        message = self._message_of(handle, operation)
        if message is None:
            raise _error("ReceiptHandleIsInvalid", operation, f"the receipt handle {handle!r} is not a message's current one")
        now = self.clock()
        if message.visible_at <= now:
            raise _error("AWS.SimpleQueueService.MessageNotInflight", operation, "the message is not in flight")
        self._hide(message, now + seconds)
        if seconds == 0:
            self._reveal(now)
            self._arrived.notify_all()
