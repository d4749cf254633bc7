"""Large payloads: a body too large for its queue lives in S3, and the message carries a pointer to it.

The wire format is AWS's SQS Extended Client's, so Java and Python producers and consumers using AWS's
libraries (``amazon-sqs-java-extended-client-lib``, ``amazon-sqs-extended-client``) and Worker Tier read each
other's messages:

- the body is ``["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": ..., "s3Key": ...}]``
  (the Java client's 1.x class, ``com.amazon.sqs.javamessaging.MessageS3Pointer``, is read too);
- the Number attribute ``ExtendedPayloadSize`` (1.x: ``SQSLargePayloadSize``) holds the body's UTF-8 size.

A message is offloaded when it carries that attribute; the pointer in its body is then the only way to its
body, and ``read`` refuses one it cannot honour with ``PayloadError`` (dead-lettered at once, naming the bucket
and the key): a malformed pointer, a bucket other than this deployment's (a producer must not make the worker
read someone else's bucket), a missing object, a body that is not UTF-8 or over ``payload_max_bytes``. S3's
throttling and 5xx answers are retried with the retry budget ``retry.S3_CALLS``, then raise
``PayloadUnavailableError``, an ordinary (retried) failure.

The object lives as long as its message may: a worker deletes it only after deleting its message as
succeeded (``worker_tier.worker.batch``), a DLQ copy or a redriven message points at the same object, and the
bucket's lifecycle rule (``expiration_days``) removes what a crash left. docs/large-payloads.md has the rules.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from worker_tier.core import contract, wall_clock
from worker_tier.core.aws import LazyClient, error_code, outcome_unknown
from worker_tier.core.errors import PayloadError, PayloadMissingError, PayloadUnavailableError
from worker_tier.core.retry import S3_CALLS

__all__ = [
    "PayloadStore",
    "Pointer",
    "expiration_days",
    "is_offloaded",
    "pointer_of",
    "size_attribute",
]

_log = logging.getLogger(__name__)

# Codes after which another try may work; anything else (AccessDenied, NoSuchBucket...) is said at once.
_TRANSIENT_CODES = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
                              "ThrottlingException", "RequestTimeTooSkewed", "503", "500"})
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
POINTER_CLASSES = (contract.PAYLOAD_POINTER_CLASS, contract.LEGACY_PAYLOAD_POINTER_CLASS)
SIZE_ATTRIBUTES = (contract.PAYLOAD_SIZE_ATTRIBUTE, contract.LEGACY_PAYLOAD_SIZE_ATTRIBUTE)
DAY_SECONDS = 24 * 60 * 60
# What the lifecycle rule adds to the longest life a message can have: a day, so no rounding or clock cuts it short.
LIFECYCLE_MARGIN_DAYS = 1


@dataclass(frozen=True)
class Pointer:
    """Where an offloaded body lives, and its UTF-8 size (None when the message did not say).

    >>> p = Pointer("bucket", "payloads/k", 12)
    >>> p.body()
    '["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": "bucket", "s3Key": "payloads/k"}]'
    >>> p.uri
    's3://bucket/payloads/k'
    """

    bucket: str
    key: str
    size: int | None = None

    def body(self) -> str:
        """The message body that points here, spelled as AWS's Extended Client spells it (``json.dumps``'s defaults)."""
        return json.dumps([contract.PAYLOAD_POINTER_CLASS, {"s3BucketName": self.bucket, "s3Key": self.key}])

    @property
    def uri(self) -> str:
        """``s3://bucket/key``, as reasons and the command line show it."""
        return f"s3://{self.bucket}/{self.key}"


def size_attribute(size: int) -> dict[str, dict[str, str]]:
    """The ``ExtendedPayloadSize`` attribute of an offloaded body of ``size`` bytes, in the SQS API's shape."""
    return {contract.PAYLOAD_SIZE_ATTRIBUTE: {"DataType": "Number", "StringValue": str(size)}}


def is_offloaded(attributes: Mapping[str, Any]) -> bool:
    """True when a message's attributes (SQS API or Lambda event shape) mark its body as a pointer."""
    return contract.PAYLOAD_SIZE_ATTRIBUTE in attributes or contract.LEGACY_PAYLOAD_SIZE_ATTRIBUTE in attributes


def declared_size(attributes: Mapping[str, Any]) -> int | None:
    """The body size the size attribute declares, or None when it is absent or not a whole number."""
    for name in SIZE_ATTRIBUTES:
        value = attributes.get(name)
        if isinstance(value, Mapping):
            raw = value.get("StringValue", value.get("stringValue"))
            try:
                return int(str(raw))
            except ValueError:
                return None
    return None


def pointer_of(body: str, attributes: Mapping[str, Any] | None = None) -> Pointer:
    """The pointer an offloaded message's body holds; PayloadError naming the body's start when it holds none."""
    try:
        parsed = json.loads(body)
    except (TypeError, ValueError, RecursionError):
        parsed = None
    shaped = isinstance(parsed, list) and len(parsed) == 2 and isinstance(parsed[1], dict)
    bucket = parsed[1].get("s3BucketName") if shaped else None
    key = parsed[1].get("s3Key") if shaped else None
    if not shaped or parsed[0] not in POINTER_CLASSES or not isinstance(bucket, str) or not isinstance(key, str) \
            or not bucket or not key:
        shown = str(body)[:120] + ("..." if len(str(body)) > 120 else "")
        raise PayloadError(
            f"the message carries {contract.PAYLOAD_SIZE_ATTRIBUTE}, so its body must be an S3 pointer "
            f'["{contract.PAYLOAD_POINTER_CLASS}", {{"s3BucketName": ..., "s3Key": ...}}], got {shown!r}'
        )
    return Pointer(bucket, key, declared_size(attributes or {}))


def uploaded_ms(body: str, attributes: Mapping[str, Any]) -> int | None:
    """When a delayed message's offloaded body was uploaded (epoch ms, from its key), or None: not offloaded, or not
    under ``DELAYED_PAYLOAD_KEY_PREFIX`` as a Worker Tier producer names it.

    >>> uploaded_ms(Pointer("b", "payloads/delayed/1800000000000-9f1c").body(), size_attribute(3))
    1800000000000
    """
    if not is_offloaded(attributes):
        return None
    try:
        key = pointer_of(body, attributes).key
    except PayloadError:
        return None
    stamp = key[len(contract.DELAYED_PAYLOAD_KEY_PREFIX):].partition("-")[0]
    return int(stamp) if key.startswith(contract.DELAYED_PAYLOAD_KEY_PREFIX) and stamp.isdigit() else None


def expiration_days(retention_seconds: int, dead_letter_retention_seconds: int, longest_delay_seconds: int) -> int:
    """The payload bucket's lifecycle expiration: the longest a message can live, in whole days, plus a margin.

    A message waits up to ``longest_delay_seconds`` (the delay table's 366 days, or none), lives in the queue for its
    retention, in the DLQ for the DLQ's, and once redriven for the queue's retention again; a day is added.

    >>> expiration_days(4 * 86400, 14 * 86400, 0)
    23
    """
    seconds = longest_delay_seconds + 2 * retention_seconds + dead_letter_retention_seconds
    return -(-seconds // DAY_SECONDS) + LIFECYCLE_MARGIN_DAYS


class PayloadStore:
    """The payload bucket: put a body and get its pointer, read a pointer's body, delete an object.

    ``s3`` is a boto3 S3 client (created on first use when not given); ``max_bytes`` is the largest body
    put or read (``payload_max_bytes``).
    """

    def __init__(self, bucket: str, s3: Any = None, *, max_bytes: int | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] | None = None) -> None:
        from worker_tier.core.settings import DEFAULT_PAYLOAD_MAX_BYTES

        self.bucket = bucket
        self.max_bytes = DEFAULT_PAYLOAD_MAX_BYTES if max_bytes is None else max_bytes
        self._s3 = LazyClient("s3", s3)
        self._sleep = sleep
        self._clock = clock or wall_clock.now  # the upload time a delayed body's key carries

    def put(self, body: str, *, delayed: bool = False) -> Pointer:
        """Upload ``body`` under a fresh key and return its pointer; PayloadUnavailableError when S3 does not take it.

        A delayed message's body goes under ``DELAYED_PAYLOAD_KEY_PREFIX``, its key starting with the upload's epoch
        milliseconds (``uploaded_ms``): a reschedule is bounded by what the object's lifecycle covers from then.
        """
        data = body.encode("utf-8")
        if delayed:
            key = f"{contract.DELAYED_PAYLOAD_KEY_PREFIX}{int(self._clock() * 1000)}-{uuid.uuid4()}"
        else:
            key = f"{contract.PAYLOAD_KEY_PREFIX}{uuid.uuid4()}"
        pointer = Pointer(self.bucket, key, len(data))
        self._call(lambda: self._s3.get().put_object(Bucket=self.bucket, Key=pointer.key, Body=data), "put", pointer)
        return pointer

    def put_at(self, key: str, body: str) -> Pointer:
        """Upload ``body`` under ``key`` (a tracked job's result: ``contract.JOB_RESULT_KEY_PREFIX``); its pointer."""
        data = body.encode("utf-8")
        pointer = Pointer(self.bucket, key, len(data))
        self._call(lambda: self._s3.get().put_object(Bucket=self.bucket, Key=key, Body=data), "put", pointer)
        return pointer

    def read(self, body: str, attributes: Mapping[str, Any]) -> tuple[str, Pointer]:
        """An offloaded message's real body and its pointer; PayloadError when it cannot be honoured (see the module)."""
        pointer = pointer_of(body, attributes)
        return self.get(pointer), pointer

    def get(self, pointer: Pointer) -> str:
        """The body at ``pointer``; PayloadError for another bucket, a missing object, a body too large or not UTF-8."""
        if pointer.bucket != self.bucket:
            raise PayloadError(
                f"the message points at {pointer.uri}, outside this deployment's payload bucket {self.bucket!r}: "
                "a worker reads only its own bucket; send large bodies through that bucket"
            )
        if pointer.size is not None and pointer.size > self.max_bytes:
            raise PayloadError(self._too_large(pointer, pointer.size))
        try:
            response = self._call(lambda: self._s3.get().get_object(Bucket=pointer.bucket, Key=pointer.key), "get", pointer)
        except PayloadUnavailableError as error:
            if error_code(error.__cause__ or error) in _MISSING_CODES:
                raise PayloadMissingError(
                    f"the message's body is missing from S3: no object {pointer.uri} (deleted after an earlier copy of "
                    "this message succeeded, expired by the bucket's lifecycle rule, or never uploaded)"
                ) from error
            raise
        length = response.get("ContentLength")
        if isinstance(length, int) and length > self.max_bytes:
            response["Body"].close()
            raise PayloadError(self._too_large(pointer, length))
        data: bytes = response["Body"].read()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise PayloadError(f"the body at {pointer.uri} is not UTF-8 text ({error.reason} at byte {error.start}); "
                               "an SQS body is text") from None

    def refresh(self, pointer: Pointer) -> bool:
        """Restart the object's lifecycle clock: copy it onto itself (a new object, created now), so the bucket's rule
        counts its days from this moment. For an object whose message starts a new life (a DLQ copy, a retry re-sent
        through the delay table), whose age the rule would otherwise count from the first upload. False (logged) when
        S3 did not copy it (the object keeps its first upload's date), or it lies in another bucket."""
        if pointer.bucket != self.bucket:  # another bucket's object is not this deployment's to keep
            return False
        from datetime import datetime, timezone

        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            self._call(lambda: self._s3.get().copy_object(
                Bucket=pointer.bucket, Key=pointer.key, CopySource={"Bucket": pointer.bucket, "Key": pointer.key},
                MetadataDirective="REPLACE", Metadata={"worker-tier-kept-at": now}), "keep", pointer)
            return True
        except PayloadUnavailableError as error:
            _log.warning("could not restart the lifecycle clock of the payload %s (%s)", pointer.uri, error)
            return False

    def delete(self, pointer: Pointer) -> bool:
        """Delete the object; False (logged) when S3 refused or did not answer: the lifecycle rule removes it later."""
        try:
            self._call(lambda: self._s3.get().delete_object(Bucket=pointer.bucket, Key=pointer.key), "delete", pointer)
            return True
        except PayloadUnavailableError as error:
            _log.warning("could not delete the payload %s (%s); the bucket's lifecycle rule will", pointer.uri, error)
            return False

    def _too_large(self, pointer: Pointer, size: int) -> str:
        return (f"the body at {pointer.uri} is {size} bytes, over payload_max_bytes {self.max_bytes} (a worker holds a "
                "body in memory); raise payload_max_bytes (with the worker's memory) or send a smaller body")

    def _call(self, call: Callable[[], Any], what: str, pointer: Pointer) -> Any:
        """``call()``, retried while S3 throttles or fails on its side; PayloadUnavailableError naming the object."""
        try:
            return S3_CALLS.call(call, give_up=lambda error: not _transient(error), sleep=self._sleep)
        except Exception as error:
            raise PayloadUnavailableError(
                f"S3 could not {what} the payload {pointer.uri} ({error_code(error)}: {error})"
            ) from error


def _transient(error: Exception) -> bool:
    """True when another try of an S3 call may work: throttling, a 5xx, a lost answer."""
    return error_code(error) in _TRANSIENT_CODES or outcome_unknown(error)
