"""Client: input rules, batch splitting and Failed-entry handling, against an in-memory SQS held to SQS's rules."""

import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.fake_dynamodb import FakeDynamoDB
from tests.support.strict_dynamodb import StrictDynamoDB
from tests.support.fakes import FakeSQS
from tests.support.strict_sqs import StrictSQS
from worker_tier.core import contract
from worker_tier import Client, MessageError, OutgoingMessage, SendError
from worker_tier.producer.client import MESSAGE_ERROR_CODE
from worker_tier.delays.dedupe import DEDUPE_MARKER_LEASE_SECONDS, DEDUPE_RETENTION_SECONDS, DEDUPE_SEND_WINDOW_SECONDS
from worker_tier.delays.delay import DelayedMessage, new_message_id
from worker_tier.core.limits import SQS_MAX_MESSAGE_BYTES
from worker_tier.core.message import copy_attributes
from worker_tier.core.contract import DUE_AT_ATTRIBUTE
from worker_tier.core.retry import SEND_ENTRIES

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
    fake = StrictDynamoDB(FakeDynamoDB())
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
        ({"at": datetime(2030, 1, 1)}, "at must be a timezone-aware datetime (for example datetime.now(timezone.utc)), got datetime.datetime(2030, 1, 1, 0, 0)"),
        ({"delay": -1}, "delay must be a non-negative number of seconds or a timedelta, got -1"),
        ({"delay": 901}, ("a delay of 901 s is over SQS's 900 s maximum and needs the delay table; "
                          f"pass delay_table (or set {contract.DELAY_TABLE_VARIABLE})")),
        ({"delay": 5, "at": datetime.now(timezone.utc)}, "give delay or at, not both"),
        ({"attributes": {"AWS.trace": "x"}}, "attribute name 'AWS.trace' is not allowed"),
        ({"attributes": {"beanstalk.sqsd.path": "/y"}}, "attribute 'beanstalk.sqsd.path' is set from the path argument; do not pass it"),
        ({"attributes": {"empty": ""}}, "attribute 'empty' of type String needs a non-empty StringValue (and no BinaryValue), got {'DataType': 'String', 'StringValue': ''}"),
        ({"attributes": {"flag": True}}, "attribute 'flag' is a bool"),
        ({"attributes": {f"a{i}": "v" for i in range(10)}}, "10 attributes given; SQS allows 10 per message and Worker Tier uses one for the path, so at most 9"),
        ({"group_id": "g"}, "group_id applies to FIFO queues (a queue URL ending in .fifo)"),
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
        f"message is {SQS_MAX_MESSAGE_BYTES + len('beanstalk.sqsd.path') + len('String') + 2} "
        f"bytes with its attributes; the queue allows at most {SQS_MAX_MESSAGE_BYTES} (MaximumMessageSize): set WORKER_TIER_PAYLOAD_BUCKET (or pass payload_bucket=) to send larger bodies through S3, or send a smaller body"
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
    assert str(error.value) == f"{message}"


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
    assert sqs.count("SendMessageBatch") == SEND_ENTRIES.attempts


def test_entry_retries_wait_the_send_budget_and_stay_well_within_a_lambda():
    # GIVEN SQS fails one entry on its side at every attempt, and a sleep that records its waits
    sqs = StrictSQS(FakeSQS(fail=lambda call, entry: ("InternalError", False)))
    waits: list[float] = []
    c = Client(QUEUE, sqs=sqs, clock=lambda: NOW, sleep=waits.append)
    # WHEN it is sent
    [result] = c.send_batch([OutgoingMessage("/x", "a")])
    # THEN it is reported failed after the budget's attempts, waiting exactly the budget's pauses between them
    assert not result.ok and sqs.count("SendMessageBatch") == SEND_ENTRIES.attempts
    assert waits == [SEND_ENTRIES.pause(n) for n in range(SEND_ENTRIES.attempts - 1)]
    # AND those waits add up to a few seconds at most
    assert sum(waits) == SEND_ENTRIES.total_seconds() <= 2


def test_sender_fault_entries_are_reported_without_retry():
    sqs = StrictSQS(FakeSQS(fail=lambda call, entry: ("InvalidParameterValue", True) if entry["Id"] == "0" else None))
    results = client(sqs).send_batch([OutgoingMessage("/x", "a"), OutgoingMessage("/x", "b")])
    assert [r.ok for r in results] == [False, True]
    assert sqs.count("SendMessageBatch") == 1


def test_send_raises_with_the_reason_when_sqs_refuses():
    sqs = StrictSQS(FakeSQS(fail=lambda call, entry: ("InvalidParameterValue", True)))
    with pytest.raises(SendError, match=r"^the message for /x was not sent \(InvalidParameterValue\): InvalidParameterValue \(fake\)$"):
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


# -- attributes are checked as SQS checks them, direct or delayed ---------------------

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
    # THEN it is refused at send, naming the attribute, the value and the rule, and nothing is sent or stored
    assert str(error.value).startswith(f"{rule}")
    assert sqs.calls == [] and stored(dynamodb) == []


def test_the_path_is_held_to_the_string_rules_too():
    # GIVEN a path with a character SQS refuses in a String value
    sqs = StrictSQS(FakeSQS())
    # WHEN it is sent
    with pytest.raises(MessageError) as error:
        client(sqs).send("/x\x01", "b")
    # THEN the path's attribute is named
    assert str(error.value).startswith("attribute 'beanstalk.sqsd.path' value has character '\\x01'")


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

    def get_queue_attributes(self, QueueUrl, AttributeNames):
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
        "message is 2049 bytes with its attributes with worker_tier.due_at (added at dispatch); "
        "the queue allows at most 2048 (MaximumMessageSize): set WORKER_TIER_PAYLOAD_BUCKET (or pass payload_bucket=) to send larger bodies through S3, or send a smaller body"
    )
    assert len(stored(dynamodb)) == 1
    assert sqs.count("GetQueueAttributes") == 1


class FlakySizedSQS(SizedSQS):
    """SizedSQS whose first ``failures`` GetQueueAttributes calls are throttled."""

    def __init__(self, maximum: int, failures: int) -> None:
        super().__init__(maximum)
        self.failures = failures

    def get_queue_attributes(self, QueueUrl, AttributeNames):
        if self.failures:
            self.failures -= 1
            self.calls.append(("GetQueueAttributes", {"QueueUrl": QueueUrl}))
            raise ClientError({"Error": {"Code": "RequestThrottled", "Message": "throttled"}}, "GetQueueAttributes")
        return super().get_queue_attributes(QueueUrl, AttributeNames)


def test_a_failed_read_of_the_maximum_is_not_kept(caplog):
    # GIVEN a 256 KiB queue whose first GetQueueAttributes call is throttled
    sqs, dynamodb = FlakySizedSQS(256 * 1024, failures=1), delay_table()
    c = table_client(sqs, dynamodb)
    # WHEN a 1 KB delayed message is sent, then a 300 KB one
    c.send("/x", "a" * 1000, delay=3600)
    with pytest.raises(MessageError) as error:
        c.send("/x", "a" * 300_000, delay=3600)
    # THEN the small one is stored while the maximum is unknown; the large one is checked against the queue's real
    # maximum, read again, and refused at send rather than stored and refused by SQS at dispatch
    assert str(error.value) == (
        "message is 300075 bytes with its attributes with worker_tier.due_at (added at dispatch); "
        "the queue allows at most 262144 (MaximumMessageSize): set WORKER_TIER_PAYLOAD_BUCKET (or pass payload_bucket=) to send larger bodies through S3, or send a smaller body"
    )
    assert [len(item["body"]["S"]) for item in stored(dynamodb)] == [1000]
    assert sqs.count("GetQueueAttributes") == 2
    assert "could not read MaximumMessageSize of https://sqs.us-east-1.amazonaws.com/123456789012/work (RequestThrottled" in caplog.text


def test_while_the_maximum_is_unknown_a_delayed_message_over_256_kib_gets_a_retryable_error():
    # GIVEN a queue whose attributes cannot be read
    sqs, dynamodb = SizedSQS(None), delay_table()
    c = table_client(sqs, dynamodb)
    # WHEN a delayed message just under 256 KiB with its attributes and one just over are sent in one batch
    under = 256 * 1024 - PATH_BYTES - DUE_AT_BYTES
    results = c.send_batch([OutgoingMessage("/x", "a" * under, delay=3600), OutgoingMessage("/x", "a" * (under + 1), delay=3600)])
    # THEN the first is stored; the second is not, with a retryable code naming the failed read; the queue was asked once
    assert results[0].ok
    assert (results[1].ok, results[1].code) == (False, "QueueLimitUnknown")
    assert results[1].error == (
        "could not read the queue's MaximumMessageSize (ConnectionError: endpoint unreachable); this delayed message is "
        "262145 bytes with worker_tier.due_at, over the 262144 bytes any queue takes, so it was not stored: retry"
    )
    assert [len(item["body"]["S"]) for item in stored(dynamodb)] == [under]
    assert sqs.count("GetQueueAttributes") == 1


def test_a_given_maximum_message_size_is_used_without_asking_the_queue():
    # GIVEN a Client told its queue takes 1 KiB
    sqs = SizedSQS(4096)
    c = Client(QUEUE, sqs=StrictSQS(sqs, maximum_message_size=1024), clock=Clock(), maximum_message_size=1024)
    # WHEN a 1,100-byte message is sent straight to SQS
    with pytest.raises(MessageError) as error:
        c.send("/x", "a" * 1100)
    # THEN it is refused at send with the given size, and the queue was never asked
    assert str(error.value).endswith("the queue allows at most 1024 (MaximumMessageSize): set WORKER_TIER_PAYLOAD_BUCKET (or pass payload_bucket=) to send larger bodies through S3, or send a smaller body")
    assert sqs.calls == []


def test_maximum_message_size_out_of_range_is_refused():
    with pytest.raises(MessageError) as error:
        Client(QUEUE, maximum_message_size=10)
    assert str(error.value) == "maximum_message_size must be 1024..1048576 bytes (SQS MaximumMessageSize), got 10"


# -- FIFO messages without a dedupe_key are never deduplicated ---------------------------


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
    assert str(error.value) == f"{rule}"
    assert sqs.calls == []


# -- dedupe_key on a standard queue is one rule, at any delay ----------------------------

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
        "dedupe_key 'k' on a standard queue needs the delay table, which keeps the key; "
        f"pass delay_table (or set {contract.DELAY_TABLE_VARIABLE})"
    )
    assert sqs.calls == []


def test_a_short_delay_dedupe_key_sends_once_and_marks_the_key_sent():
    # GIVEN a standard queue with a delay table
    sqs, dynamodb = StrictSQS(FakeSQS()), delay_table()
    c = table_client(sqs, dynamodb)
    # WHEN a key is sent with a 30 s delay, then sent again
    first = c.send("/x", "a", delay=30, dedupe_key="k")
    again = c.send("/x", "a", dedupe_key="k")
    # THEN one message went to SQS, both sends got the key's id, and the marker says sent until 6 h after due
    assert len(sqs.sent) == 1 and sqs.sent[0]["DelaySeconds"] == 30
    assert first == again == new_message_id("k")
    marker = dynamodb.tables["delay"][("dedupe#k", "-")]
    assert marker["sent"] == {"BOOL": True}
    assert marker["expiration"] == {"N": str(int(NOW) + 30 + DEDUPE_RETENTION_SECONDS)}


@pytest.mark.parametrize("queue, extra", [(QUEUE, {}), (FIFO_QUEUE, {"group_id": "g"})], ids=["standard", "fifo"])
def test_the_same_dedupe_key_twice_in_one_batch_fails_both_naming_them_and_sends_the_rest(queue, extra):
    # GIVEN a Client with a delay table
    sqs, dynamodb = StrictSQS(FakeSQS()), delay_table()
    # WHEN one batch carries the key "k" at indexes 0 and 2 (which of the two is meant is ambiguous)
    batch = [OutgoingMessage("/x", "a", dedupe_key="k", **extra), OutgoingMessage("/x", "b", **extra), OutgoingMessage("/x", "c", dedupe_key="k", **extra)]
    results = table_client(sqs, dynamodb, queue=queue).send_batch(batch)
    # THEN both fail, naming both indexes and the key, before the key is claimed; the other message is sent
    rule = "messages 0, 2 have the same dedupe_key 'k': a batch may carry each key once; send one of them"
    assert [(r.ok, r.code, r.error) for r in results] == [(False, MESSAGE_ERROR_CODE, rule), (True, None, None),
                                                          (False, MESSAGE_ERROR_CODE, rule)]
    assert [e["MessageBody"] for e in sqs.sent] == ["b"] and dynamodb.calls == []


class Killed(BaseException):
    """The producer's process dies (Lambda timeout, OOM, SIGKILL) inside SendMessageBatch."""


class DyingSQS(FakeSQS):
    def send_message_batch(self, **kwargs):
        raise Killed("process killed")


def in_flight_error(c: Client, **kwargs) -> SendError:
    """The SendError of a send that must be told to retry."""
    with pytest.raises(SendError) as error:
        c.send("/x", "a", dedupe_key="k", **kwargs)
    return error.value


def test_a_key_whose_sender_died_before_sending_is_in_flight_until_its_lease_ends():
    # GIVEN a producer killed after taking the key, before SQS got the message
    sqs, dynamodb, clock = StrictSQS(FakeSQS()), delay_table(), Clock()
    with pytest.raises(Killed):
        table_client(DyingSQS(), dynamodb, clock).send("/x", "a", dedupe_key="k")
    c = table_client(sqs, dynamodb, clock)
    # WHEN its retry comes 5 s later, and again once the lease is over
    clock.now += 5
    error = in_flight_error(c)
    clock.now += DEDUPE_MARKER_LEASE_SECONDS - 5 + 1
    message_id = c.send("/x", "a", dedupe_key="k")
    # THEN the first retry is told to retry (never ok: nothing was sent); the second sends the message
    assert error.code == "DedupeKeyInFlight"
    assert str(error) == (
        "the message for /x was not sent (DedupeKeyInFlight): dedupe_key 'k' is held by another send still in flight "
        f"(its lease ends in {DEDUPE_MARKER_LEASE_SECONDS - 5} s at most); nothing was sent: retry later"
    )
    assert message_id == new_message_id("k") and len(sqs.sent) == 1


def test_a_failed_send_gives_the_key_back_so_a_retry_sends():
    # GIVEN SQS refuses the first call for the key
    sqs = StrictSQS(FakeSQS(fail=lambda call, entry: ("InternalError", False) if call <= SEND_ENTRIES.attempts else None))
    dynamodb = delay_table()
    c = table_client(sqs, dynamodb)
    # WHEN the send fails, then is retried at once
    with pytest.raises(SendError):
        c.send("/x", "a", dedupe_key="k")
    message_id = c.send("/x", "a", dedupe_key="k")
    # THEN the retry is sent
    assert len(sqs.sent) == 1 and message_id == new_message_id("k")


def test_a_key_its_sender_left_unsent_is_in_flight_within_the_lease_and_sent_after_it():
    # GIVEN a sender whose send failed and whose give-back of the key was throttled (its marker is left unsent)
    sqs, dynamodb, clock = StrictSQS(FakeSQS()), delay_table(), Clock()
    dynamodb.fault = lambda operation, params: "ProvisionedThroughputExceededException" if operation == "DeleteItem" else None
    [failed] = table_client(StrictSQS(FakeSQS(fail=lambda call, entry: ("InternalError", False))), dynamodb, clock).send_batch(
        [OutgoingMessage("/x", "a", dedupe_key="k")]
    )
    dynamodb.fault = lambda operation, params: None
    c = table_client(sqs, dynamodb, clock)
    # WHEN the key is sent again 1 s later, at the lease's last second, then after it
    clock.now += 1
    soon = in_flight_error(c)
    clock.now += DEDUPE_MARKER_LEASE_SECONDS - 2
    last = in_flight_error(c)
    clock.now += 2
    after = c.send("/x", "a", dedupe_key="k")
    # THEN the sends within the lease are told to retry; the one after it sends the message and marks the key sent
    assert failed.code == "InternalError" and soon.code == last.code == "DedupeKeyInFlight"
    assert after == new_message_id("k") and len(sqs.sent) == 1
    assert dynamodb.tables["delay"][("dedupe#k", "-")]["sent"] == {"BOOL": True}


def test_a_send_while_another_holds_the_key_is_told_to_retry_and_its_retry_sends():
    # GIVEN producer A inside its SendMessageBatch call for key k, which then fails
    dynamodb, clock, sqs = delay_table(), Clock(), StrictSQS(FakeSQS())
    b = table_client(sqs, dynamodb, clock)
    during: list[SendError] = []

    class FailingAfterB(FakeSQS):
        def send_message_batch(self, **kwargs):
            during.append(in_flight_error(b))  # B sends the same key meanwhile
            raise ConnectionError("A's connection reset")

    # WHEN A's send fails, and B retries after A gave the key back
    with pytest.raises(SendError) as a_error:
        table_client(FailingAfterB(), dynamodb, clock).send("/x", "a", dedupe_key="k")
    retried = b.send("/x", "a", dedupe_key="k")
    # THEN B was told to retry rather than ok, A got its error, and B's retry is the one message
    assert [e.code for e in during] == ["DedupeKeyInFlight"] and a_error.value.code == "ConnectionError"
    assert retried == new_message_id("k") and len(sqs.sent) == 1


# -- one key, one message: the lease covers clock skew and a slow send ---------------------------------


def test_producers_at_the_edges_of_the_skew_tolerance_send_one_message():
    # GIVEN producer A 30 s slow and producer B 30 s fast (the documented tolerance), sharing the delay table
    real = [NOW]
    dynamodb, delivered = delay_table(), FakeSQS()
    b = table_client(StrictSQS(delivered), dynamodb, clock=lambda: real[0] + 30)
    during: list[SendError] = []

    class BSendsMeanwhile(FakeSQS):
        def send_message_batch(self, QueueUrl, Entries):
            real[0] += 0.002  # B sends the key 2 ms after A took it
            during.append(in_flight_error(b))
            return delivered.send_message_batch(QueueUrl=QueueUrl, Entries=Entries)

    a = table_client(StrictSQS(BSendsMeanwhile()), dynamodb, clock=lambda: real[0] - 30)
    # WHEN A sends the key
    a_id = a.send("/x", "a", dedupe_key="k")
    # THEN B was told to retry, and SQS holds one message
    assert [e.code for e in during] == ["DedupeKeyInFlight"]
    assert a_id == new_message_id("k") and len(delivered.sent) == 1


def test_a_send_slower_than_a_minute_still_holds_its_key():
    # GIVEN producer A whose SendMessageBatch call takes 61 s, and producer B with the same clock
    dynamodb, clock, delivered = delay_table(), Clock(), FakeSQS()
    b = table_client(StrictSQS(delivered), dynamodb, clock)
    during: list[SendError] = []

    class Slow(FakeSQS):
        def send_message_batch(self, QueueUrl, Entries):
            clock.now += 61
            during.append(in_flight_error(b))
            return delivered.send_message_batch(QueueUrl=QueueUrl, Entries=Entries)

    # WHEN A sends the key and B sends it during A's call
    table_client(StrictSQS(Slow()), dynamodb, clock).send("/x", "a", dedupe_key="k")
    # THEN B was told to retry, and SQS holds one message
    assert [e.code for e in during] == ["DedupeKeyInFlight"] and len(delivered.sent) == 1


def test_no_call_starts_for_a_claim_past_its_send_window_and_the_key_is_given_back():
    # GIVEN SQS throttles the first attempt, and the backoff ends past the claim's send window
    dynamodb, clock = delay_table(), Clock()

    def throttle_once(call, entry):
        if call == 1:
            clock.now += DEDUPE_SEND_WINDOW_SECONDS
            return ("ThrottlingException", False)
        return None

    sqs = StrictSQS(FakeSQS(fail=throttle_once))
    c = table_client(sqs, dynamodb, clock)
    # WHEN the key is sent, then sent again
    error = in_flight_error(c)
    again = c.send("/x", "a", dedupe_key="k")
    # THEN the Client made no second call for the old claim, failed it retryably and gave the key back; the retry sends
    assert error.code == "DedupeLeaseOver"
    assert str(error) == (
        f"the message for /x was not sent (DedupeLeaseOver): dedupe_key 'k' was claimed {DEDUPE_SEND_WINDOW_SECONDS} s ago, past the "
        f"{DEDUPE_SEND_WINDOW_SECONDS} s in which a send surely ends inside its {DEDUPE_MARKER_LEASE_SECONDS} s lease; "
        "nothing was sent and the key was given back: retry"
    )
    assert sqs.count("SendMessageBatch") == 2 and again == new_message_id("k") and len(sqs.sent) == 1


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


# -- reserved attribute names ------------------------------------------------------------


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
        f"attribute name {name!r} is reserved: names starting with 'worker_tier.' or "
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
        ({0: {"tenant": "x"}}, "_internal_attributes: name 'tenant' must start with 'worker_tier.' or 'beanstalk.sqsd.' (or be 'ExtendedPayloadSize' or 'SQSLargePayloadSize') and not be 'worker_tier.due_at' (set by the delay dispatcher) or 'beanstalk.sqsd.path' (set from the path)"),
        ({0: {"worker_tier.due_at": "x"}}, "_internal_attributes: name 'worker_tier.due_at' must start with 'worker_tier.' or 'beanstalk.sqsd.' (or be 'ExtendedPayloadSize' or 'SQSLargePayloadSize') and not be 'worker_tier.due_at' (set by the delay dispatcher) or 'beanstalk.sqsd.path' (set from the path)"),
        ({0: {"beanstalk.sqsd.path": "/y"}}, "_internal_attributes: name 'beanstalk.sqsd.path' must start with 'worker_tier.' or 'beanstalk.sqsd.' (or be 'ExtendedPayloadSize' or 'SQSLargePayloadSize') and not be 'worker_tier.due_at' (set by the delay dispatcher) or 'beanstalk.sqsd.path' (set from the path)"),
        ({0: {"worker_tier.attempts": 4}}, "_internal_attributes: 'worker_tier.attempts' must be a string, got int"),
        ({1: {"worker_tier.attempts": "4"}}, "_internal_attributes: index 1 is not a message of this batch (0..0)"),
    ],
)
def test_internal_attributes_obey_their_rule(internal, rule):
    sqs = StrictSQS(FakeSQS())
    with pytest.raises(MessageError) as error:
        client(sqs).send_batch([OutgoingMessage("/x", "b")], _internal_attributes=internal)
    assert str(error.value).startswith(rule)
    assert sqs.calls == []


def test_an_internal_attribute_sqs_refuses_fails_its_message():
    # WHEN an internal attribute's value has a character SQS refuses
    sqs = StrictSQS(FakeSQS())
    [result] = client(sqs).send_batch([OutgoingMessage("/x", "b")], _internal_attributes={0: {"worker_tier.attempts": "4\x00"}})
    # THEN its message fails with SQS's rule, unsent
    assert (result.ok, result.code) == (False, MESSAGE_ERROR_CODE)
    assert result.error.startswith("attribute 'worker_tier.attempts' value has character '\\x00'")
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
    st.decimals(min_value=-(10**30), max_value=10**30, places=6),
    st.binary(min_size=1, max_size=8),
)
_NASTY_VALUES = st.one_of(
    _NASTY_TEXT,
    st.integers(min_value=-(10**130), max_value=10**130),
    st.floats(),
    st.floats(min_value=-1e-120, max_value=1e-120),
    st.decimals(),
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
    [result] = table_client(sqs, dynamodb).send_batch([OutgoingMessage("/x", body, delay=delay, attributes=attributes, dedupe_key=dedupe_key)])
    if result.code == MESSAGE_ERROR_CODE:
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


# -- bad input is a MessageError naming the value and the rule, whatever its type ----------------------


class NpFloat64(float):
    """numpy 2's float64: a float subclass whose repr is 'np.float64(1.5)' (numpy is not installed here)."""

    def __repr__(self) -> str:
        return f"np.float64({float.__repr__(self)})"


def nested_list(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "send, message",
    [
        (lambda c: c.send("/x", "b", attributes={"n": 10**5000}), "attribute 'n' has Number value '1000000000"),
        (lambda c: c.send("/x", nested_list(100_000)), "body must be a string or JSON-serializable, got list: maximum recursion depth exceeded"),
        (lambda c: c.send("/x", "b", delay=10**400), "delay must be a non-negative number of seconds or a timedelta, got 1000"),
        (lambda c: c.send("/x", "b", attributes=[("a", "b")]), "attributes must be a mapping of name to value, got list"),
        (lambda c: c.send("/x", "b", attributes={"n": Decimal("NaN")}), "attribute 'n' must be a finite number, got Decimal('NaN')"),
        (lambda c: c.send_batch([{"path": "/x", "body": "b"}]), "send_batch takes OutgoingMessage objects: message 0 is a dict"),
        (lambda c: c.send_batch(OutgoingMessage("/x", "b")), "send_batch takes an iterable of OutgoingMessage, got OutgoingMessage"),
    ],
    ids=["int-10**5000", "nested-body", "delay-10**400", "attribute-pairs", "decimal-nan", "batch-of-dicts", "batch-of-one"],
)
def test_bad_input_of_any_type_is_a_message_error(send, message):
    # GIVEN a Client with a delay table
    sqs, dynamodb = StrictSQS(FakeSQS()), delay_table()
    # WHEN input of a type or size the checks did not expect is sent
    with pytest.raises(MessageError) as error:
        send(table_client(sqs, dynamodb))
    # THEN it is a MessageError naming the value and the rule, and nothing is sent or stored
    assert str(error.value).startswith(message)
    assert sqs.calls == [] and dynamodb.calls == []


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Client.from_env({contract.QUEUE_URL_VARIABLE: QUEUE, contract.DELAY_SHARDS_VARIABLE: "eight"}), f"{contract.DELAY_SHARDS_VARIABLE} must be a whole number 1..16, got 'eight'"),
        (lambda: Client(QUEUE, maximum_message_size="262144"), "maximum_message_size must be 1024..1048576 bytes (SQS MaximumMessageSize), got '262144'"),
        (lambda: Client(QUEUE, delay_shards="8"), "delay_shards must be a whole number 1..16, got '8'"),
        (lambda: Client(QUEUE, delay_shards=True), "delay_shards must be a whole number 1..16, got True"),
        (lambda: Client(5), f"Client needs a queue_url string (or use Client.from_env() with {contract.QUEUE_URL_VARIABLE} set), got 5"),
    ],
    ids=["env-shards-word", "maximum-as-text", "shards-as-text", "shards-bool", "queue-url-int"],
)
def test_bad_client_settings_are_a_message_error(make, message):
    with pytest.raises(MessageError) as error:
        make()
    assert str(error.value) == message


def test_a_float_subclass_goes_to_sqs_as_its_float_value():
    # GIVEN numpy 2's float64, whose repr is not a number
    sqs = StrictSQS(FakeSQS())
    # WHEN it is an attribute value
    client(sqs).send("/x", "b", attributes={"n": NpFloat64(1.5)})
    # THEN SQS gets the float's digits
    assert sqs.sent[0]["MessageAttributes"]["n"] == {"DataType": "Number", "StringValue": "1.5"}


# -- a copy keeps its Number attributes digit for digit ------------------------------------------------


@pytest.mark.parametrize("delay", [0, 20 * 3600], ids=["direct", "delayed"])
def test_a_copy_of_a_record_keeps_its_number_attributes_digit_for_digit(delay):
    # GIVEN a record whose Number attributes have more digits than a float holds
    numbers = {"amount": "12345678901234567.25", "ratio": "0.1000000000000000000001", "big": "99999999999999999999999999999999999999", "price": "1.50"}
    record = {
        "messageId": "m1",
        "body": "b",
        "messageAttributes": {name: {"dataType": "Number", "stringValue": text} for name, text in numbers.items()},
    }
    sqs, dynamodb = StrictSQS(FakeSQS()), delay_table()
    # WHEN the worker's copy (message.copy_attributes) is sent now or through the delay table
    user, internal = copy_attributes(record)
    [result] = table_client(sqs, dynamodb).send_batch([OutgoingMessage("/x", "b", delay=delay, attributes=user)], _internal_attributes={0: internal})
    # THEN the copy carries the same Number text
    attributes = sqs.sent[0]["MessageAttributes"] if delay == 0 else DelayedMessage.from_item(stored(dynamodb)[0]).attributes
    assert result.ok
    assert {name: attributes[name] for name in numbers} == {name: {"DataType": "Number", "StringValue": text} for name, text in numbers.items()}


def test_a_decimal_attribute_is_sent_as_its_digits():
    sqs = StrictSQS(FakeSQS())
    client(sqs).send("/x", "b", attributes={"amount": Decimal("12345678901234567.25"), "rate": Decimal("1E+2")})
    assert {n: v["StringValue"] for n, v in sqs.sent[0]["MessageAttributes"].items() if n != "beanstalk.sqsd.path"} == {
        "amount": "12345678901234567.25",
        "rate": "100",
    }


# -- a message of a batch that fails a check fails alone ----------------------------------------------


def test_a_batch_fails_each_invalid_message_with_its_check_and_sends_the_others():
    # GIVEN a batch of 15 with 12 invalid bodies and a valid message too large for the queue
    sqs, dynamodb = StrictSQS(FakeSQS()), delay_table()
    batch = [OutgoingMessage("/ok", "fine", dedupe_key="k"), OutgoingMessage("/big", "a" * SQS_MAX_MESSAGE_BYTES),
             OutgoingMessage("/ok", "fine")]
    batch += [OutgoingMessage(f"/bad{i}", "a\x00") for i in range(12)]
    # WHEN it is sent
    results = table_client(sqs, dynamodb).send_batch(batch)
    # THEN each invalid one fails with the MessageError code and its check's message, and the two valid ones are sent
    assert [r.ok for r in results] == [True, False, True] + [False] * 12
    assert {r.code for r in results if not r.ok} == {MESSAGE_ERROR_CODE}
    assert results[1].error == (f"message is {SQS_MAX_MESSAGE_BYTES + len('beanstalk.sqsd.path') + len('String') + 4} "
                                f"bytes with its attributes; the queue allows at most {SQS_MAX_MESSAGE_BYTES} (MaximumMessageSize): set WORKER_TIER_PAYLOAD_BUCKET (or pass payload_bucket=) to send larger bodies through S3, or send a smaller body")
    assert results[3].error.startswith("body has character '\\x00' (U+0000) at offset 1")
    assert sorted(e["MessageBody"] for e in sqs.sent) == ["fine", "fine"]


def test_a_batch_that_is_no_list_of_outgoing_messages_raises_for_the_whole_call():
    # WHEN send_batch gets a list with a dict in it  THEN the call raises naming the item, and nothing is sent
    sqs = StrictSQS(FakeSQS())
    with pytest.raises(MessageError) as error:
        client(sqs).send_batch([OutgoingMessage("/x", "b"), {"path": "/x", "body": "b"}])
    assert str(error.value) == "send_batch takes OutgoingMessage objects: message 1 is a dict"
    assert sqs.calls == []


def test_delayed_messages_are_written_before_slow_direct_sends_eat_their_margin():
    # GIVEN SQS taking 1.5 s per SendMessageBatch call, and a delay table that notes when each item is written
    clock, dynamodb = Clock(), delay_table()

    class SlowSQS(FakeSQS):
        def send_message_batch(self, **kwargs):
            clock.now += 1.5
            return super().send_message_batch(**kwargs)

    written_at = []

    def note_writes(operation, params):
        if operation == "BatchWriteItem":
            written_at.append(clock.now)
        return None  # no fault

    dynamodb.fault = note_writes
    # WHEN one batch carries 1,000 direct messages and one due in 901 s
    batch = [OutgoingMessage("/now", f"n{i}") for i in range(1000)] + [OutgoingMessage("/later", "due in 901 s", delay=901)]
    results = table_client(StrictSQS(SlowSQS()), dynamodb, clock).send_batch(batch)
    # THEN all are accepted, and the delayed one was written at once: still more than 900 s before it is due
    assert all(r.ok for r in results)
    assert written_at == [NOW]


# -- at= on the direct path: never early, whatever the producer's clock ------------------------------


def test_a_direct_send_at_a_time_carries_its_due_time_for_the_worker_to_hold_back():
    # GIVEN a producer whose clock runs 60 s ahead, sending for a moment 10 minutes ahead by its clock
    sqs = StrictSQS(FakeSQS())
    at = datetime.fromtimestamp(NOW + 600, tz=timezone.utc)
    # WHEN it sends straight to SQS (DelaySeconds comes from its clock, so the message would be 60 s early)
    client(sqs).send("/remind", "b", at=at)
    # THEN the message carries worker_tier.due_at, which the worker compares with its own clock
    [entry] = sqs.sent
    assert entry["DelaySeconds"] == 600
    assert entry["MessageAttributes"]["worker_tier.due_at"]["StringValue"] == at.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def test_a_relative_delay_needs_no_due_time_since_sqs_counts_it():
    sqs = StrictSQS(FakeSQS())
    client(sqs).send("/remind", "b", delay=600)
    assert "worker_tier.due_at" not in sqs.sent[0]["MessageAttributes"]


def test_a_direct_send_at_a_time_leaves_room_for_its_due_time():
    # GIVEN nine attributes of the user's own (the path makes ten)
    attributes = {f"a{n}": "v" for n in range(9)}
    # WHEN sent for a moment ahead  THEN the error names the rule
    with pytest.raises(MessageError, match=r"a message sent with at= carries worker_tier\.due_at.*at most 8 attributes of its own"):
        client().send("/x", "b", at=datetime.fromtimestamp(NOW + 60, tz=timezone.utc), attributes=attributes)


def test_a_body_with_nan_is_refused_since_it_would_not_be_json():
    with pytest.raises(MessageError, match="body must be a string or JSON-serializable"):
        client().send("/x", {"ratio": float("nan")})


def test_a_timeout_after_the_call_went_out_is_reported_per_message_not_raised():
    # GIVEN an SQS whose SendMessageBatch times out on reading the answer (botocore's ReadTimeoutError: no response)
    from botocore.exceptions import ReadTimeoutError

    class TimingOut(FakeSQS):
        def send_message_batch(self, QueueUrl, Entries):
            raise ReadTimeoutError(endpoint_url=QueueUrl)

    # WHEN a batch is sent  THEN every message is reported as maybe sent: its answer was lost
    results = client(TimingOut()).send_batch([OutgoingMessage("/x", "a"), OutgoingMessage("/x", "b")])
    assert [(r.ok, r.code) for r in results] == [(False, "SendOutcomeUnknown")] * 2
    assert "SQS may have taken the message" in results[0].error and "ReadTimeoutError" in results[0].error


@pytest.mark.parametrize("failure", ["timeout", "500"])
def test_a_dedupe_key_whose_send_may_have_gone_through_is_not_sent_again_within_the_lease(failure):
    # GIVEN SQS that takes the message but whose answer is lost (a read timeout, or a 500 after the work was done)
    from botocore.exceptions import ReadTimeoutError

    class AnswerLost(FakeSQS):
        lost = True

        def send_message_batch(self, QueueUrl, Entries):
            response = super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries)
            if self.lost:
                self.lost = False
                if failure == "timeout":
                    raise ReadTimeoutError(endpoint_url=QueueUrl)
                raise ClientError({"Error": {"Code": "InternalError"}, "ResponseMetadata": {"HTTPStatusCode": 500}}, "SendMessageBatch")
            return response

    sqs, clock = AnswerLost(), Clock()
    producer = table_client(sqs, delay_table(), clock=clock)
    # WHEN the send fails that way and is retried a second later
    first = producer.send_batch([OutgoingMessage("/x", "b", dedupe_key="k")])[0]
    clock.now += 1
    retry = producer.send_batch([OutgoingMessage("/x", "b", dedupe_key="k")])[0]
    # THEN the first is reported as maybe sent, the retry is told to wait (the key stays held), and SQS holds one
    assert (first.ok, first.code) == (False, "SendOutcomeUnknown")
    assert (retry.ok, retry.code) == (False, "DedupeKeyInFlight")
    assert len(sqs.sent) == 1
