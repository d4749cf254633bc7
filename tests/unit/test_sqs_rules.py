"""sqs_rules: each rule accepts what SQS documents and refuses the rest with the value and the rule named."""

import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker_tier.core import sqs_rules
from worker_tier.core.sqs_rules import (
    attribute_name_problem,
    attribute_value_problem,
    attributes_problem,
    body_problem,
    delay_seconds_problem,
    format_number,
    group_id_problem,
)


def test_module_examples_hold():
    assert doctest.testmod(sqs_rules).failed == 0


@pytest.mark.parametrize("body", ["x", "tab\tok", "emoji \U0001f600", "\ue000"])
def test_bodies_sqs_accepts(body):
    assert body_problem(body) is None


@pytest.mark.parametrize("body,fragment", [
    ("", "must not be empty"),
    ("a\x00b", "character '\\x00' (U+0000) at offset 1"),
    ("\ufffe", "U+FFFE"),
    (b"bytes", "must be a string, got bytes"),
])
def test_bodies_sqs_refuses_are_named(body, fragment):
    assert fragment in body_problem(body)


@pytest.mark.parametrize("name", ["a", "tenant.id", "x-y_z", "A" * 256])
def test_attribute_names_sqs_accepts(name):
    assert attribute_name_problem(name) is None


@pytest.mark.parametrize("name", ["", "a\n", "trailing.", ".leading", "double..dot", "AWS.x", "amazon.y", "sp ace", "A" * 257, 7])
def test_attribute_names_sqs_refuses(name):
    # GIVEN a name SQS refuses (a trailing newline passes a re.match with $; fullmatch refuses it)
    # WHEN / THEN the problem names it and the rule
    problem = attribute_name_problem(name)
    assert problem is not None and "is not allowed" in problem


@pytest.mark.parametrize("value", [
    {"DataType": "String", "StringValue": "v"},
    {"DataType": "String.json", "StringValue": "{}"},
    {"DataType": "Number", "StringValue": "-12.5"},
    {"DataType": "Number", "StringValue": "0"},
    {"DataType": "Number", "StringValue": "9" * 38},
    {"DataType": "Number", "StringValue": "1" + "0" * 126},
    {"DataType": "Number", "StringValue": "0." + "0" * 127 + "1"},
    {"DataType": "Binary", "BinaryValue": b"\x00"},
])
def test_attribute_values_sqs_accepts(value):
    assert attribute_value_problem("a", value) is None


@pytest.mark.parametrize("value,fragment", [
    ({"DataType": "String", "StringValue": "nul\x00"}, "character '\\x00'"),
    ({"DataType": "String", "StringValue": ""}, "non-empty StringValue"),
    ({"DataType": "Number", "StringValue": "9" * 39}, "38 significant digits"),
    ({"DataType": "Number", "StringValue": "1" + "0" * 127}, "10^126"),
    ({"DataType": "Number", "StringValue": "0." + "0" * 128 + "1"}, "10^-128"),
    ({"DataType": "Number", "StringValue": "1e5"}, "no exponent"),
    ({"DataType": "Number", "StringValue": "NaN"}, "no exponent"),
    ({"DataType": "Number", "StringValue": "\u0661\u0662"}, "no exponent"),
    ({"DataType": "Number", "StringValue": "\uff11\uff12"}, "no exponent"),
    ({"DataType": "Binary", "BinaryValue": b""}, "non-empty bytes"),
    ({"DataType": "Binary", "StringValue": "x"}, "non-empty bytes"),
    ({"DataType": "Text", "StringValue": "x"}, "String, Number or Binary"),
    ({"DataType": "String.", "StringValue": "x"}, "String, Number or Binary"),
    ("plain", "must be a mapping"),
])
def test_attribute_values_sqs_refuses_are_named(value, fragment):
    assert fragment in attribute_value_problem("a", value)


def test_attributes_problem_counts_and_checks_each():
    eleven = {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)}
    assert "at most 10" in attributes_problem(eleven)
    assert "a\\n" in attributes_problem({"a\n": {"DataType": "String", "StringValue": "v"}})
    assert attributes_problem({"ok": {"DataType": "Number", "StringValue": "1"}}) is None


@pytest.mark.parametrize("value,ok", [("g-1", True), ("!#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", True), ("a" * 128, True),
                                       ("a" * 129, False), ("with space", False), ("é", False), ("", False), (None, False)])
def test_group_ids(value, ok):
    assert (group_id_problem(value) is None) is ok
    assert (group_id_problem(value, "MessageDeduplicationId") or "MessageDeduplicationId").startswith("MessageDeduplicationId")


@pytest.mark.parametrize("value,ok", [(0, True), (900, True), (901, False), (-1, False), (True, False), (1.5, False)])
def test_delay_seconds(value, ok):
    assert (delay_seconds_problem(value) is None) is ok


@pytest.mark.parametrize("value,text", [(1e-05, "0.00001"), (1e20, "100000000000000000000"), (2.5, "2.5"), (-3, "-3"), (10.0, "10")])
def test_format_number_never_uses_exponent_and_passes_the_rule(value, text):
    assert format_number(value) == text
    assert attribute_value_problem("n", {"DataType": "Number", "StringValue": format_number(value)}) is None


# Characters at the rule's edges: refused C0 controls, the allowed three, DEL, both ends of each allowed range, lone
# surrogates, U+FFFE and U+FFFF, and ordinary text.
_EDGES = "\x00\x08\t\n\x0b\x0c\r\x0e\x1f \x7f\x80\ud7ff\ud800\udfff\ue000\ufffd\ufffe\uffff\U00010000\U0010ffffaé日"


@given(st.lists(st.sampled_from(_EDGES), max_size=12), st.integers(0, 5000))
def test_a_large_body_is_judged_as_the_character_rule_judges_it_whatever_the_screen_says(characters, at):
    # GIVEN a body long enough to be screened at C speed first, with edge characters placed in it
    body = "x" * 5000
    body = body[:at] + "".join(characters) + body[at:]
    # WHEN it is checked  THEN the answer is the character rule's own, offset included
    bad = sqs_rules._invalid_character().search(body)
    problem = body_problem(body)
    assert (problem is None) == (bad is None)
    if bad is not None:
        assert f"at offset {bad.start()}" in problem
