"""Where the command line points: a stack's outputs, cdk.json's stack name, and errors that say what to pass."""

from __future__ import annotations

import json

import boto3
from click.testing import CliRunner

from tests.cli.deployment import parsed
from worker_tier_cli import cli
from worker_tier_cli.session import Runtime
from worker_tier_cli.target import DEFAULT_STACK_NAME, default_stack_name


def _stack(deployment, name, prefix=""):
    """A CloudFormation stack whose outputs name the deployment's queues and table, as WorkerTierStack's do
    (with ``prefix``: as a stack's second WorkerQueue publishes them)."""
    outputs = {f"{prefix}{key}": value for key, value in
               {"QueueUrl": deployment.queue_url, "DeadLetterQueueUrl": deployment.dlq_url, "StateTableName": "state"}.items()}
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
    assert "cannot read stack 'Nope'" in result.stderr
    assert ("pass --stack NAME, set the deployment's variables (WORKER_TIER_QUEUE_URL, WORKER_TIER_DLQ_URL, ...: "
            "make run prints them), or pass the resources (--queue-url, --dlq-url, --state-table)") in result.stderr


def test_a_missing_resource_without_a_stack_names_its_option(deployment):
    result = CliRunner().invoke(cli, ["--region", "us-east-1", "--queue-url", deployment.queue_url, "dlq", "list"],
                                obj=deployment.runtime)
    assert result.exit_code == 2
    assert ("no dlq_url: pass --dlq-url or set WORKER_TIER_DLQ_URL (no stack is read when resources are given "
            "without --stack)") in result.stderr


def test_the_default_stack_name_comes_from_cdk_json(tmp_path):
    # GIVEN no cdk.json, then one naming the stack
    assert default_stack_name(tmp_path) == DEFAULT_STACK_NAME == "WorkerTier"
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {"worker_tier_stack": "Jobs"}}))
    # THEN the name is cdk.json's
    assert default_stack_name(tmp_path) == "Jobs"


def _with_environment(deployment, environ):
    """The deployment's runtime, in a shell where ``environ`` was exported."""
    runtime = deployment.runtime
    return Runtime(clock=runtime.clock, interactive=runtime.interactive, wait_seconds=0, state_dir=runtime.state_dir,
                   environ=environ)


def _variables(deployment):
    return {"WORKER_TIER_QUEUE_URL": deployment.queue_url, "WORKER_TIER_DLQ_URL": deployment.dlq_url,
            "WORKER_TIER_STATE_TABLE": deployment.state_table}


def test_the_deployments_variables_name_it_with_no_option_and_no_stack(deployment):
    # GIVEN a shell with the variables make run's banner exports, and a dead letter
    message_id = deployment.dead_letter("/poison", ValueError("bad order"), "{}")
    runtime = _with_environment(deployment, _variables(deployment))
    # WHEN dlq show and status run with no resource option
    shown = parsed(CliRunner().invoke(cli, ["--region", "us-east-1", "dlq", "show", message_id, "--json"], obj=runtime))
    status = parsed(CliRunner().invoke(cli, ["--region", "us-east-1", "status", "--json"], obj=runtime))
    # THEN they found the DLQ and the work queue from the variables (no stack named WorkerTier was looked for)
    assert shown["message_id"] == message_id
    assert status["queues"]["DLQ"]["url"] == deployment.dlq_url and status["queues"]["DLQ"]["visible"] == 1


def test_options_may_follow_the_subcommand_and_win_over_the_groups(deployment):
    # GIVEN a message in the work queue, and a group option naming another queue
    deployment.sqs.send_message(QueueUrl=deployment.queue_url, MessageBody="a")
    other = deployment.sqs.create_queue(QueueName="other")["QueueUrl"]
    # WHEN status gets the deployment's resources after the subcommand
    shown = parsed(CliRunner().invoke(cli, ["--queue-url", other, "status", "--region", "us-east-1", "--queue-url",
                                            deployment.queue_url, "--dlq-url", deployment.dlq_url, "--json"],
                                      obj=deployment.runtime))
    # THEN the later option is the one used
    assert shown["queues"]["work queue"]["url"] == deployment.queue_url and shown["queues"]["work queue"]["visible"] == 1


def test_a_stack_named_explicitly_ignores_the_variables_of_another_deployment(deployment):
    # GIVEN a shell set up for another deployment (the local environment's queues), and a deployed stack Jobs
    _stack(deployment, "Jobs")
    runtime = _with_environment(deployment, {"WORKER_TIER_QUEUE_URL": "http://localhost:4566/000000000000/local-queue",
                                             "WORKER_TIER_DLQ_URL": "http://localhost:4566/000000000000/local-dlq"})
    # WHEN status names the stack
    shown = parsed(CliRunner().invoke(cli, ["--region", "us-east-1", "status", "--stack", "Jobs", "--json"], obj=runtime))
    # THEN the stack's queues are read, none of the variables'
    assert shown["queues"]["work queue"]["url"] == deployment.queue_url
    assert shown["queues"]["DLQ"]["url"] == deployment.dlq_url


def test_a_stacks_second_worker_queue_is_read_with_its_construct_id(deployment):
    # GIVEN a stack whose WorkerQueue "Invoices" published prefixed outputs
    _stack(deployment, "Billing", prefix="Invoices")
    # WHEN status names the stack, without and with --worker
    plain = CliRunner().invoke(cli, ["--region", "us-east-1", "--stack", "Billing", "status"], obj=deployment.runtime)
    shown = parsed(CliRunner().invoke(cli, ["--region", "us-east-1", "--stack", "Billing", "--worker", "Invoices",
                                            "status", "--json"], obj=deployment.runtime))
    # THEN the first says which outputs the stack has; the second finds them
    assert plain.exit_code == 2
    assert ("no queue_url: pass --queue-url or set WORKER_TIER_QUEUE_URL (stack 'Billing' has no QueueUrl output; it has "
            "InvoicesDeadLetterQueueUrl, InvoicesQueueUrl, InvoicesStateTableName)") in plain.stderr
    assert shown["queues"]["work queue"]["url"] == deployment.queue_url


def test_a_long_delay_without_a_delay_table_names_the_option_and_the_variable(deployment):
    # GIVEN the work queue named, and no delay table anywhere
    # WHEN a 3-day delay is sent
    result = deployment.run("send", "/hello", "{}", "--delay", str(3 * 86400))
    # THEN the error says how the command line gets the table, not how the Python API does
    assert result.exit_code == 2
    assert ("no delay_table: pass --delay-table or set WORKER_TIER_DELAY_TABLE (no stack is read when resources are "
            "given without --stack)") in result.stderr
    assert "pass delay_table (" not in result.stderr


def test_deployment_options_may_sit_between_dlq_and_its_subcommand(deployment):
    # GIVEN the options "work before or after the subcommand"  WHEN given after `dlq`, before `list`
    args = deployment.args("dlq", "list")
    dlq_url = args[args.index("--dlq-url") + 1]
    del args[args.index("--dlq-url"):args.index("--dlq-url") + 2]
    args[args.index("dlq") + 1:args.index("dlq") + 1] = ["--dlq-url", dlq_url]
    result = CliRunner().invoke(cli, args, obj=deployment.runtime)
    # THEN it is read (not "No such option")
    assert result.exit_code == 0, result.output


def test_a_stack_read_without_a_region_says_to_give_one(deployment, monkeypatch):
    # GIVEN no region anywhere (no --region, no AWS_REGION, no profile's)
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    # WHEN a stack is named
    result = CliRunner().invoke(cli, ["--stack", "Billing", "dlq", "list"], obj=deployment.runtime)
    # THEN the error names what is missing, not "pass --stack NAME" again
    assert result.exit_code == 2
    assert ("cannot read stack 'Billing': no AWS region is configured: pass --region, or set AWS_REGION (or a "
            "profile's region)") in result.stderr
