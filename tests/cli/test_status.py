"""`status` beyond the queue counts: oldest ages, the delay table's backlog, periodic ticks, alarms, --watch."""

from __future__ import annotations

import json
from datetime import timedelta

import boto3
import pytest
from click.testing import CliRunner

from tests.cli.deployment import NOW, parsed
from worker_tier.core import contract
from worker_tier.delays import delay
from worker_tier.delays.dispatch_state import WATERMARK_KEY
from worker_tier.periodic.ticks import STATUS_ATTRIBUTE, STATUS_SENT, Tick
from worker_tier_cli import cli

MINUTE = int(NOW.timestamp()) // 60


def _delay_table(deployment, due_in_minutes):
    """A delay table holding one message due at each of ``due_in_minutes`` from NOW (negative: overdue)."""
    deployment.dynamodb.create_table(
        TableName="delays", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": delay.PK, "KeyType": "HASH"}, {"AttributeName": delay.SK, "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": delay.PK, "AttributeType": "S"}, {"AttributeName": delay.SK, "AttributeType": "S"}])
    for n, minutes in enumerate(due_in_minutes):
        due_ms = int((NOW + timedelta(minutes=minutes)).timestamp() * 1000)
        message = delay.DelayedMessage(f"m{n}", due_ms, "{}", {}, shard=n % 3)
        deployment.dynamodb.put_item(TableName="delays", Item=message.to_item())


def _watermark(deployment, minute):
    deployment.dynamodb.put_item(TableName="state", Item={contract.STATE_PARTITION_KEY: {"S": WATERMARK_KEY},
                                                          "bucket": {"N": str(minute)}, "cursors": {"M": {}}})


def test_status_counts_the_delay_backlog_by_hour_after_the_watermark(deployment):
    # GIVEN a watermark 10 minutes behind, messages due 20 and 5 minutes ago (the first dispatched), in 30 min,
    # twice in 90 min, and in 3 days
    _watermark(deployment, MINUTE - 10)
    _delay_table(deployment, [-20, -5, 30, 90, 90, 3 * 24 * 60])
    # WHEN status runs with the delay table
    shown = parsed(deployment.run("status", "--json", options=("--delay-table", "delays")))
    text = deployment.run("status", options=("--delay-table", "delays")).stdout
    # THEN one is overdue, three fall in the next 24 h by hour, one is later; the dispatched one is not counted
    backlog = shown["delay_backlog"]
    assert (backlog["overdue"], backlog["later"]) == (1, 1)
    assert [(h["hour"], h["count"]) for h in backlog["by_hour"] if h["count"]] == [
        ("2026-11-22T12:00:00Z", 1), ("2026-11-22T13:00:00Z", 2)]
    assert len(backlog["by_hour"]) == 24
    assert "delay table backlog (not yet dispatched): 1 overdue, 3 in the next 24 h, 1 later" in text
    assert "2026-11-22T13:00:00Z  2" in text


def test_status_text_and_json_name_the_same_lag_for_a_watermark_ahead_of_now(deployment):
    # GIVEN a watermark 2 minutes ahead of now (the delay dispatcher dispatches ahead, on time)
    _watermark(deployment, MINUTE + 2)
    # WHEN status runs, as JSON and as text
    shown = parsed(deployment.run("status", "--json"))["delay_dispatcher"]
    text = deployment.run("status").stdout
    # THEN both say lag 0 and 2 minutes ahead
    assert (shown["lag_minutes"], shown["ahead_minutes"]) == (0, 2)
    assert "delay dispatcher: watermark 2026-11-22T12:02:00Z, 2 min ahead of now (dispatched ahead, on time), lag 0 min" in text


def test_status_shows_the_oldest_message_ages_from_cloudwatch(deployment):
    # GIVEN CloudWatch's ApproximateAgeOfOldestMessage for the work queue only
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    cloudwatch.put_metric_data(Namespace="AWS/SQS", MetricData=[{
        "MetricName": "ApproximateAgeOfOldestMessage", "Dimensions": [{"Name": "QueueName", "Value": "work"}],
        "Value": 321, "Timestamp": NOW - timedelta(seconds=90)}])
    # WHEN status runs
    shown = parsed(deployment.run("status", "--json"))
    text = deployment.run("status").stdout
    # THEN the work queue's age is CloudWatch's, the DLQ's unknown
    assert shown["queues"]["work queue"]["oldest_age_seconds"] == 321
    assert shown["queues"]["DLQ"]["oldest_age_seconds"] is None
    assert text.splitlines()[1].split()[:6] == ["work", "queue", "0", "0", "0", "5m21s"]


def _schedule(name, schedule, zone, url, group="ticks"):
    scheduler = boto3.client("scheduler", region_name="us-east-1")
    scheduler.create_schedule(
        Name=name, GroupName=group, ScheduleExpression="cron(0 12 * * ? *)", ScheduleExpressionTimezone=zone,
        Description=f"cron.yaml {name}: {schedule} ({zone}) -> {url}", FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": "arn:aws:lambda:us-east-1:123456789012:function:f", "RoleArn": "arn:aws:iam::123456789012:role/r"})


def test_status_shows_each_periodic_tasks_last_tick_its_fate_and_the_next(deployment):
    # GIVEN two deployed entries; the last tick of backup was sent, that of report never enqueued
    boto3.client("scheduler", region_name="us-east-1").create_schedule_group(Name="ticks")
    _schedule("backup", "0 */6 * * *", "UTC", "/backup")
    _schedule("report", "30 9 * * *", "Europe/Paris", "/report")
    sent = Tick("backup", "/backup", NOW)  # NOW is 12:00 UTC, a backup tick
    deployment.dynamodb.put_item(TableName="state", Item={contract.STATE_PARTITION_KEY: {"S": sent.key},
                                                          STATUS_ATTRIBUTE: {"S": STATUS_SENT}})
    # WHEN status runs with the schedule group
    shown = parsed(deployment.run("status", "--json", options=("--schedule-group", "ticks")))
    text = deployment.run("status", options=("--schedule-group", "ticks")).stdout
    # THEN each entry has its last tick (and what became of it) and its next, in its own zone
    backup, report = shown["periodic_tasks"]["entries"]
    assert (backup["name"], backup["last_tick"], backup["last_tick_fate"], backup["next_tick"]) == (
        "backup", "2026-11-22T12:00:00+00:00", "sent", "2026-11-22T18:00:00+00:00")
    assert (report["last_tick"], report["last_tick_fate"], report["next_tick"]) == (
        "2026-11-22T09:30:00+01:00", "not enqueued", "2026-11-23T09:30:00+01:00")
    assert "backup" in text and "not enqueued" in text and "Europe/Paris" in text


def test_status_lists_the_stacks_alarms_in_alarm_only(deployment):
    # GIVEN a stack, one of its alarms in ALARM, one OK, and another stack's alarm in ALARM
    boto3.client("cloudformation", region_name="us-east-1").create_stack(StackName="Jobs", TemplateBody=json.dumps({
        "Resources": {"Q": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"QueueUrl": {"Value": deployment.queue_url}, "DeadLetterQueueUrl": {"Value": deployment.dlq_url}}}))
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    for name in ("Jobs-DeadLetters-ABC", "Jobs-Backlog-DEF", "Other-DeadLetters-GHI"):
        cloudwatch.put_metric_alarm(AlarmName=name, MetricName="m", Namespace="n", Statistic="Sum", Period=60,
                                    EvaluationPeriods=1, Threshold=0, ComparisonOperator="GreaterThanThreshold")
    for name in ("Jobs-DeadLetters-ABC", "Other-DeadLetters-GHI"):
        cloudwatch.set_alarm_state(AlarmName=name, StateValue="ALARM", StateReason="Threshold Crossed")
    # WHEN status runs against the stack
    args = ["--region", "us-east-1", "--stack", "Jobs", "status"]
    shown = parsed(CliRunner().invoke(cli, [*args, "--json"], obj=deployment.runtime))
    text = CliRunner().invoke(cli, args, obj=deployment.runtime).stdout
    # THEN only its own alarm in ALARM is listed
    assert [a["name"] for a in shown["alarms_in_alarm"]] == ["Jobs-DeadLetters-ABC"]
    assert "alarms in ALARM: 1" in text and "Jobs-DeadLetters-ABC" in text and "Other" not in text


def test_status_watch_refreshes_until_ctrl_c(deployment):
    # GIVEN a sleep that is interrupted (Ctrl-C) on its second call, and a message sent between refreshes
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt
        deployment.sqs.send_message(QueueUrl=deployment.queue_url, MessageBody="a")

    deployment.runtime.sleep = sleep
    # WHEN status --watch runs every 5 s
    result = deployment.run("status", "--watch", "--interval", "5")
    # THEN it printed twice, the second time with the new message, and ended cleanly
    assert result.exit_code == 0, result.output
    assert sleeps == [5, 5]
    assert result.stdout.count("(every 5 s; Ctrl-C stops)") == 2
    tables = [line.split()[:3] for line in result.stdout.splitlines() if line.startswith("work queue")]
    assert tables == [["work", "queue", "0"], ["work", "queue", "1"]]


@pytest.mark.parametrize("interval", ["0", "0.5"])
def test_status_watch_interval_below_one_second_is_a_usage_error(deployment, interval):
    result = deployment.run("status", "--watch", "--interval", interval)
    assert result.exit_code == 2 and "--interval" in result.stderr and "x>=1" in result.stderr


def test_status_shows_each_flow_limit_how_busy_it_is_and_how_many_messages_wait_on_it(deployment):
    # GIVEN a rate whose next free turn is 4 s ahead (four turns taken at 1/s), a tenant's concurrency with 2 of 3 slots held (one more lease ended), and three
    # messages waiting: two on the rate (one whose wait has ended), one on the tenant's slots
    from worker_tier.flow.limiter import RATE_KEY_PREFIX, SLOTS_KEY_PREFIX, ConcurrencySlots, Rate, RateLimiter, Waits, item_key

    now = NOW.timestamp()
    client = lambda: deployment.dynamodb  # noqa: E731
    rates = RateLimiter(client, "state")
    for _ in range(4):
        assert rates.admit("/email", None, Rate.parse("1/s"), now, hold=5).admitted
    slots = ConcurrencySlots(client, "state")
    slots.take("/sync", "acme", 3, "a", now - 100, 10)  # its lease ended 90 s ago
    slots.take("/sync", "acme", 3, "b", now, 60)
    slots.take("/sync", "acme", 3, "c", now, 60)
    waits = Waits(client, "state")
    waits.add("m1", now + 30, item_key(RATE_KEY_PREFIX, "/email", None))
    waits.add("m2", now - 1, item_key(RATE_KEY_PREFIX, "/email", None))
    waits.add("m3", now + 5, item_key(SLOTS_KEY_PREFIX, "/sync", "acme"))
    # WHEN status runs, as JSON and as text
    shown = parsed(deployment.run("status", "--json"))["flow_limits"]
    text = deployment.run("status").stdout
    # THEN both limits are listed with their state and the messages waiting on each now
    assert shown == [
        {"kind": "rate", "limit": "1/s burst 1", "path": "/email", "key": None, "waiting": 1,
         "booked_ahead_seconds": 4.0, "held": None},
        {"kind": "concurrency", "limit": "3", "path": "/sync", "key": "acme", "waiting": 1,
         "booked_ahead_seconds": None, "held": 2},
    ]
    assert "/email" in text and "1/s burst 1" in text and "acme" in text
