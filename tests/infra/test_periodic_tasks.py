"""PeriodicTasks in the template: schedules, targets, time zones, grants."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match, Template

from infra.cron_config import parse
from infra.periodic_tasks import max_event_age_seconds
from tests.infra.conftest import synth
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


def test_cron_function_may_only_send_and_claim(template):
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    Match.object_like({"Action": ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"]}),
                    Match.object_like({"Action": ["dynamodb:PutItem", "dynamodb:UpdateItem"]}),
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
    Template.from_stack(stack).resource_count_is("AWS::Lambda::Function", 2)  # worker and delay scheduler


@pytest.mark.parametrize(
    "schedule, seconds",
    [("* * * * *", 60), ("*/15 * * * *", 900), ("0 */12 * * *", 43200), ("0 0 * * *", 86400), ("0 9,17 * * *", 28800)],
)
def test_retries_stop_before_the_next_tick(schedule, seconds):
    entry = parse(f'version: 1\ncron:\n - name: "a"\n   url: "/a"\n   schedule: "{schedule}"\n')[0]
    assert max_event_age_seconds(entry) == seconds
