"""ContainerWorker in the template: the service, backlog-per-task scaling, routing, protections."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb, aws_ec2 as ec2, aws_sqs as sqs
from aws_cdk.assertions import Annotations, Match, Template

from tests.support.synth import TASK_CODE
from worker_tier.core import contract
from worker_tier_cdk.container_worker import STOP_TIMEOUT_SECONDS, UNPINNED_IMAGE_WARNING_ID, ContainerWorker, ContainerWorkerProps
from worker_tier_cdk.grants import IDEMPOTENCY_ACTIONS
from worker_tier.core.contract import IDEMPOTENCY_KEY_PREFIX
from tests.support.synth import dynamodb_statements, on_table, synth
from worker_tier.core.settings import DEFAULT_CONTAINER_BASE_IMAGE, DEFAULT_CONTAINER_GRACE_SECONDS, Settings

REPO = Path(__file__).resolve().parents[2]
SETTINGS = Settings(container_worker=True, target_latency_seconds=10, avg_processing_seconds=1, container_min_tasks=2, container_max_tasks=20)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    stack, assembly = synth(settings=SETTINGS, outdir=str(tmp_path_factory.mktemp("container")), cron_entries=[])
    return stack, assembly


@pytest.fixture(scope="module")
def template(synthesized) -> Template:
    return Template.from_stack(synthesized[0])


def test_fargate_service_runs_the_worker_command_on_arm64(template):
    template.has_resource_properties("AWS::ECS::Service", {"LaunchType": "FARGATE", "DesiredCount": 2,
                                                           "DeploymentConfiguration": Match.object_like({"DeploymentCircuitBreaker": {"Enable": True, "Rollback": True}})})
    template.has_resource_properties(
        "AWS::ECS::TaskDefinition",
        {
            "RuntimePlatform": {"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"},
            "ContainerDefinitions": [Match.object_like({
                "StopTimeout": 120,
                "EntryPoint": ["python", "-m", "worker_tier"],
                "Command": ["worker"],
                "Environment": Match.array_with([{"Name": contract.setting_variable("container_concurrency"), "Value": "4"}]),
            })],
        },
    )
    template.has_resource_properties("AWS::ECS::Cluster", {"ClusterSettings": [{"Name": "containerInsights", "Value": "enabled"}]})


def test_scaling_tracks_backlog_per_task_by_metric_math(template):
    template.has_resource_properties("AWS::ApplicationAutoScaling::ScalableTarget", {"MinCapacity": 2, "MaxCapacity": 20})
    [policy] = template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()
    configuration = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    # target = acceptable latency / average processing time = 10 s / 1 s
    assert configuration["TargetValue"] == 10
    assert (configuration["ScaleOutCooldown"], configuration["ScaleInCooldown"]) == (60, 600)
    metrics = {m["Id"]: m for m in configuration["CustomizedMetricSpecification"]["Metrics"]}
    assert metrics["backlog_per_task"] == {"Id": "backlog_per_task", "Expression": "visible / IF(running > 0, running, 1)",
                                           "Label": "Backlog per task", "ReturnData": True}
    assert metrics["visible"]["MetricStat"]["Metric"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert metrics["running"]["MetricStat"]["Metric"]["Namespace"] == "ECS/ContainerInsights"
    assert metrics["running"]["MetricStat"]["Metric"]["MetricName"] == "RunningTaskCount"


def test_lambda_worker_forwards_to_the_long_task_queue(template):
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": "worker_tier.handlers.worker.lambda_handler",
         "Environment": {"Variables": Match.object_like({contract.CONTAINER_QUEUE_URL_VARIABLE: {"Ref": Match.string_like_regexp("LongTasksLongTaskQueue")}})}},
    )


def test_only_wildcards_are_the_image_pull_token_and_the_safety_nets_stream_listing(template):
    # THEN Resource "*" only for the actions without resource-level permissions: the execution role's image pull
    # token, and the safety net's (Lambda's stream poller's) ListStreams
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Resource"] == "*":
                assert statement["Action"] in ("ecr:GetAuthorizationToken", "dynamodb:ListStreams")


def test_container_image_pins_agree_with_requirements():
    pins = {line for line in (REPO / "requirements.txt").read_text().splitlines() if "==" in line}
    container = {line for line in (REPO / "src" / "worker_tier_cdk" / "docker" / "requirements.txt").read_text().splitlines() if "==" in line}
    assert container <= pins


def test_the_grace_period_fits_in_the_stop_timeout():
    # SIGTERM, then DEFAULT_CONTAINER_GRACE_SECONDS for running tasks, then the exit, all before ECS's SIGKILL
    assert DEFAULT_CONTAINER_GRACE_SECONDS < STOP_TIMEOUT_SECONDS == 120


def test_task_definition_carries_the_state_table_for_idempotent_tasks(template):
    # GIVEN the container worker  WHEN its task definition is synthesized  THEN idempotent tasks find their table
    [definition] = template.find_resources("AWS::ECS::TaskDefinition").values()
    [container] = definition["Properties"]["ContainerDefinitions"]
    variables = {v["Name"]: v["Value"] for v in container["Environment"]}
    assert re.fullmatch(r"StateTable[0-9A-F]{8}", variables[contract.STATE_TABLE_VARIABLE]["Ref"])
    # AND no second name for a setting: concurrency travels only as the container_concurrency setting
    assert "WORKER_TIER_CONCURRENCY" not in variables and "WORKER_TIER_GRACE_SECONDS" not in variables


def test_tasks_run_in_private_subnets_without_public_ips_by_default(template):
    # GIVEN the default container_subnets ("private")  THEN no public IP, private subnets, one NAT gateway
    [service] = template.find_resources("AWS::ECS::Service").values()
    network = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert network["AssignPublicIp"] == "DISABLED"
    assert _subnet_types(template, network["Subnets"]) == {"Private"}
    template.resource_count_is("AWS::EC2::NatGateway", 1)


def test_public_subnets_are_a_setting(tmp_path):
    # GIVEN container_subnets "public"  WHEN synthesized (nag included)
    settings = Settings(container_worker=True, container_subnets="public")
    stack, _ = synth(settings=settings, outdir=str(tmp_path), cron_entries=[])
    template = Template.from_stack(stack)
    # THEN tasks get public IPs in public subnets and there is no NAT gateway to pay for
    [service] = template.find_resources("AWS::ECS::Service").values()
    network = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert network["AssignPublicIp"] == "ENABLED"
    assert _subnet_types(template, network["Subnets"]) == {"Public"}
    template.resource_count_is("AWS::EC2::NatGateway", 0)


def test_an_existing_vpc_is_used_instead_of_a_new_one():
    # GIVEN a stack with its own VPC, handed to the construct
    stack = cdk.Stack(cdk.App(), "Host")
    vpc = ec2.Vpc(stack, "Existing", max_azs=2, nat_gateways=1)
    props = ContainerWorkerProps(
        settings=Settings(container_worker=True),
        dead_letter_queue=sqs.Queue(stack, "Dlq"),
        state_table=dynamodb.TableV2(stack, "State", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING)),
        vpc=vpc,
        task_code=TASK_CODE,
    )
    # WHEN the container worker is built
    worker = ContainerWorker(stack, "LongTasks", props)
    template = Template.from_stack(stack)
    # THEN it makes no VPC of its own and runs in the given VPC's private subnets
    assert worker.vpc is vpc
    template.resource_count_is("AWS::EC2::VPC", 1)
    [service] = template.find_resources("AWS::ECS::Service").values()
    subnets = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]["Subnets"]
    assert [s["Ref"] for s in subnets] == [stack.resolve(s.subnet_id)["Ref"] for s in vpc.private_subnets]


def test_base_image_is_a_build_argument_from_the_setting(synthesized):
    # GIVEN the default settings  WHEN the image asset is synthesized
    _, assembly = synthesized
    manifest = json.loads((Path(assembly.directory) / "WorkerTier.assets.json").read_text())
    [image] = manifest["dockerImages"].values()
    # THEN the Dockerfile gets the configured base image as BASE_IMAGE
    assert image["source"]["dockerBuildArgs"] == {"BASE_IMAGE": DEFAULT_CONTAINER_BASE_IMAGE}
    assert image["source"]["dockerFile"] == "worker.Dockerfile"


def test_dockerfile_default_base_image_is_the_settings_default():
    dockerfile = (REPO / "src" / "worker_tier_cdk" / "docker" / "worker.Dockerfile").read_text()
    assert f"ARG BASE_IMAGE={DEFAULT_CONTAINER_BASE_IMAGE}\nFROM ${{BASE_IMAGE}}\n" in dockerfile


def test_an_unpinned_base_image_warns_at_synth_and_a_digest_does_not(synthesized, tmp_path):
    # GIVEN the default base image (a tag)  THEN synth warns, naming the image
    stack, _ = synthesized
    Annotations.from_stack(stack).has_warning(
        "/WorkerTier/LongTasks",
        f"container_base_image '{DEFAULT_CONTAINER_BASE_IMAGE}' is not pinned by digest, so a rebuild may pick up a "
        f"different image: set it to '<image>@sha256:<digest>' [ack: {UNPINNED_IMAGE_WARNING_ID}]",
    )
    # AND GIVEN an image pinned by digest  THEN no such warning
    pinned = Settings(container_worker=True, container_base_image=f"{DEFAULT_CONTAINER_BASE_IMAGE}@sha256:{'a' * 64}")
    pinned_stack, _ = synth(settings=pinned, outdir=str(tmp_path), cron_entries=[])
    Annotations.from_stack(pinned_stack).has_no_warning("*", Match.string_like_regexp("not pinned by digest"))


def _subnet_types(template: Template, subnets: list[dict]) -> set[str]:
    """The CDK subnet types ("Public", "Private") of the referenced subnets, from their tags."""
    resources = template.find_resources("AWS::EC2::Subnet")
    tags = [{t["Key"]: t["Value"] for t in resources[s["Ref"]]["Properties"]["Tags"]} for s in subnets]
    return {t["aws-cdk:subnet-type"] for t in tags}


def test_task_role_reaches_only_idempotency_flow_and_job_records_of_the_state_table(template):
    # GIVEN the container task's role
    [role] = [r for r in template.find_resources("AWS::IAM::Role") if r.startswith("LongTasksTaskTaskRole")]
    # WHEN its state-table statements are read
    statements = [s for r, s in dynamodb_statements(template) if r == role and on_table(s, "StateTable")]
    # THEN it may only run Powertools' item calls, only on idempotency# items (no watermark, no cron claims), read and
    # update flow control's flow# items (never put or delete), write and read job# items (tracked jobs), and check
    # (never write) the delay dispatcher's minute records, for cancellable messages
    actions = [s["Action"] for s in statements]
    assert sorted((json.dumps(a), json.dumps(s["Condition"])) for a, s in zip(actions, statements, strict=True)) == sorted([
        (json.dumps(list(IDEMPOTENCY_ACTIONS)),
         json.dumps({"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{IDEMPOTENCY_KEY_PREFIX}*"]}})),
        (json.dumps(["dynamodb:GetItem", "dynamodb:UpdateItem"]),
         json.dumps({"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["flow#*"]}})),
        (json.dumps(["dynamodb:BatchWriteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"]),
         json.dumps({"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["job#*"]}})),
        (json.dumps("dynamodb:ConditionCheckItem"),
         json.dumps({"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["scheduler#*"]}})),
    ])


def test_tasks_may_protect_themselves_from_scale_in_on_their_own_cluster_only(template):
    # GIVEN the task role  THEN ECS task protection (the agent calls it with the task's credentials) is allowed,
    # on this cluster's tasks and nothing else
    statements = [
        s for policy in template.find_resources("AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if "ecs:UpdateTaskProtection" in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    ]
    assert len(statements) == 1
    assert "task/" in json.dumps(statements[0]["Resource"]) and "LongTasksCluster" in json.dumps(statements[0]["Resource"])


def test_a_wildcard_on_the_task_role_still_fails_synth(tmp_path):
    # GIVEN the container worker, whose only acknowledged wildcard is the execution role's ECR token
    from aws_cdk import aws_iam as iam

    from worker_tier_cdk.nag import add_checks
    from worker_tier_cdk.stack import WorkerTierStack

    app = cdk.App(outdir=str(tmp_path))
    stack = WorkerTierStack(app, "WorkerTier", settings=SETTINGS, cron_entries=[], task_code=TASK_CODE)
    # WHEN someone grants the task role a wildcard
    stack.container_worker.service.task_definition.task_role.add_to_principal_policy(
        iam.PolicyStatement(actions=["s3:GetObject"], resources=["*"])
    )
    add_checks(app)
    # THEN cdk-nag refuses it: the acknowledgement does not reach the task role
    with pytest.raises(Exception, match="AwsSolutions-IAM5"):
        app.synth()


def test_both_workers_may_read_the_dlqs_size_which_sizes_their_dead_letter_copies(synthesized, template):
    # GIVEN the stack's dead-letter queue, the Lambda worker's role and the container task's role
    stack = synthesized[0]
    dlq = {"Fn::GetAtt": [stack.get_logical_id(stack.worker.dead_letter_queue.node.default_child), "Arn"]}
    roles = {stack.get_logical_id(role.node.default_child): role.node.path
             for role in (stack.worker.function.role, stack.container_worker.service.task_definition.task_role)}
    # WHEN their SQS statements on the DLQ are read
    readers = {
        role["Ref"]
        for policy in template.find_resources("AWS::IAM::Policy").values()
        for role in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Resource"] == dlq and "sqs:GetQueueAttributes" in statement["Action"]
    }
    # THEN each may call GetQueueAttributes on it (MaximumMessageSize, read before the first dead-letter copy)
    assert set(roles) <= readers, [roles[r] for r in set(roles) - readers]
