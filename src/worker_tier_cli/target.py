"""Where the command line points: explicit URLs and names, else the stack's CloudFormation outputs.

Each resource comes from its option (or its ``WORKER_TIER_*`` variable) when given, else from the stack's
outputs (``worker_tier_cdk.stack``: ``QueueUrl``, ``DeadLetterQueueUrl``, ...), read once with
DescribeStacks the first time a command needs a resource it was not given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from worker_tier.core.errors import WorkerTierError

DEFAULT_STACK_NAME = "WorkerTier"  # app.py's stack
# cdk.json's context key naming the stack, for an app that deploys it under another name.
STACK_CONTEXT_KEY = "worker_tier_stack"
# Resource -> the stack's output that carries it (worker_tier_cdk.stack.WorkerTierStack's CfnOutputs).
STACK_OUTPUTS = {
    "queue_url": "QueueUrl",
    "dlq_url": "DeadLetterQueueUrl",
    "state_table": "StateTableName",
    "delay_table": "DelayTableName",
    "container_queue_url": "ContainerQueueUrl",
    "worker_log_group": "WorkerLogGroupName",
    "schedule_group": "ScheduleGroupName",
}
OPTION_NAMES = {
    "queue_url": "--queue-url", "dlq_url": "--dlq-url", "state_table": "--state-table",
    "delay_table": "--delay-table", "container_queue_url": "--container-queue-url",
    "worker_log_group": "--log-group", "schedule_group": "--schedule-group",
}


class TargetError(WorkerTierError):
    """A resource a command needs was neither given nor found in the stack's outputs."""


def default_stack_name(directory: Path) -> str:
    """The stack named by ``./cdk.json``'s ``context.worker_tier_stack``, else ``DEFAULT_STACK_NAME``."""
    try:
        context = json.loads((directory / "cdk.json").read_text()).get("context") or {}
    except (OSError, ValueError, AttributeError):
        return DEFAULT_STACK_NAME
    name = context.get(STACK_CONTEXT_KEY) if isinstance(context, dict) else None
    return name if isinstance(name, str) and name else DEFAULT_STACK_NAME


@dataclass
class Target:
    """The resources given explicitly, and the stack to ask for the others (``cloudformation`` makes its client).

    With no ``stack_name`` (resources given and no ``--stack``), no stack is read.
    """

    stack_name: str | None
    cloudformation: Callable[[], Any]
    given: dict[str, str | None] = field(default_factory=dict)
    _outputs: dict[str, str] | None = None

    def optional(self, resource: str) -> str | None:
        """The resource, or None when neither given nor in the stack (a stack that does not exist is an error)."""
        value = self.given.get(resource)
        if value:
            return value
        return self.outputs().get(STACK_OUTPUTS[resource])

    def required(self, resource: str) -> str:
        """The resource, else TargetError naming the option and the stack output that would give it."""
        value = self.optional(resource)
        if not value:
            where = (f"stack {self.stack_name!r} has no {STACK_OUTPUTS[resource]} output" if self.stack_name
                     else "no stack is read when resources are given without --stack")
            raise TargetError(f"no {resource}: pass {OPTION_NAMES[resource]} ({where})")
        return value

    def outputs(self) -> dict[str, str]:
        """The stack's outputs by key, read once."""
        if self.stack_name is None:
            return {}
        if self._outputs is None:
            try:
                stacks = self.cloudformation().describe_stacks(StackName=self.stack_name)["Stacks"]
            except Exception as error:  # botocore's ClientError (no such stack), or no credentials/endpoint
                raise TargetError(f"cannot read stack {self.stack_name!r} ({error}); pass --stack NAME, or the "
                                  "resources themselves (--queue-url, --dlq-url, --state-table)") from error
            outputs = (stacks[0].get("Outputs") or []) if stacks else []
            self._outputs = {o["OutputKey"]: o["OutputValue"] for o in outputs}
        return self._outputs
