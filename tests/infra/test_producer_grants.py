"""A producer outside the stack (a web app's role): WorkerTierStack.grant_produce and producer_environment."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from tests.support.synth import TASK_CODE
from worker_tier.core import contract
from worker_tier_cdk.stack import WorkerTierStack


@pytest.fixture(scope="module")
def granted():
    """A stack, and a web app's role granted production on it."""
    stack = WorkerTierStack(cdk.App(), "Jobs", task_code=TASK_CODE, cron_entries=[])
    role = iam.Role(stack, "WebApp", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
    stack.grant_produce(role)
    return stack, role, Template.from_stack(stack)


def _statements_of(template: Template, stack: cdk.Stack, role: iam.Role) -> list[dict]:
    role_id = stack.get_logical_id(role.node.default_child)
    return [statement for policy in template.find_resources("AWS::IAM::Policy").values()
            if {"Ref": role_id} in policy["Properties"]["Roles"]
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]]


def test_a_role_granted_production_sends_to_the_work_queue_offloads_bodies_and_writes_only_delayed_messages_and_jobs(granted):
    # GIVEN a stack and a web app's role  WHEN the stack grants it production
    stack, role, template = granted
    statements = _statements_of(template, stack, role)
    queue_id = stack.get_logical_id(stack.worker.queue.node.default_child)
    # THEN it may send to the work queue (Client.send's calls) and nothing else of SQS
    [sqs] = [s for s in statements if any(a.startswith("sqs:") for a in s["Action"])]
    assert sqs["Action"] == ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"]
    assert sqs["Resource"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    # AND put bodies too large for the queue under payloads/ of the payload bucket (and delete its orphans there), and
    # nothing else of S3
    # and read tracked jobs' results kept under results/; nothing else of S3
    [s3, results] = [s for s in statements if "s3:" in str(s["Action"])]
    bucket_id = stack.get_logical_id(stack.payload_bucket.node.default_child)
    assert (s3["Action"], s3["Resource"]) == (["s3:PutObject", "s3:DeleteObject"], {"Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]}, "/payloads/*"]]})
    assert (results["Action"], results["Resource"]) == ("s3:GetObject", {"Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]}, "/results/*"]]})
    # AND write, read and update tracked jobs' records (job#), write delayed messages and dedupe markers, cancel and
    # reschedule cancellable ones, and no other items
    assert [(s["Action"], s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"])
            for s in statements if s not in (sqs, s3, results)] == [
        (["dynamodb:BatchWriteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"], ["job#*"]),
        (["dynamodb:BatchWriteItem", "dynamodb:PutItem"], ["b#*"]),
        (["dynamodb:PutItem", "dynamodb:DeleteItem"], ["dedupe#*"]),
        (["dynamodb:GetItem", "dynamodb:DeleteItem"], ["b#*#15", "dedupe#*"]),
        ("dynamodb:ConditionCheckItem", ["scheduler#*"]),
    ]


def test_the_producer_environment_names_what_client_from_env_reads(granted):
    # GIVEN a stack  WHEN its producer environment is read
    stack, _, _ = granted
    environment = stack.producer_environment()
    # THEN it names the work queue, the delay table with its shards, the state table (for cancellable sends), the
    # payload bucket (for bodies too large for the queue) and the stack's own payload limits, so a producer refuses at
    # send what the stack's workers would dead-letter (a payload_max_bytes lowered for a small worker)
    assert set(environment) == {contract.QUEUE_URL_VARIABLE, contract.DELAY_TABLE_VARIABLE, contract.DELAY_SHARDS_VARIABLE,
                                contract.STATE_TABLE_VARIABLE, contract.PAYLOAD_BUCKET_VARIABLE,
                                contract.setting_variable("payload_threshold"), contract.setting_variable("payload_max_bytes"),
                                contract.JOB_RETENTION_VARIABLE}
    assert environment[contract.JOB_RETENTION_VARIABLE] == str(stack.settings.job_retention)
    assert environment[contract.setting_variable("payload_max_bytes")] == str(stack.settings.payload_max_bytes)
    assert environment[contract.DELAY_SHARDS_VARIABLE] == str(stack.settings.delay_shards)
