"""The state table: its key layout, and the conditional-put lease that its users share.

One on-demand table per stack holds three kinds of items, each under its own key
prefix so a role can be granted only its own (``dynamodb:LeadingKeys``):

- ``idempotency#...``: Powertools idempotency records of ``@task(idempotent=True)``;
- ``scheduler#...``: the delay dispatcher's lease, watermark and minute records
  (the prefix keeps the dispatcher's first name so deployed state stays readable);
- ``cron#...``: one claim per tick of a periodic task.

Every item carries ``expiration`` (epoch seconds), the table's TTL attribute.

A lease is an item that one holder owns until ``lease_until``: ``claim`` is a
conditional put that succeeds on a missing item or an expired lease (plus any
condition the caller adds), and ``release`` deletes it only while the holder still
owns it. DynamoDB's conditional writes make both atomic, so two holders never own
one lease at once, and a crashed holder's lease is taken over once it runs out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from worker_tier.core.aws import is_condition_failure
from worker_tier.core.contract import STATE_KEY_PREFIXES, STATE_PARTITION_KEY, STATE_TTL_ATTRIBUTE

# The contract's names for the state table, under the names this module exports.
KEY_PREFIXES = STATE_KEY_PREFIXES
PARTITION_KEY = STATE_PARTITION_KEY
TTL_ATTRIBUTE = STATE_TTL_ATTRIBUTE

HOLDER_ATTRIBUTE = "holder"
LEASE_UNTIL_ATTRIBUTE = "lease_until"


@dataclass(frozen=True)
class Lease:
    """A lease on one item of the state table.

    ``seconds``: how long a claim lasts; ``retention_seconds``: when the TTL removes
    the item (at least ``seconds``, so a live lease is never expired under its holder).
    """

    table: str
    key: str
    seconds: int
    retention_seconds: int

    def __post_init__(self) -> None:
        if self.retention_seconds < self.seconds:
            raise ValueError(f"Lease {self.key!r}: retention_seconds ({self.retention_seconds}) must be at least "
                             f"seconds ({self.seconds}), or the TTL could remove a lease still held")

    def claim(
        self,
        dynamodb: Any,
        holder: str,
        now: int,
        *,
        attributes: Mapping[str, Mapping[str, str]] | None = None,
        takeover_condition: str = "",
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Mapping[str, str]] | None = None,
    ) -> dict[str, Any] | None:
        """Put the lease for ``holder``; None when it now holds it, else the item that stood in the way ({} if unknown).

        The put succeeds when the item is missing, or when its lease has run out and
        ``takeover_condition`` (an extra ``AND`` term, with its ``names`` and ``values``)
        holds. ``attributes`` are stored beside the holder. Other errors propagate.
        """
        expired = f"#lease_until < :now AND ({takeover_condition})" if takeover_condition else "#lease_until < :now"
        try:
            dynamodb.put_item(
                TableName=self.table,
                Item=_merged("attribute", {
                    PARTITION_KEY: {"S": self.key},
                    HOLDER_ATTRIBUTE: {"S": holder},
                    LEASE_UNTIL_ATTRIBUTE: {"N": str(now + self.seconds)},
                    TTL_ATTRIBUTE: {"N": str(now + self.retention_seconds)},
                }, attributes),
                ConditionExpression=f"attribute_not_exists(#pk) OR ({expired})",
                ExpressionAttributeNames=_merged("name", {"#pk": PARTITION_KEY, "#lease_until": LEASE_UNTIL_ATTRIBUTE}, names),
                ExpressionAttributeValues=_merged("value", {":now": {"N": str(now)}}, values),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except Exception as error:
            if is_condition_failure(error):
                return dict(getattr(error, "response", {}).get("Item") or {})
            raise
        return None

    def release(
        self,
        dynamodb: Any,
        holder: str,
        *,
        condition: str = "",
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Mapping[str, str]] | None = None,
    ) -> bool:
        """Delete the lease if ``holder`` still owns it (and ``condition`` holds); False if it did not.

        Other errors propagate: the caller decides whether the lease may simply run out.
        """
        return _if_owned(lambda: dynamodb.delete_item(
            TableName=self.table,
            Key={PARTITION_KEY: {"S": self.key}},
            ConditionExpression=_owned(condition),
            ExpressionAttributeNames=_merged("name", {"#holder": HOLDER_ATTRIBUTE}, names),
            ExpressionAttributeValues=_merged("value", {":holder": {"S": holder}}, values),
        ))

    def update(
        self,
        dynamodb: Any,
        holder: str,
        update_expression: str,
        *,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> bool:
        """Apply ``update_expression`` to the lease's item while ``holder`` owns it; False if it does not.

        A lease given back or taken over is never recreated by the update, so no item
        lacks its TTL. Other errors propagate.
        """
        return _if_owned(lambda: dynamodb.update_item(
            TableName=self.table,
            Key={PARTITION_KEY: {"S": self.key}},
            UpdateExpression=update_expression,
            ConditionExpression=_owned(""),
            ExpressionAttributeNames=_merged("name", {"#holder": HOLDER_ATTRIBUTE}, names),
            ExpressionAttributeValues=_merged("value", {":holder": {"S": holder}}, values),
        ))


def _if_owned(write: Callable[[], object]) -> bool:
    """Run a write conditioned on the holder; False when the condition failed, other errors propagate."""
    try:
        write()
    except Exception as error:
        if is_condition_failure(error):
            return False
        raise
    return True


def _owned(condition: str) -> str:
    """The condition that the holder still owns the lease, AND ``condition`` (parenthesised) when given."""
    return f"#holder = :holder AND ({condition})" if condition else "#holder = :holder"


def _merged(what: str, own: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """``own`` plus the caller's ``extra``; ValueError when the caller's would replace one the lease relies on."""
    clash = sorted(set(own) & set(extra or {}))
    if clash:
        raise ValueError(f"a lease sets its own {what}s {sorted(own)}; the caller's may not replace them, got {clash}")
    return {**own, **(extra or {})}
