"""ContainerWorker in the template: the service, backlog-per-task scaling, routing, protections."""

from __future__ import annotations

from pathlib import Path

import pytest
from aws_cdk.assertions import Match, Template

from tests.infra.conftest import synth
from worker_tier.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SETTINGS = Settings(container_worker=True, target_latency_seconds=10, avg_processing_seconds=1, container_min_tasks=2, container_max_tasks=20)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Template:
    stack, _ = synth(settings=SETTINGS, outdir=str(tmp_path_factory.mktemp("container")), cron_entries=[])
    return Template.from_stack(stack)


def test_fargate_service_runs_the_worker_command_on_arm64(template):
    template.has_resource_properties("AWS::ECS::Service", {"LaunchType": "FARGATE", "DesiredCount": 2,
                                                           "DeploymentConfiguration": Match.object_like({"DeploymentCircuitBreaker": {"Enable": True, "Rollback": True}})})
    template.has_resource_properties(
        "AWS::ECS::TaskDefinition",
        {
            "RuntimePlatform": {"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"},
            "ContainerDefinitions": [Match.object_like({
                "StopTimeout": 120,
                "Environment": Match.array_with([{"Name": "WORKER_TIER_CONCURRENCY", "Value": "4"}, {"Name": "WORKER_TIER_GRACE_SECONDS", "Value": "100"}]),
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
         "Environment": {"Variables": Match.object_like({"WORKER_TIER_LONG_QUEUE_URL": {"Ref": Match.string_like_regexp("LongTasksLongTaskQueue")}})}},
    )


def test_only_wildcard_is_the_image_pull_token(template):
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Resource"] == "*":
                assert statement["Action"] == "ecr:GetAuthorizationToken"


def test_container_image_pins_agree_with_requirements():
    pins = {line for line in (REPO / "requirements.txt").read_text().splitlines() if "==" in line}
    container = {line for line in (REPO / "docker" / "requirements.txt").read_text().splitlines() if "==" in line}
    assert container <= pins
