"""Unit cases of the hostile audit of issue #8: RetryLater's range, error text that cannot be had, heartbeat callbacks."""

from __future__ import annotations

import pytest

from tests.support.fakes import FakeSQS
from worker_tier import RetryLater
from worker_tier.heartbeat import Heartbeat
from worker_tier.message import MAX_LOGGED_ERROR_CHARS, safe_repr, truncate_utf8


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
