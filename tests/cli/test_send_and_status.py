"""`send` through worker_tier.Client, and `status`: queue counts and the delay dispatcher's watermark."""

from __future__ import annotations

from tests.cli.deployment import NOW, parsed
from worker_tier.core import contract
from worker_tier.delays.dispatch_state import WATERMARK_KEY
from worker_tier.core.errors import NonRetryableError


def test_send_sends_path_body_and_attributes_through_the_client(deployment):
    # WHEN send runs with an attribute and a delay SQS carries itself
    result = deployment.run("send", "/hello", '{"name": "Ada"}', "--attr", "tenant=acme", "--delay", "0", "--json")
    # THEN the message is in the work queue with its path and attribute, under the id printed
    sent = parsed(result)
    [got] = deployment.drain(deployment.queue_url)
    assert got["MessageId"] == sent["message_id"] and got["Body"] == '{"name": "Ada"}'
    assert got["MessageAttributes"][contract.PATH_ATTRIBUTE]["StringValue"] == "/hello"
    assert got["MessageAttributes"]["tenant"] == {"StringValue": "acme", "DataType": "String"}


def test_send_prints_the_id_for_people(deployment):
    result = deployment.run("send", "/hello", "hi")
    assert result.exit_code == 0 and result.stdout.startswith("sent /hello ")


def test_send_refused_by_the_client_prints_its_message_and_exits_2(deployment):
    # WHEN an attribute uses Worker Tier's reserved prefix
    result = deployment.run("send", "/hello", "hi", "--attr", "worker_tier.x=1")
    # THEN the Client's own message is printed, and nothing is sent
    assert result.exit_code == 2
    assert "worker_tier.x" in result.stderr and "reserved" in result.stderr.lower()
    assert deployment.drain(deployment.queue_url) == []


def test_send_at_that_is_no_time_is_a_usage_error(deployment):
    result = deployment.run("send", "/hello", "hi", "--at", "soon")
    assert result.exit_code == 2 and "expected an ISO 8601 time (2026-11-22T09:30:00Z), got 'soon'" in result.stderr


def test_send_attr_without_equals_is_a_usage_error(deployment):
    result = deployment.run("send", "/hello", "hi", "--attr", "tenant")
    assert result.exit_code == 2 and "expected NAME=VALUE, got 'tenant'" in result.stderr


def test_send_reads_the_body_from_stdin_with_a_dash(deployment):
    # WHEN send's BODY is "-" and the body comes on stdin
    result = deployment.run("send", "/hello", "-", "--json", input='{"name": "Ada"}\n')
    # THEN the stdin's text is the body, as it came
    sent = parsed(result)
    [got] = deployment.drain(deployment.queue_url)
    assert got["MessageId"] == sent["message_id"] and got["Body"] == '{"name": "Ada"}\n'


def test_send_reads_the_body_from_a_file_with_at_and_sends_a_literal_at_with_two(deployment, tmp_path):
    # GIVEN a body of 300 KB in a file, more than a shell argument comfortably carries
    body = tmp_path / "big.json"
    body.write_text('{"pad": "' + "x" * 200_000 + '"}')
    deployment.sqs.set_queue_attributes(QueueUrl=deployment.queue_url, Attributes={"MaximumMessageSize": str(1024 * 1024)})
    # WHEN send's BODY is @big.json, and then @@hello
    from_file = deployment.run("send", "/hello", f"@{body}")
    literal = deployment.run("send", "/hello", "@@hello")
    # THEN the file's text is sent, and "@hello" is sent as written with one "@"
    assert from_file.exit_code == 0 and literal.exit_code == 0, from_file.output + literal.output
    assert sorted(m["Body"] for m in deployment.drain(deployment.queue_url)) == ["@hello", body.read_text()]


def test_send_refuses_a_body_file_that_cannot_be_read_naming_it_and_the_escape(deployment, tmp_path):
    # WHEN BODY names a file that does not exist
    result = deployment.run("send", "/hello", f"@{tmp_path}/missing.json")
    # THEN it is a usage error naming the file and how to send a body starting with @, and nothing is sent
    assert result.exit_code == 2
    assert (f"Error: cannot read the body file '{tmp_path}/missing.json' (No such file or directory): @PATH reads a file; "
            "write @@TEXT to send a body starting with @") in result.stderr
    assert deployment.drain(deployment.queue_url) == []


def test_send_refuses_a_body_over_the_queues_maximum_before_sending(deployment, tmp_path):
    # GIVEN a queue taking at most 1,024 bytes, and a body file of 2,000
    deployment.sqs.set_queue_attributes(QueueUrl=deployment.queue_url, Attributes={"MaximumMessageSize": "1024"})
    body = tmp_path / "big.txt"
    body.write_text("x" * 2_000)
    # WHEN it is sent from the file, and as an argument
    from_file = deployment.run("send", "/hello", f"@{body}")
    argument = deployment.run("send", "/hello", "x" * 2_000)
    # THEN each is refused on one line naming the source, the size, the rule and the fix; nothing is sent
    assert from_file.exit_code == argument.exit_code == 2
    assert from_file.stderr == (f"Error: the body from file {body} is over 1,024 bytes; the queue takes at most 1,024 (its "
                                "MaximumMessageSize, with the attributes): give the deployment's payload bucket "
                                "(--payload-bucket, or WORKER_TIER_PAYLOAD_BUCKET; a stack with large_payloads outputs "
                                "PayloadBucketName) to send it through S3, or keep the payload elsewhere and send its key\n")
    assert "the body from argument is 2,000 bytes; the queue takes at most 1,024" in argument.stderr
    assert deployment.drain(deployment.queue_url) == []


def test_send_refuses_a_body_that_is_not_utf8_or_has_a_character_sqs_refuses(deployment, tmp_path):
    # GIVEN a binary file and a text with a NUL
    binary, nul = tmp_path / "image.png", tmp_path / "nul.txt"
    binary.write_bytes(b"\x89PNG\r\n")
    nul.write_bytes(b"a\x00b")
    # WHEN each is sent
    results = [deployment.run("send", "/hello", f"@{path}") for path in (binary, nul)]
    # THEN each is refused before sending, naming the byte or the character and what to do instead
    assert [r.exit_code for r in results] == [2, 2]
    assert (f"Error: the body from file {binary} is not UTF-8 (byte 0x89 at offset 0): SQS carries text only; "
            "base64-encode binary data, or send its S3 key") in results[0].stderr
    assert (f"Error: the body from file {nul}: body has character '\\x00' (U+0000) at offset 1, which SQS does not allow"
            in results[1].stderr and results[1].stderr.rstrip().endswith("; remove it, or base64-encode the body"))
    assert deployment.drain(deployment.queue_url) == []


def test_send_error_of_a_single_message_names_no_batch_index(deployment):
    # WHEN one message is refused by the Client
    result = deployment.run("send", "/hello", "hi", "--delay", "-1")
    # THEN the error is the rule itself, with no "message 0" of a batch the user never made
    assert result.exit_code == 2
    assert result.stderr == "Error: delay must be a non-negative number of seconds or a timedelta, got -1.0\n"


def test_status_shows_queue_counts_dlq_depth_and_the_watermark_lag(deployment):
    # GIVEN two visible and one delayed message, one dead letter, and a watermark 3 minutes behind
    for body in ("a", "b"):
        deployment.sqs.send_message(QueueUrl=deployment.queue_url, MessageBody=body)
    deployment.sqs.send_message(QueueUrl=deployment.queue_url, MessageBody="later", DelaySeconds=600)
    deployment.dead_letter("/poison", NonRetryableError("x"), "{}")
    minute = int(NOW.timestamp()) // 60 - 3
    deployment.dynamodb.put_item(TableName="state", Item={contract.STATE_PARTITION_KEY: {"S": WATERMARK_KEY},
                                                          "bucket": {"N": str(minute)}, "cursors": {"M": {}}})
    # WHEN status runs, as text and as JSON
    text = deployment.run("status")
    shown = parsed(deployment.run("status", "--json"))
    # THEN both show the counts and the lag
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[1].split()[:5] == ["work", "queue", "2", "0", "1"]
    assert lines[2].split()[:4] == ["DLQ", "1", "0", "0"]
    assert "ApproximateAgeOfOldestMessage" in text.stdout
    assert "delay dispatcher: watermark 2026-11-22T11:57:00Z, lag 3 min" in text.stdout
    assert shown["queues"]["work queue"] == {"url": deployment.queue_url, "visible": 2, "in_flight": 0, "delayed": 1,
                                             "oldest_age_seconds": None}
    assert shown["queues"]["DLQ"]["visible"] == 1
    assert shown["delay_dispatcher"]["lag_minutes"] == 3


def test_status_before_the_dispatcher_ran_says_so(deployment):
    result = deployment.run("status")
    assert "delay dispatcher: no watermark yet: the delay dispatcher has not run" in result.stdout


def test_status_without_a_state_table_says_how_to_give_one(deployment):
    result = deployment.run("status", state=False)
    assert result.exit_code == 0 and "delay dispatcher: no state table (pass --state-table or --stack)" in result.stdout


def test_send_of_an_empty_body_names_a_fix_that_applies(deployment):
    # GIVEN an empty body (an empty file, empty stdin, or '')  WHEN sent
    result = deployment.run("send", "/hello", "")
    # THEN it is refused in one line whose fix fits an empty body ("remove it, or base64-encode the body" does not)
    assert result.exit_code == 2
    assert "base64-encode" not in result.output and "remove it" not in result.output, result.output


def test_send_errors_name_the_command_lines_options_not_the_python_api(deployment):
    # GIVEN a standard queue  WHEN `send --group g` and `send --cancellable` without a delay are run
    group = deployment.run("send", "/hello", "hi", "--group", "g")
    cancellable = deployment.run("send", "/hello", "hi", "--cancellable")
    # THEN each one-line error names the option the person typed (--group, --delay/--cancellable),
    # not Client.send's parameters (group_id, cancellable=True)
    assert "--group" in group.output, group.output
    assert "cancellable=True" not in cancellable.output and "--delay" in cancellable.output, cancellable.output
