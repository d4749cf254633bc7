"""The state table's Lease against moto's DynamoDB: one holder at a time, takeover after expiry, release by the holder only."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from moto import mock_aws

from tests.support.fake_dynamodb import FakeDynamoDB
from tests.support.strict_dynamodb import StrictDynamoDB
from worker_tier.core.state import HOLDER_ATTRIBUTE, LEASE_UNTIL_ATTRIBUTE, PARTITION_KEY, TTL_ATTRIBUTE, Lease

NOW = 1_800_000_000
LEASE = Lease("state", "cron#job#2027-01-15 08:00:00 UTC", seconds=60, retention_seconds=3600)
STATUS_NAMES = {"#status": "status"}


@pytest.fixture
def dynamodb():
    with mock_aws():
        client = StrictDynamoDB(boto3.client("dynamodb", region_name="us-east-1"))
        client.create_table(
            TableName="state",
            KeySchema=[{"AttributeName": PARTITION_KEY, "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": PARTITION_KEY, "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def stored(dynamodb) -> dict | None:
    return dynamodb.get_item(TableName="state", Key={PARTITION_KEY: {"S": LEASE.key}}, ConsistentRead=True).get("Item")


def holder(dynamodb) -> str | None:
    item = stored(dynamodb)
    return item[HOLDER_ATTRIBUTE]["S"] if item else None


def status(value: str) -> dict:
    return {"status": {"S": value}}


def test_a_claim_stores_the_holder_its_lease_and_the_ttl(dynamodb):
    # WHEN a holder claims a free lease, with an attribute of its own
    found = LEASE.claim(dynamodb, "a", NOW, attributes=status("pending"))
    # THEN it holds it until now + seconds, and the TTL removes the item after the retention
    assert found is None
    assert stored(dynamodb) == {
        PARTITION_KEY: {"S": LEASE.key},
        HOLDER_ATTRIBUTE: {"S": "a"},
        LEASE_UNTIL_ATTRIBUTE: {"N": str(NOW + 60)},
        TTL_ATTRIBUTE: {"N": str(NOW + 3600)},
        "status": {"S": "pending"},
    }


def test_two_holders_never_both_own_a_lease(dynamodb):
    # GIVEN holder a owns the lease
    assert LEASE.claim(dynamodb, "a", NOW) is None
    # WHEN b claims it at every second of a's lease, the last one included
    refusals = [LEASE.claim(dynamodb, "b", NOW + second) for second in range(LEASE.seconds + 1)]
    # THEN each claim is refused with a's item, and a still owns it
    assert all(found is not None and found[HOLDER_ATTRIBUTE] == {"S": "a"} for found in refusals)
    assert holder(dynamodb) == "a"


class LeaseMachine(RuleBasedStateMachine):
    """Holders claim, release and wait in any order against the in-memory table; no two ever own the lease at once."""

    def __init__(self) -> None:
        super().__init__()
        self.dynamodb = StrictDynamoDB(FakeDynamoDB())
        self.dynamodb.create_table("state", PARTITION_KEY)
        self.now = NOW
        self.owned_until: dict[str, int] = {}  # what each holder believes: it owns the lease until then

    @rule(name=st.sampled_from(["a", "b", "c"]))
    def claim(self, name: str) -> None:
        if LEASE.claim(self.dynamodb, name, self.now) is None:
            self.owned_until[name] = self.now + LEASE.seconds

    @rule(name=st.sampled_from(["a", "b", "c"]))
    def release(self, name: str) -> None:
        if LEASE.release(self.dynamodb, name):
            self.owned_until.pop(name, None)

    @rule(seconds=st.integers(min_value=0, max_value=2 * LEASE.seconds))
    def wait(self, seconds: int) -> None:
        self.now += seconds

    @invariant()
    def one_owner_at_most_and_it_is_the_stored_holder(self) -> None:
        owners = [name for name, until in self.owned_until.items() if until >= self.now]
        assert len(owners) <= 1
        if owners:
            assert self.dynamodb.tables["state"][(LEASE.key,)][HOLDER_ATTRIBUTE] == {"S": owners[0]}


TestLeaseMachine = LeaseMachine.TestCase
TestLeaseMachine.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)


def test_an_expired_lease_is_taken_over(dynamodb):
    # GIVEN holder a claimed the lease and died
    LEASE.claim(dynamodb, "a", NOW)
    # WHEN b claims it one second after the lease ran out
    found = LEASE.claim(dynamodb, "b", NOW + LEASE.seconds + 1)
    # THEN b holds it, for a lease of its own
    assert found is None and holder(dynamodb) == "b"
    assert stored(dynamodb)[LEASE_UNTIL_ATTRIBUTE] == {"N": str(NOW + 2 * LEASE.seconds + 1)}


def test_release_by_a_non_holder_is_refused(dynamodb):
    # GIVEN holder a owns the lease
    LEASE.claim(dynamodb, "a", NOW)
    # WHEN b releases it, then a does
    by_b = LEASE.release(dynamodb, "b")
    kept = holder(dynamodb)
    by_a = LEASE.release(dynamodb, "a")
    # THEN b's release is refused and leaves a's lease; a's deletes it
    assert (by_b, kept, by_a, stored(dynamodb)) == (False, "a", True, None)


def test_a_holder_whose_lease_was_taken_over_cannot_release_it(dynamodb):
    # GIVEN a's lease ran out and b took it over
    LEASE.claim(dynamodb, "a", NOW)
    LEASE.claim(dynamodb, "b", NOW + LEASE.seconds + 1)
    # WHEN a, back late, releases it
    released = LEASE.release(dynamodb, "a")
    # THEN b keeps it
    assert released is False and holder(dynamodb) == "b"


def test_a_takeover_condition_with_or_is_one_term_of_the_and(dynamodb):
    # GIVEN a live lease whose status is one the takeover condition accepts through an OR
    LEASE.claim(dynamodb, "a", NOW, attributes=status("stale"))
    takeover = {"takeover_condition": "#status = :pending OR #status = :stale", "names": STATUS_NAMES,
                "values": {":pending": {"S": "pending"}, ":stale": {"S": "stale"}}}
    # WHEN b claims it while the lease is live, then after it ran out
    while_live = LEASE.claim(dynamodb, "b", NOW + 1, **takeover)
    after = LEASE.claim(dynamodb, "b", NOW + LEASE.seconds + 1, **takeover)
    # THEN the OR did not loosen the expiry rule (a is kept while live), and after expiry b takes it over
    assert while_live is not None and while_live[HOLDER_ATTRIBUTE] == {"S": "a"}
    assert after is None and holder(dynamodb) == "b"


def test_an_expired_lease_is_not_taken_over_when_the_takeover_condition_fails(dynamodb):
    # GIVEN a's lease ran out, but its status is sent
    LEASE.claim(dynamodb, "a", NOW, attributes=status("sent"))
    # WHEN b claims it only over a pending status
    found = LEASE.claim(dynamodb, "b", NOW + LEASE.seconds + 1, takeover_condition="#status = :pending",
                        names=STATUS_NAMES, values={":pending": {"S": "pending"}})
    # THEN the claim is refused with the sent item
    assert found is not None and found["status"] == {"S": "sent"} and holder(dynamodb) == "a"


def test_a_release_condition_is_one_term_of_the_and(dynamodb):
    # GIVEN a holds the lease, status sent
    LEASE.claim(dynamodb, "a", NOW, attributes=status("sent"))
    values = {":pending": {"S": "pending"}, ":stale": {"S": "stale"}}
    # WHEN b releases it under an OR that holds, then a releases it under one that does not, then one that does
    by_b = LEASE.release(dynamodb, "b", condition="#status = :pending OR attribute_exists(#status)", names=STATUS_NAMES,
                         values={":pending": {"S": "pending"}})
    by_a_refused = LEASE.release(dynamodb, "a", condition="#status = :pending OR #status = :stale", names=STATUS_NAMES, values=values)
    by_a = LEASE.release(dynamodb, "a", condition="attribute_exists(#status)", names=STATUS_NAMES)
    # THEN only the holder's release whose condition holds deletes it
    assert (by_b, by_a_refused, by_a, stored(dynamodb)) == (False, False, True, None)


def test_update_applies_only_while_the_holder_owns_the_lease(dynamodb):
    # GIVEN a holds the lease, pending
    LEASE.claim(dynamodb, "a", NOW, attributes=status("pending"))
    mark = {"update_expression": "SET #status = :sent", "names": STATUS_NAMES, "values": {":sent": {"S": "sent"}}}
    # WHEN b updates it, then a does
    by_b = LEASE.update(dynamodb, "b", **mark)
    status_after_b = stored(dynamodb)["status"]
    by_a = LEASE.update(dynamodb, "a", **mark)
    # THEN b's update is refused and a's applied
    assert (by_b, status_after_b, by_a, stored(dynamodb)["status"]) == (False, {"S": "pending"}, True, {"S": "sent"})


def test_update_never_recreates_a_released_lease(dynamodb):
    # GIVEN a claimed and released the lease
    LEASE.claim(dynamodb, "a", NOW)
    LEASE.release(dynamodb, "a")
    # WHEN a updates it
    updated = LEASE.update(dynamodb, "a", "SET #status = :sent", names=STATUS_NAMES, values={":sent": {"S": "sent"}})
    # THEN nothing is written: no item without a TTL is left behind
    assert updated is False and stored(dynamodb) is None


@pytest.mark.parametrize("call, message", [
    (lambda d: LEASE.claim(d, "a", NOW, names={"#pk": "other"}),
     "a lease sets its own names ['#lease_until', '#pk']; the caller's may not replace them, got ['#pk']"),
    (lambda d: LEASE.claim(d, "a", NOW, values={":now": {"N": "0"}}),
     "a lease sets its own values [':now']; the caller's may not replace them, got [':now']"),
    (lambda d: LEASE.claim(d, "a", NOW, attributes={HOLDER_ATTRIBUTE: {"S": "b"}}),
     "a lease sets its own attributes ['expiration', 'holder', 'lease_until', 'pk']; the caller's may not replace them, got ['holder']"),
    (lambda d: LEASE.release(d, "a", values={":holder": {"S": "b"}}),
     "a lease sets its own values [':holder']; the caller's may not replace them, got [':holder']"),
])
def test_the_caller_cannot_replace_what_the_lease_relies_on(dynamodb, call, message):
    # WHEN a call passes a name, value or attribute the lease sets itself
    with pytest.raises(ValueError) as error:
        call(dynamodb)
    # THEN it is refused before anything is written
    assert str(error.value) == message and stored(dynamodb) is None


def test_a_retention_shorter_than_the_lease_is_refused():
    with pytest.raises(ValueError) as error:
        Lease("state", "k", seconds=60, retention_seconds=59)
    assert str(error.value) == (
        "Lease 'k': retention_seconds (59) must be at least seconds (60), or the TTL could remove a lease still held"
    )


@pytest.mark.parametrize("call, operation", [
    (lambda d: LEASE.claim(d, "a", NOW), "PutItem"),
    (lambda d: LEASE.release(d, "a"), "DeleteItem"),
])
def test_errors_other_than_the_condition_propagate(call, operation):
    # GIVEN a table that throttles every call
    fake = StrictDynamoDB(FakeDynamoDB(fault=lambda op, params: "ProvisionedThroughputExceededException"))
    fake.create_table("state", PARTITION_KEY)
    # WHEN the lease is claimed or released THEN the throttle is raised, not taken for a refusal
    with pytest.raises(ClientError) as error:
        call(fake)
    assert error.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert error.value.operation_name == operation
