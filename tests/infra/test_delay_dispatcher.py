"""DelayDispatcher in the session stack's template."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from worker_tier.core import contract
from worker_tier.delays.dispatch_state import LEASE_SECONDS
from worker_tier_cdk.delay_dispatcher import (
    DISPATCHER_MEMORY_MB,
    DISPATCHER_PERIOD_SECONDS,
    DISPATCHER_TIMEOUT_SECONDS,
    FANOUT_MEMORY_MB,
    LAG_ALARM_SECONDS,
)


def _policy_statements(template, role_prefix: str) -> list[dict]:
    policies = template.find_resources("AWS::IAM::Policy")
    return [
        statement
        for policy in policies.values()
        if any(role["Ref"].startswith(role_prefix) for role in policy["Properties"]["Roles"])
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_delay_table_keys_ttl_pitr_and_encryption(template):
    template.has_resource_properties(
        "AWS::DynamoDB::GlobalTable",
        {
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            "BillingMode": "PAY_PER_REQUEST",
            "SSESpecification": {"SSEEnabled": True, "SSEType": "KMS"},
            "TimeToLiveSpecification": {"AttributeName": "expiration", "Enabled": True},
            "Replicas": [Match.object_like({"PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True}})],
        },
    )


def test_scheduler_runs_every_minute_without_retries(template):
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "ScheduleExpression": "rate(1 minute)",
            "Targets": [Match.object_like({"RetryPolicy": {"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60}})],
        },
    )
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": "worker_tier.handlers.dispatcher.lambda_handler", "Timeout": 60,
         "Environment": {"Variables": Match.object_like({contract.DELAY_TABLE_VARIABLE: Match.any_value()})}},
    )


def _actions(statement: dict) -> tuple:
    return tuple(statement["Action"]) if isinstance(statement["Action"], list) else (statement["Action"],)


def _leading_keys(statement: dict) -> list | None:
    return statement.get("Condition", {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")


def test_scheduler_grants_are_the_calls_it_makes(template):
    # GIVEN the scheduler function's policy  THEN it reads the delay table, and writes only its own state items
    statements = {_actions(s): s for s in _policy_statements(template, "DelaysScheduler")}
    assert ("dynamodb:Query", "dynamodb:Scan") in statements
    state = statements[("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")]
    assert _leading_keys(state) == ["scheduler#*"]
    assert ("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl") in statements
    assert not any("dynamodb:BatchWriteItem" in actions for actions in statements)


def test_scheduler_may_dead_letter_what_the_work_queue_refuses(stack, template):
    # GIVEN the stack's scheduler function and the worker's dead-letter queue
    dlq_id = stack.get_logical_id(stack.worker.dead_letter_queue.node.default_child)
    # WHEN its environment and policy are read  THEN it knows the DLQ's URL and may send to it
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": "worker_tier.handlers.dispatcher.lambda_handler",
         "Environment": {"Variables": Match.object_like({contract.DLQ_URL_VARIABLE: {"Ref": dlq_id}})}},
    )
    sends = [s for s in _policy_statements(template, "DelaysScheduler") if "sqs:SendMessage" in s["Action"]]
    assert {"Fn::GetAtt": [dlq_id, "Arn"]} in [s["Resource"] for s in sends]


def test_worker_may_store_delayed_messages_and_knows_the_table(template):
    statements = [(_actions(s), _leading_keys(s)) for s in _policy_statements(template, "WorkerRole")]
    assert (("dynamodb:BatchWriteItem", "dynamodb:PutItem"), ["b#*"]) in statements
    assert (("dynamodb:PutItem", "dynamodb:DeleteItem"), ["dedupe#*"]) in statements
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": "worker_tier.handlers.worker.lambda_handler",
         "Environment": {"Variables": Match.object_like({contract.DELAY_TABLE_VARIABLE: Match.any_value()})}},
    )


def test_lag_alarm_treats_silence_as_lag(template):
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": contract.METRIC_DISPATCHER_LAG, "Namespace": contract.METRICS_NAMESPACE, "Threshold": LAG_ALARM_SECONDS,
         "TreatMissingData": "breaching", "Dimensions": [{"Name": "service", "Value": contract.SERVICE_NAME}]},
    )


def test_the_scheduler_may_move_message_items_only(template):
    # THEN besides Query and Scan, the scheduler may Put and Delete b# items of the delay table (a refile), no others
    statements = [(_actions(s), _leading_keys(s)) for s in _policy_statements(template, "DelaysScheduler")]
    assert (("dynamodb:PutItem", "dynamodb:DeleteItem"), ["b#*"]) in statements


@pytest.mark.parametrize("metric", [contract.METRIC_DISPATCHER_WATERMARK_AHEAD, contract.METRIC_DISPATCHER_STATE_UNREADABLE])
def test_the_scheduler_alarms_on_a_watermark_it_cannot_trust(template, metric):
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": metric, "Namespace": contract.METRICS_NAMESPACE, "Threshold": 0, "Statistic": "Sum"},
    )


def test_a_killed_run_lease_blocks_at_most_one_run_period(template):
    # GIVEN the dispatcher function's timeout in the template
    functions = template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": "worker_tier.handlers.dispatcher.lambda_handler"}})
    [timeout] = [function["Properties"]["Timeout"] for function in functions.values()]
    # THEN a living run always holds its lease, and a killed run's lease outlives it by at most one run period
    assert timeout == DISPATCHER_TIMEOUT_SECONDS
    assert timeout < LEASE_SECONDS <= timeout + DISPATCHER_PERIOD_SECONDS


def test_one_group_keeps_one_rule_without_input_at_256_mb(template):
    # GIVEN the default settings (dispatch_groups 1)  THEN one dispatcher rule, with no input, as before the fan-out
    rules = [r for r in template.find_resources("AWS::Events::Rule").values()
             if r["Properties"].get("ScheduleExpression") == "rate(1 minute)" and "Input" not in r["Properties"]["Targets"][0]]
    assert len(rules) >= 1
    template.has_resource_properties("AWS::Lambda::Function", {
        "Handler": "worker_tier.handlers.dispatcher.lambda_handler", "MemorySize": DISPATCHER_MEMORY_MB,
        "Environment": {"Variables": Match.object_like({contract.DISPATCH_GROUPS_VARIABLE: "1"})}})


@pytest.fixture(scope="module")
def fanned_out_template():
    from aws_cdk.assertions import Template

    from tests.support.synth import synth
    from worker_tier.core.settings import Settings

    stack, _ = synth(Settings(dispatch_groups=4, delay_shards=16))
    return Template.from_stack(stack)


def test_each_shard_group_has_its_own_schedule_naming_it(fanned_out_template):
    # GIVEN dispatch_groups 4  THEN groups 1..3 each get a rule passing {"group": g}, and group 0 keeps its rule without input
    inputs = sorted(r["Properties"]["Targets"][0].get("Input", "{}")
                    for r in fanned_out_template.find_resources("AWS::Events::Rule").values()
                    if r["Properties"]["Targets"][0]["Arn"].get("Fn::GetAtt", [""])[0].startswith("DelaysScheduler"))
    assert inputs == ['{"group":1}', '{"group":2}', '{"group":3}', "{}"]


def test_a_fanned_out_dispatcher_gets_a_full_vcpu_and_knows_its_group_count(fanned_out_template):
    fanned_out_template.has_resource_properties("AWS::Lambda::Function", {
        "Handler": "worker_tier.handlers.dispatcher.lambda_handler", "MemorySize": FANOUT_MEMORY_MB,
        "Environment": {"Variables": Match.object_like({contract.DISPATCH_GROUPS_VARIABLE: "4"})}})
