"""The payload bucket (large_payloads): its properties, its lifecycle, what each role may do with it, its output."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam, aws_s3 as s3
from aws_cdk.assertions import Match, Template

from tests.support.synth import TASK_CODE, synth
from worker_tier.core import contract
from worker_tier.core.settings import Settings
from worker_tier_cdk.stack import WorkerTierStack
from worker_tier_cdk.worker_queue import WorkerQueue, WorkerQueueProps, WorkerQueuePropsError

DAY_SECONDS = 24 * 60 * 60
LOG_BUCKET = "team-access-logs"
# A FIFO stack (no delay table) with its own KMS key, access logs and the container worker.
HARDENED = Settings(fifo=True, container_worker=True, payload_kms=True, payload_access_log_bucket=LOG_BUCKET)


@pytest.fixture(scope="module")
def hardened(tmp_path_factory) -> tuple[WorkerTierStack, Template]:
    """The HARDENED stack, synthesized with cdk-nag (a finding fails synth)."""
    stack, _ = synth(settings=HARDENED, outdir=str(tmp_path_factory.mktemp("hardened")), cron_entries=None)
    return stack, Template.from_stack(stack)


@pytest.fixture(scope="module")
def without_payloads(tmp_path_factory) -> tuple[WorkerTierStack, Template]:
    """The stack with large_payloads off (and the container worker, so every reader of the variable is there)."""
    settings = Settings(large_payloads=False, container_worker=True)
    stack, _ = synth(settings=settings, outdir=str(tmp_path_factory.mktemp("no-payloads")))
    return stack, Template.from_stack(stack)


def _bucket(template: Template) -> dict:
    (bucket,) = template.find_resources("AWS::S3::Bucket").values()
    return bucket


def _s3_and_kms_statements(template: Template, stack: cdk.Stack, role: iam.IRole) -> list[dict]:
    """The role's statements whose actions are S3's or KMS's, in order."""
    role_id = stack.get_logical_id(role.node.default_child)  # type: ignore[arg-type]  # a Role made in the stack
    statements = [s for policy in template.find_resources("AWS::IAM::Policy").values()
                  if {"Ref": role_id} in policy["Properties"]["Roles"]
                  for s in policy["Properties"]["PolicyDocument"]["Statement"]]
    return [s for s in statements
            if any(a.startswith(("s3:", "kms:")) for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]]))]


def _objects(bucket_id: str, pattern: str) -> dict:
    return {"Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]}, f"/{pattern}"]]}


def _consumer_statements(bucket_id: str, key_id: str | None = None) -> list[dict]:
    """What a worker's role is granted: read, put (its tasks' sends, an object kept for its message's new life) and
    delete any object, and list the bucket."""
    kms = [{"Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [key_id, "Arn"]}}] if key_id else []
    return [
        {"Action": ["s3:GetObject", "s3:DeleteObject", "s3:PutObject"], "Effect": "Allow", "Resource": _objects(bucket_id, "*")},
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": {"Fn::GetAtt": [bucket_id, "Arn"]}},
        *kms,
    ]


def _producer_statements(bucket_id: str, key_id: str | None = None) -> list[dict]:
    """What a producer's role is granted: put (and delete its orphans) under payloads/, and make the data key under SSE-KMS."""
    kms = [{"Action": "kms:GenerateDataKey", "Effect": "Allow", "Resource": {"Fn::GetAtt": [key_id, "Arn"]}}] if key_id else []
    return [{"Action": ["s3:PutObject", "s3:DeleteObject"], "Effect": "Allow", "Resource": _objects(bucket_id, "payloads/*")},
            *kms]


def test_the_payload_bucket_is_private_tls_only_unversioned_and_encrypted_by_s3(template):
    # GIVEN the repo's stack (defaults: large_payloads on, payload_kms off)
    bucket = _bucket(template)
    properties = bucket["Properties"]
    # THEN S3-managed keys encrypt it, every public access is blocked, ACLs are off, and nothing is versioned
    assert properties["BucketEncryption"] == {"ServerSideEncryptionConfiguration": [
        {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}
    assert properties["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    assert properties["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert "VersioningConfiguration" not in properties
    # AND its policy denies every request that is not over TLS
    (policy,) = template.find_resources("AWS::S3::BucketPolicy").values()
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert (statement["Effect"], statement["Action"], statement["Condition"]) == (
        "Deny", "s3:*", {"Bool": {"aws:SecureTransport": "false"}})


def test_destroy_keeps_the_payload_bucket_and_its_tls_only_policy(template):
    # GIVEN the repo's stack  WHEN `cdk destroy` reads the bucket's and its policy's deletion policies
    (policy,) = template.find_resources("AWS::S3::BucketPolicy").values()
    # THEN both are kept, as the dead-letter queue whose messages point into the bucket is
    for resource in (_bucket(template), policy):
        assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == ("Retain", "Retain")


def test_objects_of_a_stack_with_delays_expire_after_a_years_delay_two_retentions_and_the_dlqs(template):
    # GIVEN the repo's stack: a delay table (366 days), 4 days of queue retention, 14 of the DLQ's
    (rule,) = _bucket(template)["Properties"]["LifecycleConfiguration"]["Rules"]
    # THEN every object expires after 366 + 2 x 4 + 14 days and a day's margin, and an unfinished upload after a day
    assert rule == {"Id": "ExpirePayloads", "Status": "Enabled", "ExpirationInDays": 366 + 2 * 4 + 14 + 1,
                    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}


def test_objects_of_a_fifo_stack_expire_without_the_delay_tables_year(hardened):
    # GIVEN a FIFO stack: no delay table, so no message waits before its queue
    _, template = hardened
    (rule,) = _bucket(template)["Properties"]["LifecycleConfiguration"]["Rules"]
    # THEN objects expire after two retentions of 4 days, the DLQ's 14 and a day's margin
    assert rule["ExpirationInDays"] == 2 * 4 + 14 + 1


def test_a_worker_queues_own_bucket_follows_its_custom_retention():
    # GIVEN the README's own-app stack (a WorkerQueue alone, no delay table) with a week of queue retention
    stack = cdk.Stack(cdk.App(), "Billing")
    worker = WorkerQueue(stack, "Invoices", WorkerQueueProps(settings=Settings(retention_period=7 * DAY_SECONDS),
                                                             task_code=TASK_CODE))
    # WHEN synthesized
    template = Template.from_stack(stack)
    # THEN the WorkerQueue made its own bucket, whose objects expire after 2 x 7 + 14 days and a day's margin
    assert worker.payload_bucket is not None
    (rule,) = _bucket(template)["Properties"]["LifecycleConfiguration"]["Rules"]
    assert rule["ExpirationInDays"] == 2 * 7 + 14 + 1
    # AND its function is told the bucket, and may read it
    variables = template.find_resources("AWS::Lambda::Function")[
        stack.get_logical_id(worker.function.node.default_child)]["Properties"]["Environment"]["Variables"]
    assert variables[contract.PAYLOAD_BUCKET_VARIABLE] == {"Ref": stack.get_logical_id(worker.payload_bucket.node.default_child)}


def test_payload_kms_encrypts_with_the_buckets_own_rotated_key_kept_by_destroy(hardened):
    # GIVEN a stack with payload_kms
    _, template = hardened
    ((key_id, key),) = template.find_resources("AWS::KMS::Key").items()
    # THEN the bucket is encrypted with that key (S3 Bucket Keys on), which rotates and outlives the stack
    assert _bucket(template)["Properties"]["BucketEncryption"] == {"ServerSideEncryptionConfiguration": [{
        "BucketKeyEnabled": True,
        "ServerSideEncryptionByDefault": {"KMSMasterKeyID": {"Fn::GetAtt": [key_id, "Arn"]}, "SSEAlgorithm": "aws:kms"}}]}
    assert key["Properties"]["EnableKeyRotation"] is True
    assert (key["DeletionPolicy"], key["UpdateReplacePolicy"]) == ("Retain", "Retain")


def test_access_logs_go_to_the_named_bucket_under_the_payload_buckets_path(hardened):
    # GIVEN a stack with payload_access_log_bucket (synthesized with cdk-nag, which it satisfies without acknowledgment)
    stack, template = hardened
    # THEN the bucket logs its requests to that bucket, under its own path
    assert _bucket(template)["Properties"]["LoggingConfiguration"] == {
        "DestinationBucketName": LOG_BUCKET, "LogFilePrefix": f"{stack.stack_name}/PayloadBucket/"}


def test_without_an_access_log_bucket_the_missing_logs_are_acknowledged_with_a_reason(template):
    # GIVEN the repo's stack (no payload_access_log_bucket), synthesized with cdk-nag
    # THEN the bucket has no logging configuration, and synth passed: the AwsSolutions-S1 finding is acknowledged
    assert "LoggingConfiguration" not in _bucket(template)["Properties"]


def test_the_worker_reads_and_deletes_any_object_lists_the_bucket_and_puts_only_under_payloads(stack, template):
    # GIVEN the repo's stack  WHEN the worker function's S3 statements are read
    bucket_id = stack.get_logical_id(stack.payload_bucket.node.default_child)
    # THEN they are exactly these
    assert _s3_and_kms_statements(template, stack, stack.worker.function.role) == _consumer_statements(bucket_id)


def test_the_periodic_function_only_puts_under_payloads(stack, template):
    # GIVEN the repo's stack (cron.yaml's entries)  WHEN the periodic-task function's S3 statements are read
    bucket_id = stack.get_logical_id(stack.payload_bucket.node.default_child)
    # THEN it may only offload a tick's body under payloads/
    assert _s3_and_kms_statements(template, stack, stack.periodic_tasks.function.role) == _producer_statements(bucket_id)


def test_the_delay_dispatcher_and_the_safety_net_may_not_touch_the_bucket(stack, template):
    # GIVEN the repo's stack  WHEN the delay dispatcher's and the safety net's S3 statements are read
    # THEN there are none: they move pointers, never bodies
    for function in (stack.delay_dispatcher.function, stack.delay_dispatcher.recovery.function):
        assert _s3_and_kms_statements(template, stack, function.role) == []


def test_under_payload_kms_the_container_task_role_and_worker_may_decrypt_and_make_data_keys(hardened):
    # GIVEN a stack with payload_kms and the container worker
    stack, template = hardened
    bucket_id = stack.get_logical_id(stack.payload_bucket.node.default_child)
    key_id = next(iter(template.find_resources("AWS::KMS::Key")))
    # THEN the worker function and the container task role each get the consumer's S3 statements and the key's
    # Decrypt (for reads) and GenerateDataKey (for puts), on that one key
    task_role = stack.container_worker.service.task_definition.task_role
    for role in (stack.worker.function.role, task_role):
        assert _s3_and_kms_statements(template, stack, role) == _consumer_statements(bucket_id, key_id)
    # AND the periodic function only what a put needs
    assert _s3_and_kms_statements(template, stack, stack.periodic_tasks.function.role) == _producer_statements(bucket_id, key_id)


def test_a_producer_granted_by_the_stack_puts_only_under_payloads_and_reads_only_results():
    # GIVEN a stack with payload_kms and a web app's role  WHEN the stack grants it production
    app = cdk.App()
    producer_stack = WorkerTierStack(app, "Jobs", settings=HARDENED, task_code=TASK_CODE, cron_entries=[])
    role = iam.Role(producer_stack, "WebApp", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
    producer_stack.grant_produce(role)
    produced = Template.from_stack(producer_stack)
    bucket_id = producer_stack.get_logical_id(producer_stack.payload_bucket.node.default_child)
    key_id = next(iter(produced.find_resources("AWS::KMS::Key")))
    # THEN it may put under payloads/ with the key's data keys, and read tracked jobs' results (results/) only
    results = [{"Action": "s3:GetObject", "Effect": "Allow", "Resource": _objects(bucket_id, "results/*")},
               {"Action": "kms:Decrypt", "Effect": "Allow", "Resource": {"Fn::GetAtt": [key_id, "Arn"]}}]
    assert _s3_and_kms_statements(produced, producer_stack, role) == _producer_statements(bucket_id, key_id) + results
    # AND Client.from_env finds the bucket in the producer environment
    assert contract.PAYLOAD_BUCKET_VARIABLE in producer_stack.producer_environment()


def test_the_bucket_name_is_published_for_the_command_line(stack, template):
    # GIVEN the repo's stack  WHEN its outputs are read
    output = template.to_json()["Outputs"][contract.STACK_OUTPUTS["payload_bucket"]]
    # THEN PayloadBucketName names the bucket
    assert output["Value"] == {"Ref": stack.get_logical_id(stack.payload_bucket.node.default_child)}


def test_every_reader_of_the_bucket_is_told_its_name(hardened):
    # GIVEN a stack with the container worker and cron.yaml's entries
    stack, template = hardened
    bucket = {"Ref": stack.get_logical_id(stack.payload_bucket.node.default_child)}
    # THEN the worker function, the periodic-task function and the container get WORKER_TIER_PAYLOAD_BUCKET
    functions = template.find_resources("AWS::Lambda::Function")
    for function in (stack.worker.function, stack.periodic_tasks.function):
        variables = functions[stack.get_logical_id(function.node.default_child)]["Properties"]["Environment"]["Variables"]
        assert variables[contract.PAYLOAD_BUCKET_VARIABLE] == bucket
    template.has_resource_properties("AWS::ECS::TaskDefinition", {"ContainerDefinitions": Match.array_with([
        Match.object_like({"Environment": Match.array_with([{"Name": contract.PAYLOAD_BUCKET_VARIABLE, "Value": bucket}])})])})


def test_without_large_payloads_there_is_no_bucket_variable_grant_or_output(without_payloads):
    # GIVEN a stack with large_payloads off (synthesized with cdk-nag)
    stack, template = without_payloads
    document = template.to_json()
    # THEN it has no bucket, no S3 statement, no bucket output, and no resource is told a bucket
    assert stack.payload_bucket is None and stack.worker.payload_bucket is None
    assert not template.find_resources("AWS::S3::Bucket") and not template.find_resources("AWS::KMS::Key")
    assert '"s3:' not in str(document).replace("'", '"')
    assert contract.STACK_OUTPUTS["payload_bucket"] not in document.get("Outputs", {})
    assert contract.PAYLOAD_BUCKET_VARIABLE not in str(document)
    assert contract.PAYLOAD_BUCKET_VARIABLE not in stack.producer_environment()


def test_a_worker_queue_shares_a_bucket_it_is_given():
    # GIVEN a stack of two WorkerQueues, the second given the first's bucket
    stack = cdk.Stack(cdk.App(), "Billing")
    payments = WorkerQueue(stack, "Payments", WorkerQueueProps(settings=Settings(), task_code=TASK_CODE))
    invoices = WorkerQueue(stack, "Invoices", WorkerQueueProps(settings=Settings(), task_code=TASK_CODE,
                                                               payload_bucket=payments.payload_bucket))
    # WHEN synthesized  THEN there is one bucket, which both use and both publish (the second behind its id)
    template = Template.from_stack(stack)
    assert len(template.find_resources("AWS::S3::Bucket")) == 1 and invoices.payload_bucket is payments.payload_bucket
    outputs = template.to_json()["Outputs"]
    assert outputs["PayloadBucketName"]["Value"] == outputs["InvoicesPayloadBucketName"]["Value"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"payload_bucket_props": {}, "payload_bucket": "given"},
     "WorkerQueueProps: pass payload_bucket or payload_bucket_props, not both"),
    ({"settings": Settings(large_payloads=False), "payload_bucket_props": {"versioned": True}},
     "WorkerQueueProps: the large_payloads setting is off, so there is no payload bucket: turn it on, or drop "
     "payload_bucket and payload_bucket_props"),
])
def test_worker_queue_props_refuse_a_bucket_twice_or_without_large_payloads(kwargs, message):
    # GIVEN props naming the bucket both ways, or a bucket with large_payloads off
    stack = cdk.Stack(cdk.App(), "Billing")
    if kwargs.get("payload_bucket") == "given":
        kwargs = {**kwargs, "payload_bucket": s3.Bucket.from_bucket_name(stack, "Given", "given-bucket")}
    # WHEN the props are made  THEN they are refused, naming the fix
    with pytest.raises(WorkerQueuePropsError) as error:
        WorkerQueueProps(**{"settings": Settings(), **kwargs})
    assert str(error.value) == message


def test_an_imported_bucket_is_granted_and_acknowledged_by_its_arn(tmp_path):
    # GIVEN a WorkerQueue given an existing bucket by name, in an app with cdk-nag
    from worker_tier_cdk.nag import add_checks

    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Billing")
    worker = WorkerQueue(stack, "Invoices", WorkerQueueProps(
        settings=Settings(), task_code=TASK_CODE, payload_bucket=s3.Bucket.from_bucket_name(stack, "Shared", "shared-payloads")))
    add_checks(app)
    # WHEN synthesized  THEN nag passes (the wildcard on the bucket's objects is acknowledged by that ARN)
    app.synth()
    # AND the grants name that bucket's objects
    template = Template.from_stack(stack)
    resources = [s["Resource"] for s in _s3_and_kms_statements(template, stack, worker.function.role)]
    arn = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::shared-payloads"]]}
    assert arn in resources
    assert {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::shared-payloads/*"]]} in resources
