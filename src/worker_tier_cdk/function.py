"""``ServiceFunction``: a Worker Tier Lambda function with its own log group and least-privilege role."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from aws_cdk import Duration, aws_iam as iam, aws_lambda as lambda_, aws_logs as logs
from constructs import Construct

from worker_tier_cdk.code import TaskCode, stage
from worker_tier_cdk.defaults import LOG_RETENTION
from worker_tier_cdk.runtime import LAMBDA_ARCHITECTURE, LAMBDA_RUNTIME, powertools_layer_arn
from worker_tier.core.contract import METRICS_NAMESPACE, SERVICE_NAME

# Every function logs and publishes metrics under the same service and namespace.
POWERTOOLS_ENVIRONMENT = {"POWERTOOLS_SERVICE_NAME": SERVICE_NAME, "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE}


@dataclass
class ServiceFunctionProps:
    """What differs between Worker Tier's functions."""

    handler: str
    timeout_seconds: int
    memory_mb: int
    environment: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    task_code: TaskCode = field(default_factory=TaskCode)  # only the worker function runs tasks


class ServiceFunction(Construct):
    """A Python function on the Powertools layer whose role may write only to its own log group.

    The role is built by hand, not from AWSLambdaBasicExecutionRole, so that it
    names its one log group (cdk-nag AwsSolutions-IAM4).
    """

    def __init__(self, scope: Construct, construct_id: str, props: ServiceFunctionProps) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(self, "Logs", retention=LOG_RETENTION)
        self.code_directory = stage(self, props.task_code)  # the staged asset: the runtime, and the tasks if any
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            inline_policies={
                "logs": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                            resources=[self.log_group.log_group_arn],
                        )
                    ]
                )
            },
        )
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=LAMBDA_RUNTIME,
            architecture=LAMBDA_ARCHITECTURE,
            handler=props.handler,
            code=lambda_.Code.from_asset(str(self.code_directory)),
            layers=[lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", powertools_layer_arn())],
            timeout=Duration.seconds(props.timeout_seconds),
            memory_size=props.memory_mb,
            environment={**POWERTOOLS_ENVIRONMENT, **props.environment},
            description=props.description,
            log_group=self.log_group,
            role=self.role,
        )
