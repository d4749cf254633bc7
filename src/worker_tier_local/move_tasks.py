"""SQS's message move tasks (a DLQ redrive) for the local environment, which moto's server does not implement.

moto 5 answers StartMessageMoveTask, ListMessageMoveTasks and CancelMessageMoveTask with HTTP 500 and a
traceback in the terminal running ``make run``. ``MoveTasks`` is a WSGI middleware in front of moto's app that
answers these three itself (SQS's JSON protocol, ``X-Amz-Target: AmazonSQS.<Action>``) and passes every other
request to moto. A task moves the messages of its source queue, as they are (body and attributes, a reason
included), to ``DestinationArn`` or else to the queue whose RedrivePolicy names the source as its DLQ, through
moto's own SQS API, in a thread: receive, send, delete. Like SQS it moves the messages counted when it
started (``ApproximateNumberOfMessagesToMove``), at most ``MaxNumberOfMessagesPerSecond`` a second, one task
per source queue at a time, and names a task's handle only while it runs.

https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html
https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ListMessageMoveTasksResultEntry.html
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from worker_tier.core import limits
from worker_tier.core.envelope import Envelope

TARGET_PREFIX = "AmazonSQS."
ACTIONS = ("StartMessageMoveTask", "ListMessageMoveTasks", "CancelMessageMoveTask")
RUNNING, COMPLETED, CANCELLING, CANCELLED, FAILED = "RUNNING", "COMPLETED", "CANCELLING", "CANCELLED", "FAILED"
MAX_LISTED_TASKS = 10  # ListMessageMoveTasks' MaxResults: 1 (the default) to 10
MOVE_VISIBILITY_SECONDS = 30  # a received message's hold while it is sent and deleted
JSON_CONTENT_TYPE = "application/x-amz-json-1.0"

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


# StartMessageMoveTask's MaxNumberOfMessagesPerSecond range:
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html
MIN_MOVE_RATE, MAX_MOVE_RATE = 1, 500


class MoveTaskError(Exception):
    """A request SQS would refuse: its error code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class MoveTask:
    """One message move task and its counts, as ListMessageMoveTasks shows it."""

    handle: str
    source_arn: str
    destination_arn: str  # the queue it moves to: the one asked for, else the source's redrive source
    asked_destination: bool
    rate: int | None
    to_move: int
    started_ms: int
    status: str = RUNNING
    moved: int = 0
    failure: str = ""
    cancel: threading.Event = field(default_factory=threading.Event)

    def entry(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"Status": self.status, "SourceArn": self.source_arn, "ApproximateNumberOfMessagesMoved": self.moved,
                                 "ApproximateNumberOfMessagesToMove": self.to_move, "StartedTimestamp": self.started_ms}
        if self.asked_destination:  # SQS names the destination only when the request did
            shown["DestinationArn"] = self.destination_arn
        if self.status == RUNNING:
            shown["TaskHandle"] = self.handle
        if self.rate is not None:
            shown["MaxNumberOfMessagesPerSecond"] = self.rate
        if self.failure:
            shown["FailureReason"] = self.failure
        return shown


class MoveTasks:
    """The WSGI middleware: the three move-task actions answered here, everything else by ``app`` (moto's)."""

    def __init__(self, app: Callable[..., Iterable[bytes]], sqs_factory: Callable[[], Any],
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self.app = app
        self._sqs_factory = sqs_factory  # an SQS client on this same server, made when the first task starts
        self._clock, self._sleep = clock, sleep
        self._tasks: list[MoveTask] = []
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        action = str(environ.get("HTTP_X_AMZ_TARGET", "")).removeprefix(TARGET_PREFIX)
        if action not in ACTIONS:
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        request = json.loads(environ["wsgi.input"].read(length) or b"{}")
        try:
            answer, status = getattr(self, _snake(action))(request), "200 OK"
        except MoveTaskError as error:
            answer, status = {"__type": f"com.amazonaws.sqs#{error.code}", "message": str(error)}, "400 Bad Request"
        body = json.dumps(answer).encode()
        start_response(status, [("Content-Type", JSON_CONTENT_TYPE), ("Content-Length", str(len(body)))])
        return [body]

    def start_message_move_task(self, request: dict[str, Any]) -> dict[str, Any]:
        rate = request.get("MaxNumberOfMessagesPerSecond")
        if rate is not None and not (isinstance(rate, int) and MIN_MOVE_RATE <= rate <= MAX_MOVE_RATE):
            raise MoveTaskError("InvalidParameterValue", f"MaxNumberOfMessagesPerSecond must be {MIN_MOVE_RATE} to "
                                                         f"{MAX_MOVE_RATE}, got {rate!r}")
        sqs, source = self._sqs_factory(), str(request.get("SourceArn") or "")
        source_url = _queue_url(sqs, source)
        asked = bool(request.get("DestinationArn"))
        destination = str(request["DestinationArn"]) if asked else _redrive_source(sqs, source)
        _queue_url(sqs, destination)
        with self._lock:
            if any(t.source_arn == source and t.status in (RUNNING, CANCELLING) for t in self._tasks):
                raise MoveTaskError("UnsupportedOperation", f"a message move task is already running on {source}")
            counts = sqs.get_queue_attributes(QueueUrl=source_url, AttributeNames=["ApproximateNumberOfMessages"])
            task = MoveTask(uuid.uuid4().hex, source, destination, asked, int(rate) if rate is not None else None,
                            int(counts["Attributes"]["ApproximateNumberOfMessages"]), int(self._clock() * 1000))
            self._tasks.insert(0, task)
        threading.Thread(target=self._run, args=(task, sqs, source_url), name="move-task", daemon=True).start()
        return {"TaskHandle": task.handle}

    def list_message_move_tasks(self, request: dict[str, Any]) -> dict[str, Any]:
        source = str(request.get("SourceArn") or "")
        _queue_url(self._sqs_factory(), source)
        most = max(1, min(MAX_LISTED_TASKS, int(request.get("MaxResults") or 1)))
        with self._lock:
            return {"Results": [t.entry() for t in self._tasks if t.source_arn == source][:most]}

    def cancel_message_move_task(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            task = next((t for t in self._tasks if t.handle == request.get("TaskHandle") and t.status == RUNNING), None)
            if task is None:
                raise MoveTaskError("ResourceNotFoundException", f"no running message move task has handle {request.get('TaskHandle')!r}")
            task.status = CANCELLING
            task.cancel.set()
            return {"ApproximateNumberOfMessagesMoved": task.moved}

    def _run(self, task: MoveTask, sqs: Any, source_url: str) -> None:
        """Move the task's messages, then settle its status."""
        try:
            _move(task, sqs, source_url, _queue_url(sqs, task.destination_arn), self._sleep)
            final = CANCELLED if task.cancel.is_set() else COMPLETED
        except Exception as error:  # shown as the task's FailureReason, as SQS shows why a task failed
            final, task.failure = FAILED, f"{type(error).__name__}: {error}"
        with self._lock:
            task.status = final


def _move(task: MoveTask, sqs: Any, source_url: str, destination_url: str, sleep: Callable[[float], None]) -> None:
    """Receive, send and delete, a batch at a time, until the messages counted at the start are moved."""
    fifo = destination_url.endswith(".fifo")
    while task.moved < task.to_move and not task.cancel.is_set():
        batch = min(limits.SQS_MAX_BATCH_ENTRIES, task.to_move - task.moved, task.rate or limits.SQS_MAX_BATCH_ENTRIES)
        received = sqs.receive_message(QueueUrl=source_url, MaxNumberOfMessages=batch, VisibilityTimeout=MOVE_VISIBILITY_SECONDS,
                                       MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]).get("Messages") or []
        if not received:
            return
        for message in received:
            sqs.send_message(**Envelope(message["Body"], _attributes(message)).request(destination_url,
                                                                                        **_fifo_options(message, fifo)))
            sqs.delete_message(QueueUrl=source_url, ReceiptHandle=message["ReceiptHandle"])
            task.moved += 1
        if task.rate:
            sleep(len(received) / task.rate)


def _attributes(message: dict[str, Any]) -> dict[str, Any]:
    """A received message's attributes as SendMessage takes them."""
    return {name: {k: v for k, v in value.items() if k in ("DataType", "StringValue", "BinaryValue")}
            for name, value in (message.get("MessageAttributes") or {}).items()}


def _fifo_options(message: dict[str, Any], fifo: bool) -> dict[str, str]:
    if not fifo:
        return {}
    system = message.get("Attributes") or {}
    return {"MessageGroupId": system.get("MessageGroupId", "moved"), "MessageDeduplicationId": message["MessageId"]}


def _queue_url(sqs: Any, arn: str) -> str:
    """The URL of the queue ``arn`` names; MoveTaskError when there is none."""
    parts = arn.split(":")
    if len(parts) != 6 or parts[2] != "sqs":
        raise MoveTaskError("InvalidParameterValue", f"not an SQS queue ARN: {arn!r}")
    try:
        return str(sqs.get_queue_url(QueueName=parts[5], QueueOwnerAWSAccountId=parts[4])["QueueUrl"])
    except Exception as error:
        raise MoveTaskError("ResourceNotFoundException", f"no queue {arn}: {error}") from None


def _redrive_source(sqs: Any, dead_letter_arn: str) -> str:
    """The queue whose RedrivePolicy sends its dead letters to ``dead_letter_arn``: where a move without a destination goes."""
    for url in sqs.list_queues().get("QueueUrls") or []:
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn", "RedrivePolicy"])["Attributes"]
        policy = json.loads(attributes.get("RedrivePolicy") or "{}")
        if policy.get("deadLetterTargetArn") == dead_letter_arn:
            return str(attributes["QueueArn"])
    raise MoveTaskError("InvalidParameterValue", f"{dead_letter_arn} is no queue's dead-letter queue; give DestinationArn")


def _snake(action: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in action).lstrip("_")
