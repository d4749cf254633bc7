"""`dlq list` and `dlq show`: dead letters grouped by path and error type, read without being consumed."""

from __future__ import annotations

from tests.cli.deployment import NOW, hours_ago, parsed
from worker_tier.core import contract
from worker_tier.delays.delay import DelayedMessage
from worker_tier.delays.delivery import Delivery
from worker_tier.core.errors import NonRetryableError


def _three_deaths(deployment):
    poison = [deployment.dead_letter("/poison", NonRetryableError(f"order {n} references a deleted customer"),
                                     f'{{"order_id": {n}}}', failed_at=hours_ago(n)) for n in (1, 2, 5)]
    flaky = deployment.dead_letter("/flaky", ConnectionError("upstream not ready"), "{}", failed_at=hours_ago(3))
    return poison, flaky


def test_dlq_list_groups_by_path_and_error_with_counts_times_and_a_sample_reason(deployment):
    # GIVEN three /poison NonRetryableErrors and one /flaky ConnectionError in the DLQ
    _three_deaths(deployment)
    # WHEN dlq list runs
    result = deployment.run("dlq", "list")
    # THEN one row per group, largest first, with its count, first and last failed_at and a sample reason
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["PATH", "ERROR", "COUNT", "OFFLOADED", "FIRST", "FAILED", "LAST", "FAILED", "SAMPLE", "ID",
                                "SAMPLE", "REASON"]
    assert lines[1].split()[:6] == ["/poison", "NonRetryableError", "3", "0", "2026-11-22T07:00:00.000Z",
                                    "2026-11-22T11:00:00.000Z"]
    assert "references a deleted customer" in lines[1]
    assert lines[2].split()[:3] == ["/flaky", "ConnectionError", "1"] and "upstream not ready" in lines[2]
    assert "4 matching of 4 read" in result.stdout and "released" in result.stdout


def test_dlq_list_does_not_consume_the_queue(deployment):
    # GIVEN four dead letters
    _three_deaths(deployment)
    # WHEN dlq list runs twice
    deployment.run("dlq", "list")
    second = parsed(deployment.run("dlq", "list", "--json"))
    # THEN the second run reads them all again, and all four are visible in the DLQ at once
    assert second["read"] == 4
    assert deployment.depth(deployment.dlq_url) == 4


def test_dlq_list_filters_by_path_error_and_since_and_json_parses(deployment):
    # GIVEN four dead letters, failed 1, 2, 3 and 5 hours ago
    _three_deaths(deployment)
    # WHEN filtered by path, by error type, and by time
    by_path = parsed(deployment.run("dlq", "list", "--path", "/flaky", "--json"))
    by_error = parsed(deployment.run("dlq", "list", "--error", "NonRetryableError", "--json"))
    recent = parsed(deployment.run("dlq", "list", "--since", "150m", "--json"))
    # THEN each keeps only what matches
    assert [(g["path"], g["count"]) for g in by_path["groups"]] == [("/flaky", 1)]
    assert [(g["error_type"], g["count"]) for g in by_error["groups"]] == [("NonRetryableError", 3)]
    assert recent["groups"] == [{"path": "/poison", "error_type": "NonRetryableError", "count": 2, "offloaded": 0,
                                 "first_failed_at": "2026-11-22T10:00:00.000Z", "last_failed_at": "2026-11-22T11:00:00.000Z",
                                 "sample_reason": recent["groups"][0]["sample_reason"],
                                 "message_ids": recent["groups"][0]["message_ids"]}]


def test_dlq_list_prints_ids_that_dlq_show_takes_as_printed(deployment):
    # GIVEN three /poison dead letters and one /flaky
    poison, flaky = _three_deaths(deployment)
    # WHEN dlq list runs, as text and as JSON
    text = deployment.run("dlq", "list")
    listed = parsed(deployment.run("dlq", "list", "--json"))
    # THEN each row names a sample message id of its group, and the JSON names every id of each group
    sample_ids = [line.split()[6] for line in text.stdout.splitlines()[1:3]]
    assert sample_ids[0] in poison and sample_ids[1] == flaky
    assert [sorted(g["message_ids"]) for g in listed["groups"]] == [sorted(poison), [flaky]]
    # AND dlq show takes each id as printed
    for message_id in [*sample_ids, *listed["groups"][0]["message_ids"]]:
        shown = parsed(deployment.run("dlq", "show", message_id, "--json"))
        assert shown["message_id"] == message_id


def test_dlq_list_limit_reads_at_most_that_many_and_says_there_may_be_more(deployment):
    # GIVEN four dead letters  WHEN dlq list reads at most two
    _three_deaths(deployment)
    result = deployment.run("dlq", "list", "--limit", "2")
    # THEN it says it stopped at the limit
    assert "of 2 read (the limit: there may be more)" in result.stdout
    assert deployment.depth(deployment.dlq_url) == 4


def test_dlq_list_since_that_is_no_time_is_a_usage_error(deployment):
    result = deployment.run("dlq", "list", "--since", "yesterday")
    assert result.exit_code == 2
    assert "expected an ISO 8601 time (2026-11-22T09:30:00Z) or an age (30m, 2h, 7d), got 'yesterday'" in result.stderr


def test_dlq_help_says_reading_does_not_consume(deployment):
    result = deployment.run("dlq", "list", "--help")
    assert "Reading does not consume the DLQ" in result.stdout and "released" in result.stdout


def test_dlq_show_prints_body_attributes_and_reason(deployment):
    # GIVEN a dead letter with a user attribute
    message_id = deployment.dead_letter("/poison", NonRetryableError("order 42 references a deleted customer"),
                                        '{"order_id": 42}', attributes={"tenant": "acme"})
    # WHEN dlq show runs, as text and as JSON
    text = deployment.run("dlq", "show", message_id)
    shown = parsed(deployment.run("dlq", "show", message_id, "--json"))
    # THEN both carry the body, the attributes and the whole reason
    assert text.exit_code == 0, text.output
    assert f"message_id: {message_id}" in text.stdout and "reason.error_message: order 42 references" in text.stdout
    assert "attribute tenant: acme" in text.stdout and text.stdout.rstrip().endswith('{"order_id": 42}')
    assert shown["reason"]["error_type"] == "NonRetryableError" and shown["reason"]["attempts"] == 3
    assert shown["attributes"]["tenant"] == {"DataType": "String", "StringValue": "acme"}
    assert "worker_tier.failure" not in shown["attributes"] and shown["body"] == '{"order_id": 42}'
    assert deployment.depth(deployment.dlq_url) == 1


def test_dlq_show_of_an_unknown_id_names_it(deployment):
    deployment.dead_letter("/poison", NonRetryableError("x"), "{}")
    result = deployment.run("dlq", "show", "no-such-id")
    assert result.exit_code == 1
    assert f"message no-such-id is not among the 1 messages read from {deployment.dlq_url}" in result.stderr


def test_dlq_list_shows_a_message_too_large_for_its_reason_once_with_its_records_reason(deployment):
    # GIVEN a message too large to carry its reason, dead-lettered twice over (two reason records, one message),
    # and an ordinary dead letter
    sends = deployment.too_large_dead_letter("/big", NonRetryableError("too big to print"), "B" * 2_000, "src-1")
    deployment.sqs.send_message(**sends[0])
    deployment.dead_letter("/flaky", ConnectionError("upstream not ready"), "{}", failed_at=hours_ago(3))
    # WHEN dlq list runs, as JSON and as text
    listed = parsed(deployment.run("dlq", "list", "--json"))
    text = deployment.run("dlq", "list")
    # THEN the big message is one entry, with its record's reason; the records are not messages of their own
    assert [(g["path"], g["error_type"], g["count"], g["sample_reason"]) for g in listed["groups"]] == [
        ("/big", "NonRetryableError", 1, "too big to print"), ("/flaky", "ConnectionError", 1, "upstream not ready")]
    assert (listed["read"], listed["reason_records_joined"], listed["reason_records_unjoined"]) == (2, 2, [])
    assert "2 matching of 2 read" in text.stdout


def test_dlq_list_shows_a_delay_pointer_apart_as_a_pointer_not_a_dead_task(deployment):
    # GIVEN a dead letter and the delay path's pointer to a delayed message kept in its delay table
    deployment.dead_letter("/transcode", NonRetryableError("bad"), "t1")
    delayed = DelayedMessage(message_id="m-1", due_ms=1_800_000_000_000, body='{"video": 1}',
                             attributes={contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/transcode"}})
    delivery = Delivery(None, deployment.dlq_url, "delays", clock=NOW.timestamp)
    entry = delivery._pointer(delayed, delivery._reason(RuntimeError("too large"), "/transcode"), "MessageTooLong")
    pointer_id = deployment.sqs.send_message(QueueUrl=deployment.dlq_url, MessageBody=entry["MessageBody"],
                                             MessageAttributes=entry["MessageAttributes"])["MessageId"]
    # WHEN dlq list runs, as text and as JSON
    text, report = deployment.run("dlq", "list"), parsed(deployment.run("dlq", "list", "--json"))
    # THEN the pointer is named apart with its delay table item, and not counted as a dead task
    assert f"{pointer_id}: a pointer to a delayed message, not a task body: the message is in delay table delays" in text.stdout
    assert [g["count"] for g in report["groups"]] == [1]
    assert [(p["message_id"], p["delay_table"], p["sk"]) for p in report["delay_pointers"]] == [(pointer_id, "delays", "1800000000000#m-1")]
