"""The producer's large-payload settings: Client's arguments, the variables Client.from_env reads, the reserved names.

No call reaches S3 here: what is offloaded, and how, runs on moto in tests/functional/test_offloaded_sends.py.
"""

from __future__ import annotations

import pytest

from tests.support.fakes import FakeSQS
from tests.support.strict_sqs import StrictSQS
from worker_tier import Client, MessageError, OutgoingMessage
from worker_tier.core import contract
from worker_tier.core.settings import DEFAULT_PAYLOAD_MAX_BYTES

QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
BASE = {contract.QUEUE_URL_VARIABLE: QUEUE}


def test_from_env_reads_the_bucket_and_its_settings():
    # GIVEN a process given the payload bucket, a threshold and a largest body
    environ = {**BASE, contract.PAYLOAD_BUCKET_VARIABLE: "payloads", "WORKER_TIER_PAYLOAD_THRESHOLD": "2048",
               "WORKER_TIER_PAYLOAD_MAX_BYTES": "10000000"}
    # WHEN Client.from_env reads them
    client = Client.from_env(environ)
    # THEN the Client offloads to that bucket with those settings
    assert client.payload_bucket == "payloads"
    assert (client.payload_threshold, client.payload_max_bytes) == (2048, 10_000_000)


def test_from_env_without_a_bucket_offloads_nothing_and_ignores_the_threshold():
    # GIVEN a process with the threshold setting (every worker gets the settings) but no bucket (large_payloads off)
    client = Client.from_env({**BASE, "WORKER_TIER_PAYLOAD_THRESHOLD": "2048"})
    # THEN the Client starts, with no bucket and no threshold
    assert client.payload_bucket is None and client.payload_threshold == 0
    assert client.payload_max_bytes == DEFAULT_PAYLOAD_MAX_BYTES


@pytest.mark.parametrize(
    "variable, value, message",
    [
        ("WORKER_TIER_PAYLOAD_THRESHOLD", "lots", "WORKER_TIER_PAYLOAD_THRESHOLD must be a whole number 0..1048576 (bytes), got 'lots'"),
        ("WORKER_TIER_PAYLOAD_THRESHOLD", "2000000", "WORKER_TIER_PAYLOAD_THRESHOLD must be a whole number 0..1048576 (bytes), got '2000000'"),
        ("WORKER_TIER_PAYLOAD_MAX_BYTES", "10", "WORKER_TIER_PAYLOAD_MAX_BYTES must be a whole number 1024..2147483648 (bytes), got '10'"),
        ("WORKER_TIER_PAYLOAD_MAX_BYTES", "", "WORKER_TIER_PAYLOAD_MAX_BYTES must be a whole number 1024..2147483648 (bytes), got ''"),
    ],
)
def test_a_bad_variable_is_refused_naming_it(variable, value, message):
    # GIVEN a process with the bucket and a bad value  WHEN Client.from_env reads it  THEN one line names it and the rule
    with pytest.raises(MessageError) as error:
        Client.from_env({**BASE, contract.PAYLOAD_BUCKET_VARIABLE: "payloads", variable: value})
    assert str(error.value) == message


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"payload_bucket": ""}, "payload_bucket must be an S3 bucket name or None, got ''"),
        ({"payload_bucket": "b", "payload_threshold": -1}, "payload_threshold must be a whole number 0..1048576 (bytes), got -1"),
        ({"payload_bucket": "b", "payload_threshold": True}, "payload_threshold must be a whole number 0..1048576 (bytes), got True"),
        ({"payload_bucket": "b", "payload_max_bytes": 3 * 1024**3},
         "payload_max_bytes must be a whole number 1024..2147483648 (bytes), got 3221225472"),
        ({"payload_threshold": 4096}, "payload_threshold 4096 needs a payload bucket to offload to; pass payload_bucket= "
                                      "(or set WORKER_TIER_PAYLOAD_BUCKET), or leave payload_threshold 0"),
    ],
)
def test_bad_payload_arguments_are_refused_in_one_line(kwargs, message):
    # GIVEN bad large-payload arguments  WHEN a Client is made  THEN it is refused naming the value and the rule
    with pytest.raises(MessageError) as error:
        Client(QUEUE, **kwargs)
    assert str(error.value) == message


def test_a_pointer_passed_on_internally_keeps_its_size_as_a_number_and_the_legacy_name_too():
    # GIVEN the worker re-sending an offloaded message, once with each size attribute name (no bucket: nothing uploads)
    sqs = StrictSQS(FakeSQS())
    pointer = '["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": "b", "s3Key": "payloads/k"}]'
    internal = {0: {"ExtendedPayloadSize": "5000000"}, 1: {"SQSLargePayloadSize": "12"}}
    # WHEN both go out through send_batch's internal attributes
    results = Client(QUEUE, sqs=sqs).send_batch([OutgoingMessage("/x", pointer), OutgoingMessage("/y", pointer)],
                                                _internal_attributes=internal)
    # THEN SQS gets each pointer as it is, with its size attribute a Number
    assert all(r.ok for r in results)
    assert sqs.sent[0]["MessageAttributes"]["ExtendedPayloadSize"] == {"DataType": "Number", "StringValue": "5000000"}
    assert sqs.sent[1]["MessageAttributes"]["SQSLargePayloadSize"] == {"DataType": "Number", "StringValue": "12"}
    assert [e["MessageBody"] for e in sqs.sent] == [pointer, pointer]


def test_without_a_bucket_a_message_too_large_names_the_fix():
    # GIVEN a Client with no payload bucket, told its queue takes 256 KiB
    sqs = StrictSQS(FakeSQS())
    client = Client(QUEUE, sqs=sqs, maximum_message_size=256 * 1024)
    # WHEN a 300,000-byte body is sent
    with pytest.raises(MessageError) as error:
        client.send("/x", "a" * 300_000)
    # THEN it is refused before sending, naming the size, the queue's limit and the bucket that would carry it
    assert str(error.value) == (
        "message is 300027 bytes with its attributes; the queue allows at most 262144 (MaximumMessageSize): "
        "set WORKER_TIER_PAYLOAD_BUCKET (or pass payload_bucket=) to send larger bodies through S3, or send a smaller body"
    )
    assert sqs.calls == []
