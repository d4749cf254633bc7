"""DynamoDB's item and key limits at their edges: the strict stand-in (over moto) and dynalite give the same answers.

dynalite (npm ``dynalite``, an independent implementation that copies DynamoDB's validation and
messages) runs as a subprocess on 127.0.0.1 when it is installed (``npm install`` in ``tests/dynalite``,
or ``DYNALITE`` naming its ``cli.js``); otherwise its lane is skipped, saying why. Each case holds on
both: an item of exactly 409,600 bytes is stored and one of 409,601 is refused, whatever its numbers'
digits, and so for keys of 2,048 / 1,024 bytes and 2,049 / 1,025.

dynalite counts a string's UTF-16 code units, not its UTF-8 bytes (DynamoDB's rule, and the stand-in's):
the cases use ASCII strings, on which the two agree.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any, Iterator

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.support.fake_dynamodb import FakeDynamoDB
from tests.support.strict_dynamodb import (
    ITEM_TOO_LARGE,
    MAX_ITEM_BYTES,
    MAX_PARTITION_KEY_BYTES,
    MAX_SORT_KEY_BYTES,
    PARTITION_KEY_TOO_LONG,
    SORT_KEY_TOO_LONG,
    StrictDynamoDB,
    item_size,
)
from worker_tier.delays import delay
from worker_tier.delays.delay import DelayedMessage

REGION = "us-east-1"
DYNALITE_CLI = Path(__file__).resolve().parents[1] / "dynalite" / "node_modules" / "dynalite" / "cli.js"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _dynalite_cli() -> str | None:
    """Why dynalite cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed"
    cli = Path(os.environ.get("DYNALITE", DYNALITE_CLI))
    if not cli.is_file():
        return f"dynalite is not installed ({cli} missing: run `npm install` in tests/dynalite)"
    return None


@pytest.fixture(scope="module")
def dynalite_endpoint() -> Iterator[str]:
    """dynalite on a free port of 127.0.0.1, in memory, tables ready at once."""
    missing = _dynalite_cli()
    if missing:
        pytest.skip(f"the dynalite lane needs dynalite: {missing}")
    port = _free_port()
    cli = os.environ.get("DYNALITE", str(DYNALITE_CLI))
    server = subprocess.Popen(
        ["node", cli, "--port", str(port), "--host", "127.0.0.1", "--createTableMs", "0", "--deleteTableMs", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        line = server.stdout.readline() if server.stdout else ""
        if "listening" not in line:
            pytest.fail(f"dynalite did not start: {line}{server.stdout.read() if server.stdout else ''}")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(params=["strict", "dynalite"])
def dynamodb(request) -> Iterator[Any]:
    """A DynamoDB with table "one" (pk) and table "two" (pk, sk): the strict stand-in, or dynalite.

    The stand-in wraps FakeDynamoDB, not moto: moto refuses any item over 405,000 bytes of its own count.
    """
    if request.param == "strict":
        fake = FakeDynamoDB()
        fake.create_table("one", "pk")
        fake.create_table("two", "pk", "sk")
        yield StrictDynamoDB(fake)
        return
    endpoint = request.getfixturevalue("dynalite_endpoint")
    client = boto3.client("dynamodb", region_name=REGION, endpoint_url=endpoint, config=Config(retries={"max_attempts": 1}))
    for table, keys in (("one", ["pk"]), ("two", ["pk", "sk"])):
        client.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": key, "KeyType": kind} for key, kind in zip(keys, ("HASH", "RANGE"), strict=False)],
            AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"} for key in keys],
            BillingMode="PAY_PER_REQUEST",
        )
        client.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 0.05, "MaxAttempts": 200})
    yield client
    for table in ("one", "two"):
        client.delete_table(TableName=table)


def sized(target: int, **attributes: dict[str, Any]) -> dict[str, Any]:
    """Table "one"'s item with ``attributes`` and a string "fill" that make it exactly ``target`` bytes."""
    base = {"pk": {"S": "k"}, **attributes, "fill": {"S": ""}}
    return {**base, "fill": {"S": "a" * (target - item_size(base))}}


def refusal(call) -> str | None:
    """The ValidationException's message a call got, or None when it was accepted."""
    try:
        call()
    except ClientError as error:
        assert error.response["Error"]["Code"] == "ValidationException", error.response
        return str(error.response["Error"]["Message"])
    return None


NUMBERS = ["1800003600000", "180000360000", "7", "12", "123", "1000", "0.05", "0.5", "-12.345", "-0.0001", "12345678901234567890.5"]
COLLECTIONS = {
    "m": {"M": {"x": {"N": "1"}, "yy": {"S": "z"}, "nested": {"M": {}}}},
    "l": {"L": [{"BOOL": True}, {"NULL": True}, {"L": []}, {"N": "-3"}]},
    "ss": {"SS": ["a", "bb"]},
    "ns": {"NS": ["1", "22", "333"]},
    "bs": {"BS": [b"\x00\x01", b"\x02"]},
    "flag": {"BOOL": False},
    "nothing": {"NULL": True},
    "blob": {"B": b"\x00" * 10},
}


@pytest.mark.parametrize("number", NUMBERS)
def test_an_item_of_exactly_400_kb_is_stored_and_one_byte_more_is_refused_whatever_its_numbers(dynamodb, number):
    # GIVEN items carrying the number, of 409,600 and 409,601 bytes by DynamoDB's rule (digits paired on the decimal point)
    fits, over = sized(MAX_ITEM_BYTES, n={"N": number}), sized(MAX_ITEM_BYTES + 1, n={"N": number})
    # WHEN each is put
    # THEN the first is stored and the second refused with DynamoDB's message
    assert refusal(lambda: dynamodb.put_item(TableName="one", Item=fits)) is None
    assert refusal(lambda: dynamodb.put_item(TableName="one", Item=over)) == ITEM_TOO_LARGE


def test_maps_lists_sets_binary_bool_and_null_count_as_dynamodb_counts_them(dynamodb):
    # GIVEN items with one attribute of each other type, of 409,600 and 409,601 bytes
    fits, over = sized(MAX_ITEM_BYTES, **COLLECTIONS), sized(MAX_ITEM_BYTES + 1, **COLLECTIONS)
    # WHEN each is put, the second in a BatchWriteItem with a small item
    stored = refusal(lambda: dynamodb.put_item(TableName="one", Item=fits))
    refused = refusal(lambda: dynamodb.batch_write_item(RequestItems={"one": [
        {"PutRequest": {"Item": {"pk": {"S": "small"}}}}, {"PutRequest": {"Item": {**over, "pk": {"S": "big"}}}}]}))
    # THEN the first is stored; the batch is refused whole, its small item too
    assert stored is None and refused == ITEM_TOO_LARGE
    assert "Item" not in dynamodb.get_item(TableName="one", Key={"pk": {"S": "small"}})


@pytest.mark.parametrize(("table", "key", "limit", "message"), [
    ("one", "pk", MAX_PARTITION_KEY_BYTES, PARTITION_KEY_TOO_LONG),
    ("two", "sk", MAX_SORT_KEY_BYTES, SORT_KEY_TOO_LONG),
])
def test_a_key_of_its_limit_is_stored_and_one_byte_more_is_refused(dynamodb, table, key, limit, message):
    # GIVEN items whose partition (or sort) key is exactly its limit, and a byte longer
    def item(size: int) -> dict[str, Any]:
        return {"pk": {"S": "p"}, "sk": {"S": "s"}, key: {"S": "k" * size}} if table == "two" else {"pk": {"S": "k" * size}}

    # WHEN each is put, and the longer one read
    # THEN the first is stored and the second refused, for reads too
    assert refusal(lambda: dynamodb.put_item(TableName=table, Item=item(limit))) is None
    assert refusal(lambda: dynamodb.put_item(TableName=table, Item=item(limit + 1))) == message
    assert refusal(lambda: dynamodb.get_item(TableName=table, Key=item(limit + 1))) == message


def test_a_delayed_message_at_worker_tiers_item_limit_is_stored_and_the_old_counts_400_kb_is_not(dynamodb):
    # GIVEN a delayed message item (due_ms has 13 integer digits) whose size by worker_tier.delays.delay.item_bytes is
    # MAX_ITEM_BYTES (the limit less the margin), and one that the count before the digit-pair rule called 409,600
    due_ms = 1_800_003_600_000
    def message(body_bytes: int) -> dict[str, Any]:
        attributes = {"beanstalk.sqsd.path": {"DataType": "String", "StringValue": "/x"}}
        return DelayedMessage("0" * 36, due_ms, "a" * body_bytes, attributes, 0).to_item()

    empty = delay.item_bytes(message(0))
    at_limit = message(delay.MAX_ITEM_BYTES - empty)
    old_count_400_kb = message(MAX_ITEM_BYTES - empty + 1)  # the old count gave due_ms one byte less
    # WHEN each is written as the producer writes them, into a table of the delay table's key (pk, sk)
    stored = refusal(lambda: dynamodb.put_item(TableName="two", Item=at_limit))
    refused = refusal(lambda: dynamodb.put_item(TableName="two", Item=old_count_400_kb))
    # THEN the first is stored, the second refused: it is 409,601 bytes
    assert item_size(old_count_400_kb) == delay.item_bytes(old_count_400_kb) == MAX_ITEM_BYTES + 1
    assert stored is None and refused == ITEM_TOO_LARGE


def test_a_batch_of_25_writes_is_taken_and_26_are_refused(dynamodb):
    # GIVEN 26 small items
    requests = [{"PutRequest": {"Item": {"pk": {"S": f"k{i}"}}}} for i in range(26)]
    # WHEN 25 of them are written in one BatchWriteItem, then all 26
    # THEN the first call is taken and the second refused as a whole
    assert refusal(lambda: dynamodb.batch_write_item(RequestItems={"one": requests[:25]})) is None
    assert "less than or equal to 25" in (refusal(lambda: dynamodb.batch_write_item(RequestItems={"one": requests})) or "")
