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

Networking follows the ``container_subnets`` setting: ``private`` (the default) runs tasks
in private subnets behind one NAT gateway with no public IP; ``public`` gives them public
IPs in public subnets and saves the NAT gateway's cost. Either way there are no inbound
rules. Pass ``vpc`` to use an existing VPC with such subnets instead of a new one.

The base image is the ``container_base_image`` setting, passed to the Dockerfile as the
``BASE_IMAGE`` build argument; synth warns unless it is pinned by digest (``@sha256:``).

HTTP forwarding (the ``app_port`` setting): the container worker POSTs each message to an app on
localhost, so it reads the work queue itself (the contract's ``QUEUE_URL_VARIABLE`` is the work queue's,
it has no queue of its own, and the Lambda worker gets no event source) and scales on that queue's
backlog. With ``app_image``, the app runs as a second essential container of the same task, its
port mapped, the worker container starting after it (condition ``START``: the worker's own health gate,
``app_health_path``, waits for it to answer, so the app's image needs no curl for a container health
check). With ``app_signing_secret_arn``, the task role may read that one secret or parameter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from aws_cdk import Acknowledgment, Annotations, Duration, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb, aws_ec2 as ec2, aws_ecr as ecr, aws_ecs as ecs, aws_iam as iam
from aws_cdk import aws_applicationautoscaling as autoscaling, aws_logs as logs, aws_s3 as s3, aws_sqs as sqs
from aws_cdk.aws_ecr_assets import Platform
from constructs import Construct

from worker_tier_cdk import defaults
from worker_tier_cdk.code import DOCKERFILE, TaskCode, stage
from worker_tier_cdk.outputs import publish
from worker_tier_cdk.function import POWERTOOLS_ENVIRONMENT
from worker_tier_cdk.grants import (
    FLOW_ACTIONS,
    IDEMPOTENCY_ACTIONS,
    JOB_WORKER_ACTIONS,
    grant_items,
    grant_payload_consume,
    grant_signing_secret,
)
from worker_tier_cdk.settings import Settings
from worker_tier.core.contract import FLOW_KEY_PREFIX, IDEMPOTENCY_KEY_PREFIX, JOB_KEY_PREFIX, SEND_QUEUE_URL_VARIABLE, Resources
from worker_tier.core.limits import ECS_FARGATE_MAX_STOP_TIMEOUT_SECONDS
from worker_tier.core.settings import CONTAINER_SUBNETS_PUBLIC
from worker_tier.core.errors import ConfigurationError

SCALE_OUT_COOLDOWN_SECONDS = 60
SCALE_IN_COOLDOWN_SECONDS = 600
METRIC_PERIOD_SECONDS = 60
# SIGTERM to SIGKILL: Fargate's maximum, so the worker's grace period (DEFAULT_CONTAINER_GRACE_SECONDS) fits inside it.
STOP_TIMEOUT_SECONDS = ECS_FARGATE_MAX_STOP_TIMEOUT_SECONDS
# The image runs `python -m worker_tier worker` (worker_tier/__main__.py).
ENTRY_POINT = ["python", "-m", "worker_tier"]
COMMAND = ["worker"]
BASE_IMAGE_BUILD_ARG = "BASE_IMAGE"
NAT_GATEWAYS = 1
UNPINNED_IMAGE_WARNING_ID = "worker-tier:container-base-image-unpinned"
WORKER_CONTAINER = "Worker"
# An app_image in ECR: its repository gets a pull grant (ContainerImage.from_ecr_repository); ECR's URI format:
# https://docs.aws.amazon.com/AmazonECR/latest/userguide/docker-pull-ecr-image.html
ECR_IMAGE = re.compile(r"(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com/(?P<repository>[^:@]+)"
                       r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?")
APP_CONTAINER = "App"


class ContainerWorkerPropsError(ConfigurationError):
    """ContainerWorkerProps that cannot run the settings' container worker."""


@dataclass
class ContainerWorkerProps:
    """The stack's resources the container worker shares; ``vpc``: an existing one, else a new one."""

    settings: Settings
    dead_letter_queue: sqs.IQueue
    state_table: dynamodb.ITableV2
    vpc: ec2.IVpc | None = None
    work_queue: sqs.IQueue | None = None  # where tasks' follow-ups go (the contract's send_queue_url)
    task_code: TaskCode = field(default_factory=TaskCode)  # the team's tasks, beside the installed runtime
    payload_bucket: s3.IBucket | None = None  # where offloaded bodies are read and deleted (the WorkerQueue's)
    # The work queue's priority levels (WorkerQueue.level_queues): forwarding, it reads them too, so it scales on them.
    level_queues: Mapping[str, sqs.IQueue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.settings.app_port and self.work_queue is None:
            raise ContainerWorkerPropsError(
                f"ContainerWorkerProps: app_port {self.settings.app_port} makes the container worker read the work "
                "queue itself (HTTP forwarding): pass work_queue")


class ContainerWorker(Construct):
    """Public attributes: ``queue`` (the one it reads: long tasks, or the work queue when forwarding), ``dead_letter_queue``,
    ``cluster``, ``service``, ``scaling_policy``, ``app_container`` (None unless ``app_image`` is set),
    ``payload_bucket`` (None unless given).
    """

    def __init__(self, scope: Construct, construct_id: str, props: ContainerWorkerProps) -> None:
        super().__init__(scope, construct_id)
        settings = props.settings
        props.task_code.check_modules(settings.task_modules)
        props.task_code.check_app(settings.app)
        props.task_code.check_middleware(settings.middleware)
        self.dead_letter_queue = props.dead_letter_queue
        self.payload_bucket = props.payload_bucket
        self._level_queues = props.level_queues
        self.forwarding = bool(settings.app_port)
        self.queue = props.work_queue if self.forwarding and props.work_queue is not None else sqs.Queue(
            self,
            "LongTaskQueue",  # the id keeps its first name: renaming it would replace the deployed queue
            dead_letter_queue=sqs.DeadLetterQueue(queue=props.dead_letter_queue, max_receive_count=settings.redrive_max_receive_count),
            **{**defaults.queue_props(settings), "visibility_timeout": Duration.seconds(settings.visibility_timeout)},
        )
        public = settings.container_subnets == CONTAINER_SUBNETS_PUBLIC
        self.vpc = props.vpc or self._new_vpc(public)
        self.cluster = ecs.Cluster(self, "Cluster", vpc=self.vpc, container_insights_v2=ecs.ContainerInsights.ENABLED)
        task_definition = self._task_definition(settings, props.state_table, props.task_code)
        self.service = ecs.FargateService(
            self,
            "Service",
            cluster=self.cluster,
            task_definition=task_definition,
            desired_count=settings.container_min_tasks,
            assign_public_ip=public,  # no inbound rules either way: tasks only make outbound calls
            vpc_subnets=ec2.SubnetSelection(
                subnet_type=ec2.SubnetType.PUBLIC if public else ec2.SubnetType.PRIVATE_WITH_EGRESS
            ),
            circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
            min_healthy_percent=100,
        )
        self.queue.grant_consume_messages(task_definition.task_role)
        # A message its waits brought to max_retries receives is replaced by a fresh copy on its own queue (flow control)
        self.queue.grant_send_messages(task_definition.task_role)
        props.dead_letter_queue.grant_send_messages(task_definition.task_role)
        grant_items(props.state_table, task_definition.task_role, actions=IDEMPOTENCY_ACTIONS,
                    leading_key_prefixes=[IDEMPOTENCY_KEY_PREFIX])
        grant_items(props.state_table, task_definition.task_role, actions=FLOW_ACTIONS, leading_key_prefixes=[FLOW_KEY_PREFIX])
        grant_items(props.state_table, task_definition.task_role, actions=JOB_WORKER_ACTIONS, leading_key_prefixes=[JOB_KEY_PREFIX])
        if props.work_queue is not None:
            props.work_queue.grant_send_messages(task_definition.task_role)  # tasks' follow-ups (Client.from_env)
        if props.work_queue is not None and not self.forwarding:  # forwarding: the queue it reads is the work queue
            task_definition.default_container.add_environment(  # type: ignore[union-attr]  # the pattern's container
                SEND_QUEUE_URL_VARIABLE, props.work_queue.queue_url
            )
        if self.payload_bucket is not None:
            grant_payload_consume(self.payload_bucket, task_definition.task_role)
        if settings.app_signing_secret_arn:
            grant_signing_secret(task_definition.task_role, settings.app_signing_secret_arn)
        self._grant_task_protection(task_definition.task_role)
        self.scaling_policy = self._scaling(settings)
        if not self.forwarding:  # forwarding: the queue it reads is the work queue, published as such
            publish(self, "container_queue_url", self.queue.queue_url)

    def _new_vpc(self, public: bool) -> ec2.Vpc:
        """Two AZs, flow logs on; private subnets behind one NAT gateway unless tasks are public."""
        subnets = [ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC)]
        if not public:
            subnets.append(ec2.SubnetConfiguration(name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS))
        vpc = ec2.Vpc(self, "Vpc", max_azs=2, nat_gateways=0 if public else NAT_GATEWAYS, subnet_configuration=subnets)
        vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(
            logs.LogGroup(self, "FlowLogs", retention=defaults.LOG_RETENTION)
        ))
        return vpc

    def _task_definition(self, settings: Settings, state_table: dynamodb.ITableV2, task_code: TaskCode) -> ecs.FargateTaskDefinition:
        task_definition = ecs.FargateTaskDefinition(
            self,
            "Task",
            cpu=settings.container_cpu,
            memory_limit_mib=settings.container_memory_mb,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.ARM64, operating_system_family=ecs.OperatingSystemFamily.LINUX
            ),
        )
        worker = task_definition.add_container(
            WORKER_CONTAINER,
            image=self._image(settings, task_code),
            entry_point=ENTRY_POINT,
            command=COMMAND,
            logging=ecs.LogDriver.aws_logs(
                stream_prefix="worker", log_group=logs.LogGroup(self, "Logs", retention=defaults.LOG_RETENTION)
            ),
            environment={
                **settings.to_environment(),
                **POWERTOOLS_ENVIRONMENT,
                **Resources(
                    queue_url=self.queue.queue_url, dlq_url=self.dead_letter_queue.queue_url, state_table=state_table.table_name,
                    payload_bucket=self.payload_bucket.bucket_name if self.payload_bucket is not None else None,
                ).to_environment(),
            },
            stop_timeout=Duration.seconds(STOP_TIMEOUT_SECONDS),
        )
        self.app_container = self._app_container(task_definition, settings) if settings.app_image else None
        if self.app_container is not None:
            worker.add_container_dependencies(
                ecs.ContainerDependency(container=self.app_container, condition=ecs.ContainerDependencyCondition.START)
            )
        Validations.of(task_definition).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-ECS2",
                reason="The environment carries only settings and resource names (queue URLs, table names), no secrets.",
            ),
        )
        # On the execution role only, so a wildcard on the task role would still fail synth.
        Validations.of(task_definition.obtain_execution_role()).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason="The execution role's ecr:GetAuthorizationToken, which pulls the image, has no resource-level "
                "permissions: AWS requires Resource '*' for it.",
            ),
        )
        return task_definition

    def _app_container(self, task_definition: ecs.FargateTaskDefinition, settings: Settings) -> ecs.ContainerDefinition:
        """The app's own image (app_image), essential, serving app_port on the task's localhost, logging to CloudWatch."""
        return task_definition.add_container(
            APP_CONTAINER,
            image=self._app_image(settings.app_image),
            essential=True,
            port_mappings=[ecs.PortMapping(container_port=settings.app_port)],
            logging=ecs.LogDriver.aws_logs(
                stream_prefix="app", log_group=logs.LogGroup(self, "AppLogs", retention=defaults.LOG_RETENTION)
            ),
            stop_timeout=Duration.seconds(STOP_TIMEOUT_SECONDS),
        )

    def _app_image(self, reference: str) -> ecs.ContainerImage:
        """An ECR image (``<account>.dkr.ecr.<region>.amazonaws.com/<repository>``) with a pull grant on its one
        repository for the execution role; any other reference from its registry, as given."""
        match = ECR_IMAGE.fullmatch(reference)
        if match is None:
            return ecs.ContainerImage.from_registry(reference)
        repository = ecr.Repository.from_repository_attributes(
            self, "AppRepository", repository_name=match["repository"],
            repository_arn=f"arn:{Stack.of(self).partition}:ecr:{match['region']}:{match['account']}:repository/"
                           f"{match['repository']}")
        return ecs.ContainerImage.from_ecr_repository(repository, tag=match["digest"] or match["tag"] or "latest")

    def _grant_task_protection(self, task_role: iam.IRole) -> None:
        """ECS scale-in protection: the agent calls UpdateTaskProtection with the task role, on this cluster's tasks.

        https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection.html
        """
        stack = Stack.of(self)
        task_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["ecs:UpdateTaskProtection", "ecs:GetTaskProtection"],
                resources=[stack.format_arn(service="ecs", resource="task", resource_name=f"{self.cluster.cluster_name}/*")],
            )
        )
        cluster = stack.get_logical_id(self.cluster.node.default_child)  # type: ignore[arg-type]  # the cluster's CfnCluster
        Validations.of(task_role).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:"
                f"task/<{cluster}>/*]",
                reason="A task protects itself by its own task ARN, known only once it runs: the grant is every task of "
                "this cluster, and nothing else.",
            )
        )

    def _image(self, settings: Settings, task_code: TaskCode) -> ecs.ContainerImage:
        """docker/worker.Dockerfile on the configured base image; a warning at synth unless it is pinned by digest."""
        if "@sha256:" not in settings.container_base_image:
            Annotations.of(self).add_warning_v2(
                UNPINNED_IMAGE_WARNING_ID,
                f"container_base_image {settings.container_base_image!r} is not pinned by digest, so a rebuild may "
                "pick up a different image: set it to '<image>@sha256:<digest>'",
            )
        return ecs.ContainerImage.from_asset(
            str(stage(self, task_code, container=True)),
            file=DOCKERFILE,
            platform=Platform.LINUX_ARM64,
            build_args={BASE_IMAGE_BUILD_ARG: settings.container_base_image},
        )

    def _scaling(self, settings: Settings) -> autoscaling.CfnScalingPolicy:
        """Target tracking on backlog per task (metric math), fast out, slow in."""
        capacity = self.service.auto_scale_task_count(
            min_capacity=settings.container_min_tasks, max_capacity=settings.container_max_tasks
        )
        target = capacity.node.find_child("Target")
        # Forwarding with priorities: the backlog is every level's (the work queue's is the normal level's).
        levels = dict(self._level_queues) if self.forwarding else {}
        backlog = " + ".join(["visible", *(f"visible_{level}" for level in levels)])
        return autoscaling.CfnScalingPolicy(
            self,
            "BacklogPerTask",
            policy_name="backlog-per-task",
            policy_type="TargetTrackingScaling",
            scaling_target_id=target.scalable_target_id,  # type: ignore[attr-defined]  # Target: the ScalableTarget
            target_tracking_scaling_policy_configuration=autoscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty(
                target_value=settings.backlog_per_task_target,
                scale_out_cooldown=SCALE_OUT_COOLDOWN_SECONDS,
                scale_in_cooldown=SCALE_IN_COOLDOWN_SECONDS,
                customized_metric_specification=autoscaling.CfnScalingPolicy.CustomizedMetricSpecificationProperty(
                    metrics=[
                        _metric("visible", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "Sum",
                                {"QueueName": self.queue.queue_name}),
                        *(_metric(f"visible_{level}", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "Sum",
                                  {"QueueName": queue.queue_name}) for level, queue in levels.items()),
                        _metric("running", "ECS/ContainerInsights", "RunningTaskCount", "Average",
                                {"ClusterName": self.cluster.cluster_name, "ServiceName": self.service.service_name}),
                        autoscaling.CfnScalingPolicy.TargetTrackingMetricDataQueryProperty(
                            id="backlog_per_task",
                            expression=f"({backlog}) / IF(running > 0, running, 1)" if levels
                            else "visible / IF(running > 0, running, 1)",
                            label="Backlog per task",
                            return_data=True,
                        ),
                    ]
                ),
            ),
        )


def _metric(query_id: str, namespace: str, name: str, statistic: str, dimensions: dict[str, str]):
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
