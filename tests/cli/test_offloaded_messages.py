"""Messages whose body is in S3 (AWS's Extended Client format): `dlq show` reads the body, `dlq list` marks them,
`redrive` moves the pointer and leaves the object, `send` offloads a body too large for the queue."""

from __future__ import annotations

import boto3
import pytest

from tests.cli.deployment import NOW, parsed
from worker_tier.core import contract, envelope, message, payloads
from worker_tier.core.errors import NonRetryableError
from worker_tier.core.settings import DEFAULT_PAYLOAD_MAX_BYTES

BIG = '{"pad": "' + "é" * 700_000 + '"}'  # 1.4 MB of UTF-8: more than SQS's largest message
BIG_BYTES = len(BIG.encode("utf-8"))


def _s3():
    return boto3.client("s3", region_name="us-east-1")


def _services_asked(deployment) -> list[str]:
    """Record the services the command line makes clients of (every call still reaches moto)."""
    asked: list[str] = []

    def client(service, **kwargs):
        asked.append(service)
        return boto3.client(service, **kwargs)

    deployment.runtime.client = client
    return asked


# -- dlq show -----------------------------------------------------------------------------------------------------


def test_dlq_show_of_an_offloaded_message_prints_the_body_read_from_s3_and_says_where_it_came_from(deployment):
    # GIVEN a dead letter whose 1.4 MB body is in the payload bucket
    message_id, pointer = deployment.offloaded_dead_letter("/resize", NonRetryableError("corrupt image"), BIG)
    # WHEN dlq show runs, as text and as JSON
    text = deployment.run("dlq", "show", message_id)
    shown = parsed(deployment.run("dlq", "show", message_id, "--json"))
    # THEN the text names the object and its size, then prints the real body
    assert text.exit_code == 0, text.output
    assert f"body (from s3://payloads/{pointer.key}, {BIG_BYTES} bytes):\n{BIG}\n" in text.stdout
    assert f"attribute {contract.PAYLOAD_SIZE_ATTRIBUTE}: {BIG_BYTES}" in text.stdout
    # AND the JSON has the real body and where it lives
    assert shown["body"] == BIG
    assert shown["payload"] == {"bucket": "payloads", "key": pointer.key, "size": BIG_BYTES, "pointer": pointer.body(),
                                "error": None}
    # AND the message and its object are as they were
    assert deployment.depth(deployment.dlq_url) == 1
    assert _s3().get_object(Bucket="payloads", Key=pointer.key)["ContentLength"] == BIG_BYTES


def test_dlq_show_of_an_offloaded_message_whose_object_is_gone_says_so_in_one_line_and_shows_the_pointer(deployment):
    # GIVEN an offloaded dead letter whose object was never uploaded (or expired)
    message_id, pointer = deployment.offloaded_dead_letter("/resize", NonRetryableError("x"), BIG, upload=False)
    # WHEN dlq show runs, as text and as JSON
    text = deployment.run("dlq", "show", message_id)
    shown = parsed(deployment.run("dlq", "show", message_id, "--json"))
    # THEN it says the body was not read and why, on one line, and still prints the pointer; the command succeeds
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    reason = next(line for line in lines if line.startswith("body:"))
    assert reason.startswith(f"body: offloaded at {pointer.uri}, not read: the message's body is missing from S3: "
                             f"no object {pointer.uri}")
    assert lines[-2:] == ["pointer (the message's body as SQS holds it):", pointer.body()]
    assert shown["body"] is None and shown["payload"]["key"] == pointer.key
    assert "missing from S3" in shown["payload"]["error"] and shown["payload"]["pointer"] == pointer.body()


def test_dlq_show_does_not_follow_a_pointer_out_of_the_deployments_payload_bucket(deployment):
    # GIVEN a dead letter pointing into bucket "elsewhere", while the deployment's payload bucket is "payloads"
    message_id, pointer = deployment.offloaded_dead_letter("/resize", NonRetryableError("x"), "secret body", bucket="elsewhere")
    _s3().create_bucket(Bucket="payloads")
    # WHEN dlq show runs with the deployment's bucket known, then with the other bucket named
    refused = deployment.run("dlq", "show", message_id, options=("--payload-bucket", "payloads"))
    trusted = deployment.run("dlq", "show", message_id, options=("--payload-bucket", "elsewhere"))
    # THEN the first names both buckets and the way to read it, and prints the pointer, not the body
    assert refused.exit_code == 0, refused.output
    assert ("body: offloaded at s3://elsewhere/" + pointer.key + ", not read: it points into bucket 'elsewhere', not this "
            "deployment's payload bucket 'payloads'; read it yourself (aws s3 cp s3://elsewhere/" + pointer.key + " -), or "
            "pass --payload-bucket elsewhere to trust that bucket") in refused.stdout
    assert "secret body" not in refused.stdout
    # AND naming that bucket reads it
    assert trusted.stdout.rstrip().endswith("secret body")


def test_dlq_show_of_a_message_marked_offloaded_whose_body_is_no_pointer_shows_the_body_and_why(deployment):
    # GIVEN a dead letter carrying ExtendedPayloadSize over a body that is not a pointer
    original = {contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/a"}, **payloads.size_attribute(5)}
    sent = deployment.sqs.send_message(QueueUrl=deployment.dlq_url, MessageBody="hello", MessageAttributes=(
        envelope.dead_letter_attributes(original, message.failure_reason(NonRetryableError("x"), attempts=1, path="/a", failed_at=NOW))))
    # WHEN dlq show runs
    result = deployment.run("dlq", "show", sent["MessageId"])
    # THEN it says the body should have been a pointer, and shows the body as SQS holds it
    assert result.exit_code == 0, result.output
    assert "body: offloaded, not read: the message carries ExtendedPayloadSize, so its body must be an S3 pointer" in result.stdout
    assert result.stdout.rstrip().endswith("pointer (the message's body as SQS holds it):\nhello")


# -- dlq list -----------------------------------------------------------------------------------------------------


def test_dlq_list_counts_each_groups_offloaded_messages_without_reading_s3(deployment):
    # GIVEN two offloaded /resize dead letters and one /resize and one /email that hold their own bodies
    for n in range(2):
        deployment.offloaded_dead_letter("/resize", NonRetryableError("corrupt image"), f"{n}{BIG}")
    deployment.dead_letter("/resize", NonRetryableError("corrupt image"), "small")
    deployment.dead_letter("/email", NonRetryableError("bounced"), "{}")
    asked = _services_asked(deployment)
    # WHEN dlq list runs, as text and as JSON
    text = deployment.run("dlq", "list")
    listed = parsed(deployment.run("dlq", "list", "--json"))
    # THEN each group says how many of its messages are offloaded
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0].split()[:4] == ["PATH", "ERROR", "COUNT", "OFFLOADED"]
    assert lines[1].split()[:4] == ["/resize", "NonRetryableError", "3", "2"]
    assert lines[2].split()[:4] == ["/email", "NonRetryableError", "1", "0"]
    assert [(g["path"], g["offloaded"]) for g in listed["groups"]] == [("/resize", 2), ("/email", 0)]
    # AND no S3 client was made: a list reads no body
    assert "s3" not in asked and "sqs" in asked


# -- redrive ------------------------------------------------------------------------------------------------------


def _redriven_and_readable(deployment, pointer):
    """The one message back in the work queue: the same pointer, its size attribute, and a body S3 still holds."""
    [moved] = deployment.drain(deployment.queue_url)
    assert moved["Body"] == pointer.body()
    assert moved["MessageAttributes"][contract.PAYLOAD_SIZE_ATTRIBUTE] == {"DataType": "Number",
                                                                         "StringValue": str(BIG_BYTES)}
    assert contract.FAILURE_ATTRIBUTE not in moved["MessageAttributes"]
    body, _ = payloads.PayloadStore("payloads", _s3()).read(moved["Body"], moved["MessageAttributes"])
    return body


def test_redrive_by_batches_moves_the_pointer_with_its_size_attribute_and_leaves_the_object(deployment):
    # GIVEN an offloaded dead letter
    _, pointer = deployment.offloaded_dead_letter("/resize", NonRetryableError("x"), BIG)
    asked = _services_asked(deployment)
    # WHEN it is redriven with a filter (receive, send, delete one batch at a time)
    report = parsed(deployment.run("redrive", "--path", "/resize", "--json"))
    # THEN the pointer is back in the work queue with ExtendedPayloadSize, and its object still holds the body
    assert report["moved"] == 1
    assert _redriven_and_readable(deployment, pointer) == BIG
    # AND the redrive never touched S3 (it has no grant there)
    assert "s3" not in asked


def test_redrive_without_a_filter_moves_the_pointer_with_its_size_attribute_and_leaves_the_object(deployment):
    # GIVEN an offloaded dead letter  WHEN everything is redriven (moto in-process: the batch move)
    _, pointer = deployment.offloaded_dead_letter("/resize", NonRetryableError("x"), BIG)
    result = deployment.run("redrive", "--yes")
    # THEN the same holds
    assert result.exit_code == 0, result.output
    assert _redriven_and_readable(deployment, pointer) == BIG


# -- send ---------------------------------------------------------------------------------------------------------


def test_send_of_a_body_too_large_for_the_queue_without_a_payload_bucket_is_refused_naming_how_to_give_one(
        deployment, tmp_path):
    # GIVEN a body file larger than the queue's MaximumMessageSize (256 KiB here), and no payload bucket known
    deployment.sqs.set_queue_attributes(QueueUrl=deployment.queue_url, Attributes={"MaximumMessageSize": "262144"})
    path = tmp_path / "big.json"
    path.write_text(BIG)
    # WHEN it is sent
    result = deployment.run("send", "/resize", f"@{path}")
    # THEN it is refused in one line naming the queue's limit and both ways to name the bucket; nothing is sent
    assert result.exit_code == 2
    assert result.stderr == (
        f"Error: the body from file {path} is over 262,144 bytes; the queue takes at most 262,144 (its "
        "MaximumMessageSize, with the attributes): give the deployment's payload bucket (--payload-bucket, or "
        "WORKER_TIER_PAYLOAD_BUCKET; a stack with large_payloads outputs PayloadBucketName) to send it through S3, "
        "or keep the payload elsewhere and send its key\n")
    assert deployment.drain(deployment.queue_url) == []


def test_send_of_a_body_too_large_for_the_queue_with_a_payload_bucket_offloads_it_to_s3(deployment, tmp_path):
    # GIVEN the deployment's payload bucket, named by its variable, and a 1.4 MB body file
    _s3().create_bucket(Bucket="payloads")
    deployment.runtime.environ = {contract.PAYLOAD_BUCKET_VARIABLE: "payloads"}
    path = tmp_path / "big.json"
    path.write_text(BIG)
    # WHEN it is sent
    sent = parsed(deployment.run("send", "/resize", f"@{path}", "--json"))
    # THEN the queue holds a pointer with ExtendedPayloadSize, and the object holds the body
    [got] = deployment.drain(deployment.queue_url)
    assert got["MessageId"] == sent["message_id"]
    assert got["MessageAttributes"][contract.PAYLOAD_SIZE_ATTRIBUTE]["StringValue"] == str(BIG_BYTES)
    body, pointer = payloads.PayloadStore("payloads", _s3()).read(got["Body"], got["MessageAttributes"])
    assert body == BIG and pointer.key.startswith(contract.PAYLOAD_KEY_PREFIX)


def test_send_of_a_small_body_with_a_payload_bucket_puts_nothing_in_s3(deployment):
    # GIVEN a payload bucket named by --payload-bucket  WHEN a small body is sent
    _s3().create_bucket(Bucket="payloads")
    result = deployment.run("send", "/hello", "hi", options=("--payload-bucket", "payloads"))
    # THEN the queue holds the body itself, and the bucket stays empty
    assert result.exit_code == 0, result.output
    [got] = deployment.drain(deployment.queue_url)
    assert got["Body"] == "hi" and contract.PAYLOAD_SIZE_ATTRIBUTE not in got.get("MessageAttributes", {})
    assert _s3().list_objects_v2(Bucket="payloads").get("KeyCount") == 0


def test_send_of_a_body_over_payload_max_bytes_is_refused_naming_the_value_and_the_rule(deployment, tmp_path):
    # GIVEN a payload bucket, and a body file one byte over payload_max_bytes' default
    _s3().create_bucket(Bucket="payloads")
    path = tmp_path / "huge.txt"
    path.write_bytes(b"x" * (DEFAULT_PAYLOAD_MAX_BYTES + 1))
    # WHEN it is sent
    result = deployment.run("send", "/resize", f"@{path}", options=("--payload-bucket", "payloads"))
    # THEN it is refused before anything is sent or put, naming the limit, the rule and the fix
    assert result.exit_code == 2
    assert result.stderr == (
        f"Error: the body from file {path} is over {DEFAULT_PAYLOAD_MAX_BYTES:,} bytes; a body offloaded to s3://payloads "
        f"may have at most {DEFAULT_PAYLOAD_MAX_BYTES:,} (payload_max_bytes: a worker holds the body in memory): raise "
        "payload_max_bytes (with the worker's memory), or keep the payload elsewhere and send its key\n")
    assert deployment.drain(deployment.queue_url) == []
    assert _s3().list_objects_v2(Bucket="payloads").get("KeyCount") == 0


@pytest.mark.parametrize("pointer_body", ["[]", "{}", "5"])
def test_dlq_show_of_a_pointer_of_the_wrong_shape_says_so_and_prints_it(deployment, pointer_body):
    # GIVEN a dead letter marked offloaded whose body is JSON but not a pointer  WHEN shown  THEN it says so, no crash
    attributes = {contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/resize"}, **payloads.size_attribute(10)}
    message_id = deployment.sqs.send_message(QueueUrl=deployment.dlq_url, MessageBody=pointer_body,
                                             MessageAttributes=attributes)["MessageId"]
    text = deployment.run("dlq", "show", message_id)
    assert text.exit_code == 0, text.output
    assert "body: offloaded, not read:" in text.stdout
    shown = parsed(deployment.run("dlq", "show", message_id, "--json"))
    assert shown["body"] is None and shown["payload"]["pointer"] == pointer_body
