"""PeriodicTasks in the template: schedules, targets, time zones, grants."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match, Template

from infra.cron_config import CronConfigError, parse
from infra.periodic_tasks import (
    CRON_TIMEOUT_SECONDS,
    max_event_age_seconds,
)
from tests.infra.conftest import synth
from worker_tier.periodic import TICK_LEASE_SECONDS, TICK_PENDING_POLL_SECONDS, TICK_PENDING_POLLS
from worker_tier.limits import LAMBDA_ASYNC_MAX_EVENT_AGE_SECONDS, LAMBDA_ASYNC_MAX_RETRY_ATTEMPTS
from worker_tier.settings import Settings

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


def test_cron_function_may_only_send_claim_release_and_dead_letter(template):
    send = ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"]
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    Match.object_like({"Action": send, "Resource": {"Fn::GetAtt": [Match.string_like_regexp("^WorkerQueue"), "Arn"]}}),
                    Match.object_like({"Action": ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"]}),
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
