"""Dedupe keys on a standard queue: one marker item per key in the delay table, and one claim rule.

A marker is ``pk = "dedupe#<key>"``, ``sk = "-"``, with the key's message id
(``id``), whether its message went out (``sent``), when it was claimed
(``claimed_ms``, the claimant's clock) and a TTL (``expiration``:
``DEDUPE_RETENTION_SECONDS`` after the message is due). A send straight to SQS
claims the key with an unsent marker, sends, then marks it sent or gives it
back; a delayed send writes the marker, already sent, in one transaction with
the stored message. Both use the one claim rule (``claim_condition``): a sender
takes the key when

- there is no marker, or
- the marker has expired (``expiration`` is past; DynamoDB's TTL removes it later), or
- the marker is unsent and was claimed more than ``DEDUPE_MARKER_LEASE_SECONDS`` ago (its sender died).

Otherwise the key is held, and the send's outcome (``held_outcome``) is:

- **deduplicated** when the marker is sent (a marker without ``sent`` counts as
  sent): ``ok``, with the key's id, and nothing is sent or stored;
- **in flight** when another sender holds it unsent inside its lease: a
  retryable failure, code ``DedupeKeyInFlight``, never ``ok``, since that
  sender may still fail. A retry after the lease has run out always settles it.

The lease (300 s) covers the clock skew two producers may have
(``delay.MAX_CLOCK_SKEW_SECONDS``: 60 s, ±30 s each) and the longest send: a
sender starts no SendMessageBatch call, first or retry, for a claim older than
``DEDUPE_SEND_WINDOW_SECONDS`` (120 s), which leaves ``MAX_SEND_CALL_SECONDS``
(120 s: one attempt at botocore's default 60 s connect and 60 s read timeouts)
inside the lease as any other producer sees it. Its own elapsed time is the one
thing the sender can check; it cannot see another producer's clock, nor recall a
message once SQS has it. A call that botocore keeps retrying past that is the
slow send the guarantee leaves out.

A send whose answer is lost (a read timeout, a closed connection, a 5xx: SQS may
have the message) is reported ``SendOutcomeUnknown`` and keeps the key held
unsent: a retry inside the lease is told ``DedupeKeyInFlight``, and one after it
sends again, which is the second window the guarantee leaves out.

The guarantee: **at most one message per key, provided a send completes within
the lease and its answer arrives; otherwise it may duplicate, never lose.** A message is
also never reported sent when it was not: a key whose marker could not be marked
sent waits out its lease unsent, and a later send with the key sends it again.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from worker_tier.core.aws import error_code, error_response, is_condition_failure
from worker_tier.core.contract import DELAY_DEDUPE_KEY_PREFIX as DEDUPE_PREFIX
from worker_tier.core.contract import DELAY_PARTITION_KEY as PK
from worker_tier.core.contract import DELAY_SORT_KEY as SK
from worker_tier.core.contract import DELAY_TTL_ATTRIBUTE as TTL_ATTRIBUTE
from worker_tier.delays.delay import DISPATCHED_RETENTION_SECONDS, MAX_CLOCK_SKEW_SECONDS, DelayedMessage, new_message_id

_log = logging.getLogger(__name__)

DEDUPE_MARKER_LEASE_SECONDS = 300
# One SendMessageBatch attempt at its longest: botocore's default connect_timeout plus read_timeout (60 s each):
# https://botocore.amazonaws.com/v1/documentation/api/latest/reference/config.html
MAX_SEND_CALL_SECONDS = 120
DEDUPE_SEND_WINDOW_SECONDS = DEDUPE_MARKER_LEASE_SECONDS - MAX_CLOCK_SKEW_SECONDS - MAX_SEND_CALL_SECONDS
# How long a dedupe_key on a standard queue holds: until this long after the message was due.
DEDUPE_RETENTION_SECONDS = DISPATCHED_RETENTION_SECONDS

# Claim outcomes; UNANSWERED: the delay table failed the claim (throttled, unreachable), a retryable failure.
CLAIMED, DEDUPLICATED, IN_FLIGHT, UNANSWERED = "claimed", "deduplicated", "in flight", "unanswered"
IN_FLIGHT_CODE = "DedupeKeyInFlight"
LEASE_OVER_CODE = "DedupeLeaseOver"
_SENT, _CLAIMED_MS = "sent", "claimed_ms"


@dataclass(frozen=True)
class Claim:
    """What a claim came to: ``outcome``, at ``now_ms``, the holder's marker if held, the DynamoDB error if UNANSWERED."""

    key: str
    outcome: str
    now_ms: int
    holder: Mapping[str, Any] | None = None
    error: Exception | None = None

    @property
    def message_id(self) -> str:
        """The key's message id: the holder's when there is one."""
        return (self.holder or {}).get("id", {}).get("S") or new_message_id(self.key)

    def failure(self) -> tuple[str, str] | None:
        """(code, reason) of a send that cannot go ahead (IN_FLIGHT, UNANSWERED), both retryable; None otherwise."""
        if self.outcome == UNANSWERED:
            return error_code(self.error), f"delay table did not take dedupe_key {self.key!r}: {self.error}"  # type: ignore[arg-type]  # an UNANSWERED claim always carries its error
        return (IN_FLIGHT_CODE, self.in_flight_reason()) if self.outcome == IN_FLIGHT else None

    def in_flight_reason(self) -> str:
        """The retryable error of an IN_FLIGHT claim, naming the key and when its lease ends."""
        claimed_ms = int((self.holder or {}).get(_CLAIMED_MS, {}).get("N", self.now_ms))
        left = max(0, math.ceil((claimed_ms + DEDUPE_MARKER_LEASE_SECONDS * 1000 - self.now_ms) / 1000))
        return (
            f"dedupe_key {self.key!r} is held by another send still in flight (its lease ends in {left} s at most); "
            "nothing was sent: retry later"
        )


def marker_key(key: str) -> dict[str, dict[str, str]]:
    """The marker's primary key."""
    return {PK: {"S": DEDUPE_PREFIX + key}, SK: {"S": "-"}}


def marker_item(key: str, due: float, claimed_ms: int, *, sent: bool, sqs_message_id: str | None = None) -> dict[str, Any]:
    """The marker: the key's message id, whether it was sent, when it was claimed, and its TTL."""
    item = {
        **marker_key(key),
        "id": {"S": new_message_id(key)},
        _SENT: {"BOOL": sent},
        _CLAIMED_MS: {"N": str(claimed_ms)},
        TTL_ATTRIBUTE: {"N": str(math.ceil(due) + DEDUPE_RETENTION_SECONDS)},
    }
    if sqs_message_id is not None:
        item["sqs_message_id"] = {"S": sqs_message_id}
    return item


def claim_condition(now_ms: int) -> dict[str, Any]:
    """The claim rule as a marker Put's condition (with ALL_OLD, so a refusal returns the holder)."""
    return {
        "ConditionExpression": f"attribute_not_exists({PK}) OR #expiration < :now OR (#sent = :unsent AND #claimed_ms < :lease_start)",
        "ExpressionAttributeNames": {"#expiration": TTL_ATTRIBUTE, "#sent": _SENT, "#claimed_ms": _CLAIMED_MS},
        "ExpressionAttributeValues": {
            ":now": {"N": str(now_ms // 1000)},
            ":unsent": {"BOOL": False},
            ":lease_start": {"N": str(now_ms - DEDUPE_MARKER_LEASE_SECONDS * 1000)},
        },
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def held_outcome(holder: Mapping[str, Any] | None) -> str:
    """DEDUPLICATED for a sent marker (or one without ``sent``), else IN_FLIGHT; for a marker the claim rule refused."""
    if holder is not None and holder.get(_SENT, {"BOOL": True}).get("BOOL", True):
        return DEDUPLICATED
    return IN_FLIGHT


def may_send(claimed_ms: int, now_ms: int) -> bool:
    """True while a claim is young enough that one more SendMessageBatch call ends inside its lease."""
    return now_ms - claimed_ms < DEDUPE_SEND_WINDOW_SECONDS * 1000


def late_claims(claims: Mapping[str, tuple[str, int]], now_ms: int) -> dict[str, str]:
    """Of {entry id: (key, claimed_ms)}, the entries too late for another send call, each with its retryable error."""
    return {
        entry_id: (
            f"dedupe_key {key!r} was claimed {(now_ms - claimed_ms) / 1000:.0f} s ago, past the {DEDUPE_SEND_WINDOW_SECONDS} s in which "
            f"a send surely ends inside its {DEDUPE_MARKER_LEASE_SECONDS} s lease; nothing was sent and the key was given back: retry"
        )
        for entry_id, (key, claimed_ms) in claims.items()
        if not may_send(claimed_ms, now_ms)
    }


def repeated_keys(keys: list[Any]) -> dict[int, str]:
    """The problem of each batch index whose dedupe key another index has too (which of them is meant is ambiguous)."""
    indexes: dict[str, list[int]] = {}
    for index, key in enumerate(keys):
        if isinstance(key, str):
            indexes.setdefault(key, []).append(index)
    problems = {}
    for key, shared in indexes.items():
        for index in shared if len(shared) > 1 else []:
            problems[index] = (f"messages {', '.join(map(str, shared))} have the same dedupe_key {key!r}: a batch may carry "
                               "each key once; send one of them")
    return problems


class DedupeMarkers:
    """The markers of dedupe keys: claimed before a send straight to SQS and settled after it, or stored with a delayed message."""

    def __init__(self, table: str, dynamodb: Any, clock: Callable[[], float], *, deduplicated: set[str] | None = None) -> None:
        self._table = table
        self._dynamodb = dynamodb
        self._clock = clock
        # The ids of delayed messages ``store_delayed`` did not store because an earlier send holds their key.
        self.deduplicated: set[str] = set() if deduplicated is None else deduplicated

    def claim(self, key: str, due: float) -> Claim:
        """Take the key with an unsent marker (CLAIMED), or say who holds it, or that the table did not answer."""
        now_ms = int(self._clock() * 1000)
        try:
            self._dynamodb.put_item(TableName=self._table, Item=marker_item(key, due, now_ms, sent=False), **claim_condition(now_ms))
        except Exception as error:
            if not is_condition_failure(error):
                return Claim(key, UNANSWERED, now_ms, error=error)
            holder = error_response(error).get("Item")
            return Claim(key, held_outcome(holder), now_ms, holder)
        return Claim(key, CLAIMED, now_ms)

    def settle(self, key: str, due: float, claimed_ms: int, sqs_message_id: str | None) -> None:
        """Mark the key sent, or give back this sender's claim so a retry sends at once; a failure is only logged."""
        try:
            if sqs_message_id is not None:
                item = marker_item(key, due, claimed_ms, sent=True, sqs_message_id=sqs_message_id)
                self._dynamodb.put_item(TableName=self._table, Item=item)
            else:
                self._dynamodb.delete_item(
                    TableName=self._table, Key=marker_key(key), ConditionExpression="#claimed_ms = :mine",
                    ExpressionAttributeNames={"#claimed_ms": _CLAIMED_MS}, ExpressionAttributeValues={":mine": {"N": str(claimed_ms)}},
                )
        except Exception as error:  # an unsent marker waits out its lease; a sent one left unsent may be sent again
            _log.warning("dedupe_key %r: could not settle its marker (%s: %s)", key, error_code(error), error)

    def store_delayed(self, message: DelayedMessage) -> tuple[str, str] | None:
        """Store a delayed message with its key's marker (``store_with_marker``); None when stored or deduplicated.

        Else (code, reason) of the retryable failure. This is the ``keyed_write`` of
        ``delay.DelayStore``; DynamoDB errors other than the marker's condition raise.
        """
        now_ms = int(self._clock() * 1000)
        claim = store_with_marker(self._dynamodb, self._table, str(message.dedupe_key), message.to_item(), message.due_ms / 1000, now_ms)
        if claim.outcome == DEDUPLICATED:
            self.deduplicated.add(message.message_id)
        return claim.failure()


def store_with_marker(dynamodb: Any, table: str, key: str, item: dict[str, Any], due: float, now_ms: int) -> Claim:
    """Store a delayed message's item and its key's marker (sent) in one transaction, under the claim rule.

    A crash cannot leave a marker without its message. DynamoDB errors other than
    the marker's condition raise.
    """
    marker = {"TableName": table, "Item": marker_item(key, due, now_ms, sent=True), **claim_condition(now_ms)}
    try:
        dynamodb.transact_write_items(TransactItems=[{"Put": marker}, {"Put": {"TableName": table, "Item": item}}])
    except Exception as error:
        reasons = error_response(error).get("CancellationReasons") or []
        if not reasons or reasons[0].get("Code") != "ConditionalCheckFailed":
            raise
        holder = reasons[0].get("Item")
        return Claim(key, held_outcome(holder), now_ms, holder)
    return Claim(key, CLAIMED, now_ms)
