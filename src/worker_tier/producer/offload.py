"""The producer's side of large payloads: a body too large for its queue goes to the payload bucket first.

``Offloader.fit`` decides, message by message, and uploads (``worker_tier.core.payloads.PayloadStore``): a message
(body and attributes, ``message_bytes``) over the queue's MaximumMessageSize, over ``payload_threshold`` when one
is set, or whose delay-table item would be over the item limit, has its body put under ``payloads/<uuid>`` (sent
now) or ``payloads/delayed/<uuid>`` (delayed), and carries the Extended Client's pointer and ``ExtendedPayloadSize``
instead. A message already carrying the size attribute (the worker re-sending a retry) is never offloaded again.

An upload belongs to one ``send_batch`` call (``Uploads``): once the call knows each message's fate, an object
whose message was not sent or stored (refused, deduplicated by an earlier send, an error after the upload) is
deleted at once and counted as an orphan (``Offloader.orphans``, a warning naming the key, and the
``PayloadOrphans`` metric when a worker's task sends); one whose send's outcome is unknown is kept, since SQS or
the delay table may have the message. A crash between the upload and the send leaves the object to the bucket's
lifecycle rule (``payloads.expiration_days``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from worker_tier.core import contract, limits, observability, payloads
from worker_tier.core.aws import OUTCOME_UNKNOWN_ERRORS
from worker_tier.core.envelope import Envelope
from worker_tier.core.errors import MessageError, PayloadError
from worker_tier.core.payloads import PayloadStore, Pointer
from worker_tier.core.settings import DEFAULT_PAYLOAD_MAX_BYTES

__all__ = ["MAX_BYTES_VARIABLE", "PAYLOAD_UNAVAILABLE_CODE", "THRESHOLD_VARIABLE", "Offloader", "Uploads"]

_log = logging.getLogger(__name__)

THRESHOLD_VARIABLE = contract.setting_variable("payload_threshold")
MAX_BYTES_VARIABLE = contract.setting_variable("payload_max_bytes")
# The ranges Settings allows (worker_tier.core.settings): a threshold up to SQS's largest message, a body up to the
# Extended Client's 2 GB.
THRESHOLD_RANGE = (0, limits.SQS_MAX_MESSAGE_BYTES)
MAX_BYTES_RANGE = (limits.SQS_MIN_MAXIMUM_MESSAGE_SIZE_BYTES, limits.EXTENDED_CLIENT_MAX_PAYLOAD_BYTES)
# S3 did not take a body (throttling, 5xx, after PayloadStore's retries): the message was not sent; retry.
PAYLOAD_UNAVAILABLE_CODE = "PayloadUnavailable"
# Codes after which a store in the delay table may still have happened (a lost answer, a 5xx): its object is kept.
MAYBE_STORED_CODES = frozenset({*OUTCOME_UNKNOWN_ERRORS, "InternalServerError", "ServiceUnavailable"})
# The fix a too-large message's error names when the Client has no bucket.
BUCKET_FIX = f"set {contract.PAYLOAD_BUCKET_VARIABLE} (or pass payload_bucket=) to send larger bodies through S3"


def check_settings(bucket: Any, threshold: Any, max_bytes: Any) -> None:
    """MessageError for a payload_bucket, payload_threshold or payload_max_bytes of the wrong type or out of range."""
    if bucket is not None and (not isinstance(bucket, str) or not bucket):
        raise MessageError(f"payload_bucket must be an S3 bucket name or None, got {bucket!r:.60}")
    for name, value, (low, high) in (("payload_threshold", threshold, THRESHOLD_RANGE),
                                     ("payload_max_bytes", max_bytes, MAX_BYTES_RANGE)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise MessageError(f"{name} must be a whole number {low}..{high} (bytes), got {value!r:.60}")
    if threshold and bucket is None:
        raise MessageError(f"payload_threshold {threshold} needs a payload bucket to offload to; pass payload_bucket= "
                           f"(or set {contract.PAYLOAD_BUCKET_VARIABLE}), or leave payload_threshold 0")


def settings_from_env(environ: Mapping[str, str]) -> dict[str, int]:
    """payload_threshold and payload_max_bytes from their variables, when set; MessageError naming a bad one.

    The threshold is read only with a bucket (``contract.PAYLOAD_BUCKET_VARIABLE``): without one nothing is offloaded.
    """
    found: dict[str, int] = {}
    for key, variable, (low, high) in (("payload_threshold", THRESHOLD_VARIABLE, THRESHOLD_RANGE),
                                       ("payload_max_bytes", MAX_BYTES_VARIABLE, MAX_BYTES_RANGE)):
        text = environ.get(variable)
        if text is None or (key == "payload_threshold" and not environ.get(contract.PAYLOAD_BUCKET_VARIABLE)):
            continue
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise MessageError(f"{variable} must be a whole number {low}..{high} (bytes), got {text!r:.60}")
        found[key] = value
    return found


class Offloader:
    """Puts bodies too large for their queue in the payload bucket; None as ``bucket``: it never does (and says how to).

    ``threshold``: offload any message over it too (0: only what the queue or the delay table cannot hold);
    ``max_bytes``: the largest body offloaded (``payload_max_bytes``); ``orphans``: objects deleted because their
    message was not sent. Its metrics (``PayloadsOffloaded``, ``PayloadOrphans``) are added only in a worker's task,
    whose worker publishes them; elsewhere the count and the log say it.
    """

    def __init__(self, bucket: str | None, s3: Any = None, *, threshold: int = 0,
                 max_bytes: int = DEFAULT_PAYLOAD_MAX_BYTES, kept_codes: frozenset[str] = frozenset(),
                 clock: Callable[[], float] | None = None) -> None:
        check_settings(bucket, threshold, max_bytes)
        # Failure codes after which a message may have been sent (client.OUTCOME_UNKNOWN_CODE): its object stays.
        self.kept_codes = kept_codes | MAYBE_STORED_CODES
        self.store = PayloadStore(bucket, s3, max_bytes=max_bytes, clock=clock) if bucket else None
        self.threshold = threshold
        self.max_bytes = max_bytes
        self.orphans = 0

    def fit(self, envelope: Envelope, limit: Callable[[], int], uploads: Uploads, index: int, *, extra: int = 0,
            reserved: int = 0, delayed: bool = False, item_too_large: Callable[[], bool] | None = None,
            what: str = "") -> Pointer | None:
        """Offload ``envelope``'s body when it must be, and make the envelope carry the pointer; None when it stays.

        ``limit`` gives the queue's MaximumMessageSize, asked only for a message larger than the smallest a queue
        may have; ``extra`` bytes and ``reserved`` attributes are still to be added (``worker_tier.due_at``);
        ``item_too_large`` tells whether the delay table's item would be over its limit. MessageError when the
        message is too large and there is no bucket (naming the fix), the body is over ``max_bytes``, or there is
        no attribute left for ``ExtendedPayloadSize``.
        """
        if payloads.is_offloaded(envelope.attributes):
            return None  # a pointer already (a worker's re-send): its object is the one the pointer names
        size = envelope.size() + extra
        over_threshold = bool(self.threshold) and size > self.threshold
        maximum = limit() if size > limits.SQS_MIN_MAXIMUM_MESSAGE_SIZE_BYTES else None
        over_limit = maximum is not None and size > maximum
        if not (over_threshold or over_limit or (item_too_large is not None and item_too_large())):
            return None
        if self.store is None:
            if over_limit:
                raise MessageError(f"message is {size} bytes with its attributes{' ' + what if what else ''}; the queue "
                                   f"allows at most {maximum} (MaximumMessageSize): {BUCKET_FIX}, or send a smaller body")
            return None  # the caller's own check says why (the delay table's item limit)
        self._check_offloadable(envelope, reserved)
        pointer = self.store.put(envelope.body, delayed=delayed)
        uploads.add(index, pointer)
        self._count(contract.METRIC_PAYLOADS_OFFLOADED)
        envelope.body = pointer.body()
        envelope.attributes.update(payloads.size_attribute(pointer.size or 0))
        return pointer

    def _check_offloadable(self, envelope: Envelope, reserved: int) -> None:
        """MessageError when the body is over payload_max_bytes, or no attribute is left for the size attribute."""
        body_bytes = len(envelope.body.encode("utf-8"))
        if body_bytes > self.max_bytes:
            raise MessageError(
                f"body is {body_bytes} bytes, over payload_max_bytes {self.max_bytes} (the largest body offloaded to S3, "
                f"which a worker holds in memory); send a smaller body, or raise payload_max_bytes ({MAX_BYTES_VARIABLE}) "
                "with the worker's memory"
            )
        if envelope.room(reserved=reserved) < 1:
            taken = len(envelope.attributes) + reserved
            raise MessageError(
                f"the body goes to S3 and the message carries {contract.PAYLOAD_SIZE_ATTRIBUTE}, one of SQS's "
                f"{limits.SQS_MAX_MESSAGE_ATTRIBUTES} attributes, but it already has {taken} (its own, the path"
                f"{' and ' + contract.DUE_AT_ATTRIBUTE if reserved else ''}); drop one of its attributes"
            )

    def uploads(self) -> Uploads:
        """The uploads of one send_batch call."""
        return Uploads(self)

    def discard(self, pointer: Pointer, why: str) -> None:
        """Delete an object whose message was not sent or stored, and count it as an orphan."""
        self.orphans += 1
        _log.warning("deleting the payload %s: %s", pointer.uri, why)
        self._count(contract.METRIC_PAYLOAD_ORPHANS)
        if self.store is not None:
            self.store.delete(pointer)

    def _count(self, metric: str) -> None:
        """Count ``metric`` where it is published: a worker publishes its tasks' counts with its own."""
        if observability.running_record.current() is not None:
            observability.count_shared(metric)

    def delete_cancelled(self, body: str, attributes: Mapping[str, Any]) -> bool:
        """After a cancel: delete the object a cancelled message's pointer names in this bucket (best effort)."""
        if self.store is None or not payloads.is_offloaded(attributes):
            return False
        try:
            pointer = payloads.pointer_of(body, attributes)
        except PayloadError:  # not a pointer after all: nothing of ours to delete
            return False
        return pointer.bucket == self.store.bucket and self.store.delete(pointer)


class Uploads:
    """The objects one send_batch call uploaded, by message index, until their messages' fates are known."""

    def __init__(self, offloader: Offloader) -> None:
        self._offloader = offloader
        self._by_index: dict[int, Pointer] = {}
        self._unsent: set[int] = set()

    def add(self, index: int, pointer: Pointer) -> None:
        """Record message ``index``'s upload."""
        self._by_index[index] = pointer

    def unsent(self, index: int) -> None:
        """Message ``index`` was not sent or stored although its result is ok: an earlier send held its dedupe key."""
        self._unsent.add(index)

    def settle(self, results: Mapping[int, Any], why: str = "") -> None:
        """Delete each object whose message was not sent or stored; keep those sent and those whose send may have been.

        ``results`` are SendResults by index; an index missing from it was never sent (``why`` says what stopped it).
        """
        for index, pointer in self._by_index.items():
            result = results.get(index)
            if index in self._unsent:
                self._offloader.discard(pointer, "its message was deduplicated: an earlier send with its dedupe_key "
                                                 "holds the key, so nothing was sent")
            elif result is None:
                self._offloader.discard(pointer, f"its message was not sent ({why or 'the call stopped'})")
            elif not result.ok and result.code not in self._offloader.kept_codes:
                self._offloader.discard(pointer, f"its message was not sent ({result.code}: {result.error})")
        self._by_index.clear()
