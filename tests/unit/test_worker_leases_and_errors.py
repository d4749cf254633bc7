"""Heartbeat leases that SQS takes away, visibility refusals, RetryLater's bounds, the dead-letter fit, error text that
cannot be had and heartbeat callbacks that raise."""

from __future__ import annotations

import json
import math
from datetime import timedelta

import pytest

from tests.support.fakes import FakeSQS
from worker_tier import RetryLater
from worker_tier.worker.dead_letter import fit_reason
from worker_tier.worker.heartbeat import Heartbeat
from worker_tier.core.envelope import message_bytes, sqs_attributes
from worker_tier.core.message import MAX_LOGGED_ERROR_CHARS, safe_repr, truncate_utf8
from worker_tier.core.contract import FAILURE_ATTRIBUTE
from worker_tier.core.visibility import VisibilityChange, VisibilityRefusal, change_visibility


# -- RetryLater refuses what it cannot mean, where it is raised -----------------------------------------


@pytest.mark.parametrize("delay", [math.nan, math.inf, -math.inf, -1, True, "60", None])
def test_retry_later_refuses_a_delay_that_is_not_a_finite_non_negative_number(delay):
    # GIVEN a delay that is not a finite, non-negative number  WHEN RetryLater is raised with it
    with pytest.raises(ValueError) as error:
        RetryLater(delay)
    # THEN the error names the value and the rule
    assert str(error.value) == (
        f"RetryLater delay must be a finite, non-negative number of seconds or a timedelta, got {delay!r}"
    )


def test_retry_later_takes_seconds_or_a_timedelta_rounded_up():
    assert (RetryLater(1.2).delay_seconds, RetryLater(timedelta(minutes=2)).delay_seconds) == (2, 120)


# -- a lease SQS takes away, or that lapses, is lost ------------------------------------------------------


def test_heartbeat_refused_because_the_message_is_not_ours_loses_the_lease_at_once():
    # GIVEN a held message whose receipt handle SQS no longer accepts (another consumer received it)
    sqs = FakeSQS(fail=lambda call, entry: ("ReceiptHandleIsInvalid", True))
    heartbeat = Heartbeat(sqs, "q", interval_seconds=30)
    held = heartbeat.hold("m1", "r1")
    # WHEN it beats
    heartbeat.beat()
    # THEN the task is told and the heartbeat stops extending it
    assert held.expired.is_set()
    assert heartbeat.held() == []


def test_transient_heartbeat_failures_lose_the_lease_when_the_retries_end_before_the_next_beat():
    # GIVEN every extension fails on SQS's side (not the sender's fault), interval 30 s so a 40 s window
    now = [0.0]
    sqs = FakeSQS(fail=lambda call, entry: ("InternalError", False))
    heartbeat = Heartbeat(sqs, "q", interval_seconds=30, clock=lambda: now[0], sleep=lambda s: None)
    held = heartbeat.hold("m1", "r1")
    # WHEN it beats at 30 s and the extension and its retries all fail
    now[0] = 30.0
    heartbeat.beat()
    # THEN the lease is lost now: the window ends at 40 s, before the next beat at 60 s could extend it
    assert held.expired.is_set() and heartbeat.held() == []
    assert sqs.count("ChangeMessageVisibilityBatch") > 1  # the extension was retried first


def test_a_retry_that_succeeds_keeps_the_lease_and_renews_the_window():
    # GIVEN an extension that fails once on SQS's side, then succeeds
    now = [0.0]
    failures = [1]

    def fail(call, entry):
        if failures[0]:
            failures[0] -= 1
            return ("InternalError", False)
        return None

    sqs = FakeSQS(fail=fail)
    heartbeat = Heartbeat(sqs, "q", interval_seconds=30, clock=lambda: now[0], sleep=lambda s: None)
    held = heartbeat.hold("m1", "r1")
    # WHEN it beats at 30 s
    now[0] = 30.0
    heartbeat.beat()
    # THEN the retry extended it: still held, and the next beat (60 s) is inside the renewed window (to 70 s)
    assert not held.expired.is_set() and heartbeat.held() == ["m1"]
    now[0] = 60.0
    heartbeat.beat()
    assert not held.expired.is_set()


@pytest.mark.parametrize(
    "code, text, lost",
    [
        ("ReceiptHandleIsInvalid", "", True),
        ("AWS.SimpleQueueService.MessageNotInflight", "", True),
        ("InvalidParameterValue", "Value r1 for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.", True),
        ("InvalidParameterValue", "Value 50000 for parameter VisibilityTimeout is invalid.", False),
        ("InternalError", "", False),
    ],
)
def test_a_refusal_says_whether_the_message_is_lost(code, text, lost):
    refusal = VisibilityRefusal(VisibilityChange("m1", "r1", 40), code, text)
    assert refusal.lost() is lost


def test_change_visibility_returns_refusals_with_their_codes():
    # GIVEN SQS refuses the second of two changes
    sqs = FakeSQS(fail=lambda call, entry: ("MessageNotInflight", True) if entry["Id"] == "1" else None)
    # WHEN both are sent
    refused = change_visibility(sqs, "q", [VisibilityChange("a", "ra", 5), VisibilityChange("b", "rb", 5)])
    # THEN the refusal names the message and SQS's code
    assert [(r.message_id, r.code, r.sender_fault) for r in refused] == [("b", "MessageNotInflight", True)]


def test_a_failed_call_returns_every_change_as_a_transient_refusal():
    class Down:
        def change_message_visibility_batch(self, **_):
            raise ConnectionError("network down")

    refused = change_visibility(Down(), "q", [VisibilityChange("a", "ra", 5)])
    assert [(r.message_id, r.code, r.sender_fault, r.lost()) for r in refused] == [("a", "ConnectionError", False, False)]


# -- what a dead-letter copy can carry -----------------------------------------------------------


def test_attributes_sqs_would_refuse_are_named_not_raised():
    # GIVEN event attributes: a good String, a Binary that is not base64, an unknown type, a bad name, a non-mapping
    event = {
        "ok": {"dataType": "String", "stringValue": "v"},
        "bin": {"dataType": "Binary", "binaryValue": "%%%"},
        "odd": {"dataType": "Blob", "stringValue": "v"},
        "AWS.reserved": {"dataType": "String", "stringValue": "v"},
        "junk": "not a mapping",
        "b64": {"dataType": "Binary.png", "binaryValue": "AAE="},
    }
    # WHEN converted to the SQS API's shape
    converted, dropped = sqs_attributes(event)
    # THEN what SQS accepts is kept and the rest named
    assert converted == {"ok": {"DataType": "String", "StringValue": "v"}, "b64": {"DataType": "Binary.png", "BinaryValue": b"\x00\x01"}}
    assert dropped == ["bin", "odd", "AWS.reserved", "junk"]


def test_a_reason_that_cannot_fit_beside_the_body_is_reported_as_not_fitting():
    # GIVEN a body 50 bytes under the limit
    body = "b" * (1024 * 1024 - 50)
    reason = {"error_type": "E", "error_message": "m" * 100, "attempts": 1}
    # WHEN the reason is fitted  THEN none fits: the caller sends it as a record of its own
    assert fit_reason(body, {}, reason, 1024 * 1024) is None


def test_a_reason_is_shortened_to_fit_exactly_within_the_limit():
    # GIVEN a body with 300 bytes to spare, and an error message of non-ASCII text JSON spells longer
    body = "b" * (1024 * 1024 - 300)
    reason = {"error_type": "E", "error_message": "é" * 500, "attempts": 1}
    # WHEN fitted
    attributes = fit_reason(body, {}, reason, 1024 * 1024)
    # THEN it fits, with a shortened message
    assert message_bytes(body, attributes) <= 1024 * 1024
    assert json.loads(attributes[FAILURE_ATTRIBUTE]["StringValue"])["error_message"].endswith("...")


# -- RetryLater past a float's range, error text that cannot be had, heartbeat callbacks that raise ---------------


def test_retry_later_past_a_floats_range_gets_the_clear_error_not_an_overflow():
    # GIVEN a delay too large for a float  WHEN RetryLater is raised with it
    with pytest.raises(ValueError) as error:
        RetryLater(10**400)
    # THEN the error names the rule and the value, cut short
    assert str(error.value) == (
        "RetryLater delay must be a finite, non-negative number of seconds or a timedelta, got "
         "1" + "0" * 76 + "..."
    )


@pytest.mark.parametrize(
    "text, limit, expected",
    [("caf\udce9.jpg", 100, "caf\\udce9.jpg"), ("caf\udce9.jpg", 8, "caf\\u..."), ("\udce9", 3, "...")],
    ids=["fits", "cut", "only-the-mark"],
)
def test_truncate_utf8_spells_a_lone_surrogate_as_an_escape(text, limit, expected):
    # GIVEN text with a lone surrogate  WHEN cut to a UTF-8 byte limit  THEN it does not raise; the surrogate is escaped
    assert truncate_utf8(text, limit) == expected


class ReprRaises(Exception):
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


class ReprNotStr(Exception):
    def __repr__(self):
        return 42


@pytest.mark.parametrize(
    "error, expected",
    [
        (ReprRaises(), "<repr() of ReprRaises raised RuntimeError: repr exploded>"),
        (ReprNotStr(), "<repr() of ReprNotStr raised TypeError: __repr__ returned non-string (type int)>"),
        (ValueError("x" * 10_000), "ValueError('" + "x" * (MAX_LOGGED_ERROR_CHARS - 15) + "..."),
    ],
    ids=["raises", "not-a-str", "huge"],
)
def test_safe_repr_never_raises_and_is_capped(error, expected):
    # GIVEN an error whose repr raises, is not a str, or is huge  WHEN shown in a log  THEN a capped, readable text
    assert safe_repr(error) == expected


def test_a_failing_on_extended_callback_does_not_stop_the_beat_or_the_others():
    # GIVEN a held message with a callback that raises and one that records
    sqs = FakeSQS()
    heartbeat = Heartbeat(sqs, "https://sqs.example/q", interval_seconds=1, clock=lambda: 0.0)
    heartbeat.hold("m1", "r1")
    called: list[str] = []

    def broken() -> None:
        raise RuntimeError("table down")

    heartbeat.on_extended("m1", broken)
    heartbeat.on_extended("m1", lambda: called.append("m1"))
    # WHEN two beats extend it
    heartbeat.beat()
    heartbeat.beat()
    # THEN both beats went out and the working callback ran after each
    assert sqs.count("ChangeMessageVisibilityBatch") == 2
    assert called == ["m1", "m1"]
