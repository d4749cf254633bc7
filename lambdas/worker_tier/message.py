"""The wire contract: Elastic Beanstalk sqsd's attributes and Worker Tier's dead-letter reason.

Attributes travel in two shapes. The Lambda SQS event spells them
``{"stringValue": ..., "dataType": ...}``; the SQS API (boto3) spells them
``{"StringValue": ..., "DataType": ...}``. ``sqs_attributes`` converts the
first into the second so a dead-lettered message keeps what it came with.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime, timezone
from typing import Any, Mapping

from worker_tier import limits

# sqsd's attributes: https://docs.aws.amazon.com/elasticbeanstalk/latest/dg/using-features-managing-env-tiers.html
PATH_ATTRIBUTE = "beanstalk.sqsd.path"
TASK_NAME_ATTRIBUTE = "beanstalk.sqsd.task_name"
SCHEDULED_TIME_ATTRIBUTE = "beanstalk.sqsd.scheduled_time"
SCHEDULED_JOB_BODY = "elasticbeanstalk scheduled job"
SCHEDULED_TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"
ROUTING_ATTRIBUTES = (PATH_ATTRIBUTE, TASK_NAME_ATTRIBUTE, SCHEDULED_TIME_ATTRIBUTE)

FAILURE_ATTRIBUTE = "worker_tier.failure"
DUE_AT_ATTRIBUTE = "worker_tier.due_at"
MAX_ERROR_MESSAGE_BYTES = 1024


def event_attribute_value(attribute: Mapping[str, Any]) -> str | None:
    """The String or Number value of a Lambda-event attribute; None for Binary, as sqsd drops it."""
    if str(attribute.get("dataType", "")).split(".")[0] in ("String", "Number"):
        return attribute.get("stringValue")
    return None


def record_path(record: Mapping[str, Any], default_path: str) -> str:
    """A Lambda SQS record's route: its ``beanstalk.sqsd.path`` attribute, else the default (sqsd's HttpPath)."""
    attributes = record.get("messageAttributes")
    routing = attributes.get(PATH_ATTRIBUTE) if attributes else None
    return (routing.get("stringValue") if routing else None) or default_path


def task_attributes(event_attributes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """String and Number attributes of a Lambda SQS record, by name."""
    values = {name: event_attribute_value(attr) for name, attr in event_attributes.items()}
    return {name: value for name, value in values.items() if value is not None}


def sqs_attributes(event_attributes: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Convert Lambda-event message attributes into the SQS API's shape, keeping every type."""
    converted: dict[str, dict[str, Any]] = {}
    for name, attr in event_attributes.items():
        value: dict[str, Any] = {"DataType": attr["dataType"]}
        if attr.get("binaryValue") is not None:
            value["BinaryValue"] = base64.b64decode(attr["binaryValue"])
        else:
            value["StringValue"] = attr.get("stringValue", "")
        converted[name] = value
    return converted


def attribute_bytes(name: str, value: Mapping[str, Any]) -> int:
    """Bytes one SQS-API attribute adds to a message's size (name, type and value)."""
    payload = value.get("StringValue")
    payload_bytes = len(payload.encode("utf-8")) if payload is not None else len(value.get("BinaryValue", b""))
    return len(name.encode("utf-8")) + len(value["DataType"].encode("utf-8")) + payload_bytes


def message_bytes(body: str, attributes: Mapping[str, Mapping[str, Any]]) -> int:
    """A message's size as SQS counts it against its 1 MiB quota."""
    return len(body.encode("utf-8")) + sum(attribute_bytes(n, v) for n, v in attributes.items())


def format_scheduled_time(moment: datetime) -> str:
    """EB's ``beanstalk.sqsd.scheduled_time`` text for an aware datetime."""
    return moment.astimezone(timezone.utc).strftime(SCHEDULED_TIME_FORMAT)


def parse_scheduled_time(text: str | None) -> datetime | None:
    """Parse EB's scheduled-time text; None when absent or not in EB's format."""
    if not text:
        return None
    try:
        return datetime.strptime(text, SCHEDULED_TIME_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def failure_reason(error: BaseException, *, attempts: int, path: str, failed_at: datetime) -> dict[str, Any]:
    """The ``worker_tier.failure`` fields for an error (DESIGN.md, message contract)."""
    return {
        "error_type": type(error).__name__,
        "error_message": _truncate_utf8(str(error), MAX_ERROR_MESSAGE_BYTES),
        "attempts": attempts,
        "failed_at": failed_at.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "path": path,
    }


def dead_letter_attributes(
    original: Mapping[str, Mapping[str, Any]], reason: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The original attributes plus ``worker_tier.failure``, within SQS's 10-attribute quota.

    Routing attributes and the reason are kept first; any attribute that does not
    fit is named in the reason's ``dropped_attributes``.
    """
    routing = [name for name in ROUTING_ATTRIBUTES if name in original]
    others = [name for name in original if name not in ROUTING_ATTRIBUTES and name != FAILURE_ATTRIBUTE]
    room = limits.SQS_MAX_MESSAGE_ATTRIBUTES - 1 - len(routing)
    kept, dropped = routing + others[:room], others[room:]
    if dropped:
        reason = {**reason, "dropped_attributes": dropped}
    attributes = {name: dict(original[name]) for name in kept}
    attributes[FAILURE_ATTRIBUTE] = {"DataType": "String", "StringValue": json.dumps(reason, separators=(",", ":"))}
    return attributes


def _truncate_utf8(text: str, max_bytes: int) -> str:
    """Cut text to at most max_bytes of UTF-8 without splitting a character."""
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    return encoded[: max_bytes - 3].decode("utf-8", errors="ignore") + "..."


def lambda_record(received: dict[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """One Lambda SQS event record, as Lambda builds it from a received message (ReceiveMessage shape)."""
    body = received.get("Body", "")
    return {
        "messageId": received["MessageId"],
        "receiptHandle": received["ReceiptHandle"],
        "body": body,
        "attributes": dict(received.get("Attributes") or {}),
        "messageAttributes": {
            name: _event_attribute(value) for name, value in (received.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": received.get("MD5OfBody") or hashlib.md5(body.encode("utf-8")).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


def _event_attribute(value: dict[str, Any]) -> dict[str, Any]:
    """An SQS API message attribute in the Lambda event's spelling."""
    attribute: dict[str, Any] = {"stringListValues": [], "binaryListValues": [], "dataType": value["DataType"]}
    if "BinaryValue" in value:
        attribute["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
    else:
        attribute["stringValue"] = value.get("StringValue")
    return attribute
