"""Repro: a rescheduled cancellable offloaded message outlives its object's lifecycle rule.

docs/large-payloads.md promises: "an object of a message still alive is never removed by the rule before its message
could be" and "`reschedule` keeps it". The rule counts from the object's last write (upload or the worker's copy onto
itself); ``reschedule`` moves the message up to 366 days from *now*, with no S3 call, so a message rescheduled late
in its first delay is due after its object expired: at dispatch the worker finds no object (PayloadMissingError, dead-
lettered), a body lost with no crash, only a documented API call.
"""

from __future__ import annotations

from datetime import timedelta

from tests.functional.test_offloaded_sends import DAY, MB, delayed, stored_messages  # noqa: F401  (fixture)
from worker_tier.core.payloads import expiration_days
from worker_tier_cdk.defaults import DEAD_LETTER_RETENTION_SECONDS

RETENTION = 4 * DAY  # the default retention_period
LONGEST_DELAY = 366 * DAY  # a standard WorkerTierStack's delay table


def _due_seconds(item: dict) -> float:
    return int(item["due_ms"]["N"]) / 1000


def test_a_message_rescheduled_late_in_its_delay_is_due_after_its_objects_lifecycle_expiration(delayed):  # noqa: F811
    world, s3 = delayed
    lifecycle_days = expiration_days(RETENTION, DEAD_LETTER_RETENTION_SECONDS, LONGEST_DELAY)  # 389: the stack's rule
    # GIVEN a cancellable 2 MB message sent for 300 days from now: its object is uploaded now
    uploaded_at = world.now
    world.client.send("/later", "r" * (2 * MB), delay=timedelta(days=300), dedupe_key="r", cancellable=True)
    [key] = s3.keys()
    # WHEN, 299 days later, it is rescheduled to 366 days from then (allowed: within the 366-day maximum)
    world.now += 299 * DAY
    s3.calls.clear()
    assert world.client.reschedule("r", delay=timedelta(days=366)) is True
    [item] = stored_messages(world)
    due = _due_seconds(item)
    # THEN its object must still exist when it is due: either its clock was restarted, or the due time is within the rule
    expires_at = uploaded_at + lifecycle_days * DAY
    assert s3.keys() == [key]
    assert "CopyObject" in s3.calls or due <= expires_at, (
        f"the message is due {(due - uploaded_at) / DAY:.0f} days after its object's upload, and the bucket's rule "
        f"expires the object after {lifecycle_days} days; the reschedule made S3 calls {s3.calls}"
    )
