"""The strict DynamoDB stand-in: what it refuses that moto takes, transactions, batches; and worker_tier's count agrees with it.

Its agreement with dynalite at the edges is in tests/functional/test_dynamodb_rules.py.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws

from tests.support.fake_dynamodb import FakeDynamoDB
from tests.support.strict_dynamodb import (
    DUPLICATE_WRITES,
    PARTITION_KEY_TOO_LONG,
    SORT_KEY_TOO_LONG,
    TOO_MANY_WRITES,
    TRANSACTION_DUPLICATES,
    TRANSACTION_TOO_LARGE,
    StrictDynamoDB,
    item_size,
)
from worker_tier.delays.delay import item_bytes


@pytest.fixture
def fake() -> FakeDynamoDB:
    fake = FakeDynamoDB()
    fake.create_table("one", "pk")
    fake.create_table("two", "pk", "sk")
    return fake


def refusal(call) -> str:
    with pytest.raises(ClientError) as error:
        call()
    assert error.value.response["Error"]["Code"] == "ValidationException"
    return str(error.value.response["Error"]["Message"])


def put(pk: str, **attributes: Any) -> dict[str, Any]:
    return {"Put": {"TableName": "one", "Item": {"pk": {"S": pk}, **attributes}}}


def test_what_moto_takes_and_dynamodb_refuses_the_stand_in_refuses():
    # GIVEN moto's DynamoDB with a table of partition and sort key, and the stand-in over it
    with mock_aws():
        moto = boto3.client("dynamodb", region_name="us-east-1")
        moto.create_table(TableName="two", BillingMode="PAY_PER_REQUEST",
                          KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}])
        long_partition = {"pk": {"S": "p" * 2049}, "sk": {"S": "s"}}
        long_sort = {"pk": {"S": "p"}, "sk": {"S": "s" * 1025}}
        writes = {"two": [{"PutRequest": {"Item": {"pk": {"S": f"k{i}"}, "sk": {"S": "s"}}}} for i in range(26)]}
        # WHEN an item is read and deleted by a 2,049-byte partition key and a 1,025-byte sort key, and 26 are written at once
        moto.get_item(TableName="two", Key=long_partition)
        moto.delete_item(TableName="two", Key=long_sort)
        moto.batch_write_item(RequestItems=writes)
        strict = StrictDynamoDB(moto)
        # THEN moto took all three; the stand-in refuses each with DynamoDB's message
        assert moto.scan(TableName="two")["Count"] == 26
        assert refusal(lambda: strict.get_item(TableName="two", Key=long_partition)) == PARTITION_KEY_TOO_LONG
        assert refusal(lambda: strict.delete_item(TableName="two", Key=long_sort)) == SORT_KEY_TOO_LONG
        assert "Member must have length less than or equal to 25" in refusal(lambda: strict.batch_write_item(RequestItems=writes))
        assert [operation for operation, _ in strict.refused] == ["GetItem", "DeleteItem", "BatchWriteItem"]


def test_a_transaction_of_100_actions_is_taken_and_101_refused(fake):
    # GIVEN 101 small puts
    actions = [put(f"k{i}") for i in range(101)]
    strict = StrictDynamoDB(fake)
    # WHEN 100 go in one transaction, then 101
    strict.transact_write_items(TransactItems=actions[:100])
    message = refusal(lambda: strict.transact_write_items(TransactItems=actions))
    # THEN the first is taken and the second refused as a whole
    assert "Member must have length less than or equal to 100" in message
    assert len(fake.tables["one"]) == 100


def test_a_transaction_over_4_mb_is_refused_whole(fake):
    # GIVEN 11 items of 400,000 bytes each: 4,400,000 bytes, over 4 MB (4,194,304)
    actions = [put(f"k{i}", body={"S": "a" * (400_000 - item_size({"pk": {"S": f"k{i}"}}) - len("body"))}) for i in range(11)]
    strict = StrictDynamoDB(fake)
    # WHEN they go in one transaction, then the first ten
    message = refusal(lambda: strict.transact_write_items(TransactItems=actions))
    strict.transact_write_items(TransactItems=actions[:10])
    # THEN the eleven are refused and the ten taken
    assert message == TRANSACTION_TOO_LARGE
    assert len(fake.tables["one"]) == 10


def test_two_actions_on_one_item_are_refused_in_a_transaction_and_in_a_batch(fake):
    # GIVEN two writes of one item
    strict = StrictDynamoDB(fake)
    # WHEN they go in one transaction, and in one BatchWriteItem
    in_transaction = refusal(lambda: strict.transact_write_items(TransactItems=[put("k"), put("k", other={"BOOL": True})]))
    in_batch = refusal(lambda: strict.batch_write_item(RequestItems={"one": [
        {"PutRequest": {"Item": {"pk": {"S": "k"}}}}, {"DeleteRequest": {"Key": {"pk": {"S": "k"}}}}]}))
    # THEN both are refused, and nothing was written
    assert (in_transaction, in_batch) == (TRANSACTION_DUPLICATES, DUPLICATE_WRITES)
    assert fake.tables["one"] == {}


def test_a_batch_of_more_than_25_requests_over_two_tables_is_refused(fake):
    # GIVEN 13 writes to one table and 13 to another
    requests = {
        "one": [{"PutRequest": {"Item": {"pk": {"S": f"k{i}"}}}} for i in range(13)],
        "two": [{"PutRequest": {"Item": {"pk": {"S": f"k{i}"}, "sk": {"S": "s"}}}} for i in range(13)],
    }
    # WHEN they go in one BatchWriteItem
    # THEN it is refused: 25 requests per call, whatever the tables
    assert refusal(lambda: StrictDynamoDB(fake).batch_write_item(RequestItems=requests)) == TOO_MANY_WRITES


_names = st.text(min_size=1, max_size=4)
_numbers = st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(lambda d: d.is_finite()).map(lambda d: f"{d:f}")
_scalars = st.one_of(
    st.text(max_size=8).map(lambda s: {"S": s}),
    st.binary(max_size=8).map(lambda b: {"B": b}),
    _numbers.map(lambda n: {"N": n}),
    st.booleans().map(lambda b: {"BOOL": b}),
    st.just({"NULL": True}),
    st.lists(st.text(max_size=4), min_size=1, max_size=3, unique=True).map(lambda s: {"SS": s}),
    st.lists(_numbers, min_size=1, max_size=3).map(lambda n: {"NS": n}),
)
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3).map(lambda v: {"L": v}),
    st.dictionaries(_names, inner, max_size=3).map(lambda v: {"M": v}),
), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_names, _values, max_size=5))
def test_worker_tiers_item_size_is_the_stand_ins(item):
    # GIVEN any item of any of DynamoDB's types
    # WHEN worker_tier.delays.delay.item_bytes and the stand-in (checked against dynalite) measure it
    # THEN they agree
    assert item_bytes(item) == item_size(item)
