"""The IAM model of tests/support/iam.py against the IAM User Guide's documented evaluation and examples.

Sources: policy evaluation logic (explicit Deny, then Allow, else implicit deny)
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html; condition operators
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html; set operators
(ForAllValues is true for an absent key, ForAnyValue false)
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html;
DynamoDB's LeadingKeys example https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html.
"""

from __future__ import annotations

import pytest

from tests.support.iam import Policy, PolicyModelError, Request, Resources, Tables, authorization, resolve

TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/GameScores"
QUEUE = "arn:aws:sqs:us-east-1:123456789012:work"


def allow(action, resource, condition=None) -> dict:
    statement = {"Effect": "Allow", "Action": action, "Resource": resource}
    return {**statement, "Condition": condition} if condition else statement


def test_an_explicit_deny_wins_over_any_allow():
    # GIVEN an Allow of every SQS action and a Deny of SendMessage without TLS
    policy = Policy("r", (allow("sqs:*", "*"),), ({"Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": QUEUE,
                                                   "Condition": {"Bool": {"aws:SecureTransport": "false"}}},))
    # THEN a plain-HTTP send is denied, a TLS one allowed
    assert not policy.decide(Request("sqs:SendMessage", QUEUE, {"aws:SecureTransport": False})).allowed
    assert policy.decide(Request("sqs:SendMessage", QUEUE, {"aws:SecureTransport": True})).allowed


def test_nothing_allowed_is_implicitly_denied_and_the_reason_names_the_missing_statement():
    decision = Policy("r", (allow("sqs:ReceiveMessage", QUEUE),)).decide(Request("sqs:SendMessage", QUEUE))
    assert (decision.allowed, decision.reason) == (False, f"missing statement: Allow sqs:SendMessage on {QUEUE}")


def test_actions_match_case_insensitively_with_wildcards_and_resources_case_sensitively():
    policy = Policy("r", (allow("SQS:send*", "arn:aws:sqs:us-east-1:123456789012:wor?"),))
    assert policy.decide(Request("sqs:SendMessage", QUEUE)).allowed
    assert not policy.decide(Request("sqs:SendMessage", QUEUE.upper())).allowed
    assert not policy.decide(Request("sqs:SendMessage", QUEUE + "s")).allowed


def test_for_all_values_holds_only_when_every_leading_key_matches_and_when_there_is_none():
    policy = Policy("r", (allow("dynamodb:GetItem", TABLE, {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["b#*#15"]}}),))
    assert policy.decide(Request("dynamodb:GetItem", TABLE, {"dynamodb:LeadingKeys": ["b#1#15"]})).allowed
    assert not policy.decide(Request("dynamodb:GetItem", TABLE, {"dynamodb:LeadingKeys": ["b#1#15", "b#1#3"]})).allowed
    assert policy.decide(Request("dynamodb:GetItem", TABLE, {})).allowed  # the documented pitfall of an absent key


def test_for_any_value_is_false_for_an_absent_key_and_single_valued_operators_need_the_key():
    any_value = Policy("r", (allow("dynamodb:Query", TABLE, {"ForAnyValue:StringEquals": {"dynamodb:LeadingKeys": "a"}}),))
    assert not any_value.decide(Request("dynamodb:Query", TABLE, {})).allowed
    equals = Policy("r", (allow("dynamodb:Query", TABLE, {"StringEquals": {"aws:PrincipalTag/team": ["x", "y"]}}),))
    assert equals.decide(Request("dynamodb:Query", TABLE, {"aws:PrincipalTag/team": "y"})).allowed
    assert not equals.decide(Request("dynamodb:Query", TABLE, {})).allowed


def test_an_operator_the_model_does_not_know_fails_rather_than_allows():
    policy = Policy("r", (allow("sqs:SendMessage", QUEUE, {"NumericLessThan": {"sqs:DelaySeconds": "5"}}),))
    with pytest.raises(PolicyModelError, match="condition operator 'NumericLessThan' is not modelled"):
        policy.decide(Request("sqs:SendMessage", QUEUE))


def test_tokens_resolve_into_the_test_resources_arns():
    # GIVEN a template with a queue and a table, and the test's names for them
    template = {"Resources": {"WorkQueueAAAAAAAA": {"Type": "AWS::SQS::Queue"}, "TableBBBBBBBB": {"Type": "AWS::DynamoDB::GlobalTable"}}}
    resources = Resources(queues={"WorkQueue": "work"}, tables={"Table": "GameScores"})
    # THEN GetAtt, Ref, Join and Sub give the ARNs moto's resources have
    assert resolve({"Fn::GetAtt": ["WorkQueueAAAAAAAA", "Arn"]}, template, resources) == QUEUE
    assert resolve({"Fn::GetAtt": ["TableBBBBBBBB", "StreamArn"]}, template, resources) == TABLE + "/stream/*"
    assert resolve({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ecs:", {"Ref": "AWS::Region"}, ":",
                                      {"Ref": "AWS::AccountId"}, ":task/c/*"]]}, template, resources) == \
        "arn:aws:ecs:us-east-1:123456789012:task/c/*"
    assert resolve({"Fn::Sub": "${TableBBBBBBBB.Arn}/index/*"}, template, resources) == TABLE + "/index/*"
    assert resolve({"Ref": "Missing"}, template, resources) == "unresolved:Missing"


def test_calls_map_to_the_service_authorization_references_actions_and_leading_keys():
    tables = Tables({"GameScores": "pk"})
    # SendMessageBatch is authorized as SendMessage, on the queue of its URL
    (send,) = authorization("sqs", "SendMessageBatch", {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/work"}, tables)
    assert (send.action, send.resource) == ("sqs:SendMessage", QUEUE)
    # a TransactWriteItems is each item's own action with its own leading key
    items = {"TransactItems": [{"Put": {"TableName": "GameScores", "Item": {"pk": {"S": "b#1#15"}}}},
                               {"ConditionCheck": {"TableName": "GameScores", "Key": {"pk": {"S": "scheduler#m"}}}}]}
    assert [(r.action, r.context["dynamodb:LeadingKeys"]) for r in authorization("dynamodb", "TransactWriteItems", items, tables)] == [
        ("dynamodb:PutItem", ["b#1#15"]), ("dynamodb:ConditionCheckItem", ["scheduler#m"])]
    # a BatchWriteItem carries every partition key it writes; a Query its key condition's
    batch = {"RequestItems": {"GameScores": [{"PutRequest": {"Item": {"pk": {"S": "b#2"}}}}, {"DeleteRequest": {"Key": {"pk": {"S": "b#1"}}}}]}}
    assert authorization("dynamodb", "BatchWriteItem", batch, tables)[0].context["dynamodb:LeadingKeys"] == ["b#1", "b#2"]
    query = {"TableName": "GameScores", "KeyConditionExpression": "#p = :p AND sk > :s", "ExpressionAttributeNames": {"#p": "pk"},
             "ExpressionAttributeValues": {":p": {"S": "b#3#0"}, ":s": {"S": "0"}}}
    assert authorization("dynamodb", "Query", query, tables)[0].context["dynamodb:LeadingKeys"] == ["b#3#0"]
    # ListStreams has no resource type; an unlisted operation is checked as itself on "*"
    assert authorization("dynamodb", "ListStreams", {}, tables)[0].resource == "*"
    assert authorization("ecs", "UpdateTaskProtection", {}, tables)[0].action == "ecs:UpdateTaskProtection"
