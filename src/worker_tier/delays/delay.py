"""Long delays: the delay table's key layout, and the producer's writes into it.

Layout (one item per delayed message)::

    pk = "b#<minute>#<shard>"   the due minute (epoch seconds // 60) and a shard 0..shards-1
    sk = "<due ms, 13 digits>#<id>"   ordered by due time, then id

and one item per dedupe key of a standard queue (``pk = "dedupe#<key>"``, ``sk = "-"``;
``worker_tier.delays.dedupe``), which the dispatcher never reads.

A busy minute spreads its writes over ``shards`` partitions (the producer's
``delay_shards``). The dispatcher reads every one of the ``MAX_SHARDS`` possible
shards of a minute, one paginated Query each, in parallel, and gets each shard's
items already in due order: whatever shard count a producer used, and however
the setting changes, its messages are read.

TTL. Items are never deleted after dispatch (a delete would cost as much as the
write): the TTL attribute, set at write, removes them ``DISPATCHED_RETENTION_SECONDS``
after they were due, for free, and leaves them for troubleshooting until then.
The TTL cannot tell a dispatched item from one the dispatcher never read (it was
stopped, or stuck on a minute, for longer than the margin). The table's stream
can: ``worker_tier.delays.delay_recovery`` reads every TTL deletion and every write from
it, and sends to the work queue each item the dispatcher could have missed
(late, never early, and counted). The guarantee: no undispatched message is lost
to the TTL, **provided the recovery function processes each stream record within
the stream's 24-hour retention** (its mapping alarms on age and names any batch
it gives up on while the stream still holds it).

The invariant that makes the watermark safe (see ``worker_tier.delays.dispatcher``): the
producer stores a message only when it is due more than ``LONG_DELAY_THRESHOLD_SECONDS``
(SQS's 900 s) after the producer's clock, and the dispatcher dispatches a minute only
once that minute has *ended* by ``DISPATCH_HORIZON_SECONDS`` = 900 − ``MAX_CLOCK_SKEW_SECONDS``
after its own clock. A producer can therefore write into a dispatched minute only
if the two clocks differ by more than ``MAX_CLOCK_SKEW_SECONDS`` in total.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Iterable, Mapping

from worker_tier.core import limits
from worker_tier.core.aws import OUTCOME_UNKNOWN_CODE, error_code, outcome_unknown
from worker_tier.core.contract import (
    DELAY_BUCKET_KEY_PREFIX,
    DELAY_DEDUPE_KEY_PREFIX,
    DELAY_PARTITION_KEY,
    DELAY_SORT_KEY,
    DELAY_TTL_ATTRIBUTE,
    DUE_AT_ATTRIBUTE,
)
from worker_tier.core.errors import UnreadableItemError, WorkerTierError
from worker_tier.core.message import format_due_at
from worker_tier.core.retry import BATCH_ENTRIES, chunks
from worker_tier.core.settings import DEFAULT_DELAY_SHARDS, MAX_DELAY_SHARDS

# The key layout is the contract's; these names stay importable from here.
PK = DELAY_PARTITION_KEY
SK = DELAY_SORT_KEY
TTL_ATTRIBUTE = DELAY_TTL_ATTRIBUTE
BUCKET_KEY_PREFIX = DELAY_BUCKET_KEY_PREFIX
DEDUPE_PREFIX = DELAY_DEDUPE_KEY_PREFIX

BUCKET_SECONDS = 60
DEFAULT_SHARDS = DEFAULT_DELAY_SHARDS
MAX_SHARDS = MAX_DELAY_SHARDS
LONG_DELAY_THRESHOLD_SECONDS = limits.SQS_MAX_DELAY_SECONDS
MAX_CLOCK_SKEW_SECONDS = 60  # producer and dispatcher clocks together; ±30 s each
DISPATCH_HORIZON_SECONDS = limits.SQS_MAX_DELAY_SECONDS - MAX_CLOCK_SKEW_SECONDS
MAX_DELAY_SECONDS = 366 * 24 * 60 * 60
# Cancellable messages (``Client.send(..., cancellable=True)``; ``worker_tier.delays.cancellation``) all live on this
# shard of their minute, and the delay dispatcher Queries it with ConsistentRead, so a cancel that committed
# before the dispatcher started the minute is never read back by a stale Query. The default producer
# (DEFAULT_SHARDS = 8) writes nothing else there, so ordinary messages keep their eventually consistent reads.
CANCELLABLE_SHARD = MAX_SHARDS - 1
# TTL margin after due. Kept below the dispatcher's minute-record retention less the stream's 24 h, so the
# safety net still finds the minute record when it decides an expired item (tests/unit/dispatcher/test_recovery.py).
DISPATCHED_RETENTION_SECONDS = 6 * 60 * 60
# The sort key holds due_ms in 13 zero-padded digits, so text order is time order up to 10**13 - 1 ms
# (2286-11-20); time.gmtime converts all of it. A due_ms outside 0..MAX_DUE_MS is not a message.
MAX_DUE_MS = 10**13 - 1
# A delayed message's item may be at most MAX_ITEM_BYTES: DynamoDB's 400 KB less a margin, because AWS states its
# number rule only approximately (``item_bytes``). A refiled copy (``worker_tier.delays.delivery.refile``: a new pk of the
# same form, a TTL a few digits longer at most) still fits DynamoDB's limit.
ITEM_SIZE_MARGIN_BYTES = 1024
MAX_ITEM_BYTES = limits.DYNAMODB_MAX_ITEM_BYTES - ITEM_SIZE_MARGIN_BYTES
_BUCKET_KEY = re.compile(r"b#(-?[0-9]+)#(-?[0-9]+)")
# DynamoDB's code for a request it refuses as invalid (an item too large, a key too long): the whole call, not one item.
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html#API_BatchWriteItem_Errors
VALIDATION_ERROR_CODE = "ValidationException"
_ATTRIBUTE_VALUE_KEYS = (frozenset({"DataType", "StringValue"}), frozenset({"DataType", "BinaryValue"}))


class DelayStoreError(WorkerTierError):
    """The delay table did not store some messages; ``failures`` maps each one's id to (error code, reason)."""

    def __init__(self, message: str, failures: Mapping[str, tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.failures = dict(failures or {})

    @property
    def unstored_ids(self) -> frozenset[str]:
        """The ids of the messages not stored."""
        return frozenset(self.failures)


@dataclass(frozen=True)
class DelayedMessage:
    """A message waiting in the delay table."""

    message_id: str
    due_ms: int
    body: str
    attributes: Mapping[str, Mapping[str, Any]]  # SQS API shape, path attribute included
    shard: int = 0
    dedupe_key: str | None = None
    cancellable: bool = False  # stored on CANCELLABLE_SHARD, with its place in its key's marker

    @property
    def bucket(self) -> int:
        """The due minute (epoch seconds // 60)."""
        return self.due_ms // 1000 // BUCKET_SECONDS

    @property
    def key(self) -> dict[str, dict[str, str]]:
        return {PK: {"S": bucket_key(self.bucket, self.shard)}, SK: {"S": sort_key(self.due_ms, self.message_id)}}

    def to_item(self) -> dict[str, dict[str, Any]]:
        """The DynamoDB item."""
        item: dict[str, dict[str, Any]] = {
            **self.key,
            "id": {"S": self.message_id},
            "due_ms": {"N": str(self.due_ms)},
            "body": {"S": self.body},
            "attributes": {"S": encode_attributes(self.attributes)},
            TTL_ATTRIBUTE: {"N": str(self.due_ms // 1000 + DISPATCHED_RETENTION_SECONDS)},
        }
        if self.dedupe_key is not None:
            item["dedupe_key"] = {"S": self.dedupe_key}
        if self.cancellable:
            item["cancellable"] = {"BOOL": True}
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Mapping[str, Any]]) -> DelayedMessage:
        shard = int(item[PK]["S"].rsplit("#", 1)[1])
        dedupe = item.get("dedupe_key", {}).get("S")
        cancellable = item.get("cancellable", {}).get("BOOL") is True
        return cls(item["id"]["S"], int(item["due_ms"]["N"]), item["body"]["S"], decode_attributes(item["attributes"]["S"]), shard, dedupe,
                   cancellable)


def bucket_key(bucket: int, shard: int) -> str:
    """Partition key of one shard of one minute."""
    return f"b#{bucket}#{shard}"


def read_consistently(shard: int) -> bool:
    """Whether the delay dispatcher Queries this shard with ConsistentRead: the shard of cancellable messages.

    Examples
    --------
    >>> read_consistently(CANCELLABLE_SHARD), read_consistently(0)
    (True, False)
    """
    return shard == CANCELLABLE_SHARD


def parse_bucket_key(pk: str) -> tuple[int, int] | None:
    """The (minute, shard) a message item's pk names, however spelled; None when it names none.

    Examples
    --------
    >>> parse_bucket_key("b#30000016#03"), parse_bucket_key("b#x#0")
    ((30000016, 3), None)
    """
    match = _BUCKET_KEY.fullmatch(pk)
    return (int(match.group(1)), int(match.group(2))) if match else None


def is_scheduled_key(pk: str) -> bool:
    """Whether the dispatcher reads this pk: exactly ``bucket_key(m, s)`` with ``0 <= s < MAX_SHARDS``.

    Examples
    --------
    >>> [is_scheduled_key(pk) for pk in ("b#30000016#3", "b#30000016#03", f"b#30000016#{MAX_SHARDS}")]
    [True, False, False]
    """
    parsed = parse_bucket_key(pk)
    return parsed is not None and 0 <= parsed[1] < MAX_SHARDS and pk == bucket_key(*parsed)


def due_ms_problem(due_ms: Any) -> str | None:
    """Why ``due_ms`` is not a due time the delay path can keep (an int in 0..MAX_DUE_MS), or None."""
    if isinstance(due_ms, int) and not isinstance(due_ms, bool) and 0 <= due_ms <= MAX_DUE_MS:
        return None
    return f"due_ms {due_ms!r} is out of range: a due time is whole epoch milliseconds 0..{MAX_DUE_MS} (the sort key's 13 digits)"


def read_item(item: Mapping[str, Mapping[str, Any]]) -> DelayedMessage:
    """The delayed message an item holds, in the shape SQS's API takes; UnreadableItemError if not one.

    A message SQS would refuse for its content (a character, an empty value) is still a
    message: sending it gets SQS's refusal, and the sender dead-letters a copy with it.
    A wrong shape is not: botocore refuses it before sending (ParamValidationError).

    Examples
    --------
    >>> message = DelayedMessage("m-1", 1_800_000_900_000, "hi", {"p": {"DataType": "String", "StringValue": "/x"}})
    >>> read_item(message.to_item()) == message
    True
    """
    try:
        message = DelayedMessage.from_item(item)
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as error:
        raise UnreadableItemError(f"{type(error).__name__}: {error} (a message item has id, due_ms, body and attributes)") from error
    problem = due_ms_problem(message.due_ms) or _attribute_shape_problem(message.attributes)
    if problem is None and not isinstance(message.body, str):
        problem = f"body is {type(message.body).__name__} {message.body!r:.80}, not a string"
    if problem:
        raise UnreadableItemError(problem)
    return message


def _attribute_shape_problem(attributes: Any) -> str | None:
    """Why stored attributes are not in the SQS API shape (DataType plus StringValue or BinaryValue, nothing else)."""
    if not isinstance(attributes, Mapping):
        return f"attributes {attributes!r:.80} are not a JSON object of SQS message attributes"
    for name, value in attributes.items():
        if not (isinstance(value, Mapping) and frozenset(value) in _ATTRIBUTE_VALUE_KEYS
                and isinstance(value["DataType"], str) and isinstance(value.get("StringValue", ""), str)
                and isinstance(value.get("BinaryValue", b""), bytes)):
            return (f"attribute {name!r} is {value!r:.80}; an SQS message attribute has exactly DataType (a string) "
                    "and StringValue (a string) or BinaryValue (bytes)")
    return None


def with_due_at(message: DelayedMessage) -> dict[str, Any]:
    """The stored attributes plus when the message was due (``worker_tier.due_at``), as the work queue gets them.

    Examples
    --------
    >>> with_due_at(DelayedMessage("m-1", 1_800_000_900_123, "hi", {}))["worker_tier.due_at"]["StringValue"]
    '2027-01-15T08:15:00.123Z'
    """
    due = format_due_at(message.due_ms)
    return {**message.attributes, DUE_AT_ATTRIBUTE: {"DataType": "String", "StringValue": due}}


def sort_key(due_ms: int, message_id: str) -> str:
    """Sort key: due time (zero-padded, so text order is time order), then id."""
    return f"{due_ms:013d}#{message_id}"


def shard_of(message_id: str, shards: int) -> int:
    """A stable shard for an id, spreading a minute's writes evenly."""
    return int.from_bytes(hashlib.blake2b(message_id.encode(), digest_size=4).digest(), "big") % shards


def new_message_id(dedupe_key: str | None) -> str:
    """A random id, or one derived from the dedupe key so the same key is the same message."""
    if dedupe_key is None:
        return str(uuid.uuid4())
    return str(uuid.UUID(bytes=hashlib.sha256(dedupe_key.encode("utf-8")).digest()[:16]))


def encode_attributes(attributes: Mapping[str, Mapping[str, Any]]) -> str:
    """SQS-shaped attributes as JSON text (binary values base64)."""
    encoded = {
        name: {k: base64.b64encode(v).decode("ascii") if k == "BinaryValue" else v for k, v in value.items()}
        for name, value in attributes.items()
    }
    return json.dumps(encoded, separators=(",", ":"), sort_keys=True)


def decode_attributes(text: str) -> dict[str, dict[str, Any]]:
    """The inverse of encode_attributes."""
    return {
        name: {k: base64.b64decode(v) if k == "BinaryValue" else v for k, v in value.items()}
        for name, value in json.loads(text).items()
    }


def item_bytes(item: Mapping[str, Mapping[str, Any]]) -> int:
    """An item's size as DynamoDB counts it against its 400 KB limit: each attribute's UTF-8 name plus its value.

    A string counts its UTF-8 bytes, binary its length, a bool or null one byte, a set
    the sum of its elements, a map or list 3 bytes plus, per element, 1 byte and the
    element (with its UTF-8 name in a map). A number counts its significant digits in
    pairs aligned on the decimal point, plus 1 byte, plus 1 when negative: so 1800003600000
    (13 integer digits, the first alone in its pair, trailing zeros trimmed: 01 80 00 03 6-) is 1 + 5 = 6
    bytes, not "half of its 8 significant digits plus one" (5). AWS states the number rule only approximately
    (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html);
    this is how dynalite, which copies DynamoDB's validation, counts it (tests/functional/test_dynamodb_rules.py
    checks the two agree), and ``MAX_ITEM_BYTES`` keeps a margin under the limit.

    Examples
    --------
    >>> item_bytes({"body": {"S": "中"}, "n": {"N": "1250"}, "m": {"M": {"a": {"BOOL": True}}}})
    18
    """
    return sum(len(name.encode("utf-8")) + _value_bytes(value) for name, value in item.items())


def number_bytes(text: str) -> int:
    """A DynamoDB number's size: 1 byte, plus its significant digits in pairs aligned on the decimal point, plus 1 if negative.

    Examples
    --------
    >>> [number_bytes(n) for n in ("0", "7", "12", "123", "1800003600000", "-0.05")]
    [1, 2, 2, 3, 6, 3]
    """
    number = Decimal(text)
    sign, digits, _ = number.as_tuple()
    significant = len("".join(map(str, digits)).strip("0"))
    if not significant:
        return 1
    # An even position for the leading digit (an odd count of integer digits) leaves it alone in its pair.
    alone = 1 if number.adjusted() % 2 == 0 else 0
    return 1 + (significant + alone + 1) // 2 + sign


def _value_bytes(value: Mapping[str, Any]) -> int:
    """One attribute value's size, as DynamoDB counts it."""
    [(kind, data)] = value.items()
    if kind == "S":
        return len(data.encode("utf-8"))
    if kind == "B":
        return len(data)
    if kind == "N":
        return number_bytes(data)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(_value_bytes({kind[0]: element}) for element in data)
    if kind == "L":
        return 3 + sum(1 + _value_bytes(element) for element in data)
    if kind == "M":
        return 3 + sum(1 + len(name.encode("utf-8")) + _value_bytes(element) for name, element in data.items())
    raise ValueError(f"item_bytes counts DynamoDB's attribute types S, N, B, BOOL, NULL, SS, NS, BS, L and M, got {kind!r}")


# Stores one delayed message that has a dedupe key, with its key's marker: None when stored or deduplicated,
# else (code, reason). ``worker_tier.delays.dedupe.DedupeMarkers.store_delayed`` is the one the client passes.
KeyedWrite = Callable[[DelayedMessage], tuple[str, str] | None]


class DelayStore:
    """Writes delayed messages into the delay table: BatchWriteItem, or ``keyed_write`` for a dedupe key."""

    def __init__(
        self,
        table: str,
        dynamodb: Any,
        shards: int = DEFAULT_SHARDS,
        sleep: Callable[[float], None] = time.sleep,
        *,
        keyed_write: KeyedWrite | None = None,
    ) -> None:
        self.table = table
        self.shards = shards
        self._dynamodb = dynamodb
        self._sleep = sleep
        self._keyed_write = keyed_write

    def put_many(self, messages: Iterable[DelayedMessage]) -> None:
        """Store messages: plain ones 25 per BatchWriteItem, each keyed one through ``keyed_write``.

        Every message is tried. A keyed message whose key is already used is
        deduplicated: not stored, and not a failure. Raises DelayStoreError naming
        each message not stored, with its code and reason, and only those. Raises
        ValueError, storing nothing, for a keyed message when there is no ``keyed_write``.
        """
        messages = list(messages)
        self._check_keyed(messages)
        failures: dict[str, tuple[str, str]] = {}
        for message in messages:
            if message.dedupe_key is not None:
                failures.update(self._put_keyed(message))
        plain = [m.to_item() for m in messages if m.dedupe_key is None]
        for chunk in chunks(plain, limits.DYNAMODB_MAX_BATCH_WRITE_ITEMS):
            failures.update(self._batch_write(list(chunk)))
        if failures:
            raise DelayStoreError(f"delay table {self.table} did not store {len(failures)} of {len(messages)} messages", failures)

    def _check_keyed(self, messages: list[DelayedMessage]) -> None:
        """ValueError naming the first keyed message when this store has no ``keyed_write`` for it."""
        keyed = next((m for m in messages if m.dedupe_key is not None), None)
        if keyed is not None and self._keyed_write is None:
            raise ValueError(
                f"message {keyed.message_id} has dedupe_key {keyed.dedupe_key!r}, which needs its marker written with it; "
                "give the DelayStore keyed_write (worker_tier.delays.dedupe.DedupeMarkers.store_delayed)"
            )

    def _put_keyed(self, message: DelayedMessage) -> dict[str, tuple[str, str]]:
        """One keyed message: {} when stored or deduplicated, else its id with the code and reason."""
        try:
            failure = self._keyed_write(message)  # type: ignore[misc]  # _check_keyed made sure it is set
        except Exception as error:
            return {message.message_id: (error_code(error), f"delay table {self.table} did not store it: {error}")}
        return {message.message_id: failure} if failure else {}

    def _batch_write(self, items: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
        """BatchWriteItem until every item is processed (``retry.BATCH_ENTRIES``); the ids not stored, with why."""
        pending = [{"PutRequest": {"Item": item}} for item in items]
        for _ in BATCH_ENTRIES.attempts_with_pauses(self._sleep):
            try:
                response = self._dynamodb.batch_write_item(RequestItems={self.table: pending})
            except Exception as error:  # botocore already retried; what was still pending is not stored
                if error_code(error) == VALIDATION_ERROR_CODE and len(pending) > 1:
                    return self._each_alone(pending)
                if outcome_unknown(error):  # DynamoDB may have stored them: a tracked job keeps its record
                    return _unstored(pending, OUTCOME_UNKNOWN_CODE, f"delay table {self.table} may have stored it; "
                                                                    f"its answer was lost ({error_code(error)}: {error})")
                return _unstored(pending, error_code(error), f"delay table {self.table} did not store it: {error}")
            pending = (response.get("UnprocessedItems") or {}).get(self.table) or []
            if not pending:
                return {}
        reason = f"delay table {self.table} left {len(pending)} items unprocessed after {BATCH_ENTRIES.attempts} attempts"
        return _unstored(pending, "UnprocessedItems", reason)

    def _each_alone(self, requests: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
        """Each PutRequest in its own BatchWriteItem: DynamoDB refuses a whole batch for one invalid item, so only that one fails."""
        failures: dict[str, tuple[str, str]] = {}
        for request in requests:
            failures.update(self._batch_write([request["PutRequest"]["Item"]]))
        return failures


def _unstored(requests: list[dict[str, Any]], code: str, reason: str) -> dict[str, tuple[str, str]]:
    """The ids of PutRequests not stored, each with the code and reason."""
    return {request["PutRequest"]["Item"]["id"]["S"]: (code, reason) for request in requests}
