"""``MemoryTables``: an in-memory DynamoDB for the calls Worker Tier makes, for ``TaskWorld``.

The calls and their rules are those of ``tests/support/fake_dynamodb.py``, the unit tests' stand-in: PutItem, GetItem, DeleteItem and UpdateItem (``SET #a = :v, ...``),
Query on the partition key (``pk = :pk``, paged by ``Limit``), BatchWriteItem, TransactWriteItems (Put, Delete,
ConditionCheck: all or none) and Scan, with the condition expressions Worker Tier and Powertools write
(``attribute_not_exists``, ``attribute_exists``, ``=``, ``<``, ``AND``, ``OR``, parentheses, ``#names``, ``:values``).
A refused condition raises botocore's ``ClientError`` with DynamoDB's code, and the old item under ``ALL_OLD``.
Any other call raises ``UnsupportedCallError`` naming it.
"""

from __future__ import annotations

import bisect
import copy
import re
from typing import Any

from botocore.exceptions import ClientError

from worker_tier.core.errors import WorkerTierError

# DynamoDB's page: 1 MB of items; a page of this many items stands for it.
PAGE_ITEMS = 100
_TOKENS = re.compile(r"\s*(attribute_not_exists|attribute_exists|AND|OR|\(|\)|=|<|[#:]?[A-Za-z_]\w*)")
_ASSIGNMENT = re.compile(r"(#?\w+) = (:\w+)")

Item = dict[str, Any]


def client_error(code: str, operation: str, message: str = "", **extra: Any) -> ClientError:
    """botocore's error for ``code``, as the service would raise it; ``message`` says why."""
    response: Any = {"Error": {"Code": code, "Message": f"{message or code} (worker_tier.testing)"}, **extra}
    return ClientError(response, operation)


class MemoryTables:
    """DynamoDB tables in memory, each keyed by its partition key and, when it has one, its sort key (strings)."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[tuple[str, ...], Item]] = {}
        self.keys: dict[str, tuple[str, ...]] = {}

    def create_table(self, name: str, *key: str) -> None:
        """An empty table keyed by ``key``: its partition key, then its sort key if any."""
        self.tables[name], self.keys[name] = {}, key

    def put_item(self, TableName: str, Item: Item, ConditionExpression: str | None = None,
                 ExpressionAttributeNames: dict[str, str] | None = None,
                 ExpressionAttributeValues: dict[str, Any] | None = None,
                 ReturnValuesOnConditionCheckFailure: str = "NONE", **_: Any) -> dict[str, Any]:
        existing = self._table(TableName).get(self._key(TableName, Item))
        if not _holds(ConditionExpression, ExpressionAttributeNames, ExpressionAttributeValues, existing):
            raise client_error("ConditionalCheckFailedException", "PutItem", **_old(existing, ReturnValuesOnConditionCheckFailure))
        self._table(TableName)[self._key(TableName, Item)] = copy.deepcopy(Item)
        return {}

    def get_item(self, TableName: str, Key: Item, **_: Any) -> dict[str, Any]:
        item = self._table(TableName).get(self._key(TableName, Key))
        return {"Item": copy.deepcopy(item)} if item is not None else {}

    def delete_item(self, TableName: str, Key: Item, ConditionExpression: str | None = None,
                    ExpressionAttributeNames: dict[str, str] | None = None,
                    ExpressionAttributeValues: dict[str, Any] | None = None, **_: Any) -> dict[str, Any]:
        key = self._key(TableName, Key)
        if not _holds(ConditionExpression, ExpressionAttributeNames, ExpressionAttributeValues, self._table(TableName).get(key)):
            raise client_error("ConditionalCheckFailedException", "DeleteItem")
        self._table(TableName).pop(key, None)
        return {}

    def update_item(self, TableName: str, Key: Item, UpdateExpression: str,
                    ExpressionAttributeNames: dict[str, str] | None = None,
                    ExpressionAttributeValues: dict[str, Any] | None = None, **_: Any) -> dict[str, Any]:
        parts = UpdateExpression.removeprefix("SET ").split(",")
        assignments = [_ASSIGNMENT.fullmatch(part.strip()) for part in parts]
        if not UpdateExpression.startswith("SET ") or not all(assignments):
            raise UnsupportedCallError(f"UpdateItem takes 'SET #a = :v, ...' here, got {UpdateExpression!r}")
        item = self._table(TableName).setdefault(self._key(TableName, Key), copy.deepcopy(Key))
        for match in assignments:
            assert match is not None  # checked above
            name = (ExpressionAttributeNames or {}).get(match.group(1), match.group(1))
            item[name] = copy.deepcopy((ExpressionAttributeValues or {})[match.group(2)])
        return {}

    def query(self, TableName: str, KeyConditionExpression: str, ExpressionAttributeValues: dict[str, Any],
              ExclusiveStartKey: Item | None = None, Limit: int | None = None, **_: Any) -> dict[str, Any]:
        if KeyConditionExpression != "pk = :pk":
            raise UnsupportedCallError(f"Query takes 'pk = :pk' here, got {KeyConditionExpression!r}")
        partition = ExpressionAttributeValues[":pk"]["S"]
        keys = sorted(key for key in self._table(TableName) if key[0] == partition)
        return self._page(TableName, keys, ExclusiveStartKey, min(Limit or PAGE_ITEMS, PAGE_ITEMS))

    def scan(self, TableName: str, ExclusiveStartKey: Item | None = None, **_: Any) -> dict[str, Any]:
        return self._page(TableName, sorted(self._table(TableName)), ExclusiveStartKey, PAGE_ITEMS)

    def batch_write_item(self, RequestItems: dict[str, list[dict[str, Any]]], **_: Any) -> dict[str, Any]:
        for table, requests in RequestItems.items():
            for request in requests:
                if "PutRequest" in request:
                    self.put_item(table, request["PutRequest"]["Item"])
                else:
                    self.delete_item(table, request["DeleteRequest"]["Key"])
        return {"UnprocessedItems": {}}

    def transact_write_items(self, TransactItems: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        """Put, Delete and ConditionCheck entries, all or none; one item twice is refused, as DynamoDB does."""
        reasons, seen = [], set()
        for entry in TransactItems:
            [(kind, request)] = entry.items()
            table = request["TableName"]
            key = (table, self._key(table, request.get("Item") or request["Key"]))
            if kind not in ("Put", "Delete", "ConditionCheck") or key in seen:
                raise client_error("ValidationException", "TransactWriteItems")
            seen.add(key)
            existing = self._table(table).get(key[1])
            ok = _holds(request.get("ConditionExpression"), request.get("ExpressionAttributeNames"),
                        request.get("ExpressionAttributeValues"), existing)
            old = {} if ok else _old(existing, request.get("ReturnValuesOnConditionCheckFailure", "NONE"))
            reasons.append({"Code": "None" if ok else "ConditionalCheckFailed", **old})
        if any(reason["Code"] != "None" for reason in reasons):
            raise client_error("TransactionCanceledException", "TransactWriteItems", CancellationReasons=reasons)
        for entry in TransactItems:
            [(kind, request)] = entry.items()
            if kind == "Put":
                self.put_item(request["TableName"], request["Item"])
            elif kind == "Delete":
                self.delete_item(request["TableName"], request["Key"])
        return {}

    def _page(self, table: str, keys: list[tuple[str, ...]], start: Item | None, size: int) -> dict[str, Any]:
        first = 0 if start is None else bisect.bisect_right(keys, self._key(table, start))
        page = keys[first:first + size]
        response: dict[str, Any] = {"Items": [copy.deepcopy(self.tables[table][key]) for key in page], "Count": len(page)}
        if len(keys) - first > size:
            response["LastEvaluatedKey"] = {name: {"S": value} for name, value in zip(self.keys[table], page[-1], strict=True)}
        return response

    def _table(self, name: str) -> dict[tuple[str, ...], Item]:
        if name not in self.tables:
            raise client_error("ResourceNotFoundException", "DynamoDB")
        return self.tables[name]

    def _key(self, table: str, item: Item) -> tuple[str, ...]:
        return tuple(item[name]["S"] for name in self.keys[table])


class UnsupportedCallError(WorkerTierError, NotImplementedError):
    """A call or an expression the in-memory stand-ins do not model."""


def _old(existing: Item | None, return_values: str) -> dict[str, Any]:
    """What a refused condition returns: the item as it was under ALL_OLD, else nothing."""
    return {"Item": copy.deepcopy(existing)} if return_values == "ALL_OLD" and existing is not None else {}


def _holds(text: str | None, names: dict[str, str] | None, values: dict[str, Any] | None, item: Item | None) -> bool:
    """Whether the condition expression ``text`` holds for ``item`` (None: absent); no condition always holds."""
    return True if not text else _Condition(_TOKENS.findall(text), names or {}, values or {}, item or {}).evaluate()


class _Condition:
    """A recursive-descent reading of one condition expression against one item."""

    def __init__(self, tokens: list[str], names: dict[str, str], values: dict[str, Any], item: Item) -> None:
        self.tokens, self.names, self.values, self.item, self.position = tokens, names, values, item, 0

    def evaluate(self) -> bool:
        return self._or()

    def _next(self) -> str:
        self.position += 1
        return self.tokens[self.position - 1]

    def _peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _or(self) -> bool:
        result = self._and()
        while self._peek() == "OR":
            self._next()
            result = self._and() or result
        return result

    def _and(self) -> bool:
        result = self._atom()
        while self._peek() == "AND":
            self._next()
            result = self._atom() and result
        return result

    def _atom(self) -> bool:
        token = self._next()
        if token == "(":
            result = self._or()
            self._next()  # ")"
            return result
        if token in ("attribute_not_exists", "attribute_exists"):
            self._next()  # "("
            word = self._next()
            name = self.names.get(word, word)
            self._next()  # ")"
            return (name in self.item) == (token == "attribute_exists")
        operator, operand = self._next(), self._next()
        left = self.item.get(self.names.get(token, token))
        return left is not None and _compare(left, self.values[operand], operator)


def _compare(left: dict[str, Any], right: dict[str, Any], operator: str) -> bool:
    (kind, a), (_, b) = next(iter(left.items())), next(iter(right.items()))
    if kind == "N":
        a, b = float(a), float(b)
    return bool(a == b if operator == "=" else a < b)
