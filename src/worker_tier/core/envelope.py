"""One SQS message, as Worker Tier sends and receives it: ``Envelope``.

An envelope holds a message's body, its attributes in the SQS API's shape (``{"DataType": ...,
"StringValue" | "BinaryValue": ...}``: the user's and the reserved ``beanstalk.sqsd.*`` and
``worker_tier.*`` ones) and its system attributes (``AWSTraceHeader``). Everything that turns a
message into a SendMessage request or a SendMessageBatch entry goes through it
(``Envelope.request``, ``Envelope.entry``), and so does everything that reads one back to send
it again: a Lambda SQS record (``Envelope.from_record``) or a ReceiveMessage message
(``Envelope.from_received``, and ``lambda_record``, the record Lambda would build from it).

SQS's two quotas are counted once: attributes per message (``limits.attribute_room``, which this module
and the producer's checks share; system attributes do not count) and bytes per message, here (``message_bytes``: the body's UTF-8 plus each
attribute's name, data type and value; system attributes do not count either).

The worker's hot path reads a record's path and body in place (``Worker._process_record``):
an envelope is built only for a message that is sent again (forwarded, dead-lettered).
"""

from __future__ import annotations

import base64
import json
from typing import Any, Mapping

from worker_tier.core.contract import FAILURE_ATTRIBUTE, KEPT_ATTRIBUTES
from worker_tier.core.errors import MessageError
from worker_tier.core.limits import attribute_room

__all__ = [
    "Envelope",
    "attribute_bytes",
    "body_md5",
    "dead_letter_attributes",
    "lambda_record",
    "message_bytes",
    "sqs_attributes",
]




def attribute_bytes(name: str, value: Mapping[str, Any]) -> int:
    """Bytes one SQS-API attribute adds to a message's size (name, type and value)."""
    payload = value.get("StringValue")
    payload_bytes = len(payload.encode("utf-8")) if payload is not None else len(value.get("BinaryValue", b""))
    return len(name.encode("utf-8")) + len(value["DataType"].encode("utf-8")) + payload_bytes


def message_bytes(body: str, attributes: Mapping[str, Mapping[str, Any]]) -> int:
    """A message's size as SQS counts it against its MaximumMessageSize: the body's UTF-8 plus each attribute's
    name, data type and value (system attributes are not counted).

    Examples
    --------
    >>> message_bytes("é", {"k": {"DataType": "String", "StringValue": "v"}})
    10
    """
    return len(body.encode("utf-8")) + sum(attribute_bytes(n, v) for n, v in attributes.items())


class Envelope:
    """One SQS message: ``body``, ``attributes`` (SQS API shape, by name) and ``system_attributes``
    (``MessageSystemAttributes``, such as ``AWSTraceHeader``; None when it has none).

    Examples
    --------
    >>> envelope = Envelope("hi", {"beanstalk.sqsd.path": {"DataType": "String", "StringValue": "/a"}})
    >>> envelope.size(), envelope.room()
    (29, 9)
    >>> sorted(envelope.entry("0", DelaySeconds=5))
    ['DelaySeconds', 'Id', 'MessageAttributes', 'MessageBody']
    """

    __slots__ = ("attributes", "body", "system_attributes")

    def __init__(
        self,
        body: str,
        attributes: dict[str, dict[str, Any]] | None = None,
        system_attributes: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.body = body
        self.attributes: dict[str, dict[str, Any]] = {} if attributes is None else attributes
        self.system_attributes = system_attributes

    def __repr__(self) -> str:
        return f"Envelope(body={self.body[:40]!r}, attributes={sorted(self.attributes)}, system_attributes={self.system_attributes!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Envelope):
            return NotImplemented
        return (self.body, self.attributes, self.system_attributes) == (other.body, other.attributes, other.system_attributes)

    __hash__ = None  # type: ignore[assignment]  # mutable: its attributes change (Worker._carry_source_id)

    @classmethod
    def from_record(cls, record: Mapping[str, Any], body: str | None = None) -> tuple[Envelope, list[str]]:
        """A Lambda SQS record's message, to send again, and the names of the attributes SQS would refuse (left out).

        ``body`` replaces the record's (a task's body unwrapped from its SNS envelope). The record's system
        attributes (``attributes``: SentTimestamp, AWSTraceHeader...) are SQS's account of that receive, not
        part of the message: they are not carried.
        """
        attributes, dropped = sqs_attributes(record.get("messageAttributes") or {})
        return cls((record.get("body") or "") if body is None else body, attributes), dropped

    @classmethod
    def from_received(cls, received: Mapping[str, Any]) -> Envelope:
        """A ReceiveMessage message's body and attributes (already in the SQS API's shape)."""
        return cls(received.get("Body", ""), dict(received.get("MessageAttributes") or {}))

    @classmethod
    def dead_letter(cls, body: str, original: Mapping[str, Mapping[str, Any]], reason: dict[str, Any]) -> Envelope:
        """A DLQ copy: ``body`` with ``dead_letter_attributes(original, reason)``."""
        return cls(body, dead_letter_attributes(original, reason))

    def room(self, reserved: int = 0) -> int:
        """How many more attributes this message can carry, keeping ``reserved`` (``attribute_room``)."""
        return attribute_room(len(self.attributes), reserved)

    def size(self) -> int:
        """Its size as SQS counts it against a queue's MaximumMessageSize (``message_bytes``)."""
        return message_bytes(self.body, self.attributes)

    def checked_size(self, limit: int, *, extra: int = 0, what: str = "") -> int:
        """Its size plus ``extra`` bytes still to be added; MessageError when over the queue's ``limit``."""
        size = message_bytes(self.body, self.attributes) + extra
        if size > limit:
            raise MessageError(
                f"message is {size} bytes with its attributes{' ' + what if what else ''}; "
                f"the queue allows at most {limit} (MaximumMessageSize)"
            )
        return size

    def request(self, queue_url: str, **options: Any) -> dict[str, Any]:
        """SendMessage's arguments: the queue, this message, and ``options`` (MessageGroupId, DelaySeconds...)."""
        return self._fields({"QueueUrl": queue_url, **options})

    def entry(self, entry_id: str, **options: Any) -> dict[str, Any]:
        """A SendMessageBatch entry: its ``Id``, this message, and ``options`` (DelaySeconds, MessageGroupId...)."""
        return self._fields({"Id": entry_id, **options})

    def _fields(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` plus the message: the one place a request's MessageBody is written."""
        fields["MessageBody"] = self.body
        fields["MessageAttributes"] = self.attributes
        if self.system_attributes:
            fields["MessageSystemAttributes"] = self.system_attributes
        return fields

    def lambda_record(self, received: Mapping[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
        """The Lambda SQS event record of this message as ``received`` (its id, receipt handle and system attributes)."""
        return _record(self.body, self.attributes, received, queue_arn, region)


def lambda_record(received: Mapping[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """One Lambda SQS event record, as Lambda builds it from a received message (ReceiveMessage shape).

    ``Envelope.from_received(received).lambda_record(received, ...)``, without the envelope: the container
    worker builds one per message.
    """
    return _record(received.get("Body", ""), received.get("MessageAttributes") or {}, received, queue_arn, region)


def _record(
    body: str, attributes: Mapping[str, Mapping[str, Any]], received: Mapping[str, Any], queue_arn: str, region: str
) -> dict[str, Any]:
    """A Lambda SQS event record: ``body`` and ``attributes`` in the event's spelling, the rest from ``received``."""
    return {
        "messageId": received["MessageId"],
        "receiptHandle": received["ReceiptHandle"],
        "body": body,
        "attributes": dict(received.get("Attributes") or {}),
        "messageAttributes": {name: _event_attribute(value) for name, value in attributes.items()},
        "md5OfBody": received.get("MD5OfBody") or body_md5(body),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


def sqs_attributes(event_attributes: Any) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Convert Lambda-event message attributes into the SQS API's shape, keeping every type.

    Returns the converted attributes and the names of those SQS would refuse (a
    bad name, an unknown data type, a Binary value that is not base64, a String
    with no stringValue...): those are left out and named, never raised.
    """
    from worker_tier.core import sqs_rules  # only the dead-letter and forward paths pay for it

    if not isinstance(event_attributes, Mapping):
        return {}, []
    converted: dict[str, dict[str, Any]] = {}
    dropped: list[str] = []
    for name, attr in event_attributes.items():
        value = _api_attribute(attr)
        if value is None or sqs_rules.attribute_name_problem(name) or sqs_rules.attribute_value_problem(name, value):
            dropped.append(str(name))
        else:
            converted[name] = value
    return converted, dropped


def _api_attribute(attr: Any) -> dict[str, Any] | None:
    """One Lambda-event attribute in the SQS API's shape, or None when it cannot be converted."""
    if not isinstance(attr, Mapping):
        return None
    data_type = attr.get("dataType")
    if str(data_type).partition(".")[0] != "Binary":
        return {"DataType": data_type, "StringValue": attr.get("stringValue")}
    try:
        return {"DataType": data_type, "BinaryValue": base64.b64decode(attr.get("binaryValue") or "", validate=True)}
    except (TypeError, ValueError):  # binascii.Error is a ValueError
        return None


def _event_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    """An SQS API message attribute in the Lambda event's spelling."""
    attribute: dict[str, Any] = {"stringListValues": [], "binaryListValues": [], "dataType": value["DataType"]}
    if "BinaryValue" in value:
        attribute["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
    else:
        attribute["stringValue"] = value.get("StringValue")
    return attribute


def dead_letter_attributes(
    original: Mapping[str, Mapping[str, Any]], reason: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The original attributes plus ``worker_tier.failure``, within SQS's 10-attribute quota.

    The routing attributes, the Extended Client's size attribute (``contract.KEPT_ATTRIBUTES``) and the reason are
    kept first; any attribute that does not
    fit is named in the reason's ``dropped_attributes``.
    """
    routing = [name for name in KEPT_ATTRIBUTES if name in original]
    others = [name for name in original if name not in KEPT_ATTRIBUTES and name != FAILURE_ATTRIBUTE]
    room = attribute_room(len(routing), reserved=1)
    kept, dropped = routing + others[:room], others[room:]
    if dropped:
        reason = {**reason, "dropped_attributes": [*reason.get("dropped_attributes", []), *dropped]}
    attributes = {name: dict(original[name]) for name in kept}
    attributes[FAILURE_ATTRIBUTE] = {"DataType": "String", "StringValue": json.dumps(reason, separators=(",", ":"))}
    return attributes


def body_md5(body: str) -> str:
    """The hex MD5 of a body's UTF-8, as SQS reports it (``MD5OfBody``); hashlib (OpenSSL, ~5 ms) is imported only
    when one is computed, off the handler's cold start."""
    import hashlib

    return hashlib.md5(body.encode("utf-8"), usedforsecurity=False).hexdigest()
