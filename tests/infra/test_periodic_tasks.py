"""PeriodicTasks in the template: schedules, targets, time zones, grants."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dynamodb as dynamodb, aws_sns as sns, aws_sqs as sqs
from aws_cdk.assertions import Match, Template

from worker_tier_cdk import defaults
from worker_tier.core.errors import CronConfigError
from worker_tier.periodic.cron_config import parse
from worker_tier_cdk.periodic_tasks import (
    CRON_TIMEOUT_SECONDS,
    PeriodicTasks,
    PeriodicTasksProps,
    max_event_age_seconds,
)
from worker_tier.core import limits
from tests.support.synth import synth
from worker_tier.periodic.ticks import TICK_LEASE_SECONDS, TICK_PENDING_POLL_SECONDS, TICK_PENDING_POLLS
from worker_tier.core.limits import LAMBDA_ASYNC_MAX_EVENT_AGE_SECONDS, LAMBDA_ASYNC_MAX_RETRY_ATTEMPTS
from worker_tier.core.settings import Settings

CRON = """\
version: 1
cron:
 - name: "backup-job"
   url: "/backup"
   schedule: "0 */12 * * *"
 - name: "first-monday-or-first"
   url: "/report"
   schedule: "0 6 1 * MON"
   timezone: "Europe/Berlin"
 - name: "paused"
   url: "/paused"
   schedule: "@daily"
   enabled: false
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Template:
    stack, _ = synth(settings=Settings(), cron_entries=parse(CRON), outdir=str(tmp_path_factory.mktemp("cron")))
    return Template.from_stack(stack)


def schedules(template: Template) -> list[dict]:
    return [r["Properties"] for r in template.find_resources("AWS::Scheduler::Schedule").values()]


def test_one_schedule_per_expression_both_day_fields_make_two(template):
    expressions = sorted((s["ScheduleExpression"], s["ScheduleExpressionTimezone"]) for s in schedules(template))
    assert expressions == [
        ("cron(0 0 * * ? *)", "UTC"),
        ("cron(0 0,12 * * ? *)", "UTC"),
        ("cron(0 6 1 * ? *)", "Europe/Berlin"),
        ("cron(0 6 ? * MON *)", "Europe/Berlin"),
    ]


def test_schedules_are_exact_time_and_carry_the_tick(template):
    for schedule in schedules(template):
        assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
        payload = json.loads(schedule["Target"]["Input"])
        assert payload["scheduled_time"] == "<aws.scheduler.scheduled-time>"
        assert payload["body"] == "elasticbeanstalk scheduled job"
        assert schedule["Target"]["RetryPolicy"]["MaximumRetryAttempts"] == 5
        assert "DeadLetterConfig" in schedule["Target"]


def test_disabled_entry_is_deployed_disabled(template):
    states = {json.loads(s["Target"]["Input"])["name"]: s["State"] for s in schedules(template)}
    assert states == {"backup-job": "ENABLED", "first-monday-or-first": "ENABLED", "paused": "DISABLED"}


def _dead_letter_queue_arn(template: Template) -> dict:
    [queue_id] = [key for key in template.find_resources("AWS::SQS::Queue") if key.startswith("PeriodicTasksTickDeadLetterQueue")]
    return {"Fn::GetAtt": [queue_id, "Arn"]}


def test_cron_function_may_only_send_claim_release_offload_and_dead_letter(template):
    send = ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"]
    offload = {"Fn::Join": ["", [{"Fn::GetAtt": [Match.string_like_regexp("^PayloadBucket"), "Arn"]}, "/payloads/*"]]}
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    Match.object_like({"Action": send, "Resource": {"Fn::GetAtt": [Match.string_like_regexp("^WorkerQueue"), "Arn"]}}),
                    Match.object_like({"Action": ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"]}),
                    Match.object_like({"Action": ["s3:PutObject", "s3:DeleteObject"], "Resource": offload}),
                    Match.object_like({"Action": send, "Resource": _dead_letter_queue_arn(template)}),
                ]
            }
        },
    )


def test_a_tick_the_function_fails_is_retried_then_dead_lettered(template):
    # GIVEN the cron function's asynchronous invocation settings  WHEN synthesized
    # THEN every retry Lambda allows, its longest event age, and the tick DLQ on failure
    template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {
            "FunctionName": {"Ref": Match.string_like_regexp("^PeriodicTasksCronFunction")},
            "MaximumRetryAttempts": LAMBDA_ASYNC_MAX_RETRY_ATTEMPTS,
            "MaximumEventAgeInSeconds": LAMBDA_ASYNC_MAX_EVENT_AGE_SECONDS,
            "DestinationConfig": {"OnFailure": {"Destination": _dead_letter_queue_arn(template)}},
        },
    )


def test_a_failed_tick_raises_an_alarm(template):
    # GIVEN the cron function  WHEN synthesized  THEN any error in a minute alarms
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "AWS/Lambda",
            "MetricName": "Errors",
            "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": Match.string_like_regexp("^PeriodicTasksCronFunction")}}],
            "Statistic": "Sum",
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )


def test_claim_lease_outlasts_the_function_and_the_wait_fits_in_it():
    # GIVEN the lease, the duplicate's wait and the function timeout
    wait_seconds = TICK_PENDING_POLLS * TICK_PENDING_POLL_SECONDS
    # THEN a duplicate finishes waiting within one invocation, and a live holder is never overtaken
    assert wait_seconds < CRON_TIMEOUT_SECONDS < TICK_LEASE_SECONDS
    # AND the lease is gone by Lambda's first asynchronous retry, 1 minute after a failure
    assert TICK_LEASE_SECONDS <= 60


def test_scheduler_role_trusts_only_this_accounts_schedule_group(template):
    # GIVEN the schedules' group  WHEN synthesized
    [(group_id, group)] = template.find_resources("AWS::Scheduler::ScheduleGroup").items()
    # THEN every schedule is in it
    assert {s.get("GroupName") for s in schedules(template)} == {group["Properties"]["Name"]}
    # AND only Scheduler acting for this account's group may assume the role (confused-deputy guard)
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": "sts:AssumeRole",
                        "Effect": "Allow",
                        "Principal": {"Service": "scheduler.amazonaws.com"},
                        "Condition": {
                            "StringEquals": {
                                "aws:SourceAccount": {"Ref": "AWS::AccountId"},
                                "aws:SourceArn": {"Fn::GetAtt": [group_id, "Arn"]},
                            }
                        },
                    }
                ]
            }
        },
    )


def test_scheduler_role_invokes_only_the_cron_function(template):
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [{"Action": "lambda:InvokeFunction", "Effect": "Allow", "Resource": {"Fn::GetAtt": [Match.string_like_regexp("PeriodicTasksCronFunction"), "Arn"]}}]
                )
            }
        },
    )


def test_repository_cron_yaml_is_deployed_by_default(stack):
    # The session stack is built without cron_entries: it reads the repo's cron.yaml.
    assert stack.periodic_tasks is not None
    assert [s.node.id for s in stack.periodic_tasks.schedules] == ["Entry0Schedule0", "Entry1Schedule0"]


def test_empty_cron_list_deploys_nothing_periodic(tmp_path):
    stack, _ = synth(settings=Settings(), cron_entries=[], outdir=str(tmp_path))
    assert stack.periodic_tasks is None
    Template.from_stack(stack).resource_count_is("AWS::Scheduler::Schedule", 0)
    Template.from_stack(stack).resource_count_is("AWS::Lambda::Function", 3)  # worker, delay scheduler, delay recovery


@pytest.mark.parametrize(
    "schedule, seconds",
    [("* * * * *", 60), ("*/15 * * * *", 900), ("0 */12 * * *", 43200), ("0 0 * * *", 86400), ("0 9,17 * * *", 28800)],
)
def test_retries_stop_before_the_next_tick(schedule, seconds):
    entry = parse(f'version: 1\ncron:\n - name: "a"\n   url: "/a"\n   schedule: "{schedule}"\n')[0]
    assert max_event_age_seconds(entry) == seconds


def test_on_a_fifo_queue_a_name_sqs_refuses_as_group_id_fails_synth(tmp_path):
    # GIVEN an entry parsed without knowing the queue type, whose name has a space
    entries = parse('version: 1\ncron:\n - name: "nightly report"\n   url: "/report"\n   schedule: "@daily"\n')
    # WHEN the stack's queue is FIFO  THEN synth stops: on FIFO the name is each tick's MessageGroupId
    with pytest.raises(CronConfigError) as error:
        synth(settings=Settings(fifo=True), cron_entries=entries, outdir=str(tmp_path))
    assert str(error.value) == (
        "cron.yaml line 3, entry 'nightly report': name (the MessageGroupId on a FIFO queue) would fail every tick: "
        "MessageGroupId 'nightly report' is not allowed: SQS takes 1 to 128 ASCII letters, digits and punctuation (no spaces)"
    )


BIG_BODY_ENTRIES = parse("version: 1\ncron:\n - name: big\n   url: /big\n   schedule: '@daily'\n   body: " + "x" * 300_000 + "\n")
BIG_BODY_REFUSED = (
    "cron.yaml line 3, entry 'big': body would fail every tick: the tick message is 300120 bytes with its attributes; "
    "the queue's MaximumMessageSize is 262144 bytes"
)


def periodic_tasks(queue_factory, entries=BIG_BODY_ENTRIES, stack: Stack | None = None, **props) -> PeriodicTasks:
    """PeriodicTasks in a fresh stack (or ``stack``), on the queue ``queue_factory(stack)`` makes."""
    stack = stack or Stack(App(), "Periodic")
    table = dynamodb.TableV2(stack, "State", **defaults.state_table_props())
    return PeriodicTasks(stack, "PeriodicTasks", PeriodicTasksProps(entries=entries, queue=queue_factory(stack), state_table=table, **props))


def imported_queue(stack: Stack) -> sqs.IQueue:
    return sqs.Queue.from_queue_arn(stack, "Imported", "arn:aws:sqs:us-east-1:123456789012:work")


def test_a_tick_larger_than_the_queues_maximum_message_size_fails_synth():
    # GIVEN a queue created in the app with SQS's former default size, 256 KiB, and a 300,000-byte body
    # WHEN PeriodicTasks is built  THEN synth stops, naming the entry and the queue's size
    with pytest.raises(CronConfigError) as error:
        periodic_tasks(lambda stack: sqs.Queue(stack, "Queue", max_message_size_bytes=256 * 1024))
    assert str(error.value) == BIG_BODY_REFUSED
    # AND on a queue with no MaximumMessageSize set, SQS's 1 MiB applies and the entry is accepted
    assert periodic_tasks(lambda stack: sqs.Queue(stack, "Queue")).schedules


def test_an_imported_queue_is_taken_as_256_kib_unless_the_prop_says_otherwise():
    # GIVEN an imported queue, whose MaximumMessageSize synth cannot read
    # WHEN built with no size  THEN SQS's former default, 256 KiB, is assumed
    with pytest.raises(CronConfigError) as error:
        periodic_tasks(imported_queue)
    assert str(error.value) == BIG_BODY_REFUSED
    # WHEN the prop gives the queue's size  THEN that size is used
    assert periodic_tasks(imported_queue, maximum_message_size_bytes=limits.SQS_MAX_MESSAGE_BYTES).schedules


@pytest.mark.parametrize(
    "queue_factory, size, message",
    [
        (
            imported_queue,
            1023,
            "maximum_message_size_bytes must be 1024..1048576 (SQS MaximumMessageSize), got 1023",
        ),
        (
            lambda stack: sqs.Queue(stack, "Queue"),
            262144,
            "maximum_message_size_bytes is for an imported queue, got 262144 for a queue created in the app, whose own "
            "MaximumMessageSize is used; remove the prop",
        ),
    ],
)
def test_a_maximum_message_size_prop_that_cannot_apply_is_refused(queue_factory, size, message):
    with pytest.raises(ValueError) as error:
        periodic_tasks(queue_factory, entries=parse(CRON), maximum_message_size_bytes=size)
    assert str(error.value) == message


def test_alarm_actions_go_on_every_alarm():
    # GIVEN an SNS topic as the alarm action (formerly: PeriodicTasks had no alarm_actions, unlike WorkerQueue)
    stack = Stack(App(), "Periodic")
    topic = sns.Topic(stack, "Alarms")
    # WHEN PeriodicTasks is built with it
    tasks = periodic_tasks(lambda s: sqs.Queue(s, "Queue"), entries=parse(CRON), stack=stack, alarm_actions=[cloudwatch_actions.SnsAction(topic)])
    # THEN the errors, dead-letter and mark-failed alarms all notify it
    alarms = Template.from_stack(stack).find_resources("AWS::CloudWatch::Alarm")
    assert sorted(a["Properties"].get("MetricName") for a in alarms.values()) == ["ApproximateNumberOfMessagesVisible", "Errors", "TickMarkFailed"]
    assert tasks.mark_failed_alarm.alarm_arn
    topic_ref = {"Ref": stack.get_logical_id(topic.node.default_child)}
    assert [a["Properties"]["AlarmActions"] for a in alarms.values()] == [[topic_ref]] * 3
