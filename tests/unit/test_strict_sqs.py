"""The strict SQS stand-in refuses what SQS refuses (and moto accepts), in SQS's shapes."""

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.support.fakes import FakeSQS
from tests.support.strict_sqs import StrictSQS

QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
FIFO_QUEUE = QUEUE + ".fifo"


def string(value):
    return {"DataType": "String", "StringValue": value}


def number(value):
    return {"DataType": "Number", "StringValue": value}


def entry(body="b", attributes=None, **extra):
    return {"Id": "0", "MessageBody": body, **({"MessageAttributes": attributes} if attributes else {}), **extra}


# Each case: a SendMessageBatch entry SQS refuses, the code, and the start of the message.
REFUSED_ENTRIES = [
    ("NUL in body", entry("a\x00"), "InvalidMessageContents", "Invalid characters found in MessageBody: '\\x00' (U+0000) at offset 1."),
    ("lone surrogate in body", entry("a\ud800"), "InvalidMessageContents", "Invalid characters found in MessageBody: '\\ud800'"),
    ("U+FFFE in body", entry("\ufffe"), "InvalidMessageContents", "Invalid characters found in MessageBody: '\\ufffe'"),
    ("empty body", entry(""), "MissingParameter", "The request must contain the parameter MessageBody."),
    ("name ending in newline", entry(attributes={"tenant\n": string("a")}), "InvalidParameterValue", "Message (user) attribute name 'tenant\\n' is invalid."),
    ("name with a space", entry(attributes={"a b": string("a")}), "InvalidParameterValue", "Message (user) attribute name 'a b' is invalid."),
    ("leading period", entry(attributes={".a": string("a")}), "InvalidParameterValue", "Message (user) attribute name '.a' is invalid."),
    ("trailing period", entry(attributes={"a.": string("a")}), "InvalidParameterValue", "Message (user) attribute name 'a.' is invalid."),
    ("double period", entry(attributes={"a..b": string("a")}), "InvalidParameterValue", "Message (user) attribute name 'a..b' is invalid."),
    ("amazon prefix, any case", entry(attributes={"aMaZoN.x": string("a")}), "InvalidParameterValue", "Message (user) attribute name 'aMaZoN.x' is invalid."),
    ("name of 257 characters", entry(attributes={"a" * 257: string("a")}), "InvalidParameterValue", "Message (user) attribute name 'aaaa"),
    ("NUL in a String value", entry(attributes={"a": string("x\x00")}), "InvalidParameterValue", "Invalid characters found in message attribute 'a': '\\x00'"),
    ("empty String value", entry(attributes={"a": string("")}), "InvalidParameterValue", "Message (user) attribute 'a' must contain a non-empty value of type 'String'."),
    ("Number above 10^126", entry(attributes={"n": number("1" + "0" * 127)}), "InvalidParameterValue", "Message (user) attribute 'n' Number value '1000"),
    ("Number below 10^-128", entry(attributes={"n": number("0." + "0" * 128 + "1")}), "InvalidParameterValue", "Message (user) attribute 'n' Number value '0.000"),
    ("Number of 39 digits", entry(attributes={"n": number("1" * 39)}), "InvalidParameterValue", "Message (user) attribute 'n' Number value '1111"),
    ("Number in exponent notation", entry(attributes={"n": number("1e5")}), "InvalidParameterValue", "Message (user) attribute 'n' has an invalid Number value '1e5'."),
    ("Number that is not a number", entry(attributes={"n": number("NaN")}), "InvalidParameterValue", "Message (user) attribute 'n' has an invalid Number value 'NaN'."),
    ("empty Binary", entry(attributes={"b": {"DataType": "Binary", "BinaryValue": b""}}), "InvalidParameterValue", "Message (user) attribute 'b' must contain a non-empty value of type 'Binary'."),
    ("unknown data type", entry(attributes={"a": {"DataType": "Text", "StringValue": "x"}}), "InvalidParameterValue", "Message (user) attribute 'a' has an invalid data type 'Text'."),
    ("empty custom label", entry(attributes={"a": {"DataType": "String.", "StringValue": "x"}}), "InvalidParameterValue", "Message (user) attribute 'a' has an invalid data type 'String.'."),
    ("11 attributes", entry(attributes={f"a{i}": string("x") for i in range(11)}), "InvalidParameterValue", "Number of message attributes [11] exceeds the allowed maximum [10]."),
    ("DelaySeconds 901", entry(DelaySeconds=901), "InvalidParameterValue", "Value 901 for parameter DelaySeconds is invalid. Reason: must be 0..900."),
    ("dedupe id on a standard queue", entry(MessageDeduplicationId="d"), "InvalidParameterValue", "The request include parameter MessageDeduplicationId"),
]


@pytest.mark.parametrize("case, sent, code, message", REFUSED_ENTRIES, ids=[c[0] for c in REFUSED_ENTRIES])
def test_entries_sqs_refuses_come_back_failed_as_sender_faults(case, sent, code, message):
    # GIVEN a strict stand-in over the fake
    inner = FakeSQS()
    strict = StrictSQS(inner)
    # WHEN the entry is sent beside a good one
    good = {"Id": "1", "MessageBody": "fine"}
    response = strict.send_message_batch(QueueUrl=QUEUE, Entries=[sent, good])
    # THEN the bad entry fails as SQS fails it, and only the good one reaches the inner client
    [failed] = response["Failed"]
    assert (failed["Id"], failed["Code"], failed["SenderFault"]) == ("0", code, True)
    assert failed["Message"].startswith(message)
    assert [s["Id"] for s in response["Successful"]] == ["1"]
    assert [e["Id"] for e in inner.sent] == ["1"]


@pytest.mark.parametrize("case, sent, code, message", REFUSED_ENTRIES[:4], ids=[c[0] for c in REFUSED_ENTRIES[:4]])
def test_a_single_send_sqs_refuses_raises_its_client_error(case, sent, code, message):
    # GIVEN a strict stand-in over moto
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="work")["QueueUrl"]
        strict = StrictSQS(sqs)
        # WHEN the message is sent alone
        with pytest.raises(ClientError) as error:
            strict.send_message(QueueUrl=url, MessageBody=sent["MessageBody"], MessageAttributes=sent.get("MessageAttributes", {}))
        # THEN SQS's code and message come back, and moto never saw it
        assert error.value.response["Error"]["Code"] == code
        assert error.value.response["Error"]["Message"].startswith(message)
        assert "Messages" not in sqs.receive_message(QueueUrl=url)


MOTO_ACCEPTS = [c for c in REFUSED_ENTRIES if c[0] in ("NUL in body", "empty body", "NUL in a String value", "Number above 10^126", "name ending in newline")]


@pytest.mark.parametrize("case, sent, code, message", MOTO_ACCEPTS, ids=[c[0] for c in MOTO_ACCEPTS])
def test_moto_accepts_what_the_stand_in_refuses(case, sent, code, message):
    # GIVEN moto alone, and the same moto behind the stand-in
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="work")["QueueUrl"]
        # WHEN the entry goes to each
        bare = sqs.send_message_batch(QueueUrl=url, Entries=[sent])
        strict = StrictSQS(sqs).send_message_batch(QueueUrl=url, Entries=[sent])
        # THEN moto takes it and the stand-in refuses it: the gap it exists to close
        assert (len(bare["Successful"]), bare.get("Failed", [])) == (1, [])
        assert [f["Code"] for f in strict["Failed"]] == [code]


@pytest.mark.parametrize(
    "attributes",
    [
        {"tenant.id-2_x": string("naïve ☃ \U0001f600\t\n\r")},
        {"n": number("-0.000000000000000000000000000001")},
        {"n": number("1" + "0" * 126)},
        {"n": number("0." + "0" * 127 + "1")},
        {"n": number("1" * 38)},
        {"n": number("000" + "1" * 38 + "000")},
        {"n": number("0")},
        {"n": number("+.5")},
        {"b": {"DataType": "Binary.gif", "BinaryValue": b"\x00"}},
        {"c": {"DataType": "Number.float-32", "StringValue": "1.5"}},
        {f"a{i}": string("x") for i in range(10)},
    ],
)
def test_what_sqs_accepts_passes_through(attributes):
    # GIVEN the stand-in over the fake
    inner = FakeSQS()
    # WHEN a message with attributes at the edges of the rules is sent
    response = StrictSQS(inner).send_message_batch(QueueUrl=QUEUE, Entries=[entry(attributes=attributes)])
    # THEN it is forwarded untouched
    assert response["Failed"] == []
    assert inner.sent[0]["MessageAttributes"] == attributes


def test_size_counts_body_names_types_and_values():
    # GIVEN a queue of 100 bytes and a message of exactly 100 (90 + "ab" + "String" + "xx")
    strict = StrictSQS(FakeSQS(), maximum_message_size=100)
    exact = entry("a" * 90, {"ab": string("xx")})
    over = entry("a" * 91, {"ab": string("xx")})
    # WHEN each is sent in a batch of its own
    ok = strict.send_message_batch(QueueUrl=QUEUE, Entries=[exact])
    with pytest.raises(ClientError) as error:
        strict.send_message_batch(QueueUrl=QUEUE, Entries=[over])
    # THEN the exact one passes and the one a byte over makes the batch too long, as in SQS
    assert ok["Failed"] == []
    assert error.value.response["Error"]["Message"] == "Batch requests cannot be longer than 100 bytes. You have sent 101 bytes."


def test_a_single_message_over_the_queues_maximum_is_refused():
    # GIVEN moto with a 1 KiB queue, behind the stand-in told the same size
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="work", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
        strict = StrictSQS(sqs, maximum_message_size=1024)
        # WHEN a message of 1,025 bytes with its attribute is sent
        with pytest.raises(ClientError) as error:
            strict.send_message(QueueUrl=url, MessageBody="a" * 1016, MessageAttributes={"ab": string("x")})
        # THEN it is refused with SQS's code and the size
        assert error.value.response["Error"]["Code"] == "InvalidParameterValue"
        assert error.value.response["Error"]["Message"] == (
            "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes (1025)."
        )


@pytest.mark.parametrize(
    "entries, code, message",
    [
        ([], "AWS.SimpleQueueService.EmptyBatchRequest", "There should be at least one SendMessageBatchRequestEntry in the request."),
        ([{"Id": str(i), "MessageBody": "b"} for i in range(11)], "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "Maximum number of entries per request are 10. You have sent 11."),
        ([{"Id": "a", "MessageBody": "b"}, {"Id": "a", "MessageBody": "c"}], "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "Id a repeated."),
        ([{"Id": "a.b", "MessageBody": "b"}], "AWS.SimpleQueueService.InvalidBatchEntryId", "Batch entry id 'a.b': up to 80 alphanumerics, hyphens and underscores."),
        ([{"Id": "a", "MessageBody": "x" * 600}, {"Id": "b", "MessageBody": "x" * 600}], "AWS.SimpleQueueService.BatchRequestTooLong", "Batch requests cannot be longer than 1024 bytes. You have sent 1200 bytes."),
    ],
)
def test_batch_level_problems_refuse_the_whole_call(entries, code, message):
    # GIVEN a 1 KiB queue behind the stand-in
    inner = FakeSQS()
    # WHEN a batch that is wrong as a whole is sent
    with pytest.raises(ClientError) as error:
        StrictSQS(inner, maximum_message_size=1024).send_message_batch(QueueUrl=QUEUE, Entries=entries)
    # THEN the call is refused with SQS's code, and nothing is sent
    assert (error.value.response["Error"]["Code"], error.value.response["Error"]["Message"]) == (code, message)
    assert inner.calls == []


@pytest.mark.parametrize(
    "extra, code, message",
    [
        ({}, "MissingParameter", "The request must contain the parameter MessageGroupId."),
        ({"MessageGroupId": "g"}, "InvalidParameterValue", "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"),
        ({"MessageGroupId": "g", "MessageDeduplicationId": "d", "DelaySeconds": 5}, "InvalidParameterValue", "Value 5 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type."),
        ({"MessageGroupId": "a b", "MessageDeduplicationId": "d"}, "InvalidParameterValue", "Value 'a b' for parameter MessageGroupId is invalid."),
        ({"MessageGroupId": "g", "MessageDeduplicationId": "é"}, "InvalidParameterValue", "Value 'é' for parameter MessageDeduplicationId is invalid."),
        ({"MessageGroupId": "g" * 129, "MessageDeduplicationId": "d"}, "InvalidParameterValue", "Value 'gggg"),
    ],
)
def test_fifo_rules(extra, code, message):
    # GIVEN a FIFO queue without content-based deduplication (as the stack makes it)
    strict = StrictSQS(FakeSQS())
    # WHEN a message breaking one FIFO rule is sent
    response = strict.send_message_batch(QueueUrl=FIFO_QUEUE, Entries=[entry(**extra)])
    # THEN it fails with SQS's code
    [failed] = response["Failed"]
    assert failed["Code"] == code
    assert failed["Message"].startswith(message)


def test_fifo_with_content_based_deduplication_needs_no_dedupe_id():
    # GIVEN a FIFO queue with content-based deduplication, named as FIFO by the flag only
    strict = StrictSQS(FakeSQS(), fifo=True, content_based_deduplication=True)
    # WHEN a message with a group and no dedupe id is sent
    response = strict.send_message_batch(QueueUrl=QUEUE, Entries=[entry(MessageGroupId="!#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")])
    # THEN it is accepted
    assert response["Failed"] == []


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def test_a_visibility_change_may_not_reach_past_twelve_hours_from_the_receive():
    # GIVEN a message received through the stand-in one hour ago
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="work")["QueueUrl"]
        clock = Clock(1_000.0)
        strict = StrictSQS(sqs, clock=clock)
        sqs.send_message(QueueUrl=url, MessageBody="b")
        handle = strict.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
        clock.now += 3600
        # WHEN its visibility is set to 11 h, then to 11 h + 1 s
        strict.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=11 * 3600)
        with pytest.raises(ClientError) as error:
            strict.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=11 * 3600 + 1)
        # THEN the first is taken and the second refused, as moto would not
        assert error.value.response["Error"]["Code"] == "InvalidParameterValue"
        assert error.value.response["Error"]["Message"] == (
            "Value 39601 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message "
            "is beyond the limit [43200 seconds] (3600 s since the receive)."
        )
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=11 * 3600 + 1)  # moto: fine


def test_visibility_batch_fails_only_the_entries_out_of_range():
    # GIVEN handles the stand-in never saw received
    inner = FakeSQS()
    entries = [
        {"Id": "0", "ReceiptHandle": "h0", "VisibilityTimeout": 43_200},
        {"Id": "1", "ReceiptHandle": "h1", "VisibilityTimeout": 43_201},
        {"Id": "2", "ReceiptHandle": "h2", "VisibilityTimeout": -1},
    ]
    # WHEN their visibility is changed in one batch
    response = StrictSQS(inner).change_message_visibility_batch(QueueUrl=QUEUE, Entries=entries)
    # THEN only the range is checked: 43,200 passes, the others fail
    assert [s["Id"] for s in response["Successful"]] == ["0"]
    assert [(f["Id"], f["Code"], f["Message"]) for f in response["Failed"]] == [
        ("1", "InvalidParameterValue", "Value 43201 for parameter VisibilityTimeout is invalid. Reason: must be 0..43200."),
        ("2", "InvalidParameterValue", "Value -1 for parameter VisibilityTimeout is invalid. Reason: must be 0..43200."),
    ]


def test_refusals_are_recorded():
    # GIVEN the stand-in
    strict = StrictSQS(FakeSQS())
    # WHEN one entry is refused
    strict.send_message_batch(QueueUrl=QUEUE, Entries=[entry("\x00")])
    # THEN it is listed with its operation, id and code
    assert [(op, i, code) for op, i, code, _ in strict.refused] == [("SendMessageBatch", "0", "InvalidMessageContents")]


TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


@pytest.mark.parametrize("system, message", [
    ({"Other": {"DataType": "String", "StringValue": TRACE}}, "Message system attribute name 'Other' is invalid; the only one is AWSTraceHeader."),
    ({"AWSTraceHeader": {"DataType": "Number", "StringValue": "1"}}, "Message system attribute 'AWSTraceHeader' must be of type String with a StringValue."),
    ({"AWSTraceHeader": {"DataType": "String", "StringValue": "trace-1"}}, "Message system attribute 'AWSTraceHeader' is not a valid X-Ray trace header: 'trace-1'."),
])
def test_a_system_attribute_other_than_an_xray_trace_header_is_refused(system, message):
    # GIVEN an entry with a system attribute SQS refuses  WHEN it is sent
    response = StrictSQS(FakeSQS()).send_message_batch(
        QueueUrl="q", Entries=[{"Id": "0", "MessageBody": "a", "MessageSystemAttributes": system}])
    # THEN it fails as the sender's fault, naming the rule
    assert response["Failed"] == [{"Id": "0", "Code": "InvalidParameterValue", "Message": message, "SenderFault": True}]


def test_the_trace_header_of_a_batch_send_reaches_a_receive_that_asks_for_it_and_no_other():
    with mock_aws():
        # GIVEN a batch entry with AWSTraceHeader (moto drops it from SendMessageBatch; SQS keeps it)
        strict = StrictSQS(boto3.client("sqs", region_name="us-east-1"))
        url = strict.create_queue(QueueName="q")["QueueUrl"]
        system = {"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}}
        strict.send_message_batch(QueueUrl=url, Entries=[{"Id": "0", "MessageBody": "a" * 10, "MessageSystemAttributes": system}])
        # WHEN it is received without asking, then asking for it
        plain = strict.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"][0]
        asked = strict.receive_message(QueueUrl=url, MessageSystemAttributeNames=["AWSTraceHeader"])["Messages"][0]
        # THEN only the receive that asked has it, in Attributes
        assert "AWSTraceHeader" not in plain.get("Attributes", {})
        assert asked["Attributes"]["AWSTraceHeader"] == TRACE


def test_a_system_attribute_does_not_count_toward_the_message_size():
    # GIVEN a body of exactly the queue's maximum and a trace header  WHEN sent  THEN it is accepted
    strict = StrictSQS(FakeSQS(), maximum_message_size=1024)
    system = {"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}}
    response = strict.send_message_batch(QueueUrl="q", Entries=[{"Id": "0", "MessageBody": "a" * 1024, "MessageSystemAttributes": system}])
    assert response["Failed"] == []
