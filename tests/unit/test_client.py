"""Client: input rules, batch splitting and Failed-entry handling, against an in-memory SQS."""

from datetime import datetime, timedelta, timezone

import pytest

from tests.fakes import FakeSQS
from worker_tier import Client, MessageError, OutgoingMessage, SendError
from worker_tier.client import MAX_ENTRY_ATTEMPTS
from worker_tier.limits import SQS_MAX_MESSAGE_BYTES

QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
NOW = 1_800_000_000.0


def client(sqs=None, queue=QUEUE) -> Client:
    return Client(queue, sqs=sqs or FakeSQS(), clock=lambda: NOW, sleep=lambda s: None)


def test_send_puts_the_path_in_the_sqsd_attribute():
    sqs = FakeSQS()
    client(sqs).send("/resize", '{"k": 1}', attributes={"tenant": "acme", "size": 3, "blob": b"\x01"})
    [entry] = sqs.sent
    assert entry["MessageBody"] == '{"k": 1}'
    assert entry["MessageAttributes"] == {
        "beanstalk.sqsd.path": {"DataType": "String", "StringValue": "/resize"},
        "tenant": {"DataType": "String", "StringValue": "acme"},
        "size": {"DataType": "Number", "StringValue": "3"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x01"},
    }
    assert "DelaySeconds" not in entry


def test_non_string_body_is_json_encoded():
    sqs = FakeSQS()
    client(sqs).send("/x", {"a": [1, 2]})
    assert sqs.sent[0]["MessageBody"] == '{"a":[1,2]}'


@pytest.mark.parametrize(
    "kwargs, delay",
    [
        ({"delay": 30}, 30),
        ({"delay": timedelta(seconds=1.2)}, 2),
        ({"at": datetime.fromtimestamp(NOW + 600, tz=timezone.utc)}, 600),
        ({"at": datetime.fromtimestamp(NOW - 60, tz=timezone.utc)}, None),
        ({"delay": 900}, 900),
    ],
)
def test_delays_up_to_fifteen_minutes_use_delay_seconds(kwargs, delay):
    sqs = FakeSQS()
    client(sqs).send("/x", "b", **kwargs)
    assert sqs.sent[0].get("DelaySeconds") == delay


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"at": datetime(2030, 1, 1)}, "message 0 for '/x': at must be a timezone-aware datetime (for example datetime.now(timezone.utc)), got datetime.datetime(2030, 1, 1, 0, 0)"),
        ({"delay": -1}, "message 0 for '/x': delay must be a non-negative number of seconds or a timedelta, got -1"),
        ({"delay": 901}, "message 0 for '/x': a delay of 901 s is over SQS's 900 s maximum and needs the delay table; pass delay_table (or set WORKER_TIER_DELAY_TABLE)"),
        ({"delay": 5, "at": datetime.now(timezone.utc)}, "message 0 for '/x': give delay or at, not both"),
        ({"attributes": {"AWS.trace": "x"}}, "message 0 for '/x': attribute name 'AWS.trace' is not allowed"),
        ({"attributes": {"beanstalk.sqsd.path": "/y"}}, "message 0 for '/x': attribute 'beanstalk.sqsd.path' is set from the path argument; do not pass it"),
        ({"attributes": {"empty": ""}}, "message 0 for '/x': attribute 'empty' must not be an empty string (SQS refuses empty values)"),
        ({"attributes": {"flag": True}}, "message 0 for '/x': attribute 'flag' is a bool"),
        ({"attributes": {f"a{i}": "v" for i in range(10)}}, "message 0 for '/x': 10 attributes given; SQS allows 10 per message and Worker Tier uses one for the path, so at most 9"),
        ({"group_id": "g"}, "message 0 for '/x': group_id and dedupe_key apply to FIFO queues (a queue URL ending in .fifo)"),
    ],
)
def test_bad_input_is_refused_naming_value_and_rule(kwargs, message):
    sqs = FakeSQS()
    with pytest.raises(MessageError) as error:
        client(sqs).send("/x", "b", **kwargs)
    assert str(error.value).startswith(message)
    assert sqs.calls == []


def test_oversized_body_is_refused_before_sending():
    sqs = FakeSQS()
    with pytest.raises(MessageError) as error:
        client(sqs).send("/x", "a" * SQS_MAX_MESSAGE_BYTES)
    assert str(error.value) == (
        f"message 0 for '/x': message is {SQS_MAX_MESSAGE_BYTES + len('beanstalk.sqsd.path') + len('String') + 2} "
        f"bytes with its attributes; SQS allows at most {SQS_MAX_MESSAGE_BYTES}"
    )
    assert sqs.calls == []


@pytest.mark.parametrize(
    "body, message",
    [("", "body must not be empty (SQS requires at least one character)"), ("a\x00", "body has character '\\x00' at offset 1, which SQS does not allow")],
)
def test_bodies_sqs_refuses_are_refused(body, message):
    with pytest.raises(MessageError) as error:
        client().send("/x", body)
    assert str(error.value) == f"message 0 for '/x': {message}"


def test_bad_path_is_refused():
    with pytest.raises(MessageError, match=r"path must be a string starting with '/', got 'x'"):
        client().send("x", "b")


def test_fifo_needs_group_and_refuses_delay():
    fifo = client(queue=QUEUE + ".fifo")
    with pytest.raises(MessageError, match="group_id is required for a FIFO queue"):
        fifo.send("/x", "b")
    with pytest.raises(MessageError, match=r"a FIFO queue has no per-message delay .* got a delay of 5 s"):
        fifo.send("/x", "b", group_id="g", delay=5)


def test_fifo_uses_group_and_dedupe_key():
    sqs = FakeSQS()
    client(sqs, queue=QUEUE + ".fifo").send("/x", "b", group_id="g", dedupe_key="d")
    assert (sqs.sent[0]["MessageGroupId"], sqs.sent[0]["MessageDeduplicationId"]) == ("g", "d")


def test_send_batch_splits_into_tens_and_keeps_order():
    sqs = FakeSQS()
    results = client(sqs).send_batch([OutgoingMessage("/x", str(i)) for i in range(23)])
    assert [len(params["Entries"]) for _, params in sqs.calls] == [10, 10, 3]
    assert [r.index for r in results] == list(range(23))
    assert all(r.ok for r in results)


def test_send_batch_splits_by_total_size():
    sqs = FakeSQS()
    body = "a" * (400 * 1024)
    client(sqs).send_batch([OutgoingMessage("/x", body) for _ in range(5)])
    assert [len(params["Entries"]) for _, params in sqs.calls] == [2, 2, 1]


def test_throttled_entries_are_retried_until_accepted():
    # GIVEN SQS fails entry 3 with a server-side throttle on the first two calls
    sqs = FakeSQS(fail=lambda call, entry: ("ThrottlingException", False) if entry["Id"] == "3" and call <= 2 else None)
    # WHEN a batch is sent
    results = client(sqs).send_batch([OutgoingMessage("/x", str(i)) for i in range(5)])
    # THEN all are accepted; the retries carried only the failed entry
    assert all(r.ok for r in results)
    assert [[e["Id"] for e in params["Entries"]] for _, params in sqs.calls] == [["0", "1", "2", "3", "4"], ["3"], ["3"]]


def test_entries_failing_every_attempt_are_reported_not_dropped():
    sqs = FakeSQS(fail=lambda call, entry: ("InternalError", False) if entry["Id"] == "1" else None)
    results = client(sqs).send_batch([OutgoingMessage("/x", str(i)) for i in range(3)])
    assert [r.ok for r in results] == [True, False, True]
    assert (results[1].code, results[1].error) == ("InternalError", "InternalError (fake)")
    assert sqs.count("SendMessageBatch") == MAX_ENTRY_ATTEMPTS


def test_sender_fault_entries_are_reported_without_retry():
    sqs = FakeSQS(fail=lambda call, entry: ("InvalidParameterValue", True) if entry["Id"] == "0" else None)
    results = client(sqs).send_batch([OutgoingMessage("/x", "a"), OutgoingMessage("/x", "b")])
    assert [r.ok for r in results] == [False, True]
    assert sqs.count("SendMessageBatch") == 1


def test_send_raises_with_the_reason_when_sqs_refuses():
    sqs = FakeSQS(fail=lambda call, entry: ("InvalidParameterValue", True))
    with pytest.raises(SendError, match=r"^SQS refused the message for /x: InvalidParameterValue \(fake\)$"):
        client(sqs).send("/x", "a")


def test_a_call_that_raises_reports_every_entry():
    class Down:
        def send_message_batch(self, **kwargs):
            raise ConnectionError("endpoint unreachable")

    results = client(Down()).send_batch([OutgoingMessage("/x", "a"), OutgoingMessage("/x", "b")])
    assert [(r.ok, r.code, r.error) for r in results] == [(False, "ConnectionError", "endpoint unreachable")] * 2


def test_client_needs_a_queue():
    with pytest.raises(MessageError, match=r"Client needs a queue_url"):
        Client.from_env({})
