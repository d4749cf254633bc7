"""``ContainerWorker`` (opt-in): ECS Fargate tasks running ``python -m worker_tier worker`` for long tasks.

It consumes its own long-task queue: the Lambda worker forwards ``@task(container=True)``
messages there, so producers need not know which tasks are long. Its dead letters go
to the stack's one DLQ.

Scaling tracks backlog per task, computed by CloudWatch metric math from metrics AWS
already publishes, ``visible / IF(running > 0, running, 1)``, against a target of
``target_latency_seconds / avg_processing_seconds``. The L2 ``scale_to_track_custom_metric``
refuses metric math ("Only direct metrics are supported for Target Tracking"), so the
policy is an L1 ``CfnScalingPolicy`` on the service's scalable target. Scale-out is fast
(60 s cooldown), scale-in slow (10 min); running tasks protect themselves from scale-in.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Acknowledgment, Duration, Validations, aws_dynamodb as dynamodb, aws_ec2 as ec2, aws_ecs as ecs
from aws_cdk import aws_applicationautoscaling as autoscaling, aws_logs as logs, aws_sqs as sqs
from aws_cdk.aws_ecr_assets import Platform
from constructs import Construct

from infra import REPO_ROOT, defaults
from infra.function import POWERTOOLS_ENVIRONMENT
from infra.settings import Settings

DOCKERFILE = "docker/worker.Dockerfile"
DOCKER_EXCLUDES = [".venv", "cdk.out", "node_modules", ".git", ".pytest_cache", ".hypothesis", "tests", "bench", "**/__pycache__"]
SCALE_OUT_COOLDOWN_SECONDS = 60
SCALE_IN_COOLDOWN_SECONDS = 600
METRIC_PERIOD_SECONDS = 60
GRACE_SECONDS = 100
STOP_TIMEOUT_SECONDS = 120  # ECS's maximum: the worker drains within GRACE_SECONDS of SIGTERM


@dataclass
class ContainerWorkerProps:
    """The stack's resources the container worker shares."""

    settings: Settings
    dead_letter_queue: sqs.IQueue
    state_table: dynamodb.ITableV2


class ContainerWorker(Construct):
    """Public attributes: ``queue`` (long tasks), ``dead_letter_queue``, ``cluster``, ``service``, ``scaling_policy``."""

    def __init__(self, scope: Construct, construct_id: str, props: ContainerWorkerProps) -> None:
        super().__init__(scope, construct_id)
        settings = props.settings
        self.dead_letter_queue = props.dead_letter_queue
        self.queue = sqs.Queue(
            self,
            "LongTaskQueue",
            dead_letter_queue=sqs.DeadLetterQueue(queue=props.dead_letter_queue, max_receive_count=settings.redrive_max_receive_count),
            **{**defaults.queue_props(settings), "visibility_timeout": Duration.seconds(settings.visibility_timeout)},
        )
        vpc = self._vpc()
        self.cluster = ecs.Cluster(self, "Cluster", vpc=vpc, container_insights_v2=ecs.ContainerInsights.ENABLED)
        task_definition = self._task_definition(settings)
        self.service = ecs.FargateService(
            self,
            "Service",
            cluster=self.cluster,
            task_definition=task_definition,
            desired_count=settings.container_min_tasks,
            assign_public_ip=True,  # reaches SQS and DynamoDB without a NAT gateway; no inbound rules at all
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC),
            circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
            min_healthy_percent=100,
        )
        self.queue.grant_consume_messages(task_definition.task_role)
        props.dead_letter_queue.grant_send_messages(task_definition.task_role)
        props.state_table.grant_read_write_data(task_definition.task_role)
        self.scaling_policy = self._scaling(settings)

    def _vpc(self) -> ec2.Vpc:
        """Two public subnets, flow logs on; tasks only make outbound calls."""
        vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=2,
            nat_gateways=0,
            subnet_configuration=[ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC)],
        )
        vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(
            logs.LogGroup(self, "FlowLogs", retention=defaults.LOG_RETENTION)
        ))
        return vpc

    def _task_definition(self, settings: Settings) -> ecs.FargateTaskDefinition:
        task_definition = ecs.FargateTaskDefinition(
            self,
            "Task",
            cpu=settings.container_cpu,
            memory_limit_mib=settings.container_memory_mb,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.ARM64, operating_system_family=ecs.OperatingSystemFamily.LINUX
            ),
        )
        task_definition.add_container(
            "Worker",
            image=ecs.ContainerImage.from_asset(
                str(REPO_ROOT), file=DOCKERFILE, exclude=DOCKER_EXCLUDES, platform=Platform.LINUX_ARM64
            ),
            logging=ecs.LogDriver.aws_logs(
                stream_prefix="worker", log_group=logs.LogGroup(self, "Logs", retention=defaults.LOG_RETENTION)
            ),
            environment={
                **settings.to_environment(),
                **POWERTOOLS_ENVIRONMENT,
                "WORKER_TIER_QUEUE_URL": self.queue.queue_url,
                "WORKER_TIER_DLQ_URL": self.dead_letter_queue.queue_url,
                "WORKER_TIER_CONCURRENCY": str(settings.container_concurrency),
                "WORKER_TIER_GRACE_SECONDS": str(GRACE_SECONDS),
            },
            stop_timeout=Duration.seconds(STOP_TIMEOUT_SECONDS),
        )
        Validations.of(task_definition).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-ECS2",
                reason="The environment carries only settings and resource names (queue URLs, table names), no secrets.",
            ),
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason="The execution role's ecr:GetAuthorizationToken, which pulls the image, has no resource-level "
                "permissions: AWS requires Resource '*' for it.",
            ),
        )
        return task_definition

    def _scaling(self, settings: Settings) -> autoscaling.CfnScalingPolicy:
        """Target tracking on backlog per task (metric math), fast out, slow in."""
        capacity = self.service.auto_scale_task_count(
            min_capacity=settings.container_min_tasks, max_capacity=settings.container_max_tasks
        )
        target = capacity.node.find_child("Target")
        return autoscaling.CfnScalingPolicy(
            self,
            "BacklogPerTask",
            policy_name="backlog-per-task",
            policy_type="TargetTrackingScaling",
            scaling_target_id=target.scalable_target_id,  # type: ignore[attr-defined]
            target_tracking_scaling_policy_configuration=autoscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty(
                target_value=settings.backlog_per_task_target,
                scale_out_cooldown=SCALE_OUT_COOLDOWN_SECONDS,
                scale_in_cooldown=SCALE_IN_COOLDOWN_SECONDS,
                customized_metric_specification=autoscaling.CfnScalingPolicy.CustomizedMetricSpecificationProperty(
                    metrics=[
                        _metric("visible", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "Sum",
                                {"QueueName": self.queue.queue_name}),
                        _metric("running", "ECS/ContainerInsights", "RunningTaskCount", "Average",
                                {"ClusterName": self.cluster.cluster_name, "ServiceName": self.service.service_name}),
                        autoscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty(
                            id="backlog_per_task",
                            expression="visible / IF(running > 0, running, 1)",
                            label="Backlog per task",
                            return_data=True,
                        ),
                    ]
                ),
            ),
        )


def _metric(query_id: str, namespace: str, name: str, statistic: str, dimensions: dict[str, str]):  # type: ignore[no-untyped-def]
    """One metric of the scaling policy's math (not returned itself)."""
    return autoscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty(
        id=query_id,
        return_data=False,
        metric_stat=autoscaling.CfnScalingPolicy.TargetTrackingMetricStatProperty(
            metric=autoscaling.CfnScalingPolicy.TargetTrackingMetricProperty(
                namespace=namespace,
                metric_name=name,
                dimensions=[autoscaling.CfnScalingPolicy.TargetTrackingMetricDimensionProperty(name=k, value=v)
                            for k, v in dimensions.items()],
            ),
            stat=statistic,
        ),
    )
