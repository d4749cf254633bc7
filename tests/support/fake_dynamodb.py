"""An in-memory DynamoDB for the calls Worker Tier makes, with fault injection.

It evaluates the condition expressions Worker Tier writes (attribute_not_exists,
=, <, AND, OR, parentheses, #names and :values) and raises botocore's real
ClientError, so the code under test takes the same paths as against AWS. A refused
condition returns the old item with ReturnValuesOnConditionCheckFailure ALL_OLD,
as DynamoDB does: in the error of PutItem, in CancellationReasons[i]["Item"] of
TransactWriteItems.
"""

from __future__ import annotations

import bisect
import copy
import re
from typing import Any, Callable

from botocore.exceptions import ClientError

Fault = Callable[[str, dict[str, Any]], "str | None"]
_TOKENS = re.compile(r"\s*(attribute_not_exists|attribute_exists|AND|OR|\(|\)|=|<|[#:]?[A-Za-z_][\w]*)")


def client_error(code: str, operation: str, **extra: Any) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} (fake)"}, **extra}, operation)


class FakeDynamoDB:
    """Tables keyed by (pk,) or (pk, sk); ``fault(operation, params)`` may return an error code to raise."""

    def __init__(self, fault: Fault | None = None) -> None:
        self.tables: dict[str, dict[tuple, dict[str, Any]]] = {}
        self.partitions: dict[str, dict[str, set[tuple]]] = {}
        self.keys: dict[str, tuple[str, ...]] = {}
        self._sorted: dict[tuple[str, str | None], list[tuple]] = {}  # (table, pk or None for all) -> sorted keys
        self.calls: list[str] = []
        self.fault = fault or (lambda operation, params: None)
        self.unprocessed: Callable[[list[dict]], list[dict]] = lambda requests: []
        self.page_size = 100
        # Benchmarks turn copying off, so the fake's own cost does not swamp what is measured.
        self.copy_items = True
        # Eventually consistent reads: an item deleted since the last ``settle()`` may still be returned by a Query
        # without ConsistentRead, while ``stale(key)`` says so (DynamoDB gives no bound; about a second in practice).
        self.stale: Callable[[tuple], bool] = lambda key: False
        self.ghosts: dict[str, dict[tuple, dict[str, Any]]] = {}

    def create_table(self, name: str, *key: str) -> None:
        self.tables[name] = {}
        self.partitions[name] = {}
        self.keys[name] = key

    def _store(self, table: str, item: dict) -> None:
        key = self._key(table, item)
        if key not in self.tables[table]:
            self._sorted.pop((table, key[0]), None)
            self._sorted.pop((table, None), None)
        self.tables[table][key] = self._copy(item)
        self.partitions[table].setdefault(key[0], set()).add(key)

    # -- operations -------------------------------------------------------------------

    def put_item(self, TableName: str, Item: dict, ConditionExpression: str | None = None,
                 ExpressionAttributeNames: dict | None = None, ExpressionAttributeValues: dict | None = None,
                 ReturnValuesOnConditionCheckFailure: str = "NONE") -> dict:
        self._enter("PutItem", locals())
        existing = self.tables[TableName].get(self._key(TableName, Item))
        if ConditionExpression and not _Condition(ConditionExpression, ExpressionAttributeNames, ExpressionAttributeValues).holds(existing):
            raise client_error("ConditionalCheckFailedException", "PutItem", **_old_item(existing, ReturnValuesOnConditionCheckFailure))
        self._store(TableName, Item)
        return {}

    def get_item(self, TableName: str, Key: dict, ConsistentRead: bool = False) -> dict:
        self._enter("GetItem", locals())
        item = self.tables[TableName].get(self._key(TableName, Key))
        return {"Item": self._copy(item)} if item is not None else {}

    def delete_item(self, TableName: str, Key: dict, ConditionExpression: str | None = None,
                    ExpressionAttributeNames: dict | None = None, ExpressionAttributeValues: dict | None = None) -> dict:
        self._enter("DeleteItem", locals())
        key = self._key(TableName, Key)
        if ConditionExpression and not _Condition(ConditionExpression, ExpressionAttributeNames, ExpressionAttributeValues).holds(
            self.tables[TableName].get(key)
        ):
            raise client_error("ConditionalCheckFailedException", "DeleteItem")
        self._remove(TableName, key)
        return {}

    def _remove(self, table: str, key: tuple) -> None:
        removed = self.tables[table].pop(key, None)
        if removed is not None:
            self.ghosts.setdefault(table, {})[key] = removed
        self.partitions[table].get(key[0], set()).discard(key)
        self._sorted.pop((table, key[0]), None)
        self._sorted.pop((table, None), None)

    def settle(self) -> None:
        """Every eventually consistent read from now on sees every write so far."""
        self.ghosts.clear()

    def update_item(self, TableName: str, Key: dict, UpdateExpression: str,
                    ExpressionAttributeNames: dict | None = None, ExpressionAttributeValues: dict | None = None) -> dict:
        self._enter("UpdateItem", locals())
        assignments = [re.fullmatch(r"(#?\w+) = (:\w+)", part.strip()) for part in UpdateExpression.removeprefix("SET ").split(",")]
        assert UpdateExpression.startswith("SET ") and all(assignments), f"fake supports 'SET #a = :v, ...' only, got {UpdateExpression!r}"
        key = self._key(TableName, Key)
        if key not in self.tables[TableName]:
            self._store(TableName, Key)
        for match in assignments:
            name = (ExpressionAttributeNames or {}).get(match.group(1), match.group(1))
            self.tables[TableName][key][name] = self._copy(ExpressionAttributeValues[match.group(2)])
        return {}

    def query(self, TableName: str, KeyConditionExpression: str, ExpressionAttributeValues: dict,
              ExclusiveStartKey: dict | None = None, Limit: int | None = None, ConsistentRead: bool = False, **_: Any) -> dict:
        self._enter("Query", locals())
        assert KeyConditionExpression == "pk = :pk", KeyConditionExpression
        pk = ExpressionAttributeValues[":pk"]["S"]
        ghosts = {} if ConsistentRead else {k: v for k, v in self.ghosts.get(TableName, {}).items() if k[0] == pk and self.stale(k)}
        if not self.partitions[TableName].get(pk) and not ghosts:
            return {"Items": [], "Count": 0}
        table = {**ghosts, **self.tables[TableName]} if ghosts else self.tables[TableName]
        keys = self._sorted_keys(TableName, pk) if not ghosts else sorted({*self.partitions[TableName].get(pk, ()), *ghosts})
        first = 0 if ExclusiveStartKey is None else bisect.bisect_right(keys, self._key(TableName, ExclusiveStartKey))
        size = min(Limit or self.page_size, self.page_size)
        page = keys[first : first + size]
        response: dict[str, Any] = {"Items": [self._copy(table[k]) for k in page], "Count": len(page)}
        if len(keys) - first > size:
            last = table[page[-1]]
            response["LastEvaluatedKey"] = {name: last[name] for name in self.keys[TableName]}
        return response

    def batch_write_item(self, RequestItems: dict) -> dict:
        self._enter("BatchWriteItem", locals())
        unprocessed: dict[str, list] = {}
        for table, requests in RequestItems.items():
            held = self.unprocessed(requests)
            for request in requests:
                if any(request is h for h in held):
                    continue
                self._store(table, request["PutRequest"]["Item"])
            if held:
                unprocessed[table] = held
        return {"UnprocessedItems": unprocessed}

    def transact_write_items(self, TransactItems: list[dict]) -> dict:
        """Put, Delete and ConditionCheck entries, all or none; an item twice in one transaction is refused, as DynamoDB does."""
        self._enter("TransactWriteItems", locals())
        reasons, keys = [], set()
        for entry in TransactItems:
            [(kind, request)] = entry.items()
            assert kind in ("Put", "Delete", "ConditionCheck"), f"fake transactions take Put, Delete and ConditionCheck, got {kind}"
            key = (request["TableName"], self._key(request["TableName"], request.get("Item") or request["Key"]))
            if key in keys:
                raise client_error("ValidationException", "TransactWriteItems")
            keys.add(key)
            existing = self.tables[key[0]].get(key[1])
            condition = request.get("ConditionExpression")
            ok = not condition or _Condition(condition, request.get("ExpressionAttributeNames"), request.get("ExpressionAttributeValues")).holds(existing)
            old = {} if ok else _old_item(existing, request.get("ReturnValuesOnConditionCheckFailure", "NONE"))
            reasons.append({"Code": "None" if ok else "ConditionalCheckFailed", **old})
        if any(r["Code"] != "None" for r in reasons):
            raise client_error("TransactionCanceledException", "TransactWriteItems", CancellationReasons=reasons)
        for entry in TransactItems:
            [(kind, request)] = entry.items()
            if kind == "Put":
                self._store(request["TableName"], request["Item"])
            elif kind == "Delete":
                self._remove(request["TableName"], self._key(request["TableName"], request["Key"]))
        return {}

    def scan(self, TableName: str, ProjectionExpression: str | None = None,
             ExclusiveStartKey: dict | None = None, **_: Any) -> dict:
        self._enter("Scan", locals())
        keys = self._sorted_keys(TableName, None)
        first = 0 if ExclusiveStartKey is None else bisect.bisect_right(keys, self._key(TableName, ExclusiveStartKey))
        page = keys[first : first + self.page_size]
        response: dict[str, Any] = {"Items": [self._copy(self.tables[TableName][k]) for k in page]}
        if len(keys) - first > self.page_size:
            response["LastEvaluatedKey"] = {name: {"S": value} for name, value in zip(self.keys[TableName], page[-1], strict=True)}
        return response

    # -- helpers ----------------------------------------------------------------------

    def _sorted_keys(self, table: str, pk: str | None) -> list[tuple]:
        """A partition's keys (or the whole table's, for pk None) in order, kept until a key is added or removed."""
        keys = self.tables[table] if pk is None else self.partitions[table].get(pk, ())
        cached = self._sorted.get((table, pk))
        if cached is None or len(cached) != len(keys):  # the length catches a test editing ``tables`` directly
            cached = self._sorted[(table, pk)] = sorted(keys)
        return cached

    def _copy(self, value: Any) -> Any:
        return copy.deepcopy(value) if self.copy_items else value

    def count(self, operation: str) -> int:
        return sum(1 for name in self.calls if name == operation)

    def _enter(self, operation: str, params: dict[str, Any]) -> None:
        self.calls.append(operation)
        code = self.fault(operation, params)
        if code is not None:
            raise client_error(code, operation)

    def _key(self, table: str, item: dict) -> tuple:
        return tuple(item[name]["S"] for name in self.keys[table])


def _old_item(existing: dict | None, return_values: str) -> dict[str, Any]:
    """What a refused condition returns: the item as it was ({"Item": ...}) with ALL_OLD when it exists, else nothing."""
    assert return_values in ("NONE", "ALL_OLD"), f"ReturnValuesOnConditionCheckFailure takes NONE or ALL_OLD, got {return_values!r}"
    return {"Item": copy.deepcopy(existing)} if return_values == "ALL_OLD" and existing is not None else {}


class _Condition:
    """Parses and evaluates a condition expression against an item (None when absent)."""

    def __init__(self, text: str, names: dict | None, values: dict | None) -> None:
        self.tokens = _TOKENS.findall(text)
        self.names = names or {}
        self.values = values or {}

    def holds(self, item: dict | None) -> bool:
        self.item = item or {}
        self.position = 0
        return self._or()

    def _next(self) -> str:
        token = self.tokens[self.position]
        self.position += 1
        return token

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
            assert self._next() == ")"
            return result
        if token in ("attribute_not_exists", "attribute_exists"):
            assert self._next() == "("
            name = self._name(self._next())
            assert self._next() == ")"
            return (name in self.item) == (token == "attribute_exists")
        operator, operand = self._next(), self._next()
        left, right = self.item.get(self._name(token)), self.values[operand]
        if left is None:
            return False
        return _compare(left, right, operator)

    def _name(self, token: str) -> str:
        return self.names.get(token, token)


def _compare(left: dict, right: dict, operator: str) -> bool:
    (kind, a), (_, b) = next(iter(left.items())), next(iter(right.items()))
    if kind == "N":
        a, b = float(a), float(b)
    return a == b if operator == "=" else a < b
