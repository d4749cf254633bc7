"""WorkerTierStack's template: one behaviour per test."""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb, aws_iam as iam, aws_sqs as sqs
from aws_cdk.assertions import Match, Template
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from aws_cdk.assertions import Annotations

from tests.support.synth import TASK_CODE
from worker_tier.core import contract
from worker_tier_cdk.code import TaskCode, TaskCodeError
from worker_tier.core.errors import CronConfigError
from worker_tier_cdk.stack import WorkerTierStack
from worker_tier_cdk.grants import (
    CANCELLABLE_MESSAGE_KEY_PATTERN,
    DELAYED_MESSAGE_KEY_PREFIX,
    IDEMPOTENCY_ACTIONS,
    GrantError,
    grant_delay_produce,
    grant_items,
)
from worker_tier.core.contract import IDEMPOTENCY_KEY_PREFIX, DISPATCHER_KEY_PREFIX
from worker_tier_cdk.runtime import LAMBDA_RUNTIME, PYTHON_VERSION, POWERTOOLS_VERSION, powertools_layer_arn
from worker_tier_cdk.worker_queue import SETTINGS_ADVICE_WARNING_ID, WorkerQueue, WorkerQueueProps, WorkerQueuePropsError
from tests.support.synth import actions_of, dynamodb_statements, on_table, synth
from worker_tier.delays import delay, dispatch_state as dispatcher
from worker_tier.core.settings import DEFAULT_CONTAINER_BASE_IMAGE, Settings, SettingsError

# What grant_read_write_data gives: every item of the table, to read and write.
FULL_READ_WRITE = {"dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:Scan", "dynamodb:GetItem",
                   "dynamodb:BatchWriteItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
DOCKERFILE = REPO / "src" / "worker_tier_cdk" / "docker" / "worker.Dockerfile"
CONTAINER_REQUIREMENTS = REPO / "src" / "worker_tier_cdk" / "docker" / "requirements.txt"


def test_work_queue_is_encrypted_with_redrive_backstop_above_max_retries(template):
    template.has_resource_properties(
        "AWS::SQS::Queue",
        {
            "SqsManagedSseEnabled": True,
            "VisibilityTimeout": 300,
            "MessageRetentionPeriod": 345600,
            "RedrivePolicy": {"maxReceiveCount": Settings().redrive_max_receive_count, "deadLetterTargetArn": Match.any_value()},
        },
    )


def test_dead_letter_queue_keeps_fourteen_days(template):
    template.has_resource_properties(
        "AWS::SQS::Queue", {"SqsManagedSseEnabled": True, "MessageRetentionPeriod": 1209600, "RedrivePolicy": Match.absent()}
    )


def test_destroy_keeps_the_dead_letter_queue_and_the_dead_letters_in_it(stack, template):
    # GIVEN the synthesized stack  WHEN `cdk destroy` reads the DLQ's policies
    dead_letter_queue = template.find_resources("AWS::SQS::Queue")[stack.get_logical_id(stack.worker.dead_letter_queue.node.default_child)]
    # THEN it keeps the queue, as it keeps the tables and log groups
    assert (dead_letter_queue["DeletionPolicy"], dead_letter_queue["UpdateReplacePolicy"]) == ("Retain", "Retain")


# What docs/operations.md's "What cdk destroy keeps" calls each kind of resource the stack retains.
KEPT_BY_DESTROY = {"AWS::SQS::Queue": "dead-letter queue", "AWS::DynamoDB::GlobalTable": "table", "AWS::Logs::LogGroup": "log group",
                   "AWS::S3::Bucket": "payload bucket", "AWS::S3::BucketPolicy": "bucket policy"}


def test_destroy_keeps_what_operations_md_says_it_keeps(stack, template):
    # GIVEN the synthesized stack and the "kept" column of operations.md's table of what cdk destroy keeps
    resources = template.to_json()["Resources"]
    section = (REPO / "docs" / "operations.md").read_text(encoding="utf-8").split("## What cdk destroy keeps", 1)[1].split("\n## ", 1)[0]
    kept_column = " ".join(row.split("|")[1] for row in section.splitlines() if row.startswith("| ")).lower()
    # WHEN the resources destroy retains are listed
    retained = {logical_id: resource["Type"] for logical_id, resource in resources.items() if resource.get("DeletionPolicy") == "Retain"}
    # THEN they are the kinds the docs name as kept, and the work queue, whose messages are lost with it, is not among them
    assert set(retained.values()) == set(KEPT_BY_DESTROY)
    assert all(word in kept_column for word in KEPT_BY_DESTROY.values()), kept_column
    assert stack.get_logical_id(stack.worker.queue.node.default_child) not in retained


def test_a_dead_letter_queue_removal_policy_prop_lets_destroy_delete_it():
    # GIVEN a WorkerQueue whose dead_letter_queue_props say DESTROY
    stack = cdk.Stack(cdk.App(), "Billing")
    worker = WorkerQueue(stack, "Invoices", WorkerQueueProps(settings=Settings(), task_code=TASK_CODE,
                                                             dead_letter_queue_props={"removal_policy": cdk.RemovalPolicy.DESTROY}))
    # WHEN synthesized
    queues = Template.from_stack(stack).find_resources("AWS::SQS::Queue")
    # THEN `cdk destroy` deletes that DLQ
    assert queues[stack.get_logical_id(worker.dead_letter_queue.node.default_child)]["DeletionPolicy"] == "Delete"


def test_every_queue_refuses_plain_http(template):
    # GIVEN every queue policy  THEN together they cover every queue of the stack, each denying plain HTTP
    policies = template.find_resources("AWS::SQS::QueuePolicy")
    covered = {queue["Ref"] for policy in policies.values() for queue in policy["Properties"]["Queues"]}
    assert covered == set(template.find_resources("AWS::SQS::Queue"))
    for policy in policies.values():
        [statement] = policy["Properties"]["PolicyDocument"]["Statement"]
        assert statement["Effect"] == "Deny"
        assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_worker_function_runtime_layer_and_timeout(template):
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Runtime": "python3.14",
            "Architectures": ["arm64"],
            "Handler": "worker_tier.handlers.worker.lambda_handler",
            "Timeout": 299,
            "Layers": [{"Fn::Join": ["", ["arn:aws:lambda:", {"Ref": "AWS::Region"}, ":017000801446:layer:AWSLambdaPowertoolsPythonV3-python314-arm64:27"]]}],
        },
    )


def test_runtime_layer_and_pinned_powertools_agree():
    # The function's Python, the layer's Python, and the Powertools the tests run are one version each.
    assert LAMBDA_RUNTIME.name == f"python{PYTHON_VERSION}"
    assert f"python{PYTHON_VERSION.replace('.', '')}" in powertools_layer_arn("us-east-1")
    pins = (REPO / "requirements.txt").read_text()
    assert f"aws-lambda-powertools=={POWERTOOLS_VERSION}" in pins



def test_one_python_version_for_the_package_the_lambda_and_the_image():
    # GIVEN pyproject's requires-python, and every Python the Dockerfile and the image default name
    supported = SpecifierSet(PYPROJECT["requires-python"])
    named_by_dockerfile = set(re.findall(r"python:(\d+\.\d+)", DOCKERFILE.read_text()))
    # THEN the Lambda runtime, the image's default base and the Dockerfile all run PYTHON_VERSION
    assert LAMBDA_RUNTIME.name == f"python{PYTHON_VERSION}"
    assert re.search(rf"/python:{re.escape(PYTHON_VERSION)}(-[a-z]+)?$", DEFAULT_CONTAINER_BASE_IMAGE)
    assert named_by_dockerfile == {PYTHON_VERSION}
    # AND the package supports it, as it supports the Python running these tests (CI's)
    assert Version(PYTHON_VERSION) in supported
    assert Version(platform.python_version()) in supported


def test_container_requirements_pin_what_the_runtime_dependencies_allow():
    # GIVEN pyproject's runtime dependencies and the container image's requirements
    allowed = {canonicalize_name(r.name): r.specifier for r in map(Requirement, PYPROJECT["dependencies"])}
    lines = CONTAINER_REQUIREMENTS.read_text().splitlines()
    pins = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    # THEN the image pins exactly those packages, each to one version the range allows
    assert {canonicalize_name(pin.name) for pin in pins} == set(allowed)
    for pin in pins:
        [exact] = pin.specifier
        assert exact.operator == "==", pin
        assert Version(exact.version) in allowed[canonicalize_name(pin.name)], pin


def test_worker_environment_carries_settings_and_resources(template):
    [function] = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": "worker_tier.handlers.worker.lambda_handler"}}
    ).values()
    variables = function["Properties"]["Environment"]["Variables"]
    for name, value in Settings().to_environment().items():
        assert variables[name] == value
    assert {contract.QUEUE_URL_VARIABLE, contract.DLQ_URL_VARIABLE, contract.STATE_TABLE_VARIABLE} <= set(variables)


def test_event_source_reports_item_failures_with_max_concurrency(template):
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"BatchSize": 10, "FunctionResponseTypes": ["ReportBatchItemFailures"], "ScalingConfig": {"MaximumConcurrency": 50}},
    )


def test_alarms_on_dead_letters_and_oldest_message(template):
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": "ApproximateNumberOfMessagesVisible", "Threshold": 0, "ComparisonOperator": "GreaterThanThreshold"},
    )
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm", {"MetricName": "ApproximateAgeOfOldestMessage", "Threshold": 900}
    )


def test_tasks_may_send_follow_ups_to_the_work_queue(template):
    # GIVEN the worker function's role  THEN it may send to the queue it consumes (Client.from_env in a task)
    worker_role = next(
        name for name, role in template.find_resources("AWS::IAM::Role").items() if name.startswith("WorkerRole")
    )
    statements = [
        s for name, policy in template.find_resources("AWS::IAM::Policy").items()
        if {"Ref": worker_role} in policy["Properties"]["Roles"] for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    sends = [s for s in statements if "sqs:SendMessage" in actions_of(s)]
    assert any("WorkerQueue" in json.dumps(s["Resource"]) and "DeadLetter" not in json.dumps(s["Resource"]) for s in sends)


@pytest.mark.parametrize(
    "metric_name", ["DeadLetterFailed", "VisibilityChangesRefused", "MalformedRecords", "RetryDelayShortened"]
)
def test_every_worker_failure_path_metric_has_an_alarm(template, metric_name):
    # GIVEN a count the worker publishes when it takes a failure path
    # THEN any non-zero count raises an alarm
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"Namespace": "WorkerTier", "MetricName": metric_name, "Statistic": "Sum", "Threshold": 0,
         "ComparisonOperator": "GreaterThanThreshold"},
    )


def test_state_table_is_encrypted_with_pitr_and_ttl(template):
    template.has_resource_properties(
        "AWS::DynamoDB::GlobalTable",
        {
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "BillingMode": "PAY_PER_REQUEST",
            "SSESpecification": {"SSEEnabled": True, "SSEType": "KMS"},
            "TimeToLiveSpecification": {"AttributeName": "expiration", "Enabled": True},
            "Replicas": [Match.object_like({"PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True}})],
        },
    )


STREAM_LIST_ACTION = "dynamodb:ListStreams"  # Lambda's stream poller calls it; it takes only Resource "*"


def test_iam_grants_name_actions_and_resources_without_wildcards(template):
    documents = [p["Properties"]["PolicyDocument"] for p in template.find_resources("AWS::IAM::Policy").values()]
    for role in template.find_resources("AWS::IAM::Role").values():
        documents += [p["PolicyDocument"] for p in role["Properties"].get("Policies", [])]
    statements = [s for d in documents for s in d["Statement"]]
    assert statements
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert not any("*" in action for action in actions), statement
        # Resource "*" only for the actions that have no resource-level permissions, each alone in its statement
        assert statement["Resource"] != "*" or actions == [STREAM_LIST_ACTION], statement


def test_function_logs_go_to_its_own_group_with_retention(template):
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})
    template.has_resource_properties(
        "AWS::IAM::Role",
        {"Policies": [{"PolicyName": "logs", "PolicyDocument": Match.object_like({"Statement": [Match.object_like({"Action": ["logs:CreateLogStream", "logs:PutLogEvents"]})]})}]},
    )


def test_cfn_lint_finds_nothing_but_w3005(synthesized):
    # GIVEN the synthesized template
    _, assembly, _ = synthesized
    path = Path(assembly.directory) / "WorkerTier.template.json"
    # WHEN cfn-lint checks it
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--ignore-checks", "W3005", "--", str(path)], capture_output=True, text=True, check=False
    )
    # THEN nothing else is reported
    assert result.returncode == 0, result.stdout + result.stderr


def test_nag_fails_synth_on_a_finding(tmp_path):
    # GIVEN the stack plus an unencrypted, non-TLS queue: the nag plugin must catch it (so the clean run means something)
    app = cdk.App(outdir=str(tmp_path))
    from worker_tier_cdk.nag import add_checks
    from worker_tier_cdk.stack import WorkerTierStack

    stack = WorkerTierStack(app, "WorkerTier", settings=Settings(), task_code=TASK_CODE)
    sqs.Queue(stack, "Careless", encryption=sqs.QueueEncryption.UNENCRYPTED)
    add_checks(app)
    # WHEN synthesized  THEN it fails with AwsSolutions findings
    with pytest.raises(RuntimeError) as error:
        app.synth()
    assert "ERROR The SQS queue does not require requests to use SSL. (AwsSolutions)" in str(error.value)
    assert "WorkerTier/Careless/Resource" in str(error.value)
    assert "WorkerTier/Worker/" not in str(error.value)


def test_bad_setting_in_context_fails_synth_naming_it():
    with pytest.raises(SettingsError, match=r"^max_retries must be 1..100 \(EB MaxRetries\), got 0$"):
        synth(context={"worker_tier": {"max_retries": 0}})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"queue": "Q", "queue_props": {}, "dead_letter_queue": "D"}, "WorkerQueueProps: pass queue or queue_props, not both"),
        ({"dead_letter_queue": "D", "dead_letter_queue_props": {}}, "WorkerQueueProps: pass dead_letter_queue or dead_letter_queue_props, not both"),
        ({"queue": "Q"}, "WorkerQueueProps: an existing queue needs its existing dead_letter_queue too (its redrive policy is not ours to change)"),
    ],
)
def test_worker_queue_props_existing_xor_new(kwargs, message):
    with pytest.raises(WorkerQueuePropsError) as error:
        WorkerQueueProps(settings=Settings(), **kwargs)
    assert str(error.value) == message


def test_cdk_json_settings_are_valid_and_app_is_thin():
    context = json.loads((REPO / "cdk.json").read_text())
    assert Settings.from_mapping(context["context"]["worker_tier"]) == Settings.from_mapping(context["context"]["worker_tier"])
    assert context["notices"] is False and context["cli-telemetry"] is False


def test_fifo_setting_makes_fifo_queue_and_dlq(tmp_path):
    # GIVEN fifo settings  WHEN synthesized (nag included)
    stack, _ = synth(settings=Settings(fifo=True), outdir=str(tmp_path), cron_entries=[])
    template = Template.from_stack(stack)
    # THEN both queues are FIFO without content-based deduplication (it hashes the body only), and the function knows
    queues = template.find_resources("AWS::SQS::Queue")
    assert len(queues) == 2
    for queue in queues.values():
        assert queue["Properties"]["FifoQueue"] is True
        assert queue["Properties"]["ContentBasedDeduplication"] is False
    [function] = template.find_resources("AWS::Lambda::Function").values()
    assert function["Properties"]["Environment"]["Variables"][contract.setting_variable("fifo")] == "true"


def test_lambda_path_alarms_on_backlog_per_worker(template):
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"Metrics": Match.array_with([Match.object_like({"Expression": "visible / IF(workers > 0, workers, 1)"})]),
         "Threshold": Settings().backlog_per_task_target},
    )
    template.resource_count_is("AWS::CloudWatch::Dashboard", 1)


def test_visibility_below_aws_advice_warns_at_synth_without_failing_it(tmp_path):
    # GIVEN a visibility AWS accepts but advises against (below 6 x the function timeout)
    settings = Settings(visibility_timeout=600)
    # WHEN synthesized with cdk-nag  THEN synth succeeds, and the stack carries AWS's advice as a warning
    stack, _ = synth(settings=settings, outdir=str(tmp_path), cron_entries=[])
    [advice] = settings.advisories()
    Annotations.from_stack(stack).has_warning("/WorkerTier/Worker", f"{advice} [ack: {SETTINGS_ADVICE_WARNING_ID}]")


def test_eb_default_visibility_synthesizes_without_the_advice(stack):
    # GIVEN EB's defaults (300 / 299), kept for compatibility  THEN no visibility warning
    Annotations.from_stack(stack).has_no_warning("*", Match.string_like_regexp("AWS advises"))


def test_visibility_shorter_than_batching_window_plus_timeout_fails_synth():
    # GIVEN the edge case's 300 / 299 / max_batching_window 300  WHEN synthesized  THEN refused with all three values
    context = {"worker_tier": {"visibility_timeout": 300, "inactivity_timeout": 299, "max_batching_window": 300}}
    with pytest.raises(SettingsError) as error:
        synth(context=context)
    assert str(error.value).endswith(
        "got visibility_timeout 300 < inactivity_timeout 299 + max_batching_window 300"
    )


def test_worker_role_reaches_only_idempotency_flow_and_job_records_of_the_state_table(template):
    # GIVEN the worker function's role
    [role] = [r for r in template.find_resources("AWS::IAM::Role") if r.startswith("WorkerRole")]
    # WHEN its state-table statements are read
    statements = [s for r, s in dynamodb_statements(template) if r == role and on_table(s, "StateTable")]
    # THEN it may only run Powertools' item calls, only on idempotency# items, read and update flow control's flow#
    # items (never put or delete), write and read job# items (tracked jobs: each change, and its tasks' tracked sends;
    # never delete one but in a batch of unsent messages' records), and check (never write) the delay dispatcher's
    # minute records, for cancellable messages
    resource = {"Fn::GetAtt": [statements[0]["Resource"]["Fn::GetAtt"][0], "Arn"]}
    expected = [{
        "Action": list(IDEMPOTENCY_ACTIONS),
        "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{IDEMPOTENCY_KEY_PREFIX}*"]}},
        "Effect": "Allow",
        "Resource": resource,
    }, {
        "Action": ["dynamodb:GetItem", "dynamodb:UpdateItem"],
        "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["flow#*"]}},
        "Effect": "Allow",
        "Resource": resource,
    }, {
        "Action": ["dynamodb:BatchWriteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
        "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["job#*"]}},
        "Effect": "Allow",
        "Resource": resource,
    }, {
        "Action": "dynamodb:ConditionCheckItem",
        "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["scheduler#*"]}},
        "Effect": "Allow",
        "Resource": resource,
    }]
    assert sorted(statements, key=repr) == sorted(expected, key=repr)


def test_no_role_has_a_dynamodb_wildcard_or_reads_across_the_state_table(template):
    # GIVEN every DynamoDB statement of every role
    statements = dynamodb_statements(template)
    assert statements
    for role, statement in statements:
        actions = set(actions_of(statement))
        # THEN none is a wildcard
        assert not any("*" in action for action in actions), (role, statement)
        if on_table(statement, "StateTable"):
            # AND none has full read/write on the shared state table, or can Scan/Query across its owners' items
            assert not actions >= FULL_READ_WRITE, (role, statement)
            assert not actions & {"dynamodb:Scan", "dynamodb:Query", "dynamodb:BatchGetItem"}, (role, statement)


def test_key_prefixes_match_the_keys_the_code_writes():
    # GIVEN the prefixes the grants allow  THEN the keys the scheduler and producers write start with them
    assert dispatcher.LEASE_KEY.startswith(DISPATCHER_KEY_PREFIX)
    assert dispatcher.WATERMARK_KEY.startswith(DISPATCHER_KEY_PREFIX)
    assert dispatcher.minute_key(29_000_000).startswith(DISPATCHER_KEY_PREFIX)
    assert delay.bucket_key(29_000_000, 3).startswith(DELAYED_MESSAGE_KEY_PREFIX)


@pytest.mark.parametrize(
    "actions, prefixes, message",
    [
        (["dynamodb:GetItem"], [], "leading_key_prefixes must be non-empty prefixes without wildcards, got []"),
        (["dynamodb:GetItem"], ["cron*"], "leading_key_prefixes must be non-empty prefixes without wildcards, got ['cron*']"),
        (["dynamodb:*"], ["cron#"], "actions must be named dynamodb: actions without wildcards, got ['dynamodb:*']"),
        (["sqs:SendMessage"], ["cron#"], "actions must be named dynamodb: actions without wildcards, got ['sqs:SendMessage']"),
    ],
)
def test_grant_items_refuses_grants_that_would_not_limit(stack, actions, prefixes, message):
    # GIVEN a grant reaching every item or every action  WHEN asked for  THEN refused, naming the value and the rule
    with pytest.raises(GrantError) as error:
        grant_items(stack.state_table, stack.worker.function, actions=actions, leading_key_prefixes=prefixes)
    assert str(error.value) == message


def test_delay_producers_write_only_messages_and_dedupe_markers():
    # GIVEN a delay table and a producer's role
    stack = cdk.Stack(cdk.App(), "Producer")
    table = dynamodb.TableV2(stack, "Delays", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    role = iam.Role(stack, "Producer", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    # WHEN it is granted production
    grant_delay_produce(table, role)
    # THEN it may batch-write and put b# messages, and put and delete dedupe# markers; nothing else
    [policy] = Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert [(s["Action"], s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]) for s in statements] == [
        (["dynamodb:BatchWriteItem", "dynamodb:PutItem"], ["b#*"]),
        (["dynamodb:PutItem", "dynamodb:DeleteItem"], ["dedupe#*"]),
    ]


def test_delay_producers_that_cancel_read_and_delete_only_the_cancellable_shard_and_markers():
    # GIVEN a delay table, a state table and a producer's role
    stack = cdk.Stack(cdk.App(), "Canceller")
    key = dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING)
    table, state = dynamodb.TableV2(stack, "Delays", partition_key=key), dynamodb.TableV2(stack, "State", partition_key=key)
    role = iam.Role(stack, "Producer", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    # WHEN it is granted production with cancel and reschedule
    grant_delay_produce(table, role, state_table=state)
    # THEN it may get and delete only the cancellable shard's messages (b#<minute>#15) and dedupe# markers, and only
    # check the delay dispatcher's minute records
    [policy] = Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert [(s["Action"], s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]) for s in statements] == [
        (["dynamodb:BatchWriteItem", "dynamodb:PutItem"], ["b#*"]),
        (["dynamodb:PutItem", "dynamodb:DeleteItem"], ["dedupe#*"]),
        (["dynamodb:GetItem", "dynamodb:DeleteItem"], ["b#*#15", "dedupe#*"]),
        ("dynamodb:ConditionCheckItem", ["scheduler#*"]),
    ]
    # AND the pattern (IAM's StringLike: * is any run of characters) matches the cancellable shard of any minute only
    assert CANCELLABLE_MESSAGE_KEY_PATTERN == "b#*#15"
    pattern = re.compile(re.escape(CANCELLABLE_MESSAGE_KEY_PATTERN).replace(r"\*", ".*"))
    minute = 29_000_000
    assert pattern.fullmatch(delay.bucket_key(minute, delay.CANCELLABLE_SHARD))
    assert not any(pattern.fullmatch(delay.bucket_key(minute, shard)) for shard in range(delay.CANCELLABLE_SHARD))


def test_every_role_reaches_only_its_own_items_of_the_shared_tables(template):
    # GIVEN every DynamoDB statement on the state table, and every write to the delay table
    statements = [
        (role, s) for role, s in dynamodb_statements(template)
        if on_table(s, "StateTable")
        or (on_table(s, "DelaysDelayTable") and set(actions_of(s)) - {"dynamodb:Query", "dynamodb:Scan"})
    ]
    # (the recovery function's stream reads are on the stream's ARN, not on items)
    statements = [(role, s) for role, s in statements if "StreamArn" not in json.dumps(s["Resource"])]
    assert len({role for role, _ in statements}) >= 4  # worker, scheduler, recovery, cron
    # THEN each is limited by its partition-key prefix (or to the cancellable shard's messages)
    for role, statement in statements:
        keys = statement.get("Condition", {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
        assert keys and all(k.endswith("#*") or k == CANCELLABLE_MESSAGE_KEY_PATTERN for k in keys), (role, statement)


@pytest.mark.parametrize(
    "task_modules, message",
    [
        ("tasks.exampels", "task_modules names 'tasks.exampels', but its task code directory '{tasks}' has no "
                           "tasks/exampels.py or tasks/exampels/__init__.py; name a module that the directory contains"),
        ("billing.tasks", "task_modules names 'billing.tasks', but no task code directory is named 'billing' "
                          "(deployed: ['tasks']); pass task_code=TaskCode.from_directories(...) with the directory that holds it"),
    ],
)
def test_task_modules_the_task_code_does_not_deploy_fail_naming_the_module(task_modules, message):
    # GIVEN this repo's task code  WHEN task_modules names a module it lacks  THEN the error names it and what was looked for
    with pytest.raises(TaskCodeError) as error:
        TASK_CODE.check_modules(task_modules)
    assert str(error.value) == message.format(tasks=REPO / "tasks")


def test_a_task_directory_without_init_is_no_task_module(tmp_path):
    # GIVEN a plain folder of modules  WHEN task_modules names the folder itself  THEN it is refused: importing it registers nothing
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "tasks.py").write_text("")
    code = TaskCode.from_directories(tmp_path / "jobs")
    code.check_modules("jobs.tasks")
    with pytest.raises(TaskCodeError, match=r"has no jobs/__init__.py; name a module"):
        code.check_modules("jobs")


def test_a_cron_file_that_does_not_exist_fails_synth_naming_the_resolved_path(tmp_path):
    # GIVEN a cron_file with a typo (formerly: the stack deployed no periodic task, silently)
    # WHEN the stack is built  THEN a CronConfigError names the path as given and as resolved
    with pytest.raises(CronConfigError) as error:
        WorkerTierStack(cdk.App(), "Typo", task_code=TASK_CODE, cron_file=tmp_path / "cron.yml")
    assert str(error.value).startswith(f"cron file {str(tmp_path / 'cron.yml')!r} (resolved to "
                                       f"{str((tmp_path / 'cron.yml').resolve())!r}) does not exist or is not a file")


def test_task_code_given_as_one_path_is_one_directory():
    # GIVEN task_code as a plain string, not TaskCode (formerly: it was read as one directory per character)
    # WHEN the stack is built  THEN it deploys that one directory
    stack = WorkerTierStack(cdk.App(), "OnePath", task_code=str(REPO / "tasks"))
    assert stack.task_code == TaskCode.from_directories(REPO / "tasks")
