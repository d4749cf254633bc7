"""`delayed list` and `delayed cancel KEY` against moto: the delay table's coming messages, and the race's exit codes."""

from __future__ import annotations

import json

import pytest

from tests.cli.deployment import NOW, parsed
from worker_tier import Client
from worker_tier.core import contract
from worker_tier.delays.delay import BUCKET_SECONDS
from worker_tier.delays.dispatcher import DelayDispatcher
from worker_tier.delays.dispatch_state import minute_key

HOUR = 3600


@pytest.fixture
def delayed(deployment):
    """The deployment plus a delay table, and a producer Client on it with the deployment's clock."""
    deployment.dynamodb.create_table(
        TableName="delay", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": contract.DELAY_PARTITION_KEY, "KeyType": "HASH"},
                   {"AttributeName": contract.DELAY_SORT_KEY, "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": contract.DELAY_PARTITION_KEY, "AttributeType": "S"},
                              {"AttributeName": contract.DELAY_SORT_KEY, "AttributeType": "S"}],
    )
    deployment.client = Client(deployment.queue_url, "delay", sqs=deployment.sqs, dynamodb=deployment.dynamodb,
                               clock=NOW.timestamp, state_table="state")
    return deployment


def run(deployment, *command: str):
    return deployment.run("--delay-table", "delay", *command)


def test_list_shows_the_next_messages_due_in_due_order(delayed):
    # GIVEN three delayed messages, one of them cancellable, and one due beyond the window
    delayed.client.send("/b", "2", delay=2 * HOUR)
    delayed.client.send("/a", "1", delay=HOUR, dedupe_key="remind-1", cancellable=True)
    delayed.client.send("/c", "3", delay=3 * HOUR)
    delayed.client.send("/late", "4", delay=30 * HOUR)
    # WHEN the next messages within four hours are listed
    listing = parsed(run(delayed, "delayed", "list", "--within", "240", "--json"))
    # THEN they come in due order, with their path, key and whether they can be cancelled
    assert [(m["path"], m["dedupe_key"], m["cancellable"], m["in_seconds"]) for m in listing["messages"]] == [
        ("/a", "remind-1", True, HOUR), ("/b", None, False, 2 * HOUR), ("/c", None, False, 3 * HOUR)]
    assert listing["messages"][0]["due"] == "2026-11-22T13:00:00.000Z"


def test_list_filters_by_path_and_stops_at_the_limit(delayed):
    for n in range(4):
        delayed.client.send("/x" if n % 2 else "/y", str(n), delay=HOUR + n * 60)
    listing = parsed(run(delayed, "delayed", "list", "--within", "120", "--path", "/x", "--limit", "1", "--json"))
    assert [(m["path"], m["in_seconds"]) for m in listing["messages"]] == [("/x", HOUR + 60)]


def test_list_for_people_is_a_table_with_what_it_read(delayed):
    delayed.client.send("/a", "1", delay=HOUR + 90, dedupe_key="k", cancellable=True)
    result = run(delayed, "delayed", "list", "--within", "120")
    assert result.exit_code == 0, result.output
    header, row, summary = result.stdout.splitlines()
    assert header.split() == ["DUE", "IN", "PATH", "DEDUPE", "KEY", "CANCELLABLE", "ID"]
    assert row.split()[:5] == ["2026-11-22T13:01:30.000Z", "1h01m", "/a", "k", "yes"]
    assert summary == "1 shown, read the minutes 2026-11-22T12:00:00.000Z through 2026-11-22T14:00:00.000Z"


def test_list_names_the_same_minutes_read_in_its_footer_and_its_json(delayed):
    # GIVEN a message due in an hour
    delayed.client.send("/a", "1", delay=HOUR)
    # WHEN the next two hours are listed, as text and as JSON
    text = run(delayed, "delayed", "list", "--within", "120").stdout.splitlines()[-1]
    listing = parsed(run(delayed, "delayed", "list", "--within", "120", "--json"))
    # THEN the footer names the first and the last minute read that the JSON names
    assert text.endswith(f"read the minutes {listing['from_minute']} through {listing['to_minute']}")


def test_list_starts_at_the_watermark_past_what_was_dispatched(delayed):
    # GIVEN a message due in 20 minutes, which the delay dispatcher has sent, and one in two hours
    delayed.client.send("/soon", "1", delay=20 * 60)
    delayed.client.send("/later", "2", delay=2 * HOUR)
    DelayDispatcher("delay", "state", delayed.queue_url, dead_letter_queue_url=delayed.dlq_url, sqs=delayed.sqs,
                    dynamodb=delayed.dynamodb, clock=lambda: NOW.timestamp() + 8 * 60, parallel=False).run()
    # WHEN the coming messages are listed
    listing = parsed(run(delayed, "delayed", "list", "--within", "180", "--json"))
    # THEN only the one not yet dispatched is listed
    assert [m["path"] for m in listing["messages"]] == ["/later"]


def test_cancel_removes_a_cancellable_message_and_exits_0(delayed):
    # GIVEN a cancellable message due tomorrow
    delayed.client.send("/remind", "r", delay=24 * HOUR, dedupe_key="remind-7", cancellable=True)
    # WHEN it is cancelled from the command line
    result = run(delayed, "delayed", "cancel", "remind-7")
    # THEN it exits 0 and says so, and the table holds nothing for it any more
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("remind-7: cancelled: it was due 2026-11-23T12:00:00.000Z; it will never be delivered")
    assert parsed(run(delayed, "delayed", "list", "--within", str(25 * 60), "--json"))["messages"] == []


def test_a_cancellable_send_prints_the_key_that_delayed_cancel_takes(delayed):
    # GIVEN a message sent from the command line, cancellable, due tomorrow, without a key of its own
    sent = run(delayed, "send", "/remind", "r", "--delay", str(24 * HOUR), "--cancellable")
    assert sent.exit_code == 0, sent.output
    key = sent.stdout.split("worker-tier delayed cancel ")[1].rstrip(")\n")
    # WHEN the printed cancel runs
    cancelled = run(delayed, "delayed", "cancel", key)
    # THEN it is cancelled, and the table holds nothing for it any more
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.startswith(f"{key}: cancelled: it was due 2026-11-23T12:00:00.000Z")
    assert parsed(run(delayed, "delayed", "list", "--within", str(25 * 60), "--json"))["messages"] == []


def test_a_cancellable_send_keeps_its_own_key_and_names_it_in_json(delayed):
    # WHEN a cancellable message is sent with a dedupe key, as JSON
    sent = parsed(run(delayed, "send", "/remind", "r", "--delay", str(2 * HOUR), "--cancellable", "--dedupe-key", "remind-7",
                      "--json"))
    # THEN the JSON names the key, and delayed list shows the message cancellable under it
    assert (sent["dedupe_key"], sent["cancellable"]) == ("remind-7", True)
    [listed] = parsed(run(delayed, "delayed", "list", "--within", "180", "--json"))["messages"]
    assert (listed["dedupe_key"], listed["cancellable"], listed["message_id"]) == ("remind-7", True, sent["message_id"])


def test_a_cancellable_send_without_the_state_table_is_a_usage_error(delayed):
    result = delayed.run("--delay-table", "delay", "send", "/remind", "r", "--delay", "3600", "--cancellable", state=False)
    assert result.exit_code == 2 and "no state_table: pass --state-table" in result.stderr


def test_a_cancellable_send_due_too_soon_is_refused_naming_the_window(delayed):
    result = run(delayed, "send", "/remind", "r", "--delay", "60", "--cancellable")
    assert result.exit_code == 2
    assert ("Error: --cancellable with due in 60 s: a cancellable message must be due more than 840 s ahead (the "
            "delay dispatcher takes it 840 s before it is due, and it is cancellable only until then); give --delay or "
            "--at later than that") in result.stderr


def test_cancel_that_lost_the_race_exits_3_with_a_clear_line(delayed):
    # GIVEN a cancellable message whose minute the delay dispatcher has started
    delayed.client.send("/remind", "r", delay=HOUR, dedupe_key="k", cancellable=True)
    bucket = int((NOW.timestamp() + HOUR) // BUCKET_SECONDS)
    delayed.dynamodb.put_item(TableName="state", Item={"pk": {"S": minute_key(bucket)}, "started_ms": {"N": "1"}})
    # WHEN it is cancelled
    result = run(delayed, "delayed", "cancel", "k", "--json")
    # THEN the exit code is 3, and the answer says it is delivered as sent
    assert result.exit_code == 3
    assert '"status": "dispatch started"' in result.stdout and "it is delivered as sent" in result.stdout


@pytest.mark.parametrize(("setup", "code", "line"), [
    ({}, 4, "nobody: no delayed message has dedupe_key 'nobody' (never sent, cancelled, or expired)"),
    ({"dedupe_key": "nobody"}, 5, "nobody: dedupe_key 'nobody' was not sent with cancellable=True; it is delivered as sent"),
])
def test_cancel_of_an_unknown_or_plain_key_exits_non_zero_with_the_reason(delayed, setup, code, line):
    if setup:
        delayed.client.send("/x", "b", delay=2 * HOUR, **setup)
    result = run(delayed, "delayed", "cancel", "nobody")
    assert result.exit_code == code and result.stderr.strip() == line


def test_cancel_without_the_state_table_is_a_usage_error(delayed):
    result = delayed.run("--delay-table", "delay", "delayed", "cancel", "k", state=False)
    assert result.exit_code == 2 and "no state_table: pass --state-table" in result.stderr


def test_delayed_cancel_json_is_valid_and_exit_code_names_the_outcome(deployment):
    deployment.dynamodb.create_table(TableName="delay", BillingMode="PAY_PER_REQUEST",
                                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                                           {"AttributeName": "sk", "AttributeType": "S"}])
    result = deployment.run("delayed", "cancel", "nobody", "--json", options=("--delay-table", "delay"))
    assert result.exit_code == 4, result.output
    assert json.loads(result.stdout)["status"] == "not found"
