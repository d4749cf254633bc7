"""The dedupe claim rule: one rule for a send straight to SQS and a delayed send, evaluated by the table."""

from __future__ import annotations

import pytest

from tests.support.fake_dynamodb import FakeDynamoDB
from tests.support.strict_dynamodb import StrictDynamoDB
from worker_tier.delays.dedupe import (
    CLAIMED,
    DEDUPE_MARKER_LEASE_SECONDS,
    DEDUPE_RETENTION_SECONDS,
    DEDUPE_SEND_WINDOW_SECONDS,
    DEDUPLICATED,
    IN_FLIGHT,
    IN_FLIGHT_CODE,
    MAX_SEND_CALL_SECONDS,
    UNANSWERED,
    DedupeMarkers,
    late_claims,
    marker_item,
    repeated_keys,
    store_with_marker,
)
from worker_tier.delays.delay import MAX_CLOCK_SKEW_SECONDS, DelayedMessage, new_message_id

NOW = 1_800_000_000.0
NOW_MS = int(NOW * 1000)
LEASE_MS = DEDUPE_MARKER_LEASE_SECONDS * 1000


def table(marker: dict | None = None) -> FakeDynamoDB:
    fake = StrictDynamoDB(FakeDynamoDB())
    fake.create_table("delay", "pk", "sk")
    if marker is not None:
        fake.tables["delay"][("dedupe#k", "-")] = marker
    return fake


def unsent(claimed_ms: int, due: float = NOW + 60) -> dict:
    return marker_item("k", due, claimed_ms, sent=False)


def sent(due: float = NOW + 60) -> dict:
    return marker_item("k", due, NOW_MS - 10_000, sent=True, sqs_message_id="m-1")


def delayed_path_marker_without_sent() -> dict:
    """A marker as the delay table's transaction wrote it before markers carried ``sent``."""
    return {"pk": {"S": "dedupe#k"}, "sk": {"S": "-"}, "id": {"S": new_message_id("k")}, "expiration": {"N": str(int(NOW) + 3600)}}


def claim_directly(dynamodb: FakeDynamoDB) -> str:
    return DedupeMarkers("delay", dynamodb, lambda: NOW).claim("k", NOW + 30).outcome


def claim_delayed(dynamodb: FakeDynamoDB) -> str:
    message = DelayedMessage(new_message_id("k"), NOW_MS + 3_600_000, "b", {}, 0, "k")
    return store_with_marker(dynamodb, "delay", "k", message.to_item(), message.due_ms / 1000, NOW_MS).outcome


CASES = [
    (None, CLAIMED),
    (sent(due=NOW - DEDUPE_RETENTION_SECONDS - 1), CLAIMED),  # expired, TTL not yet run
    (unsent(NOW_MS - LEASE_MS - 1), CLAIMED),  # its sender died; the lease is over
    (unsent(NOW_MS - LEASE_MS + 1), IN_FLIGHT),
    (unsent(NOW_MS - 1), IN_FLIGHT),
    (sent(), DEDUPLICATED),
    (delayed_path_marker_without_sent(), DEDUPLICATED),
]
CASE_IDS = ["no-marker", "expired", "unsent-lease-over", "unsent-lease-last-ms", "unsent-just-claimed", "sent", "without-sent"]


@pytest.mark.parametrize("claim", [claim_directly, claim_delayed], ids=["direct", "delayed"])
@pytest.mark.parametrize("marker, outcome", CASES, ids=CASE_IDS)
def test_one_claim_rule_for_both_paths(claim, marker, outcome):
    # GIVEN a key's marker in one state (or none)
    dynamodb = table(marker)
    # WHEN a send straight to SQS, or a delayed send, claims the key
    result = claim(dynamodb)
    # THEN both paths reach the same outcome, from the table's own condition
    assert result == outcome


@pytest.mark.parametrize("marker, outcome", CASES, ids=CASE_IDS)
def test_a_held_key_leaves_its_marker_untouched_and_a_claimed_one_is_renewed(marker, outcome):
    # GIVEN a key's marker in one state (or none)
    dynamodb = table(marker)
    # WHEN a delayed send claims the key
    claim_delayed(dynamodb)
    # THEN a held marker is as it was; a claimed one is the new sender's, sent, with its message stored alongside
    after = dynamodb.tables["delay"][("dedupe#k", "-")]
    stored = [key for key in dynamodb.tables["delay"] if not key[0].startswith("dedupe#")]
    if outcome == CLAIMED:
        assert (after["sent"], after["claimed_ms"], len(stored)) == ({"BOOL": True}, {"N": str(NOW_MS)}, 1)
    else:
        assert (after, stored) == (marker, [])


def test_an_in_flight_claim_is_a_retryable_failure_naming_the_key_and_the_lease():
    # GIVEN a key claimed 100 s ago and not yet sent
    dynamodb = table(unsent(NOW_MS - 100_000))
    # WHEN another sender claims it
    claim = DedupeMarkers("delay", dynamodb, lambda: NOW).claim("k", NOW + 30)
    # THEN the failure names the key and the time left on the lease, with the retryable code
    assert claim.failure() == (
        IN_FLIGHT_CODE,
        f"dedupe_key 'k' is held by another send still in flight (its lease ends in {DEDUPE_MARKER_LEASE_SECONDS - 100} s at most); "
        "nothing was sent: retry later",
    )


def test_a_claim_the_table_does_not_answer_is_a_retryable_failure():
    # GIVEN a table that throttles the claim
    dynamodb = table()
    dynamodb.fault = lambda operation, params: "ProvisionedThroughputExceededException" if operation == "PutItem" else None
    # WHEN a sender claims a key
    claim = DedupeMarkers("delay", dynamodb, lambda: NOW).claim("k", NOW + 30)
    # THEN the claim says so, with DynamoDB's code
    assert claim.outcome == UNANSWERED
    code, reason = claim.failure()
    assert code == "ProvisionedThroughputExceededException"
    assert reason.startswith("delay table did not take dedupe_key 'k': An error occurred (ProvisionedThroughputExceededException)")


def test_settle_gives_back_only_its_own_claim():
    # GIVEN a key claimed by sender A, then taken over by sender B after A's lease
    dynamodb = table()
    a = DedupeMarkers("delay", dynamodb, lambda: NOW).claim("k", NOW + 30)
    b = DedupeMarkers("delay", dynamodb, lambda: NOW + DEDUPE_MARKER_LEASE_SECONDS + 1).claim("k", NOW + 30)
    # WHEN A's send fails and A gives its claim back
    DedupeMarkers("delay", dynamodb, lambda: NOW).settle("k", NOW + 30, a.now_ms, None)
    # THEN B's claim stays
    assert b.outcome == CLAIMED
    assert dynamodb.tables["delay"][("dedupe#k", "-")]["claimed_ms"] == {"N": str(b.now_ms)}


def test_the_lease_covers_the_skew_and_one_full_send_call():
    # The send window plus one send call plus the clock skew two producers may have fit inside the lease.
    assert DEDUPE_SEND_WINDOW_SECONDS > 0
    assert DEDUPE_SEND_WINDOW_SECONDS + MAX_SEND_CALL_SECONDS + MAX_CLOCK_SKEW_SECONDS <= DEDUPE_MARKER_LEASE_SECONDS
    # A claim may start a call until the window ends, and not after.
    claims = {"0": ("k", NOW_MS - DEDUPE_SEND_WINDOW_SECONDS * 1000 + 1), "1": ("j", NOW_MS - DEDUPE_SEND_WINDOW_SECONDS * 1000)}
    assert list(late_claims(claims, NOW_MS)) == ["1"]


def test_repeated_keys_name_every_index_sharing_a_key():
    a = "messages 0, 3, 6 have the same dedupe_key 'a': a batch may carry each key once; send one of them"
    b = "messages 2, 5 have the same dedupe_key 'b': a batch may carry each key once; send one of them"
    assert repeated_keys(["a", None, "b", "a", ["unhashable"], "b", "a"]) == {0: a, 3: a, 6: a, 2: b, 5: b}


def test_store_delayed_stores_the_message_with_its_marker_or_names_why_not():
    # GIVEN an empty delay table, then one whose key is held unsent by a direct send still inside its lease
    message = DelayedMessage(new_message_id("k"), NOW_MS + 3_600_000, "b", {}, 0, "k")
    free, held = table(), table(unsent(NOW_MS - 1000))
    # WHEN the delayed message is stored with its marker in each
    stored = DedupeMarkers("delay", free, lambda: NOW).store_delayed(message)
    refused = DedupeMarkers("delay", held, lambda: NOW).store_delayed(message)
    # THEN the first stores both items and reports no failure, the second stores nothing and names the holder's lease
    assert stored is None and set(free.tables["delay"]) == {("dedupe#k", "-"), (message.key["pk"]["S"], message.key["sk"]["S"])}
    assert refused == (IN_FLIGHT_CODE, (
        f"dedupe_key 'k' is held by another send still in flight (its lease ends in {DEDUPE_MARKER_LEASE_SECONDS - 1} s at most); "
        "nothing was sent: retry later"
    ))
    assert set(held.tables["delay"]) == {("dedupe#k", "-")}


def test_the_delay_table_layout_does_not_import_dedupe():
    # GIVEN delay.py, which dedupe builds on (WHEN its imports are read, lazy ones included)
    import ast
    import inspect

    from worker_tier.delays import delay

    tree = ast.parse(inspect.getsource(delay))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {f"{node.module}.{a.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for a in node.names}
    imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    # THEN dedupe is not among them: the two modules import in one direction
    assert "worker_tier.delays.dedupe" not in imported
