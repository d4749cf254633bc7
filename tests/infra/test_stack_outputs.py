"""The stack outputs through which `worker-tier --stack NAME` finds a deployment: every construct publishes its own."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk.assertions import Template

from tests.support.synth import TASK_CODE
from worker_tier.core.contract import STACK_OUTPUTS
from worker_tier_cdk.settings import Settings
from worker_tier_cdk.worker_queue import WorkerQueue, WorkerQueueProps
from worker_tier_cli.target import STACK_OUTPUTS as CLI_OUTPUTS


def _output_keys(template: Template) -> set[str]:
    return set(template.to_json().get("Outputs", {}))


def test_the_whole_stack_publishes_every_output_the_command_line_reads_under_its_plain_name(template):
    # GIVEN the repo's stack (delays and cron.yaml on; the container worker and priorities off)
    keys = _output_keys(template)
    # THEN every resource the command line reads is there by its plain key, but the container and level queues it lacks
    lacked = ("container_queue_url", "high_queue_url", "low_queue_url")
    assert {key for resource, key in CLI_OUTPUTS.items() if resource not in lacked} <= keys
    assert STACK_OUTPUTS["worker_function"] in keys and "ContainerQueueUrl" not in keys


def test_a_stack_holding_only_worker_queues_is_reachable_by_its_outputs():
    # GIVEN the README's own-app stack: WorkerQueue constructs in a plain Stack, the second one named Invoices
    app = cdk.App()
    stack = cdk.Stack(app, "Billing")
    WorkerQueue(stack, "Payments", WorkerQueueProps(settings=Settings(), task_code=TASK_CODE))
    WorkerQueue(stack, "Invoices", WorkerQueueProps(settings=Settings(), task_code=TASK_CODE))
    # WHEN it is synthesized
    outputs = Template.from_stack(stack).to_json()["Outputs"]
    # THEN the first publishes the plain keys, the second the same keys behind its construct id (--worker Invoices)
    published = {"QueueUrl", "DeadLetterQueueUrl", "WorkerFunctionName", "WorkerLogGroupName", "PayloadBucketName"}
    assert published | {f"Invoices{key}" for key in published} == set(outputs)
    assert outputs["QueueUrl"]["Value"]["Ref"].startswith("PaymentsQueue")
    assert outputs["InvoicesQueueUrl"]["Value"]["Ref"].startswith("InvoicesQueue")
    assert "worker-tier" in outputs["InvoicesDeadLetterQueueUrl"]["Description"]
