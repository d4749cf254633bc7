"""Client: input rules, batch splitting and Failed-entry handling, against an in-memory SQS held to SQS's rules."""

import time
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.fake_dynamodb import FakeDynamoDB
from tests.fakes import FakeSQS
from tests.strict_sqs import StrictSQS
from worker_tier import Client, MessageError, OutgoingMessage, SendError
from worker_tier.client import DEDUPE_MARKER_LEASE_SECONDS, DEDUPE_RETENTION_SECONDS, MAX_ENTRY_ATTEMPTS
from worker_tier.delay import DelayedMessage, new_message_id
from worker_tier.limits import SQS_MAX_MESSAGE_BYTES
from worker_tier.message import DUE_AT_ATTRIBUTE

QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
FIFO_QUEUE = QUEUE + ".fifo"
NOW = 1_800_000_000.0


def client(sqs=None, queue=QUEUE) -> Client:
    return Client(queue, sqs=sqs or StrictSQS(FakeSQS()), clock=lambda: NOW, sleep=lambda s: None)


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def delay_table() -> FakeDynamoDB:
    fake = FakeDynamoDB()
    fake.create_table("delay", "pk", "sk")
    return fake


def table_client(sqs, dynamodb, clock=None, queue=QUEUE) -> Client:
    return Client(queue, "delay", sqs=sqs, dynamodb=dynamodb, clock=clock or Clock(), sleep=lambda s: None)


def stored(dynamodb) -> list[dict]:
    """Delayed messages in the table (markers left out)."""
    return [v for k, v in dynamodb.tables["delay"].items() if not k[0].startswith("dedupe#")]


def test_send_puts_the_path_in_the_sqsd_attribute():
    sqs = StrictSQS(FakeSQS())
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
    sqs = StrictSQS(FakeSQS())
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
    sqs = StrictSQS(FakeSQS())
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
        ({"attributes": {"empty": ""}}, "message 0 for '/x': attribute 'empty' of type String needs a non-empty StringValue (and no BinaryValue), got {'DataType': 'String', 'StringValue': ''}"),
        ({"attributes": {"flag": True}}, "message 0 for '/x': attribute 'flag' is a bool"),
        ({"attributes": {f"a{i}": "v" for i in range(10)}}, "message 0 for '/x': 10 attributes given; SQS allows 10 per message and Worker Tier uses one for the path, so at most 9"),
        ({"group_id": "g"}, "message 0 for '/x': group_id applies to FIFO queues (a queue URL ending in .fifo)"),
    ],
)
def test_bad_input_is_refused_naming_value_and_rule(kwargs, message):
    sqs = StrictSQS(FakeSQS())
    with pytest.raises(MessageError) as error:
        client(sqs).send("/x", "b", **kwargs)
    assert str(error.value).startswith(message)
    assert sqs.calls == []


def test_oversized_body_is_refused_before_sending():
    sqs = StrictSQS(FakeSQS())
    with pytest.raises(MessageError) as error:
        client(sqs).send("/x", "a" * SQS_MAX_MESSAGE_BYTES)
    assert str(error.value) == (
        f"message 0 for '/x': message is {SQS_MAX_MESSAGE_BYTES + len('beanstalk.sqsd.path') + len('String') + 2} "
        f"bytes with its attributes; the queue allows at most {SQS_MAX_MESSAGE_BYTES} (MaximumMessageSize)"
    )
    assert sqs.calls == []


@pytest.mark.parametrize(
    "body, message",
    [
        ("", "body must not be empty (SQS requires at least one character)"),
        ("a\x00", "body has character '\\x00' (U+0000) at offset 1, which SQS does not allow (allowed: tab, newline, carriage return, U+0020-U+D7FF, U+E000-U+FFFD, U+10000-U+10FFFF)"),
    ],
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
    sqs = StrictSQS(FakeSQS())
    client(sqs, queue=QUEUE + ".fifo").send("/x", "b", group_id="g", dedupe_key="d")
    assert (sqs.sent[0]["MessageGroupId"], sqs.sent[0]["MessageDeduplicationId"]) == ("g", "d")


def test_send_batch_splits_into_tens_and_keeps_order():
    sqs = StrictSQS(FakeSQS())
    results = client(sqs).send_batch([OutgoingMessage("/x", str(i)) for i in range(23)])
    assert [len(params["Entries"]) for _, params in sqs.calls] == [10, 10, 3]
    assert [r.index for r in results] == list(range(23))
    assert all(r.ok for r in results)


def test_send_batch_splits_by_total_size():
    sqs = StrictSQS(FakeSQS())
    body = "a" * (400 * 1024)
    client(sqs).send_batch([OutgoingMessage("/x", body) for _ in range(5)])
    assert [len(params["Entries"]) for _, params in sqs.calls] == [2, 2, 1]


def test_throttled_entries_are_retried_until_accepted():
    # GIVEN SQS fails entry 3 with a server-side throttle on the first two calls
    sqs = StrictSQS(FakeSQS(fail=lambda call, entry: ("ThrottlingException", False) if entry["Id"] == "3" and call <= 2 else None))
    # WHEN a batch is sent
    results = client(sqs).send_batch([OutgoingMessage("/x", str(i)) for i in range(5)])
    # THEN all are accepted; the retries carried only the failed entry
    assert all(r.ok for r in results)
    assert [[e["Id"] for e in params["Entries"]] for _, params in sqs.calls] == [["0", "1", "2", "3", "4"], ["3"], ["3"]]


def test_entries_failing_every_attempt_are_reported_not_dropped():
    sqs = StrictSQS(FakeSQS(fail=lambda call, entry: ("InternalError", False) if entry["Id"] == "1" else None))
    results = client(sqs).send_batch([OutgoingMessage("/x", str(i)) for i in range(3)])
    assert [r.ok for r in results] == [True, False, True]
    assert (results[1].code, results[1].error) == ("InternalError", "InternalError (fake)")
    assert sqs.count("SendMessageBatch") == MAX_ENTRY_ATTEMPTS


def test_sender_fault_entries_are_reported_without_retry():
    sqs = StrictSQS(FakeSQS(fail=lambda call, entry: ("InvalidParameterValue", True) if entry["Id"] == "0" else None))
    results = client(sqs).send_batch([OutgoingMessage("/x", "a"), OutgoingMessage("/x", "b")])
    assert [r.ok for r in results] == [False, True]
    assert sqs.count("SendMessageBatch") == 1


def test_send_raises_with_the_reason_when_sqs_refuses():
    sqs = StrictSQS(FakeSQS(fail=lambda call, entry: ("InvalidParameterValue", True)))
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


# -- item 1: attributes are checked as SQS checks them, direct or delayed ---------------------

ATTRIBUTES_SQS_REFUSES = [
    ({"note": "a\x00b"}, "attribute 'note' value has character '\\x00' (U+0000) at offset 1, which SQS does not allow"),
    ({"tenant\n": "acme"}, "attribute name 'tenant\\n' is not allowed: SQS takes 1 to 256 of A-Z a-z 0-9 _ - ."),
    ({"n": 10**127}, "attribute 'n' has Number value '1000000000"),
    ({"n": 1e-130}, "attribute 'n' has Number value '0.00000000"),
    ({"n": 12345678901234567890123456789012345678901}, "attribute 'n' has Number value '12345678901234567890123456789012345678901'; SQS Numbers"),
    ({"blob": b""}, "attribute 'blob' of type Binary needs non-empty bytes in BinaryValue (and no StringValue), got {'DataType': 'Binary', 'BinaryValue': b''}"),
]


@pytest.mark.parametrize("delay", [0, 3600], ids=["direct", "delayed"])
@pytest.mark.parametrize("attributes, rule", ATTRIBUTES_SQS_REFUSES, ids=["NUL", "name-newline", "huge", "tiny", "41-digits", "empty-binary"])
def test_attributes_sqs_refuses_are_refused_at_send_direct_or_delayed(delay, attributes, rule):
    # GIVEN a Client with a delay table, in front of a strict SQS
    sqs, dynamodb = StrictSQS(FakeSQS()), delay_table()
    # WHEN a message with an attribute SQS refuses is sent now or in an hour
    with pytest.raises(MessageError) as error:
        table_client(sqs, dynamodb).send("/x", "b", delay=delay, attributes=attributes)
    # THEN it is refused at send, naming the message, the attribute, the value and the rule, and nothing is sent or stored
    assert str(error.value).startswith(f"message 0 for '/x': {rule}")
    assert sqs.calls == [] and stored(dynamodb) == []


def test_the_path_is_held_to_the_string_rules_too():
    # GIVEN a path with a character SQS refuses in a String value
    sqs = StrictSQS(FakeSQS())
    # WHEN it is sent
    with pytest.raises(MessageError) as error:
        client(sqs).send("/x\x01", "b")
    # THEN the path's attribute is named
    assert str(error.value).startswith("message 0 for '/x\\x01': attribute 'beanstalk.sqsd.path' value has character '\\x01'")


def test_numbers_go_to_sqs_as_plain_decimals():
    # GIVEN numbers Python would print with an exponent
    sqs = StrictSQS(FakeSQS())
    # WHEN they are sent
    client(sqs).send("/x", "b", attributes={"small": 1e-05, "big": 1e20, "int": -7})
    # THEN SQS gets plain decimals it accepts
    values = {n: v["StringValue"] for n, v in sqs.sent[0]["MessageAttributes"].items() if n != "beanstalk.sqsd.path"}
    assert values == {"small": "0.00001", "big": "100000000000000000000", "int": "-7"}
    assert sqs.refused == []


class SizedSQS(FakeSQS):
    """FakeSQS that answers GetQueueAttributes with a MaximumMessageSize, or fails it."""

    def __init__(self, maximum: int | None) -> None:
        super().__init__()
        self.maximum = maximum

    def get_queue_attributes(self, QueueUrl, AttributeNames):  # noqa: N803
        self.calls.append(("GetQueueAttributes", {"QueueUrl": QueueUrl, "AttributeNames": AttributeNames}))
        if self.maximum is None:
            raise ConnectionError("endpoint unreachable")
        return {"Attributes": {"MaximumMessageSize": str(self.maximum)}}


DUE_AT_BYTES = len("worker_tier.due_at") + len("String") + len("2027-01-15T09:00:00.000Z")
PATH_BYTES = len("beanstalk.sqsd.path") + len("String") + len("/x")


def test_a_delayed_message_must_fit_the_queues_maximum_with_its_due_at():
    # GIVEN a queue of 2 KiB, learnt with one GetQueueAttributes call
    sqs, dynamodb = SizedSQS(2048), delay_table()
    c = table_client(StrictSQS(sqs, maximum_message_size=2048), dynamodb)
    fits = 2048 - PATH_BYTES - DUE_AT_BYTES
    # WHEN one delayed body fits exactly with the path and worker_tier.due_at, and one is a byte longer
    c.send("/x", "a" * fits, delay=3600)
    with pytest.raises(MessageError) as error:
        c.send("/x", "a" * (fits + 1), delay=3600)
    # THEN the first is stored, the second refused at send, and the queue was asked once
    assert str(error.value) == (
        "message 0 for '/x': message is 2049 bytes with its attributes with worker_tier.due_at (added at dispatch); "
        "the queue allows at most 2048 (MaximumMessageSize)"
    )
    assert len(stored(dynamodb)) == 1
    assert sqs.count("GetQueueAttributes") == 1


def test_a_failed_read_of_the_maximum_falls_back_to_one_mib_and_does_not_block(caplog):
    # GIVEN a queue whose attributes cannot be read
    sqs, dynamodb = SizedSQS(None), delay_table()
    c = table_client(sqs, dynamodb)
    # WHEN two delayed messages are sent
    c.send("/x", "a", delay=3600)
    c.send("/x", "a" * 300_000, delay=3600)
    # THEN both are stored (against SQS's 1 MiB), the failure was logged once and not retried per send
    assert len(stored(dynamodb)) == 2
    assert sqs.count("GetQueueAttributes") == 1
    assert "could not read MaximumMessageSize of https://sqs.us-east-1.amazonaws.com/123456789012/work (ConnectionError" in caplog.text


def test_a_given_maximum_message_size_is_used_without_asking_the_queue():
    # GIVEN a Client told its queue takes 1 KiB
    sqs = SizedSQS(4096)
    c = Client(QUEUE, sqs=StrictSQS(sqs, maximum_message_size=1024), clock=Clock(), maximum_message_size=1024)
    # WHEN a 1,100-byte message is sent straight to SQS
    with pytest.raises(MessageError) as error:
        c.send("/x", "a" * 1100)
    # THEN it is refused at send with the given size, and the queue was never asked
    assert str(error.value).endswith("the queue allows at most 1024 (MaximumMessageSize)")
    assert sqs.calls == []


def test_maximum_message_size_out_of_range_is_refused():
    with pytest.raises(MessageError) as error:
        Client(QUEUE, maximum_message_size=10)
    assert str(error.value) == "maximum_message_size must be 1024..1048576 bytes (SQS MaximumMessageSize), got 10"


# -- item 9: FIFO messages without a dedupe_key are never deduplicated ---------------------------


def test_fifo_messages_without_dedupe_key_get_distinct_deduplication_ids():
    # GIVEN a FIFO queue without content-based deduplication, as the stack makes it
    sqs = StrictSQS(FakeSQS())
    # WHEN two tasks get the same body in the same group
    c = client(sqs, queue=FIFO_QUEUE)
    c.send("/resize", '{"key": "cat.jpg"}', group_id="g")
    c.send("/thumbnail", '{"key": "cat.jpg"}', group_id="g")
    # THEN SQS took both, each with its own MessageDeduplicationId
    ids = [entry["MessageDeduplicationId"] for entry in sqs.sent]
    assert len(ids) == 2 and ids[0] != ids[1]
    assert sqs.refused == []


def test_a_retried_fifo_entry_keeps_its_deduplication_id():
    # GIVEN SQS throttles the first attempt
    sqs = StrictSQS(FakeSQS(fail=lambda call, entry: ("ThrottlingException", False) if call == 1 else None))
    # WHEN a FIFO message without a dedupe_key is sent
    client(sqs, queue=FIFO_QUEUE).send("/x", "b", group_id="g")
    # THEN the retry carries the same MessageDeduplicationId, so SQS can dedupe the Client's own retry
    [first], [second] = (params["Entries"] for _, params in sqs.calls)
    assert first["MessageDeduplicationId"] == second["MessageDeduplicationId"]


@pytest.mark.parametrize(
    "kwargs, rule",
    [
        ({"group_id": "nightly report"}, "group_id 'nightly report' is not allowed: SQS takes 1 to 128 ASCII letters, digits and punctuation (no spaces)"),
        ({"group_id": "g", "dedupe_key": "é"}, "dedupe_key 'é' is not allowed: SQS takes 1 to 128 ASCII letters, digits and punctuation (no spaces)"),
    ],
)
def test_fifo_ids_sqs_refuses_are_refused_at_send(kwargs, rule):
    sqs = StrictSQS(FakeSQS())
    with pytest.raises(MessageError) as error:
        client(sqs, queue=FIFO_QUEUE).send("/x", "b", **kwargs)
    assert str(error.value) == f"message 0 for '/x': {rule}"
    assert sqs.calls == []


# -- item 20: dedupe_key on a standard queue is one rule, at any delay ----------------------------

DUE = NOW + 3600


@pytest.mark.parametrize("first_send_before_due", [1200, 600, 10], ids=["20-min", "10-min", "10-s"])
def test_a_retried_send_at_with_a_dedupe_key_behaves_the_same_as_the_time_approaches(first_send_before_due):
    # GIVEN a standard queue with a delay table and a clock the test moves
    sqs, dynamodb, clock = StrictSQS(FakeSQS()), delay_table(), Clock()
    c = table_client(sqs, dynamodb, clock)
    at = datetime.fromtimestamp(DUE, tz=timezone.utc)
    # WHEN the same send(at=..., dedupe_key=k) is made at 20 min, 10 min and 10 s before due (from the first one on)
    ids = []
    for before in [b for b in (1200, 600, 10) if b <= first_send_before_due]:
        clock.now = DUE - before
        ids.append(c.send("/report", "b", at=at, dedupe_key="report-2027-01-15"))
    # THEN every send is accepted with the key's one id, and exactly one message exists, in SQS or in the table
    assert set(ids) == {new_message_id("report-2027-01-15")}
    assert len(sqs.sent) + len(stored(dynamodb)) == 1


def test_dedupe_key_on_a_standard_queue_needs_the_delay_table():
    # GIVEN a standard-queue Client without a delay table
    sqs = StrictSQS(FakeSQS())
    # WHEN a message with a dedupe_key is sent now
    with pytest.raises(MessageError) as error:
        client(sqs).send("/x", "b", dedupe_key="k")
    # THEN the error names the key and the setting
    assert str(error.value) == (
        "message 0 for '/x': dedupe_key 'k' on a standard queue needs the delay table, which keeps the key; "
        "pass delay_table (or set WORKER_TIER_DELAY_TABLE)"
    )
    assert sqs.calls == []


def test_a_short_delay_dedupe_key_sends_once_and_marks_the_key_sent():
    # GIVEN a standard queue with a delay table
    sqs, dynamodb = StrictSQS(FakeSQS()), delay_table()
    c = table_client(sqs, dynamodb)
    # WHEN the same key is sent twice in one batch and once more later
    results = c.send_batch([OutgoingMessage("/x", "a", delay=30, dedupe_key="k"), OutgoingMessage("/x", "a", delay=30, dedupe_key="k")])
    again = c.send("/x", "a", dedupe_key="k")
    # THEN one message went to SQS, every send got the key's id, and the marker says sent until 6 h after due
    assert len(sqs.sent) == 1 and sqs.sent[0]["DelaySeconds"] == 30
    assert {r.message_id for r in results} == {again} == {new_message_id("k")}
    marker = dynamodb.tables["delay"][("dedupe#k", "-")]
    assert marker["sent"] == {"BOOL": True}
    assert marker["expiration"] == {"N": str(int(NOW) + 30 + DEDUPE_RETENTION_SECONDS)}


def test_a_failed_send_gives_the_key_back_so_a_retry_sends():
    # GIVEN SQS refuses the first call for the key
    sqs = StrictSQS(FakeSQS(fail=lambda call, entry: ("InternalError", False) if call <= MAX_ENTRY_ATTEMPTS else None))
    dynamodb = delay_table()
    c = table_client(sqs, dynamodb)
    # WHEN the send fails, then is retried at once
    with pytest.raises(SendError):
        c.send("/x", "a", dedupe_key="k")
    message_id = c.send("/x", "a", dedupe_key="k")
    # THEN the retry is sent
    assert len(sqs.sent) == 1 and message_id == new_message_id("k")


def test_a_key_its_sender_left_unsent_is_sent_after_the_lease_not_before():
    # GIVEN a sender whose send failed and who could not give its key back (its marker is left unsent)
    sqs, dynamodb, clock = StrictSQS(FakeSQS()), delay_table(), Clock()
    dynamodb.fault = lambda operation, params: "ConnectionError" if operation == "DeleteItem" else None
    table_client(StrictSQS(FakeSQS(fail=lambda call, entry: ("InternalError", False))), dynamodb, clock).send_batch(
        [OutgoingMessage("/x", "a", dedupe_key="k")]
    )
    dynamodb.fault = lambda operation, params: None
    c = table_client(sqs, dynamodb, clock)
    # WHEN the key is sent again within the lease, then after it
    clock.now += DEDUPE_MARKER_LEASE_SECONDS - 1
    within = c.send("/x", "a", dedupe_key="k")
    clock.now += 2
    after = c.send("/x", "a", dedupe_key="k")
    # THEN the first returns the key's id without sending; the second sends it and marks it sent
    assert within == after == new_message_id("k")
    assert len(sqs.sent) == 1
    assert dynamodb.tables["delay"][("dedupe#k", "-")]["sent"] == {"BOOL": True}


def test_an_expired_key_can_be_used_again():
    # GIVEN a key sent once, long ago
    sqs, dynamodb, clock = StrictSQS(FakeSQS()), delay_table(), Clock()
    c = table_client(sqs, dynamodb, clock)
    c.send("/x", "a", dedupe_key="k")
    # WHEN it is sent again after its marker's expiry but before DynamoDB's TTL removed it
    clock.now += DEDUPE_RETENTION_SECONDS + 1
    c.send("/x", "a", dedupe_key="k")
    # THEN it is sent again
    assert len(sqs.sent) == 2


# -- item 21: reserved attribute names ------------------------------------------------------------


@pytest.mark.parametrize("name", ["worker_tier.due_at", "worker_tier.attempts", "beanstalk.sqsd.task_name", "beanstalk.sqsd.scheduled_time"])
@pytest.mark.parametrize("delay", [0, 3600], ids=["direct", "delayed"])
def test_reserved_attribute_names_are_refused_with_the_rule(name, delay):
    # GIVEN a Client with a delay table
    sqs, dynamodb = StrictSQS(FakeSQS()), delay_table()
    # WHEN a user attribute takes a name Worker Tier or sqsd sets
    with pytest.raises(MessageError) as error:
        table_client(sqs, dynamodb).send("/x", "b", delay=delay, attributes={name: "2020-01-01"})
    # THEN it is refused at send with the rule
    assert str(error.value) == (
        f"message 0 for '/x': attribute name {name!r} is reserved: names starting with 'worker_tier.' or "
        "'beanstalk.sqsd.' are set by Worker Tier and sqsd; rename it"
    )
    assert sqs.calls == [] and stored(dynamodb) == []


# -- internal attributes, for the worker's re-send ------------------------------------------------


@pytest.mark.parametrize("delay", [0, 3600], ids=["direct", "delayed"])
def test_internal_attributes_travel_with_the_message(delay):
    # GIVEN a Client with a delay table
    sqs, dynamodb = StrictSQS(FakeSQS()), delay_table()
    # WHEN the worker re-sends a message with worker_tier.attempts
    [result] = table_client(sqs, dynamodb).send_batch(
        [OutgoingMessage("/x", "b", delay=delay, attributes={"tenant": "acme"})], _internal_attributes={0: {"worker_tier.attempts": "4"}}
    )
    # THEN the attribute is on the message SQS got, or on the stored one
    assert result.ok
    attributes = sqs.sent[0]["MessageAttributes"] if delay == 0 else stored(dynamodb)[0]["attributes"]["S"]
    assert "worker_tier.attempts" in attributes and ('"4"' in attributes or attributes["worker_tier.attempts"]["StringValue"] == "4")


def test_a_periodic_tasks_copy_keeps_its_sqsd_attributes():
    # GIVEN the worker re-sending a periodic task's message (its task name and tick are sqsd's attributes)
    sqs = StrictSQS(FakeSQS())
    internal = {"beanstalk.sqsd.task_name": "backup", "beanstalk.sqsd.scheduled_time": "2026-11-22 18:00:00 UTC"}
    # WHEN it goes out with them as internal attributes
    [result] = client(sqs).send_batch([OutgoingMessage("/backup", "b")], _internal_attributes={0: internal})
    # THEN SQS gets them as they were
    assert result.ok
    assert {n: v["StringValue"] for n, v in sqs.sent[0]["MessageAttributes"].items() if n in internal} == internal


@pytest.mark.parametrize(
    "internal, rule",
    [
        ({0: {"tenant": "x"}}, "_internal_attributes: name 'tenant' must start with 'worker_tier.' or 'beanstalk.sqsd.' and not be 'worker_tier.due_at' (set by the delay scheduler) or 'beanstalk.sqsd.path' (set from the path)"),
        ({0: {"worker_tier.due_at": "x"}}, "_internal_attributes: name 'worker_tier.due_at' must start with 'worker_tier.' or 'beanstalk.sqsd.' and not be 'worker_tier.due_at' (set by the delay scheduler) or 'beanstalk.sqsd.path' (set from the path)"),
        ({0: {"beanstalk.sqsd.path": "/y"}}, "_internal_attributes: name 'beanstalk.sqsd.path' must start with 'worker_tier.' or 'beanstalk.sqsd.' and not be 'worker_tier.due_at' (set by the delay scheduler) or 'beanstalk.sqsd.path' (set from the path)"),
        ({0: {"worker_tier.attempts": 4}}, "_internal_attributes: 'worker_tier.attempts' must be a string, got int"),
        ({1: {"worker_tier.attempts": "4"}}, "_internal_attributes: index 1 is not a message of this batch (0..0)"),
        ({0: {"worker_tier.attempts": "4\x00"}}, "message 0 for '/x': attribute 'worker_tier.attempts' value has character '\\x00'"),
    ],
)
def test_internal_attributes_obey_their_rule_and_sqs_rules(internal, rule):
    sqs = StrictSQS(FakeSQS())
    with pytest.raises(MessageError) as error:
        client(sqs).send_batch([OutgoingMessage("/x", "b")], _internal_attributes=internal)
    assert str(error.value).startswith(rule)
    assert sqs.calls == []


# -- what the Client accepts, SQS accepts: now and at dispatch --------------------------------------

_NASTY_TEXT = st.text(alphabet=st.one_of(st.characters(), st.sampled_from("\x00\x01\x0b\ud800\udfff\ufffe\uffff\U0010ffff\t\n\r")), max_size=12)
_PLAUSIBLE_TEXT = st.text(
    alphabet=st.one_of(st.characters(exclude_categories=("Cc", "Cs")), st.sampled_from("\t\n\r")), min_size=1, max_size=12
)
_NAMES = st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,10}", fullmatch=True)
_NASTY_NAMES = st.one_of(
    st.text(alphabet=st.sampled_from("abcXYZ019_-. \n\t\x00é☃"), max_size=12),
    st.sampled_from(["AWS.x", "amazon.y", "worker_tier.due_at", "beanstalk.sqsd.path", "a" * 256, "a" * 257, "tenant\n"]),
)
_VALUES = st.one_of(
    _PLAUSIBLE_TEXT,
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(min_value=-1e100, max_value=1e100).filter(lambda f: f == 0 or abs(f) > 1e-100),
    st.binary(min_size=1, max_size=8),
)
_NASTY_VALUES = st.one_of(
    _NASTY_TEXT,
    st.integers(min_value=-(10**130), max_value=10**130),
    st.floats(),
    st.floats(min_value=-1e-120, max_value=1e-120),
    st.binary(max_size=2),
    st.booleans(),
)
# Mostly plausible attributes, sometimes with one hostile name or value among them.
_ATTRIBUTES = st.tuples(
    st.dictionaries(_NAMES, _VALUES, max_size=7),
    st.one_of(st.none(), st.tuples(st.one_of(_NAMES, _NASTY_NAMES), st.one_of(_VALUES, _NASTY_VALUES))),
).map(lambda pair: {**pair[0], **({pair[1][0]: pair[1][1]} if pair[1] else {})})


def _dispatch_entry(item: dict) -> dict:
    """The SendMessageBatch entry the scheduler builds: the stored attributes plus worker_tier.due_at."""
    delayed = DelayedMessage.from_item(item)
    seconds, millis = divmod(delayed.due_ms, 1000)
    due = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
    attributes = {**delayed.attributes, DUE_AT_ATTRIBUTE: {"DataType": "String", "StringValue": due}}
    return {"Id": "0", "MessageBody": delayed.body, "MessageAttributes": attributes, "DelaySeconds": 900}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.one_of(st.just("b"), _PLAUSIBLE_TEXT, _NASTY_TEXT),
    attributes=_ATTRIBUTES,
    delay=st.sampled_from([0, 30, 3600]),
    dedupe_key=st.one_of(st.none(), st.from_regex(r"[a-z0-9!~-]{1,6}", fullmatch=True), st.text(alphabet=st.sampled_from("ab1-!~ é"), max_size=4)),
)
def test_what_the_client_accepts_sqs_accepts_now_and_at_dispatch(body, attributes, delay, dedupe_key):
    # GIVEN a Client with a delay table, in front of a strict SQS
    sqs, dynamodb = StrictSQS(FakeSQS()), delay_table()
    # WHEN a message with arbitrary attributes is sent now, soon, or through the delay table
    try:
        [result] = table_client(sqs, dynamodb).send_batch([OutgoingMessage("/x", body, delay=delay, attributes=attributes, dedupe_key=dedupe_key)])
    except MessageError:
        event(f"refused, delay {delay}")
        assert sqs.calls == [] and stored(dynamodb) == []
        return
    event(f"accepted, delay {delay}")
    # THEN SQS took it, and a stored one is taken by SQS at dispatch too
    assert result.ok and sqs.refused == []
    for item in stored(dynamodb):
        dispatch = StrictSQS(FakeSQS())
        assert dispatch.send_message_batch(QueueUrl=QUEUE, Entries=[_dispatch_entry(item)])["Failed"] == []


def test_a_key_that_cannot_be_marked_sent_still_reports_the_send(caplog):
    # GIVEN a delay table that fails the write marking a key sent
    sqs, dynamodb = StrictSQS(FakeSQS()), delay_table()
    dynamodb.fault = lambda operation, params: "ProvisionedThroughputExceededException" if operation == "PutItem" and params["Item"]["sent"]["BOOL"] else None
    # WHEN a message with a dedupe_key is sent
    message_id = table_client(sqs, dynamodb).send("/x", "a", dedupe_key="k")
    # THEN SQS's acceptance is reported, and the failure is logged (the marker stays unsent: a later retry may duplicate, never lose)
    assert message_id == new_message_id("k") and len(sqs.sent) == 1
    assert "dedupe_key 'k': could not settle its marker (ProvisionedThroughputExceededException" in caplog.text
    assert dynamodb.tables["delay"][("dedupe#k", "-")]["sent"] == {"BOOL": False}
