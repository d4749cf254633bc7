"""A strict DynamoDB stand-in: refuses what real DynamoDB refuses and moto (or FakeDynamoDB) accepts.

``StrictDynamoDB(inner)`` wraps any DynamoDB client (``tests.support.fake_dynamodb.FakeDynamoDB``
or a moto boto3 client), checks the items and keys of PutItem, UpdateItem, DeleteItem,
GetItem, BatchWriteItem and TransactWriteItems against DynamoDB's documented limits,
and forwards what passes. moto counts an item its own way and refuses it from 405,000 bytes
of that count (a number counts its characters), checks key sizes only on writes, and takes 26
requests in one BatchWriteItem; wrap FakeDynamoDB to probe the 400 KB edge. It is the check on ``worker_tier.delays.delay.item_bytes``, so it is written from
the documentation alone and never imports that module; ``tests/functional/test_dynamodb_rules.py``
checks it against dynalite, a second implementation that copies DynamoDB's validation.

Refusals are botocore ``ClientError``s with DynamoDB's code (``ValidationException``)
and message, for the whole call: DynamoDB refuses a BatchWriteItem or TransactWriteItems
with one invalid item entirely, and writes nothing of it.

Sources:

- https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
  (item size: names, strings, binary, numbers, maps, lists, sets, bool and null)
- https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html
  (400 KB items; partition key 2,048 bytes, sort key 1,024 bytes; 100 actions and 4 MB per transaction)
- https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html
  (25 requests per call; one invalid request fails the call; no two requests on one item)
- https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
  (100 actions, 4 MB, one action per item)

The number rule: AWS documents "1 byte per two significant digits, plus 1 byte" only
approximately; here the digits are counted in pairs aligned on the decimal point (an odd
number of integer digits leaves the first digit alone in its pair), plus one byte for a
negative number, which is how dynalite reproduces DynamoDB. The messages are DynamoDB's,
as dynalite reproduces them (the missing space in "limit of2048" is DynamoDB's own).

Not checked: the size an UpdateItem leaves the item at (only its key and the size of its
expression values), and anything about Query and Scan.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Callable, Mapping

from botocore.exceptions import ClientError

MAX_ITEM_BYTES = 400 * 1024
MAX_PARTITION_KEY_BYTES = 2048
MAX_SORT_KEY_BYTES = 1024
MAX_BATCH_WRITE_REQUESTS = 25
MAX_TRANSACTION_ACTIONS = 100
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024
COLLECTION_OVERHEAD_BYTES = 3

VALIDATION = "ValidationException"
ITEM_TOO_LARGE = "Item size has exceeded the maximum allowed size"
UPDATE_TOO_LARGE = "Item size to update has exceeded the maximum allowed size"
PARTITION_KEY_TOO_LONG = "One or more parameter values were invalid: Size of hashkey has exceeded the maximum size limit of2048 bytes"
SORT_KEY_TOO_LONG = "One or more parameter values were invalid: Aggregated size of all range keys has exceeded the size limit of 1024 bytes"
TOO_MANY_WRITES = "Too many items requested for the BatchWriteItem call"
DUPLICATE_WRITES = "Provided list of item keys contains duplicates"
TRANSACTION_TOO_LARGE = "Transaction request cannot be larger than 4 MB"
TRANSACTION_DUPLICATES = "Transaction request cannot include multiple operations on one item"


class Refusal(Exception):
    """One thing DynamoDB would refuse: its message (the code is always ValidationException)."""


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """An item's size: each attribute's UTF-8 name plus its value's size.

    Examples
    --------
    >>> item_size({"pk": {"S": "中"}, "n": {"N": "-12.5"}, "l": {"L": [{"NULL": True}]}})
    16
    """
    return sum(_utf8(name) + value_size(value) for name, value in item.items())


def value_size(value: Mapping[str, Any]) -> int:
    """One attribute value's size: strings UTF-8, binary its bytes, numbers in digit pairs, collections with overhead."""
    [(kind, data)] = value.items()
    if kind == "S":
        return _utf8(data)
    if kind == "B":
        return len(_binary(data))
    if kind == "N":
        return number_size(data)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(value_size({kind[0]: element}) for element in data)
    if kind == "L":
        return COLLECTION_OVERHEAD_BYTES + sum(1 + value_size(element) for element in data)
    if kind == "M":
        return COLLECTION_OVERHEAD_BYTES + sum(1 + _utf8(name) + value_size(element) for name, element in data.items())
    raise Refusal(f"Supplied AttributeValue has an unknown datatype {kind!r}")


def number_size(text: str) -> int:
    """1 byte, plus the significant digits in pairs aligned on the decimal point, plus 1 for a negative number.

    Examples
    --------
    >>> [number_size(n) for n in ("0", "5", "10", "100", "0.5", "0.05", "-1")]
    [1, 2, 2, 2, 2, 2, 3]
    """
    number = Decimal(text)
    digits = "".join(str(d) for d in number.as_tuple().digits).strip("0")
    if not digits:
        return 1
    integer_digits = number.adjusted() + 1  # of the leading digit's pair: when odd, that digit is alone in its pair
    half_pair = integer_digits % 2
    pairs = (len(digits) + half_pair + 1) // 2
    return 1 + pairs + (1 if number < 0 else 0)


class StrictDynamoDB:
    """Wraps a DynamoDB client and refuses, as DynamoDB does, what moto and the fakes let through.

    The key schema of each table is read once from ``inner.describe_table`` (moto, boto3)
    or from ``inner.keys`` (FakeDynamoDB, whose keys are strings). ``refused`` lists
    every refusal as ``(operation, message)``.

    Examples
    --------
    >>> from tests.support.fake_dynamodb import FakeDynamoDB
    >>> fake = FakeDynamoDB()
    >>> fake.create_table("t", "pk")
    >>> strict = StrictDynamoDB(fake)
    >>> try:
    ...     strict.put_item(TableName="t", Item={"pk": {"S": "k" * 2049}})
    ... except ClientError as error:
    ...     print(error.response["Error"]["Code"])
    ValidationException
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.refused: list[tuple[str, str]] = []
        self._schemas: dict[str, tuple[str, ...]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        """The stand-in's own attributes are its own; any other (a fake's ``fault``, ``unprocessed``...) is the inner client's."""
        if name in ("inner", "refused", "_schemas"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.inner, name, value)

    # -- single items -----------------------------------------------------------------

    def put_item(self, **params: Any) -> Any:
        """PutItem, checked: the item's size and its key."""
        self._check("PutItem", lambda: self._item_problems(params["TableName"], params["Item"]))
        return self.inner.put_item(**params)

    def update_item(self, **params: Any) -> Any:
        """UpdateItem, checked: the key, and values that alone exceed an item's size."""
        self._check("UpdateItem", lambda: self._update_problems(params))
        return self.inner.update_item(**params)

    def delete_item(self, **params: Any) -> Any:
        """DeleteItem, checked: the key."""
        self._check("DeleteItem", lambda: self._key_problems(params["TableName"], params["Key"]))
        return self.inner.delete_item(**params)

    def get_item(self, **params: Any) -> Any:
        """GetItem, checked: the key."""
        self._check("GetItem", lambda: self._key_problems(params["TableName"], params["Key"]))
        return self.inner.get_item(**params)

    # -- many items -------------------------------------------------------------------

    def batch_write_item(self, **params: Any) -> Any:
        """BatchWriteItem, checked: 1..25 requests, each valid, no item twice; else the whole call is refused."""
        self._check("BatchWriteItem", lambda: self._batch_problems(params["RequestItems"]))
        return self.inner.batch_write_item(**params)

    def transact_write_items(self, **params: Any) -> Any:
        """TransactWriteItems, checked: 1..100 actions, each valid, no item twice, 4 MB in all."""
        self._check("TransactWriteItems", lambda: self._transaction_problems(params["TransactItems"]))
        return self.inner.transact_write_items(**params)

    # -- the checks -------------------------------------------------------------------

    def _check(self, operation: str, check: Callable[[], None]) -> None:
        """Run a check; a Refusal becomes the ClientError DynamoDB would return."""
        try:
            check()
        except Refusal as refusal:
            self.refused.append((operation, str(refusal)))
            raise ClientError({"Error": {"Code": VALIDATION, "Message": str(refusal)}}, operation) from None

    def _item_problems(self, table: str, item: Mapping[str, Mapping[str, Any]]) -> int:
        """An item's size, then its key; the item's size when it passes."""
        size = item_size(item)
        if size > MAX_ITEM_BYTES:
            raise Refusal(ITEM_TOO_LARGE)
        self._key_problems(table, item)
        return size

    def _update_problems(self, params: Mapping[str, Any]) -> None:
        """An UpdateItem's key, and expression values too large for any item."""
        self._key_problems(params["TableName"], params["Key"])
        values = params.get("ExpressionAttributeValues") or {}
        if sum(value_size(value) for value in values.values()) > MAX_ITEM_BYTES:
            raise Refusal(UPDATE_TOO_LARGE)

    def _key_problems(self, table: str, item: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
        """The key attributes' sizes (partition 2,048, sort 1,024 bytes; numbers are never too long); the key's values."""
        key = []
        limits = ((MAX_PARTITION_KEY_BYTES, PARTITION_KEY_TOO_LONG), (MAX_SORT_KEY_BYTES, SORT_KEY_TOO_LONG))
        for name, (limit, message) in zip(self._schema(table), limits, strict=False):
            value = item.get(name)
            if not value:
                raise Refusal("The provided key element does not match the schema")
            [(kind, data)] = value.items()
            if kind in ("S", "B") and not data:
                raise Refusal("One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain "
                              f"an empty {'string' if kind == 'S' else 'binary'} value. Key: {name}")
            size = _utf8(data) if kind == "S" else len(_binary(data)) if kind == "B" else 0
            if size > limit:
                raise Refusal(message)
            key.append(f"{kind}:{data!r}")
        return tuple(key)

    def _batch_problems(self, request_items: Mapping[str, list[Mapping[str, Any]]]) -> None:
        """The batch as a whole, then each request: any problem refuses the whole call."""
        for requests in request_items.values():
            if not 1 <= len(requests) <= MAX_BATCH_WRITE_REQUESTS:
                raise Refusal(
                    f"1 validation error detected: Value at 'requestItems' failed to satisfy constraint: Map value must satisfy "
                    f"constraint: [Member must have length less than or equal to {MAX_BATCH_WRITE_REQUESTS}, "
                    "Member must have length greater than or equal to 1]"
                )
        if sum(len(requests) for requests in request_items.values()) > MAX_BATCH_WRITE_REQUESTS:
            raise Refusal(TOO_MANY_WRITES)
        seen = set()
        for table, requests in request_items.items():
            for request in requests:
                if "PutRequest" in request:
                    self._item_problems(table, request["PutRequest"]["Item"])
                    key = self._key_problems(table, request["PutRequest"]["Item"])
                else:
                    key = self._key_problems(table, request["DeleteRequest"]["Key"])
                if (table, key) in seen:
                    raise Refusal(DUPLICATE_WRITES)
                seen.add((table, key))

    def _transaction_problems(self, actions: list[Mapping[str, Any]]) -> None:
        """1..100 actions, each item's size and key, one action per item, 4 MB of items in all."""
        if not 1 <= len(actions) <= MAX_TRANSACTION_ACTIONS:
            raise Refusal(
                "1 validation error detected: Value at 'transactItems' failed to satisfy constraint: Member must have length "
                f"less than or equal to {MAX_TRANSACTION_ACTIONS}"
            )
        total, seen = 0, set()
        for action in actions:
            [(kind, body)] = action.items()
            table = body["TableName"]
            if kind == "Put":
                total += self._item_problems(table, body["Item"])
                key = self._key_problems(table, body["Item"])
            else:
                key = self._key_problems(table, body["Key"])
                total += item_size(body["Key"]) + sum(value_size(v) for v in (body.get("ExpressionAttributeValues") or {}).values())
            if (table, key) in seen:
                raise Refusal(TRANSACTION_DUPLICATES)
            seen.add((table, key))
        if total > MAX_TRANSACTION_BYTES:
            raise Refusal(TRANSACTION_TOO_LARGE)

    def _schema(self, table: str) -> tuple[str, ...]:
        """The table's key attributes: the partition key, then the sort key when it has one."""
        if table not in self._schemas:
            describe = getattr(self.inner, "describe_table", None)
            if describe is not None:
                from tests.support.iam import ENFORCEMENT

                with ENFORCEMENT.harness():  # the stand-in's own read: not the role whose call it checks
                    schema = describe(TableName=table)["Table"]["KeySchema"]
                self._schemas[table] = tuple(k["AttributeName"] for k in sorted(schema, key=lambda k: k["KeyType"] != "HASH"))
            else:
                self._schemas[table] = tuple(self.inner.keys[table])
        return self._schemas[table]


def _utf8(text: str) -> int:
    """UTF-8 bytes of a string (a lone surrogate as Python would send it)."""
    return len(text.encode("utf-8", "surrogatepass"))


def _binary(data: Any) -> bytes:
    """Binary as boto3 takes it: bytes, or text it encodes."""
    return bytes(data) if isinstance(data, (bytes, bytearray)) else str(data).encode("utf-8")
