"""Where the command line points: a stack's outputs, cdk.json's stack name, and errors that say what to pass."""

from __future__ import annotations

import json

import boto3
from click.testing import CliRunner

from tests.cli.deployment import parsed
from worker_tier_cli import cli
from worker_tier_cli.target import DEFAULT_STACK_NAME, default_stack_name


def _stack(deployment, name):
    """A CloudFormation stack whose outputs name the deployment's queues and table, as WorkerTierStack's do."""
    outputs = {"QueueUrl": deployment.queue_url, "DeadLetterQueueUrl": deployment.dlq_url, "StateTableName": "state"}
    template = {"Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
                "Outputs": {key: {"Value": value} for key, value in outputs.items()}}
    boto3.client("cloudformation", region_name="us-east-1").create_stack(StackName=name, TemplateBody=json.dumps(template))


def test_stack_outputs_name_the_queues_and_table(deployment):
    # GIVEN a deployed stack named Jobs, and a message in its work queue
    _stack(deployment, "Jobs")
    deployment.sqs.send_message(QueueUrl=deployment.queue_url, MessageBody="a")
    # WHEN status runs with only --stack
    shown = parsed(CliRunner().invoke(cli, ["--region", "us-east-1", "--stack", "Jobs", "status", "--json"], obj=deployment.runtime))
    # THEN it found both queues and the state table
    assert shown["queues"]["work queue"]["url"] == deployment.queue_url and shown["queues"]["work queue"]["visible"] == 1
    assert shown["queues"]["DLQ"]["url"] == deployment.dlq_url
    assert shown["delay_dispatcher"]["watermark"] is None


def test_a_stack_that_does_not_exist_is_named_with_what_to_pass(deployment):
    result = CliRunner().invoke(cli, ["--region", "us-east-1", "--stack", "Nope", "status"], obj=deployment.runtime)
    assert result.exit_code == 2
    assert "cannot read stack 'Nope'" in result.stderr and "pass --stack NAME, or the resources themselves" in result.stderr


def test_a_missing_resource_without_a_stack_names_its_option(deployment):
    result = CliRunner().invoke(cli, ["--region", "us-east-1", "--queue-url", deployment.queue_url, "dlq", "list"],
                                obj=deployment.runtime)
    assert result.exit_code == 2
    assert "no dlq_url: pass --dlq-url (no stack is read when resources are given without --stack)" in result.stderr


def test_the_default_stack_name_comes_from_cdk_json(tmp_path):
    # GIVEN no cdk.json, then one naming the stack
    assert default_stack_name(tmp_path) == DEFAULT_STACK_NAME == "WorkerTier"
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {"worker_tier_stack": "Jobs"}}))
    # THEN the name is cdk.json's
    assert default_stack_name(tmp_path) == "Jobs"
