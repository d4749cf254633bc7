"""``MemoryTables``: an in-memory DynamoDB for the calls Worker Tier makes, for ``TaskWorld`` and the unit tests.

The calls: PutItem, GetItem, DeleteItem and UpdateItem, each with a condition and
``ReturnValuesOnConditionCheckFailure``; UpdateItem's ``SET #a = :v, #b = #b + :n, #c = #c - :n`` and
``ADD #d :n`` clauses (numbers; ADD makes a missing one from 0, arithmetic on a missing attribute is refused), in
either order, and its ``ReturnValues`` (NONE, ALL_OLD, UPDATED_OLD, ALL_NEW, UPDATED_NEW); Query on the
partition key (``pk = :pk``, paged by ``Limit``), BatchWriteItem, TransactWriteItems (Put, Delete, ConditionCheck: all or none) and Scan (with a
``ProjectionExpression`` of names). Conditions: ``attribute_not_exists``, ``attribute_exists``, ``NOT``, the six
comparisons, ``AND``, ``OR``, parentheses, ``#names`` and ``:values``, compared as DynamoDB compares them
(numbers exactly; values of different types never equal). DynamoDB's validation for these calls is kept: an
expression name or value unused or undefined, a key not matching the table's, an update of a key attribute, of
one attribute twice, or with an operand that is not a number where one must be, a batch of more than 25 items
or with one key twice, a transaction naming one item twice. Any other call or expression raises
``UnsupportedCallError`` naming it. Each rule was checked against moto and dynalite
(tests/functional/test_testing_stand_ins.py); where moto is laxer than the API reference, the reference and
dynalite win. ``tests/support/fake_dynamodb.py`` builds on this class for the unit tests.

One idea, kept in one module though it is long: DynamoDB's answers to Worker Tier's calls, its expression
readers (conditions, updates) included, since every call checks and applies them the same way.
"""

from __future__ import annotations

import bisect
import copy
import re
from dataclasses import dataclass
from decimal import Context, Decimal, Inexact
from typing import Any, Iterable, NoReturn

from botocore.exceptions import ClientError

from worker_tier.core import limits
from worker_tier.core.errors import WorkerTierError

# DynamoDB's page: 1 MB of items; a page of this many items stands for it.
PAGE_ITEMS = 100
# TransactWriteItems' limit: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
MAX_TRANSACTION_ITEMS = 100
_KEYWORDS = {"AND", "OR", "NOT", "ATTRIBUTE_EXISTS", "ATTRIBUTE_NOT_EXISTS", "SIZE"}
_TOKEN = re.compile(r"\s*(<>|<=|>=|=|<|>|\(|\)|,|\+|-|[#:]?[A-Za-z_][\w.]*)")
# UpdateItem's ReturnValues, in the order DynamoDB's refusal lists them.
RETURN_VALUES = ("ALL_NEW", "UPDATED_OLD", "ALL_OLD", "NONE", "UPDATED_NEW")
# DynamoDB's numbers: up to 38 digits of precision.
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html#HowItWorks.DataTypes.Number
NUMBER_DIGITS = 38
MISSING_ATTRIBUTE_MESSAGE = "The provided expression refers to an attribute that does not exist in the item"
WRONG_TYPE_MESSAGE = "An operand in the update expression has an incorrect data type"
_UPDATE_TOKEN = re.compile(r"\s*([#:]?[A-Za-z_]\w*|[=+,()-])")
LIST_APPEND = "list_append"  # SET #a = list_append(#a, :v): a tracked job's history (worker_tier.core.jobs)
_ORDERED = ("N", "S", "B")  # the types <, <=, > and >= compare
CONDITION_FAILED_MESSAGE = "The conditional request failed"

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
        self.page_items = PAGE_ITEMS

    def create_table(self, name: str, *key: str) -> None:
        """An empty table keyed by ``key``: its partition key, then its sort key if any."""
        self.tables[name], self.keys[name] = {}, key

    # -- the DynamoDB API (boto3's names and shapes) ----------------------------------------

    def put_item(self, TableName: str, Item: Item, ConditionExpression: str | None = None,
                 ExpressionAttributeNames: dict[str, str] | None = None,
                 ExpressionAttributeValues: dict[str, Any] | None = None,
                 ReturnValuesOnConditionCheckFailure: str = "NONE", **_: Any) -> dict[str, Any]:
        self._called("PutItem", locals())
        key = self._key(TableName, Item)
        _check_expressions([ConditionExpression], ExpressionAttributeNames, ExpressionAttributeValues)
        self._check("PutItem", TableName, key, ConditionExpression, ExpressionAttributeNames, ExpressionAttributeValues,
                    ReturnValuesOnConditionCheckFailure)
        self._store(TableName, Item)
        return {}

    def get_item(self, TableName: str, Key: Item, ConsistentRead: bool = False, **_: Any) -> dict[str, Any]:
        self._called("GetItem", locals())
        item = self._table(TableName).get(self._key(TableName, Key, exact=True))
        return {"Item": self._copy(item)} if item is not None else {}

    def delete_item(self, TableName: str, Key: Item, ConditionExpression: str | None = None,
                    ExpressionAttributeNames: dict[str, str] | None = None,
                    ExpressionAttributeValues: dict[str, Any] | None = None,
                    ReturnValuesOnConditionCheckFailure: str = "NONE", **_: Any) -> dict[str, Any]:
        self._called("DeleteItem", locals())
        key = self._key(TableName, Key, exact=True)
        _check_expressions([ConditionExpression], ExpressionAttributeNames, ExpressionAttributeValues)
        self._check("DeleteItem", TableName, key, ConditionExpression, ExpressionAttributeNames, ExpressionAttributeValues,
                    ReturnValuesOnConditionCheckFailure)
        self._remove(TableName, key)
        return {}

    def update_item(self, TableName: str, Key: Item, UpdateExpression: str, ConditionExpression: str | None = None,
                    ExpressionAttributeNames: dict[str, str] | None = None,
                    ExpressionAttributeValues: dict[str, Any] | None = None, ReturnValues: str = "NONE",
                    ReturnValuesOnConditionCheckFailure: str = "NONE", **_: Any) -> dict[str, Any]:
        """``SET`` and ``ADD`` clauses on the item, made from its key when missing, if the condition holds.

        The answer's ``Attributes`` follow ``ReturnValues``: none, the item before or after (``ALL_OLD``,
        ``ALL_NEW``), or only the attributes the expression names, before or after (``UPDATED_OLD``, ``UPDATED_NEW``).
        """
        self._called("UpdateItem", locals())
        if ReturnValues not in RETURN_VALUES:
            raise client_error("ValidationException", "UpdateItem", message=(
                f"1 validation error detected: Value {ReturnValues!r} at 'returnValues' failed to satisfy constraint: "
                f"Member must satisfy enum value set: [{', '.join(RETURN_VALUES)}]"))
        names, values = ExpressionAttributeNames or {}, ExpressionAttributeValues or {}
        actions = _Update(UpdateExpression).actions
        key = self._key(TableName, Key, exact=True)
        _check_expressions([UpdateExpression, ConditionExpression], ExpressionAttributeNames, ExpressionAttributeValues)
        _check_actions(actions, names, values, self.keys[TableName])
        self._check("UpdateItem", TableName, key, ConditionExpression, ExpressionAttributeNames, ExpressionAttributeValues,
                    ReturnValuesOnConditionCheckFailure)
        old = self._table(TableName).get(key)
        item = copy.deepcopy(old or Key)
        updated = [_apply(action, names, values, old or {}, item) for action in actions]
        self._store(TableName, item)
        return _returned(ReturnValues, old, item, updated)

    def query(self, TableName: str, KeyConditionExpression: str, ExpressionAttributeValues: dict[str, Any],
              ExclusiveStartKey: Item | None = None, Limit: int | None = None, ConsistentRead: bool = False,
              **_: Any) -> dict[str, Any]:
        """A partition's items in sort key order; a page ends at ``Limit`` (then with a LastEvaluatedKey) or at 1 MB."""
        self._called("Query", locals())
        if KeyConditionExpression != "pk = :pk":
            raise UnsupportedCallError(f"Query takes 'pk = :pk' here, got {KeyConditionExpression!r}")
        _check_expressions([KeyConditionExpression], None, ExpressionAttributeValues)
        self._table(TableName)
        items = self._partition(TableName, ExpressionAttributeValues[":pk"]["S"], ConsistentRead)
        return self._page(TableName, items, ExclusiveStartKey, Limit)

    def scan(self, TableName: str, ExclusiveStartKey: Item | None = None, ProjectionExpression: str | None = None,
             ExpressionAttributeNames: dict[str, str] | None = None, **_: Any) -> dict[str, Any]:
        """The table's items in key order, a page at a time, with only the projection's attributes if one is given."""
        self._called("Scan", locals())
        _check_expressions([ProjectionExpression], ExpressionAttributeNames, None)
        response = self._page(TableName, self._table(TableName), ExclusiveStartKey, None)
        if ProjectionExpression:
            names = [(ExpressionAttributeNames or {}).get(name.strip(), name.strip()) for name in ProjectionExpression.split(",")]
            response["Items"] = [{name: item[name] for name in names if name in item} for item in response["Items"]]
        return response

    def batch_write_item(self, RequestItems: dict[str, list[dict[str, Any]]], **_: Any) -> dict[str, Any]:
        """Puts and deletes, each table's ``_unprocessed`` ones left for the caller; a batch DynamoDB refuses writes nothing."""
        self._called("BatchWriteItem", locals())
        self._check_batch(RequestItems)
        unprocessed: dict[str, list[dict[str, Any]]] = {}
        for table, requests in RequestItems.items():
            held = self._unprocessed(requests)
            for request in requests:
                if any(request is h for h in held):
                    continue
                if "PutRequest" in request:
                    self._store(table, request["PutRequest"]["Item"])
                else:
                    self._remove(table, self._key(table, request["DeleteRequest"]["Key"], exact=True))
            if held:
                unprocessed[table] = held
        return {"UnprocessedItems": unprocessed}

    def transact_write_items(self, TransactItems: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        """Put, Delete and ConditionCheck entries, all or none; one item twice is refused, as DynamoDB does."""
        self._called("TransactWriteItems", locals())
        if len(TransactItems) > MAX_TRANSACTION_ITEMS:
            raise client_error("ValidationException", "TransactWriteItems", message=f"at most {MAX_TRANSACTION_ITEMS} items, got {len(TransactItems)}")
        reasons, seen = [], set()
        for entry in TransactItems:
            [(kind, request)] = entry.items()
            if kind not in ("Put", "Delete", "ConditionCheck"):
                raise UnsupportedCallError(f"TransactWriteItems takes Put, Delete and ConditionCheck here, got {kind}")
            table = request["TableName"]
            key = (table, self._key(table, request["Item"]) if kind == "Put" else self._key(table, request["Key"], exact=True))
            if key in seen:
                raise client_error("ValidationException", "TransactWriteItems", message="Transaction request cannot include multiple operations on one item")
            seen.add(key)
            names, values = request.get("ExpressionAttributeNames"), request.get("ExpressionAttributeValues")
            _check_expressions([request.get("ConditionExpression")], names, values)
            existing = self._table(table).get(key[1])
            ok = _holds(request.get("ConditionExpression"), names, values, existing)
            old = {} if ok else {"Message": CONDITION_FAILED_MESSAGE, **_old(existing, request.get("ReturnValuesOnConditionCheckFailure", "NONE"))}
            reasons.append({"Code": "None" if ok else "ConditionalCheckFailed", **old})
        if any(reason["Code"] != "None" for reason in reasons):
            codes = ", ".join(reason["Code"] for reason in reasons)
            raise client_error("TransactionCanceledException", "TransactWriteItems", CancellationReasons=reasons,
                               message=f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]")
        for entry in TransactItems:
            [(kind, request)] = entry.items()
            if kind == "Put":
                self._store(request["TableName"], request["Item"])
            elif kind == "Delete":
                self._remove(request["TableName"], self._key(request["TableName"], request["Key"]))
        return {}

    # -- hooks: what a subclass may change (tests/support/fake_dynamodb.py does) -------------

    def _called(self, operation: str, params: dict[str, Any]) -> None:
        """Each call, before anything else: its DynamoDB name and its parameters."""

    def _store(self, table: str, item: Item) -> None:
        """Put ``item`` in ``table`` (a copy)."""
        self._table(table)[self._key(table, item)] = self._copy(item)

    def _remove(self, table: str, key: tuple[str, ...]) -> None:
        """Take the item at ``key`` out of ``table``, if it is there."""
        self._table(table).pop(key, None)

    def _partition(self, table: str, partition: str, consistent: bool) -> dict[tuple[str, ...], Item]:
        """The items of one partition a Query sees."""
        return {key: item for key, item in self.tables[table].items() if key[0] == partition}

    def _unprocessed(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The requests of a BatchWriteItem left unprocessed (DynamoDB's throttling): none here."""
        return []

    def _copy(self, value: Any) -> Any:
        return copy.deepcopy(value)

    # -- helpers ----------------------------------------------------------------------------

    def _check(self, operation: str, table: str, key: tuple[str, ...], condition: str | None, names: dict[str, str] | None,
               values: dict[str, Any] | None, return_values: str) -> None:
        """Raise DynamoDB's refusal when ``condition`` does not hold for the item at ``key``."""
        existing = self._table(table).get(key)
        if not _holds(condition, names, values, existing):
            raise client_error("ConditionalCheckFailedException", operation, message=CONDITION_FAILED_MESSAGE,
                               **_old(existing, return_values))

    def _check_batch(self, requests: dict[str, list[dict[str, Any]]]) -> None:
        """BatchWriteItem's own rules: 1..25 requests, no key twice."""
        count = sum(len(each) for each in requests.values())
        if not 0 < count <= limits.DYNAMODB_MAX_BATCH_WRITE_ITEMS:
            raise client_error("ValidationException", "BatchWriteItem",
                               message=f"BatchWriteItem takes 1..{limits.DYNAMODB_MAX_BATCH_WRITE_ITEMS} requests, got {count}")
        for table, each in requests.items():
            keys = [self._key(table, r["PutRequest"]["Item"]) if "PutRequest" in r else self._key(table, r["DeleteRequest"]["Key"], exact=True)
                    for r in each]
            if len(set(keys)) != len(keys):
                raise client_error("ValidationException", "BatchWriteItem", message="Provided list of item keys contains duplicates")

    def _page(self, table: str, items: dict[tuple[str, ...], Item], start: Item | None, limit: int | None) -> dict[str, Any]:
        keys = sorted(items)
        size = min(limit or self.page_items, self.page_items)
        first = 0 if start is None else bisect.bisect_right(keys, self._key(table, start))
        page = keys[first:first + size]
        response: dict[str, Any] = {"Items": [self._copy(items[key]) for key in page], "Count": len(page), "ScannedCount": len(page)}
        if len(keys) - first > size or (limit is not None and len(page) == limit):
            response["LastEvaluatedKey"] = {name: {"S": value} for name, value in zip(self.keys[table], page[-1], strict=True)}
        return response

    def _table(self, name: str) -> dict[tuple[str, ...], Item]:
        if name not in self.tables:
            raise client_error("ResourceNotFoundException", "DynamoDB", message=f"Requested resource not found: table {name}")
        return self.tables[name]

    def _key(self, table: str, item: Item, exact: bool = False) -> tuple[str, ...]:
        """``item``'s key in ``table``; DynamoDB's ValidationException when it lacks a key attribute (or, ``exact``, has more)."""
        names = self.keys.get(table)
        if names is None:
            self._table(table)
        assert names is not None  # _table raised otherwise
        if any("S" not in item.get(name, {}) for name in names) or (exact and len(item) != len(names)):
            raise client_error("ValidationException", "DynamoDB", message="The provided key element does not match the schema")
        return tuple(item[name]["S"] for name in names)


# What a test whose own AWS call lies outside the stand-ins can do instead.
UNSUPPORTED_CALL_FIX = ("every call Worker Tier itself makes is modelled; run a test that needs this one against moto "
                        "(moto's mock_aws) rather than a TaskWorld")


class UnsupportedCallError(WorkerTierError, NotImplementedError):
    """A call or an expression outside what the in-memory stand-ins model: refused, never answered wrongly.

    Every call the runtime makes is modelled and checked against moto and dynalite
    (tests/functional/test_testing_stand_ins.py); a test's own call beyond them gets this, with what to do.
    """

    def __init__(self, message: str) -> None:
        super().__init__(f"{message}; {UNSUPPORTED_CALL_FIX}")


def _old(existing: Item | None, return_values: str) -> dict[str, Any]:
    """What a refused condition returns: the item as it was under ALL_OLD, else nothing."""
    if return_values not in ("NONE", "ALL_OLD"):
        raise client_error("ValidationException", "DynamoDB", message=f"ReturnValuesOnConditionCheckFailure takes NONE or ALL_OLD, got {return_values!r}")
    return {"Item": copy.deepcopy(existing)} if return_values == "ALL_OLD" and existing is not None else {}


def _tokens(text: str) -> list[str]:
    """The expression's tokens; UnsupportedCallError at anything this does not read."""
    tokens, position = [], 0
    while position < len(text.rstrip()):
        match = _TOKEN.match(text, position)
        if match is None:
            raise UnsupportedCallError(f"expression {text!r} is not modelled by worker_tier.testing from {text[position:]!r}")
        tokens.append(match.group(1).upper() if match.group(1).upper() in _KEYWORDS else match.group(1))
        position = match.end()
    return tokens


def _check_expressions(expressions: Iterable[str | None], names: dict[str, str] | None, values: dict[str, Any] | None) -> None:
    """DynamoDB's ValidationException for an expression name or value given but unused, used but not given, or an empty map."""
    used = {token for text in expressions if text for token in _tokens(text) if token[0] in "#:"}
    for given, sigil, kind in ((names, "#", "ExpressionAttributeNames"), (values, ":", "ExpressionAttributeValues")):
        if given is not None and not given:
            raise client_error("ValidationException", "DynamoDB", message=f"{kind} must not be empty")
        wanted = {token for token in used if token[0] == sigil}
        if wanted - set(given or {}):
            raise client_error("ValidationException", "DynamoDB", message=f"{kind} lacks {sorted(wanted - set(given or {}))}")
        if set(given or {}) - wanted:
            raise client_error("ValidationException", "DynamoDB", message=f"Value provided in {kind} unused in expressions: {sorted(set(given or {}) - wanted)}")


@dataclass(frozen=True)
class _Action:
    """One action of an update expression: ``SET path = operand [+|- operand]`` or ``ADD path :value``."""

    clause: str
    path: str  # a #name or an attribute's name
    operands: tuple[str, ...]
    operator: str | None = None


class _Update:
    """An update expression read as its ``SET``, ``ADD`` and ``REMOVE`` clauses (each at most once, in any order);
    anything else (DELETE, functions, nested paths) raises UnsupportedCallError."""

    def __init__(self, text: str) -> None:
        self.text, self.tokens, self.position = text, _update_tokens(text), 0
        self.actions: list[_Action] = []
        clauses: set[str] = set()
        while self.position < len(self.tokens):
            clause = self._next().upper()
            if clause not in ("SET", "ADD", "REMOVE"):
                self._unsupported()
            if clause in clauses:
                raise client_error("ValidationException", "UpdateItem", message=(
                    f'Invalid UpdateExpression: The "{clause}" section can only be used once in an update expression;'))
            clauses.add(clause)
            self.actions.append(self._action(clause))
            while self._peek() == ",":
                self._next()
                self.actions.append(self._action(clause))

    def _action(self, clause: str) -> _Action:
        path = self._path()
        if clause == "REMOVE":
            return _Action(clause, path, ())
        if clause == "ADD":
            value = self._next()
            if not value.startswith(":"):
                self._unsupported()
            return _Action(clause, path, (value,))
        if self._next() != "=":
            self._unsupported()
        if (self._peek() or "").lower() == LIST_APPEND:
            self._next()
            if self._next() != "(":
                self._unsupported()
            left = self._operand()
            if self._next() != ",":
                self._unsupported()
            right = self._operand()
            if self._next() != ")":
                self._unsupported()
            return _Action(clause, path, (left, right), LIST_APPEND)
        first = self._operand()
        if self._peek() in ("+", "-"):
            operator = self._next()
            return _Action(clause, path, (first, self._operand()), operator)
        return _Action(clause, path, (first,))

    def _path(self) -> str:
        token = self._next()
        if not (token[0] in "#_" or token[0].isalpha()) or token.upper() in ("SET", "ADD", "REMOVE"):
            self._unsupported()
        return token

    def _operand(self) -> str:
        return self._next() if (self._peek() or "").startswith(":") else self._path()

    def _next(self) -> str:
        if self.position >= len(self.tokens):
            self._unsupported()
        self.position += 1
        return self.tokens[self.position - 1]

    def _peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _unsupported(self) -> NoReturn:
        raise UnsupportedCallError(f"UpdateItem takes 'SET #a = :v, #b = #b + :n, #l = list_append(#l, :v)', 'ADD #c :n' "
                                   f"and 'REMOVE #d' clauses here, got {self.text!r}")


def _update_tokens(text: str) -> list[str]:
    tokens, position = [], 0
    while position < len(text.rstrip()):
        match = _UPDATE_TOKEN.match(text, position)
        if match is None:
            raise UnsupportedCallError(f"update expression {text!r} is not modelled by worker_tier.testing from {text[position:]!r}")
        tokens.append(match.group(1))
        position = match.end()
    return tokens


# How DynamoDB's refusal of an operand names its type (dynalite's words).
_TYPE_NAMES = {"S": "STRING", "N": "NUMBER", "B": "BINARY", "BOOL": "BOOLEAN", "NULL": "NULL", "L": "LIST", "M": "MAP"}


def _check_actions(actions: list[_Action], names: dict[str, str], values: dict[str, Any], key: tuple[str, ...]) -> None:
    """DynamoDB's refusals of an update before it reads the item: a key attribute updated, one attribute updated twice,
    a value of the wrong type for ADD, + or -."""
    seen: set[str] = set()
    for action in actions:
        name = names.get(action.path, action.path)
        if name in key:
            raise client_error("ValidationException", "UpdateItem", message=(
                f"One or more parameter values were invalid: Cannot update attribute {name}. This attribute is part of the key"))
        if name in seen:
            raise client_error("ValidationException", "UpdateItem", message=(
                "Invalid UpdateExpression: Two document paths overlap with each other; must remove or rewrite one of "
                f"these paths; path one: [{name}], path two: [{name}]"))
        seen.add(name)
        for operand in action.operands if action.clause == "ADD" or action.operator in ("+", "-") else ():
            kind = next(iter(values[operand])) if operand.startswith(":") else "N"
            if kind in ("SS", "NS", "BS"):
                raise UnsupportedCallError(f"ADD of a set ({operand} is {kind}) is not modelled by worker_tier.testing")
            if kind != "N" and action.clause == "ADD":
                raise client_error("ValidationException", "UpdateItem", message=(
                    f"Invalid UpdateExpression: Incorrect operand type for operator or function; operator: ADD, "
                    f"operand type: {_TYPE_NAMES.get(kind, kind)}"))
            if kind != "N":
                raise client_error("ValidationException", "UpdateItem", message=(
                    f"Invalid UpdateExpression: Incorrect operand type for operator or function; operator or function: "
                    f"{action.operator}, operand type: {kind}"))


def _apply(action: _Action, names: dict[str, str], values: dict[str, Any], old: Item, item: Item) -> str:
    """Carry out one action on ``item``, its operands read from the item as it was (``old``); the attribute's name."""
    name = names.get(action.path, action.path)
    if action.clause == "REMOVE":  # a missing attribute is no error
        item.pop(name, None)
        return name
    if action.clause == "ADD":
        item[name] = {"N": _arithmetic(old.get(name, {"N": "0"}), values[action.operands[0]], "+")}  # missing: from 0
        return name
    operands = [_operand(token, names, values, old) for token in action.operands]
    if action.operator == LIST_APPEND:
        if any("L" not in operand for operand in operands):
            raise client_error("ValidationException", "UpdateItem", message=WRONG_TYPE_MESSAGE)
        item[name] = {"L": [*operands[0]["L"], *operands[1]["L"]]}
        return name
    if action.operator is None:  # a number is written as DynamoDB writes it: 1.50 as 1.5
        item[name] = {"N": _arithmetic(operands[0], {"N": "0"}, "+")} if "N" in operands[0] else operands[0]
    else:
        item[name] = {"N": _arithmetic(operands[0], operands[1], action.operator)}
    return name


def _operand(token: str, names: dict[str, str], values: dict[str, Any], item: Item) -> dict[str, Any]:
    """A ``:value``, or the attribute's value in ``item``; DynamoDB's refusal when the item lacks it."""
    operand = values[token] if token.startswith(":") else item.get(names.get(token, token))
    if operand is None:
        raise client_error("ValidationException", "UpdateItem", message=MISSING_ATTRIBUTE_MESSAGE)
    return dict(operand)


def _arithmetic(left: Any, right: Any, operator: str) -> str:
    """``left`` plus or minus ``right``, numbers to 38 digits as DynamoDB keeps them, written without trailing zeros."""
    if "N" not in left or "N" not in right:
        raise client_error("ValidationException", "UpdateItem", message=WRONG_TYPE_MESSAGE)
    context = Context(prec=NUMBER_DIGITS, traps=[Inexact])
    try:
        result = (context.add if operator == "+" else context.subtract)(Decimal(left["N"]), Decimal(right["N"]))
    except Inexact:
        raise UnsupportedCallError(f"{left['N']} {operator} {right['N']} needs more than DynamoDB's {NUMBER_DIGITS} digits: "
                                   "not modelled by worker_tier.testing") from None
    return format(result.normalize(context), "f") if result else "0"


def _returned(kind: str, old: Item | None, new: Item, updated: list[str]) -> dict[str, Any]:
    """UpdateItem's answer under ``ReturnValues``: ``Attributes`` only when there are any."""
    if kind == "ALL_OLD":
        attributes = old or {}
    elif kind == "ALL_NEW":
        attributes = new
    elif kind == "UPDATED_OLD":
        attributes = {name: old[name] for name in updated if old is not None and name in old}
    elif kind == "UPDATED_NEW":
        attributes = {name: new[name] for name in updated if name in new}  # a removed one is not returned
    else:
        attributes = {}
    return {"Attributes": copy.deepcopy(attributes)} if attributes else {}


def _holds(text: str | None, names: dict[str, str] | None, values: dict[str, Any] | None, item: Item | None) -> bool:
    """Whether the condition expression ``text`` holds for ``item`` (None: absent); no condition always holds."""
    return True if not text else _Condition(_tokens(text), names or {}, values or {}, item or {}).evaluate()


class _Condition:
    """A recursive-descent reading of one condition expression against one item."""

    def __init__(self, tokens: list[str], names: dict[str, str], values: dict[str, Any], item: Item) -> None:
        self.tokens, self.names, self.values, self.item, self.position = tokens, names, values, item, 0

    def evaluate(self) -> bool:
        result = self._or()
        if self._peek() is not None:
            raise client_error("ValidationException", "DynamoDB", message=f"Invalid ConditionExpression: unexpected {self._peek()!r}")
        return result

    def _next(self) -> str:
        if self.position >= len(self.tokens):
            raise client_error("ValidationException", "DynamoDB", message="Invalid ConditionExpression: it ends too soon")
        self.position += 1
        return self.tokens[self.position - 1]

    def _expect(self, token: str) -> None:
        if self._next() != token:
            raise client_error("ValidationException", "DynamoDB", message=f"Invalid ConditionExpression: expected {token!r}")

    def _peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _or(self) -> bool:
        result = self._and()
        while self._peek() == "OR":
            self._next()
            result = self._and() or result
        return result

    def _and(self) -> bool:
        result = self._not()
        while self._peek() == "AND":
            self._next()
            result = self._not() and result
        return result

    def _not(self) -> bool:
        if self._peek() == "NOT":
            self._next()
            return not self._not()
        return self._atom()

    def _atom(self) -> bool:
        token = self._next()
        if token == "(":
            result = self._or()
            self._expect(")")
            return result
        if token in ("ATTRIBUTE_NOT_EXISTS", "ATTRIBUTE_EXISTS"):
            self._expect("(")
            name = self._name(self._next())
            self._expect(")")
            return (name in self.item) == (token == "ATTRIBUTE_EXISTS")
        left: dict[str, Any] | None
        if token == "SIZE":  # size(#a) of a string, list or map (a tracked job's history), None when it has none
            self._expect("(")
            value = self.item.get(self._name(self._next()))
            self._expect(")")
            inner = next(iter(value.values())) if value else None
            left = {"N": str(len(inner))} if isinstance(inner, (str, list, dict)) else None
        else:
            left = None
        operator, other = self._next(), self._next()
        if operator not in ("=", "<>", "<", "<=", ">", ">="):
            raise UnsupportedCallError(f"condition operator {operator!r} is not modelled by worker_tier.testing")
        return _compare(left if token == "SIZE" else self._operand(token), self._operand(other), operator)

    def _operand(self, token: str) -> dict[str, Any] | None:
        """A value (``:v``) or an attribute's value in the item (None when it has none)."""
        if token.startswith(":"):
            return dict(self.values[token])
        return self.item.get(self._name(token))

    def _name(self, token: str) -> str:
        return self.names.get(token, token)


def _compare(left: dict[str, Any] | None, right: dict[str, Any] | None, operator: str) -> bool:
    """DynamoDB's comparison: numbers exactly, strings and binary by bytes; values of different types are never equal.

    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.OperatorsAndFunctions.html
    """
    if left is None or right is None or next(iter(left)) != next(iter(right)):
        return operator == "<>" and not (left is None or right is None)
    (kind, a), (_, b) = next(iter(left.items())), next(iter(right.items()))
    if kind == "N":
        a, b = Decimal(a), Decimal(b)
    elif kind == "S":
        a, b = a.encode("utf-8"), b.encode("utf-8")
    elif kind not in _ORDERED:  # a boolean (or null, or collection) is only equal or not: dynalite's answer
        return operator in ("=", "<>") and (a == b) == (operator == "=")
    return bool({"=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[operator])

