"""The message envelope: one message's body, attributes and system attributes, SQS's two quotas
(10 attributes, MaximumMessageSize in UTF-8 bytes), and its request, entry and record shapes."""

import ast
import doctest
import base64
from pathlib import Path

import botocore.session
import pytest
from botocore.validate import validate_parameters

from tests.support.fakes import FakeSQS
from tests.support.strict_sqs import StrictSQS
from worker_tier import Client, MessageError
from worker_tier.core import contract, limits
from worker_tier.core.envelope import Envelope, lambda_record, message_bytes
from worker_tier.core.limits import attribute_room

QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:work"
SRC = Path(__file__).resolve().parents[2] / "src"
TRACE = {"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"}}


def _string(value: str) -> dict:
    return {"DataType": "String", "StringValue": value}


def _sqs_input_shape(operation: str):
    return botocore.session.get_session().get_service_model("sqs").operation_model(operation).input_shape


# -- the 10-attribute budget --------------------------------------------------------------


def test_attribute_room_counts_what_is_held_and_what_worker_tier_keeps():
    assert attribute_room(0) == limits.SQS_MAX_MESSAGE_ATTRIBUTES
    assert attribute_room(9, reserved=1) == 0
    assert attribute_room(10) == 0
    assert attribute_room(11) == -1
    # The Client's own reserve: the path, then worker_tier.due_at
    assert attribute_room(0, reserved=1) == 9
    assert attribute_room(0, reserved=2) == 8


def test_system_attributes_take_none_of_the_ten():
    envelope = Envelope("b", {f"a{i}": _string("v") for i in range(10)}, TRACE)
    assert envelope.room() == 0
    assert Envelope("b", {}, TRACE).room() == 10


def test_the_client_refuses_a_tenth_user_attribute_naming_the_budget():
    client = Client(QUEUE, sqs=StrictSQS(FakeSQS()))
    client.send("/x", "b", attributes={f"a{i}": "v" for i in range(9)})
    with pytest.raises(MessageError) as error:
        client.send("/x", "b", attributes={f"a{i}": "v" for i in range(10)})
    assert str(error.value) == (
        "10 attributes given; SQS allows 10 per message and Worker Tier uses one for the path, so at most 9"
    )


# -- sizes, in UTF-8, at the exact limit ------------------------------------------------------


def test_size_counts_utf8_bytes_of_body_and_of_each_attribute_name_type_and_value():
    # GIVEN a two-byte body character, a two-byte name, a custom type label and a three-byte value
    envelope = Envelope("é", {"ñ": {"DataType": "String.label", "StringValue": "€"}, "bin": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}})
    # THEN each counts its UTF-8 bytes (a Binary value its raw bytes, not its base64)
    assert envelope.size() == 2 + (2 + len("String.label") + 3) + (3 + len("Binary") + 2)
    assert envelope.size() == message_bytes(envelope.body, envelope.attributes)


def test_system_attributes_do_not_count_toward_the_size():
    assert Envelope("abc", {}, TRACE).size() == 3


def test_a_message_exactly_at_the_limit_fits_and_one_byte_more_does_not():
    path = _string("/xy")
    fixed = len(contract.PATH_ATTRIBUTE) + len("String") + len("/xy")
    limit = 1024
    # GIVEN a body of two-byte characters that brings the message to the limit exactly
    at_limit = Envelope("é" * ((limit - fixed) // 2), {contract.PATH_ATTRIBUTE: path})
    assert (limit - fixed) % 2 == 0
    assert at_limit.checked_size(limit) == limit
    # WHEN one more byte is added THEN it is refused, naming both sizes
    over = Envelope(at_limit.body + "a", at_limit.attributes)
    with pytest.raises(MessageError) as error:
        over.checked_size(limit)
    assert str(error.value) == "message is 1025 bytes with its attributes; the queue allows at most 1024 (MaximumMessageSize)"
    with pytest.raises(MessageError) as error:
        at_limit.checked_size(limit, extra=1, what="with worker_tier.due_at (added at dispatch)")
    assert str(error.value) == (
        "message is 1025 bytes with its attributes with worker_tier.due_at (added at dispatch); "
        "the queue allows at most 1024 (MaximumMessageSize)"
    )


def test_the_client_sends_a_message_at_the_queues_limit_which_strict_sqs_takes():
    # GIVEN a queue taking 1 KiB, counted by StrictSQS as SQS counts it
    sqs = StrictSQS(FakeSQS(), maximum_message_size=1024)
    client = Client(QUEUE, sqs=sqs, maximum_message_size=1024)
    fixed = len(contract.PATH_ATTRIBUTE) + len("String") + len("/x")
    body = "€" * ((1024 - fixed) // 3) + "a" * ((1024 - fixed) % 3)
    # WHEN a message of exactly 1024 bytes is sent THEN SQS takes it
    assert client.send("/x", body)
    assert sqs.refused == []
    # AND one byte more is refused before SQS is asked
    with pytest.raises(MessageError):
        client.send("/x", body + "a")
    assert sqs.refused == []


# -- request and entry -----------------------------------------------------------------------


def test_request_and_entry_carry_the_message_and_options_and_are_what_sqs_takes():
    envelope = Envelope("hi", {contract.PATH_ATTRIBUTE: _string("/x")})
    request = envelope.request(QUEUE, DelaySeconds=5)
    entry = envelope.entry("7", MessageGroupId="g", MessageDeduplicationId="d")
    assert request == {"QueueUrl": QUEUE, "MessageBody": "hi", "MessageAttributes": envelope.attributes, "DelaySeconds": 5}
    assert entry == {"Id": "7", "MessageBody": "hi", "MessageAttributes": envelope.attributes,
                     "MessageGroupId": "g", "MessageDeduplicationId": "d"}
    assert "MessageSystemAttributes" not in request and "MessageSystemAttributes" not in entry
    validate_parameters(request, _sqs_input_shape("SendMessage"))
    validate_parameters({"QueueUrl": QUEUE, "Entries": [entry]}, _sqs_input_shape("SendMessageBatch"))


def test_system_attributes_are_sent_as_message_system_attributes_when_set():
    envelope = Envelope("hi", {}, TRACE)
    request, entry = envelope.request(QUEUE), envelope.entry("0")
    assert request["MessageSystemAttributes"] == entry["MessageSystemAttributes"] == TRACE
    validate_parameters(request, _sqs_input_shape("SendMessage"))
    validate_parameters({"QueueUrl": QUEUE, "Entries": [entry]}, _sqs_input_shape("SendMessageBatch"))
    # An empty mapping is none
    assert "MessageSystemAttributes" not in Envelope("hi", {}, {}).entry("0")


# -- from a received message, and round trips ------------------------------------------------------


RECEIVED = {
    "MessageId": "m-1",
    "ReceiptHandle": "r-1",
    "Body": "naïve ✓",
    "Attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1800000000000", "AWSTraceHeader": "Root=1-abc"},
    "MessageAttributes": {
        contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/resize"},
        "count": {"DataType": "Number.int", "StringValue": "12345678901234567890"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xffbytes"},
    },
}


def test_received_to_record_to_envelope_to_entry_keeps_body_and_every_attribute():
    # GIVEN a ReceiveMessage message turned into the Lambda record Lambda would build
    record = lambda_record(RECEIVED, QUEUE_ARN, "us-east-1")
    assert record["messageAttributes"]["blob"]["binaryValue"] == base64.b64encode(b"\x00\xffbytes").decode()
    assert record["attributes"]["AWSTraceHeader"] == "Root=1-abc"
    # WHEN the record is read back into an envelope and sent on
    envelope, dropped = Envelope.from_record(record)
    entry = envelope.entry("0")
    # THEN the entry carries the received body and attributes exactly, types included
    assert dropped == []
    assert entry["MessageBody"] == RECEIVED["Body"]
    assert entry["MessageAttributes"] == RECEIVED["MessageAttributes"]
    assert envelope == Envelope.from_received(RECEIVED)
    # AND the record's system attributes stay SQS's account of the receive: nothing is sent as MessageSystemAttributes
    assert "MessageSystemAttributes" not in entry
    validate_parameters({"QueueUrl": QUEUE, "Entries": [entry]}, _sqs_input_shape("SendMessageBatch"))


def test_envelope_to_record_and_back_is_the_same_message():
    envelope = Envelope.from_received(RECEIVED)
    back, dropped = Envelope.from_record(envelope.lambda_record(RECEIVED, QUEUE_ARN, "us-east-1"))
    assert (back, dropped) == (envelope, [])
    assert back.size() == envelope.size()


def test_from_record_leaves_out_and_names_what_sqs_would_refuse_and_takes_a_replacement_body():
    record = {
        "messageId": "m-2",
        "body": "original",
        "messageAttributes": {
            "ok": {"dataType": "String", "stringValue": "v"},
            "bad binary": {"dataType": "Binary", "binaryValue": "not base64!"},
            "empty": {"dataType": "String", "stringValue": ""},
        },
    }
    envelope, dropped = Envelope.from_record(record, body="unwrapped")
    assert (envelope.body, envelope.attributes, sorted(dropped)) == ("unwrapped", {"ok": _string("v")}, ["bad binary", "empty"])
    assert Envelope.from_record({"messageId": "m-3"}) == (Envelope(""), [])


def test_a_dead_letter_envelope_keeps_routing_and_its_reason_within_the_budget():
    original = {f"a{i}": _string(str(i)) for i in range(10)}
    original[contract.PATH_ATTRIBUTE] = _string("/x")
    envelope = Envelope.dead_letter("b", original, {"error_type": "E"})
    assert envelope.room() == 0
    assert contract.PATH_ATTRIBUTE in envelope.attributes and contract.FAILURE_ATTRIBUTE in envelope.attributes


# -- one place builds a message ------------------------------------------------------------------


def _message_body_sites(path: Path) -> list[int]:
    """Lines of ``path`` that write a MessageBody: a "MessageBody" string (a dict key, a subscript) or a keyword."""
    tree = ast.parse(path.read_text(), filename=str(path))
    lines = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value == "MessageBody"]
    lines += [node.value.lineno for node in ast.walk(tree) if isinstance(node, ast.keyword) and node.arg == "MessageBody"]
    return sorted(lines)


def test_only_the_envelope_builds_a_message_body_in_src():
    # The testing helper's in-memory SQS receives bodies (SendMessage's MessageBody is its parameter); it builds none.
    receivers = {"worker_tier/testing/queues.py"}
    sites = {str(p.relative_to(SRC)): lines for p in sorted(SRC.rglob("*.py"))
             if str(p.relative_to(SRC)) not in receivers and (lines := _message_body_sites(p))}
    assert list(sites) == ["worker_tier/core/envelope.py"]
    assert len(sites["worker_tier/core/envelope.py"]) == 1  # Envelope._fields


def test_the_structural_check_finds_a_message_body_built_elsewhere(tmp_path):
    module = tmp_path / "elsewhere.py"
    module.write_text('entry = {"Id": "0", "MessageBody": body}\nsqs.send_message(QueueUrl=q, MessageBody=b)\n')
    assert _message_body_sites(module) == [1, 2]


def test_the_envelope_module_examples_hold():
    from worker_tier.core import envelope

    assert doctest.testmod(envelope).failed == 0
