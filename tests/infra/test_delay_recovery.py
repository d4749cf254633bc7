"""DelayRecovery in a stack of its own, synthesized once with cdk-nag (a finding fails synth)."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb, aws_sqs as sqs
from aws_cdk.assertions import Match, Template

from worker_tier.core import contract
from worker_tier_cdk import defaults
from worker_tier_cdk.delay_recovery import (
    ITERATOR_AGE_ALARM_SECONDS,
    RECOVERY_MEMORY_MB,
    STREAM_BATCH_SIZE,
    STREAM_MAX_BATCHING_WINDOW_SECONDS,
    STREAM_MAX_RECORD_AGE_SECONDS,
    STREAM_RETRY_ATTEMPTS,
    DelayRecovery,
    DelayRecoveryProps,
)
from worker_tier_cdk.nag import add_checks
from worker_tier.delays import delay
from worker_tier.delays.delay_recovery import DYNAMODB_STREAM_RETENTION_SECONDS


def _tables_and_queues(stack: cdk.Stack):
    table = dynamodb.TableV2(
        stack, "Delay",
        partition_key=dynamodb.Attribute(name=delay.PK, type=dynamodb.AttributeType.STRING),
        sort_key=dynamodb.Attribute(name=delay.SK, type=dynamodb.AttributeType.STRING),
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True),
        dynamo_stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
    )
    state = dynamodb.TableV2(stack, "State", **defaults.state_table_props())
    dlq = sqs.Queue(stack, "Dlq", encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True)
    queue = sqs.Queue(stack, "Work", encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
                      dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=5))
    return table, state, queue, dlq


@pytest.fixture(scope="module")
def recovery_template() -> Template:
    app = cdk.App()
    stack = cdk.Stack(app, "Recovery")
    table, state, queue, dlq = _tables_and_queues(stack)
    DelayRecovery(stack, "Recovery", DelayRecoveryProps(delay_table=table, state_table=state, queue=queue, dead_letter_queue=dlq))
    add_checks(app)
    app.synth()  # fails on any cdk-nag finding
    return Template.from_stack(stack)


def test_the_mapping_passes_only_inserts_and_ttl_removes_of_message_items(recovery_template):
    template = recovery_template
    # THEN two filters, ORed: an INSERT of a b# item, or a REMOVE of one made by DynamoDB's TTL service
    message_key = {"Keys": {"pk": {"S": [{"prefix": "b#"}]}}}
    patterns = [
        {"eventName": ["INSERT"], "dynamodb": message_key},
        {"eventName": ["REMOVE"], "userIdentity": {"type": ["Service"], "principalId": ["dynamodb.amazonaws.com"]},
         "dynamodb": message_key},
    ]
    mapping = next(iter(template.find_resources("AWS::Lambda::EventSourceMapping").values()))["Properties"]
    assert [json.loads(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]] == patterns


def test_the_mapping_batches_bisects_reports_item_failures_and_bounds_retries(recovery_template):
    template = recovery_template
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "EventSourceArn": {"Fn::GetAtt": [Match.string_like_regexp("Delay"), "StreamArn"]},
            "StartingPosition": "TRIM_HORIZON",
            "BatchSize": STREAM_BATCH_SIZE,
            "MaximumBatchingWindowInSeconds": STREAM_MAX_BATCHING_WINDOW_SECONDS,
            "BisectBatchOnFunctionError": True,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "MaximumRetryAttempts": STREAM_RETRY_ATTEMPTS,
            "MaximumRecordAgeInSeconds": STREAM_MAX_RECORD_AGE_SECONDS,
            "DestinationConfig": {"OnFailure": {"Destination": {"Fn::GetAtt": [Match.string_like_regexp("StreamFailureQueue"), "Arn"]}}},
        },
    )


def test_a_failed_batch_is_named_while_the_stream_still_holds_it():
    # THEN the mapping gives up on a record well inside the stream's 24-hour retention, and alarms on its age first
    assert STREAM_MAX_RECORD_AGE_SECONDS <= DYNAMODB_STREAM_RETENTION_SECONDS / 2
    assert ITERATOR_AGE_ALARM_SECONDS < STREAM_MAX_RECORD_AGE_SECONDS


def test_the_failure_queue_is_encrypted_tls_only_and_alarmed(recovery_template):
    template = recovery_template
    (queue_id, queue), = [(k, v) for k, v in template.find_resources("AWS::SQS::Queue").items() if "StreamFailureQueue" in k]
    assert queue["Properties"]["SqsManagedSseEnabled"] is True
    template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {"Queues": [{"Ref": queue_id}], "PolicyDocument": {"Statement": Match.array_with([Match.object_like(
            {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})])}},
    )
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": "ApproximateNumberOfMessagesVisible", "Threshold": 0,
         "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}]},
    )


def test_alarms_on_iterator_age_late_writes_and_ttl_recoveries(recovery_template):
    template = recovery_template
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": "IteratorAge", "Namespace": "AWS/Lambda", "Threshold": ITERATOR_AGE_ALARM_SECONDS * 1000,
         "Statistic": "Maximum"},
    )
    for metric in ("DelayedLateWrites", "DelayedRecoveredFromTtl", "DelayedWatermarkAhead"):
        template.has_resource_properties(
            "AWS::CloudWatch::Alarm",
            {"MetricName": metric, "Namespace": "WorkerTier", "Threshold": 0, "Statistic": "Sum",
             "TreatMissingData": "notBreaching"},
        )


def test_the_role_reads_the_stream_scheduler_items_and_cancellable_messages_and_moves_only_message_items(recovery_template):
    template = recovery_template
    statements = [
        s for policy in template.find_resources("AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    stream = next(s for s in statements if "dynamodb:GetRecords" in s["Action"])
    assert sorted(stream["Action"]) == ["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"]
    logical_id, attribute = stream["Resource"]["Fn::GetAtt"]
    assert logical_id.startswith("Delay") and attribute == "StreamArn"
    # ListStreams takes only Resource "*" (it has no resource-level permissions), in a statement of its own
    assert [s for s in statements if "dynamodb:ListStreams" in json.dumps(s["Action"])] == [
        {"Action": "dynamodb:ListStreams", "Effect": "Allow", "Resource": "*"}]
    items = {(json.dumps(s["Action"]), json.dumps(s["Resource"]["Fn::GetAtt"][0][:5]),
              json.dumps(s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]))
             for s in statements if s.get("Condition")}
    assert items == {
        ('"dynamodb:GetItem"', '"State"', '["scheduler#*"]'),
        ('["dynamodb:PutItem", "dynamodb:DeleteItem"]', '"Delay"', '["b#*"]'),
        ('"dynamodb:GetItem"', '"Delay"', '["b#*#15"]'),  # whether a late cancellable message was cancelled
    }


def test_the_function_is_the_smallest_size_knows_the_delay_table_and_waits_the_longest_window(recovery_template):
    # THEN it runs at Lambda's smallest memory, is told the delay table, and batches for DynamoDB's longest window
    assert (RECOVERY_MEMORY_MB, STREAM_MAX_BATCHING_WINDOW_SECONDS) == (128, 300)
    recovery_template.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": "worker_tier.handlers.recovery.lambda_handler", "MemorySize": 128,
         "Environment": {"Variables": Match.object_like({contract.DELAY_TABLE_VARIABLE: {"Ref": Match.string_like_regexp("Delay")}})}},
    )


def test_the_stack_streams_the_delay_table_into_its_safety_net(template):
    # GIVEN the whole stack (the session's template, synthesized with cdk-nag)
    # THEN the delay table streams old and new images, and that stream feeds the recovery function
    (table_id, table), = [(k, v) for k, v in template.find_resources("AWS::DynamoDB::GlobalTable").items() if "Delay" in k]
    assert table["Properties"]["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"EventSourceArn": {"Fn::GetAtt": [table_id, "StreamArn"]}, "FunctionName": {"Ref": Match.string_like_regexp("DelaysRecovery")}},
    )
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": "worker_tier.handlers.recovery.lambda_handler",
         "Environment": {"Variables": Match.object_like({contract.DLQ_URL_VARIABLE: Match.any_value(), contract.QUEUE_URL_VARIABLE: Match.any_value(),
                                                         contract.STATE_TABLE_VARIABLE: Match.any_value()})}},
    )
