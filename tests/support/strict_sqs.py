"""A strict SQS stand-in: refuses what real SQS refuses and moto (or FakeSQS) accepts.

``StrictSQS(inner)`` wraps any SQS client (``tests.support.fakes.FakeSQS`` or a moto boto3
client), checks the arguments of SendMessage, SendMessageBatch,
ChangeMessageVisibility and ChangeMessageVisibilityBatch against AWS's documented
rules, and forwards what passes. It is the check on ``worker_tier.core.sqs_rules``, so
it is written from the documentation alone and never imports that module.

Refusals take SQS's shapes: a per-entry problem in a batch call is a Failed entry
``{"Id", "Code", "Message", "SenderFault": True}`` (the other entries go on); a
problem with the batch as a whole (entry count, ids, total size) or with a single
call is a botocore ``ClientError`` with SQS's code, as botocore reports it.

Sources:

- https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
  (body characters and size, DelaySeconds, MessageGroupId, MessageDeduplicationId; InvalidMessageContents)
- https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_MessageAttributeValue.html
  (DataType, StringValue, BinaryValue)
- https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
  (entry ids, 10 entries, total size; BatchEntryIdsNotDistinct, BatchRequestTooLong, EmptyBatchRequest,
  InvalidBatchEntryId, TooManyEntriesInBatchRequest)
- https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html
  (0..43,200 s, and never past 12 hours from the receive)
- https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html
  (10 attributes, names, custom types, Number precision and range)
- https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_MessageSystemAttributeValue.html and
  https://docs.aws.amazon.com/xray/latest/devguide/xray-services-sqs.html (MessageSystemAttributes: only
  ``AWSTraceHeader``, a String in X-Ray's trace header format, outside the message's size and its 10 attributes;
  a receive asking for it, or for ``All``, gets it in ``Attributes``)

moto 5.2.5 keeps ``AWSTraceHeader`` from SendMessage but drops it from SendMessageBatch entries; this
stand-in keeps each accepted message's header itself and adds it to the receives that ask for it.

Where the documentation leaves a case open, this stand-in refuses it (stricter
than SQS, never looser): Number values in exponent notation, custom type labels
outside ``[A-Za-z0-9_.-]``, and String list / Binary list values.
"""

from __future__ import annotations

import re
import string
import time
from decimal import Decimal
from typing import Any, Callable, Mapping

from botocore.exceptions import ClientError

DEFAULT_MAXIMUM_MESSAGE_SIZE_BYTES = 1024 * 1024
MAX_ATTRIBUTES = 10
MAX_ATTRIBUTE_NAME_CHARS = 256
MAX_DATA_TYPE_CHARS = 256
MAX_NUMBER_DIGITS = 38
MIN_NUMBER_MAGNITUDE = Decimal(10) ** -128
MAX_NUMBER_MAGNITUDE = Decimal(10) ** 126
MAX_DELAY_SECONDS = 900
MAX_VISIBILITY_SECONDS = 12 * 60 * 60
MAX_BATCH_ENTRIES = 10
MAX_BATCH_ID_CHARS = 80
MAX_GROUP_ID_CHARS = 128
TRACE_HEADER = "AWSTraceHeader"
# X-Ray's header: Root=1-<8 hex time>-<24 hex>, then optional Parent=<16 hex> and Sampled=<0|1|?>, ';'-separated.
_TRACE_HEADER_FORMAT = re.compile(r"Root=1-[0-9a-f]{8}-[0-9a-f]{24}(;(Parent=[0-9a-f]{16}|Sampled=[01?]|[A-Za-z]+=[^;]*))*")

INVALID_PARAMETER = "InvalidParameterValue"
INVALID_CONTENTS = "InvalidMessageContents"
MISSING_PARAMETER = "MissingParameter"
# botocore reports the batch-level codes in their query-compatible spelling.
TOO_MANY_ENTRIES = "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
EMPTY_BATCH = "AWS.SimpleQueueService.EmptyBatchRequest"
IDS_NOT_DISTINCT = "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
BATCH_TOO_LONG = "AWS.SimpleQueueService.BatchRequestTooLong"
INVALID_BATCH_ID = "AWS.SimpleQueueService.InvalidBatchEntryId"


def _allowed_character(c: str) -> bool:
    """XML 1.0 Char: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]."""
    o = ord(c)
    return o in (0x9, 0xA, 0xD) or 0x20 <= o <= 0xD7FF or 0xE000 <= o <= 0xFFFD or 0x10000 <= o <= 0x10FFFF


_NAME_CHARACTERS = frozenset(string.ascii_letters + string.digits + "_-.")
_ID_CHARACTERS = frozenset(string.ascii_letters + string.digits + "_-")
_GROUP_CHARACTERS = frozenset(string.ascii_letters + string.digits + string.punctuation)
_PLAIN_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


class Refusal(Exception):
    """One thing SQS would refuse: its error code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class StrictSQS:
    """Wraps an SQS client and refuses, as SQS does, what moto and the fakes let through.

    A queue is FIFO when ``fifo`` is True or its QueueUrl ends in ``.fifo``. FIFO
    queues here have content-based deduplication off unless
    ``content_based_deduplication`` is True (Worker Tier's stack turns it off).
    ``refused`` lists every refusal as ``(operation, entry id or None, code, message)``.

    Examples
    --------
    >>> from tests.support.fakes import FakeSQS
    >>> strict = StrictSQS(FakeSQS())
    >>> strict.send_message_batch(QueueUrl="q", Entries=[{"Id": "0", "MessageBody": "a\\x00"}])["Failed"][0]["Code"]
    'InvalidMessageContents'
    """

    def __init__(
        self,
        inner: Any,
        *,
        maximum_message_size: int = DEFAULT_MAXIMUM_MESSAGE_SIZE_BYTES,
        fifo: bool = False,
        content_based_deduplication: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.inner = inner
        self.maximum_message_size = maximum_message_size
        self.fifo = fifo
        self.content_based_deduplication = content_based_deduplication
        self.refused: list[tuple[str, str | None, str, str]] = []
        self._clock = clock
        self._received_at: dict[str, float] = {}
        self._trace_headers: dict[str, str] = {}  # message id → the AWSTraceHeader it was sent with

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # -- sends ------------------------------------------------------------------------

    def send_message(self, **params: Any) -> Any:
        """SendMessage, checked; a refusal raises ClientError."""
        self._check_single("SendMessage", lambda: self._message_problems(params, params["QueueUrl"]))
        response = self.inner.send_message(**params)
        self._keep_trace_header(params, response["MessageId"])
        return response

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **rest: Any) -> dict[str, Any]:
        """SendMessageBatch, checked: batch problems raise, entry problems become Failed entries."""
        self._check_single("SendMessageBatch", lambda: self._batch_problems(Entries, "Send", sizes=True))
        response = self._forward_batch(
            "SendMessageBatch", QueueUrl, Entries, lambda e: self._message_problems(e, QueueUrl), rest, self.inner.send_message_batch
        )
        by_id = {entry["Id"]: entry for entry in Entries}
        for sent in response["Successful"]:
            self._keep_trace_header(by_id[sent["Id"]], sent["MessageId"])
        return response

    def _keep_trace_header(self, message: Mapping[str, Any], message_id: str) -> None:
        header = (message.get("MessageSystemAttributes") or {}).get(TRACE_HEADER)
        if header is not None:
            self._trace_headers[message_id] = header["StringValue"]

    # -- visibility -------------------------------------------------------------------

    def receive_message(self, **params: Any) -> Any:
        """ReceiveMessage, forwarded; the receive time of each message is kept for the 12-hour rule."""
        response = self.inner.receive_message(**params)
        now = self._clock()
        asked = {*params.get("MessageSystemAttributeNames", ()), *params.get("AttributeNames", ())}
        for received in response.get("Messages") or []:
            self._received_at[received["ReceiptHandle"]] = now
            header = self._trace_headers.get(received["MessageId"])
            if header is not None and asked & {"All", TRACE_HEADER}:
                received.setdefault("Attributes", {}).setdefault(TRACE_HEADER, header)
        return response

    def change_message_visibility(self, **params: Any) -> Any:
        """ChangeMessageVisibility, checked; a refusal raises ClientError."""
        self._check_single("ChangeMessageVisibility", lambda: self._visibility_problem(params))
        return self.inner.change_message_visibility(**params)

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **rest: Any) -> dict[str, Any]:
        """ChangeMessageVisibilityBatch, checked like SendMessageBatch."""
        self._check_single("ChangeMessageVisibilityBatch", lambda: self._batch_problems(Entries, "ChangeMessageVisibility", sizes=False))
        return self._forward_batch(
            "ChangeMessageVisibilityBatch", QueueUrl, Entries, self._visibility_problem, rest, self.inner.change_message_visibility_batch
        )

    def _visibility_problem(self, params: Mapping[str, Any]) -> None:
        """VisibilityTimeout 0..43,200, and not past 12 hours from a receive this wrapper saw."""
        timeout = params.get("VisibilityTimeout")
        if timeout is None:
            raise Refusal(MISSING_PARAMETER, "The request must contain the parameter VisibilityTimeout.")
        if isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 <= timeout <= MAX_VISIBILITY_SECONDS:
            raise Refusal(INVALID_PARAMETER, f"Value {timeout!r} for parameter VisibilityTimeout is invalid. Reason: must be 0..{MAX_VISIBILITY_SECONDS}.")
        received = self._received_at.get(params.get("ReceiptHandle", ""))
        if received is not None and self._clock() - received + timeout > MAX_VISIBILITY_SECONDS:
            elapsed = self._clock() - received
            raise Refusal(
                INVALID_PARAMETER,
                f"Value {timeout} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message "
                f"is beyond the limit [{MAX_VISIBILITY_SECONDS} seconds] ({elapsed:.0f} s since the receive).",
            )

    # -- the call shapes --------------------------------------------------------------

    def _check_single(self, operation: str, check: Callable[[], None]) -> None:
        """Run a check; a Refusal becomes the ClientError SQS would return."""
        try:
            check()
        except Refusal as refusal:
            self.refused.append((operation, None, refusal.code, str(refusal)))
            raise ClientError({"Error": {"Code": refusal.code, "Message": str(refusal), "Type": "Sender"}}, operation) from None

    def _forward_batch(
        self,
        operation: str,
        queue_url: str,
        entries: list[dict[str, Any]],
        check: Callable[[Mapping[str, Any]], None],
        rest: Mapping[str, Any],
        call: Callable[..., dict[str, Any]],
    ) -> dict[str, Any]:
        """Forward the entries that pass; the others come back as Failed entries with SenderFault True."""
        passed, failed = [], []
        for entry in entries:
            try:
                check(entry)
            except Refusal as refusal:
                self.refused.append((operation, entry["Id"], refusal.code, str(refusal)))
                failed.append({"Id": entry["Id"], "Code": refusal.code, "Message": str(refusal), "SenderFault": True})
            else:
                passed.append(entry)
        response = call(QueueUrl=queue_url, Entries=passed, **rest) if passed else {"Successful": []}
        return {**response, "Successful": list(response.get("Successful") or []), "Failed": list(response.get("Failed") or []) + failed}

    def _batch_problems(self, entries: list[Mapping[str, Any]], action: str, *, sizes: bool) -> None:
        """The batch as a whole: 1..10 entries, valid distinct ids, total size."""
        if not entries:
            raise Refusal(EMPTY_BATCH, f"There should be at least one {action}MessageBatchRequestEntry in the request.")
        if len(entries) > MAX_BATCH_ENTRIES:
            raise Refusal(TOO_MANY_ENTRIES, f"Maximum number of entries per request are {MAX_BATCH_ENTRIES}. You have sent {len(entries)}.")
        ids = [entry.get("Id") for entry in entries]
        for entry_id in ids:
            if not isinstance(entry_id, str) or not 0 < len(entry_id) <= MAX_BATCH_ID_CHARS or not set(entry_id) <= _ID_CHARACTERS:
                raise Refusal(INVALID_BATCH_ID, f"Batch entry id {entry_id!r}: up to {MAX_BATCH_ID_CHARS} alphanumerics, hyphens and underscores.")
        repeated = next((i for i in ids if ids.count(i) > 1), None)
        if repeated is not None:
            raise Refusal(IDS_NOT_DISTINCT, f"Id {repeated} repeated.")
        total = sum(_message_size(entry) for entry in entries) if sizes else 0
        if total > self.maximum_message_size:
            raise Refusal(BATCH_TOO_LONG, f"Batch requests cannot be longer than {self.maximum_message_size} bytes. You have sent {total} bytes.")

    # -- one message ------------------------------------------------------------------

    def _message_problems(self, message: Mapping[str, Any], queue_url: str) -> None:
        """Every rule for one message: body, attributes, size, delay and FIFO ids."""
        _body_problem(message.get("MessageBody"))
        attributes = message.get("MessageAttributes") or {}
        if len(attributes) > MAX_ATTRIBUTES:
            raise Refusal(INVALID_PARAMETER, f"Number of message attributes [{len(attributes)}] exceeds the allowed maximum [{MAX_ATTRIBUTES}].")
        for name, value in attributes.items():
            _name_problem(name)
            _value_problem(name, value)
        _system_attributes_problem(message.get("MessageSystemAttributes"))
        size = _message_size(message)
        if size > self.maximum_message_size:
            raise Refusal(INVALID_PARAMETER, f"One or more parameters are invalid. Reason: Message must be shorter than {self.maximum_message_size} bytes ({size}).")
        self._queue_type_problems(message, self.fifo or queue_url.endswith(".fifo"))

    def _queue_type_problems(self, message: Mapping[str, Any], fifo: bool) -> None:
        """DelaySeconds, MessageGroupId and MessageDeduplicationId for the queue's type."""
        delay = message.get("DelaySeconds")
        if delay is not None and (isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= MAX_DELAY_SECONDS):
            raise Refusal(INVALID_PARAMETER, f"Value {delay!r} for parameter DelaySeconds is invalid. Reason: must be 0..{MAX_DELAY_SECONDS}.")
        for field in ("MessageGroupId", "MessageDeduplicationId"):
            if message.get(field) is not None:
                _group_id_problem(field, message[field])
        if not fifo:
            if message.get("MessageDeduplicationId") is not None:
                raise Refusal(INVALID_PARAMETER, "The request include parameter MessageDeduplicationId that is not valid for this queue type.")
            return
        if delay:
            raise Refusal(INVALID_PARAMETER, f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.")
        if message.get("MessageGroupId") is None:
            raise Refusal(MISSING_PARAMETER, "The request must contain the parameter MessageGroupId.")
        if message.get("MessageDeduplicationId") is None and not self.content_based_deduplication:
            raise Refusal(INVALID_PARAMETER, "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")


def _system_attributes_problem(system: Any) -> None:
    """MessageSystemAttributes: AWSTraceHeader only, a String holding an X-Ray trace header."""
    if system is None:
        return
    for name, value in system.items():
        if name != TRACE_HEADER:
            raise Refusal(INVALID_PARAMETER, f"Message system attribute name '{name}' is invalid; the only one is {TRACE_HEADER}.")
        if value.get("DataType") != "String" or not isinstance(value.get("StringValue"), str):
            raise Refusal(INVALID_PARAMETER, f"Message system attribute '{name}' must be of type String with a StringValue.")
        if not _TRACE_HEADER_FORMAT.fullmatch(value["StringValue"]):
            raise Refusal(INVALID_PARAMETER, f"Message system attribute '{name}' is not a valid X-Ray trace header: {value['StringValue']!r}.")


def _body_problem(body: Any) -> None:
    """MessageBody: a non-empty string of allowed characters."""
    if not isinstance(body, str) or not body:
        raise Refusal(MISSING_PARAMETER, "The request must contain the parameter MessageBody.")
    _characters_problem(body, "MessageBody", INVALID_CONTENTS)


def _characters_problem(text: str, what: str, code: str) -> None:
    """A character outside XML 1.0's Char production."""
    for offset, character in enumerate(text):
        if not _allowed_character(character):
            raise Refusal(code, f"Invalid characters found in {what}: {character!r} (U+{ord(character):04X}) at offset {offset}.")


def _name_problem(name: Any) -> None:
    """Attribute name: 1..256 of [A-Za-z0-9_.-], no leading/trailing/double period, no AWS./Amazon. prefix."""
    ok = (
        isinstance(name, str)
        and 0 < len(name) <= MAX_ATTRIBUTE_NAME_CHARS
        and set(name) <= _NAME_CHARACTERS
        and not name.startswith(".")
        and not name.endswith(".")
        and ".." not in name
        and not name.lower().startswith(("aws.", "amazon."))
    )
    if not ok:
        raise Refusal(INVALID_PARAMETER, f"Message (user) attribute name {name!r} is invalid.")


def _value_problem(name: str, value: Any) -> None:
    """Attribute value: data type, then the value its base type needs."""
    if not isinstance(value, Mapping):
        raise Refusal(INVALID_PARAMETER, f"Message (user) attribute '{name}' must be a MessageAttributeValue.")
    if value.get("StringListValues") or value.get("BinaryListValues"):
        raise Refusal(INVALID_PARAMETER, f"Message (user) attribute '{name}': list values are not implemented by SQS.")
    base = _data_type_base(name, value.get("DataType"))
    if base == "Binary":
        data = value.get("BinaryValue")
        if value.get("StringValue") is not None or not isinstance(data, (bytes, bytearray)) or not data:
            raise Refusal(INVALID_PARAMETER, f"Message (user) attribute '{name}' must contain a non-empty value of type 'Binary'.")
        return
    text = value.get("StringValue")
    if value.get("BinaryValue") is not None or not isinstance(text, str) or not text:
        raise Refusal(INVALID_PARAMETER, f"Message (user) attribute '{name}' must contain a non-empty value of type '{base}'.")
    if base == "Number":
        _number_problem(name, text)
    else:
        _characters_problem(text, f"message attribute '{name}'", INVALID_PARAMETER)


def _data_type_base(name: str, data_type: Any) -> str:
    """String, Number or Binary, from a DataType with an optional '.label' suffix."""
    if isinstance(data_type, str) and 0 < len(data_type) <= MAX_DATA_TYPE_CHARS:
        base, dot, label = data_type.partition(".")
        if base in ("String", "Number", "Binary") and (not dot or (label and set(label) <= _NAME_CHARACTERS)):
            return base
    raise Refusal(INVALID_PARAMETER, f"Message (user) attribute '{name}' has an invalid data type {data_type!r}.")


def _number_problem(name: str, text: str) -> None:
    """Number: a plain decimal, up to 38 significant digits, zero or magnitude 10^-128..10^126."""
    if not _PLAIN_DECIMAL.fullmatch(text):
        raise Refusal(INVALID_PARAMETER, f"Message (user) attribute '{name}' has an invalid Number value {text!r}.")
    mantissa = text.lstrip("+-").replace(".", "").lstrip("0").rstrip("0")
    if not mantissa:
        return  # zero
    magnitude = abs(Decimal(text))
    if len(mantissa) > MAX_NUMBER_DIGITS or not MIN_NUMBER_MAGNITUDE <= magnitude <= MAX_NUMBER_MAGNITUDE:
        raise Refusal(INVALID_PARAMETER, f"Message (user) attribute '{name}' Number value {text!r} is out of range or too precise.")


def _group_id_problem(field: str, value: Any) -> None:
    """MessageGroupId / MessageDeduplicationId: 1..128 of alphanumerics and ASCII punctuation."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_GROUP_ID_CHARS or not set(value) <= _GROUP_CHARACTERS:
        raise Refusal(INVALID_PARAMETER, f"Value {value!r} for parameter {field} is invalid.")


def _message_size(message: Mapping[str, Any]) -> int:
    """Body bytes plus each attribute's name, data type and value bytes (UTF-8)."""
    body = message.get("MessageBody")
    size = len(body.encode("utf-8", "surrogatepass")) if isinstance(body, str) else 0
    for name, value in (message.get("MessageAttributes") or {}).items():
        if not isinstance(value, Mapping):
            continue  # refused by the attribute checks
        size += len(str(name).encode("utf-8", "surrogatepass")) + len(str(value.get("DataType", "")).encode("utf-8"))
        payload = value.get("StringValue") if value.get("StringValue") is not None else value.get("BinaryValue", b"")
        size += len(payload.encode("utf-8", "surrogatepass")) if isinstance(payload, str) else len(payload or b"")
    return size
