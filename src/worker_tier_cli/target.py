"""Where the command line points: the deployment's variables (``worker_tier.core.contract``), options, or a stack's outputs.

One configuration names a deployment everywhere: the deployment variables that ``make run``'s banner
exports and ``Client.from_env()`` reads (``worker_tier.core.contract``) are read by every command too.
Where a resource comes from, first found wins:

1. its option (``--queue-url``; before or after the subcommand);
2. with ``--stack`` (or its variable, ``contract.STACK_VARIABLE``): that stack's outputs, and the variables are ignored, so a
   shell set up for the local environment cannot mix its queues into a deployed stack's;
3. its variable (``target.VARIABLES``);
4. when no resource was given either way: the default stack's outputs (``cdk.json``'s
   ``context.worker_tier_stack``, else ``WorkerTier``), read once with DescribeStacks on first need.

A stack holding several ``WorkerQueue`` constructs publishes the first one's outputs under the plain names and
the others' with their construct id in front (``InvoicesQueueUrl``); ``--worker Invoices`` picks those.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from worker_tier.core import contract
from worker_tier.core.errors import WorkerTierError

DEFAULT_STACK_NAME = "WorkerTier"  # app.py's stack
# cdk.json's context key naming the stack, for an app that deploys it under another name.
STACK_CONTEXT_KEY = "worker_tier_stack"
STACK_VARIABLE = contract.STACK_VARIABLE
ENDPOINT_VARIABLE = "AWS_ENDPOINT_URL"  # boto3's own: https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html
WORKER_VARIABLE = contract.WORKER_VARIABLE
# Resource -> the stack's output that carries it, for the resources a command reads.
STACK_OUTPUTS = {resource: key for resource, key in contract.STACK_OUTPUTS.items() if resource != "worker_function"}
OPTION_NAMES = {
    "queue_url": "--queue-url", "dlq_url": "--dlq-url", "state_table": "--state-table",
    "delay_table": "--delay-table", "container_queue_url": "--container-queue-url",
    "worker_log_group": "--log-group", "schedule_group": "--schedule-group", "payload_bucket": "--payload-bucket",
    "high_queue_url": "--high-queue-url", "low_queue_url": "--low-queue-url",
}
# Resource -> the variable naming it: the runtime's contract where the runtime has one, else the command line's own.
VARIABLES = {
    "queue_url": contract.QUEUE_URL_VARIABLE,
    "dlq_url": contract.DLQ_URL_VARIABLE,
    "state_table": contract.STATE_TABLE_VARIABLE,
    "delay_table": contract.DELAY_TABLE_VARIABLE,
    "container_queue_url": contract.CONTAINER_QUEUE_URL_VARIABLE,
    "worker_log_group": contract.LOG_GROUP_VARIABLE,
    "schedule_group": contract.SCHEDULE_GROUP_VARIABLE,
    "payload_bucket": contract.PAYLOAD_BUCKET_VARIABLE,
    "high_queue_url": contract.HIGH_QUEUE_URL_VARIABLE,
    "low_queue_url": contract.LOW_QUEUE_URL_VARIABLE,
}


# botocore's errors for what the AWS configuration lacks, by class name: what to set instead of a stack name.
_UNSET_CONFIGURATION = {
    "NoRegionError": "no AWS region is configured: pass --region, or set AWS_REGION (or a profile's region)",
    "NoCredentialsError": "no AWS credentials were found: set AWS_PROFILE, or configure credentials (aws configure)",
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
    """The resources given as options, the environment, and the stack to ask for the others.

    ``cloudformation`` makes the client; ``directory`` is where ``cdk.json`` names the default stack.
    Options may be added until the first resource is read (the subcommand's own come after the group's).
    """

    cloudformation: Callable[[], Any]
    # The endpoint the clients ask (--endpoint-url, else AWS_ENDPOINT_URL), named when a stack cannot be read there.
    endpoint: Callable[[], str | None] = lambda: None
    given: dict[str, str] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=dict)
    stack: str | None = None
    worker: str | None = None
    directory: Path = field(default_factory=Path.cwd)
    _outputs: dict[str, str] | None = None

    def give(self, resource: str, value: str | None) -> None:
        """An option's value (``stack`` and ``worker`` included); None (not passed) changes nothing."""
        if value:
            if resource in ("stack", "worker"):
                setattr(self, resource, value)
            else:
                self.given[resource] = value

    @property
    def stack_name(self) -> str | None:
        """The stack to read, or None when the resources are named without one."""
        if self._explicit_stack:
            return self._explicit_stack
        if self.given or self._from_environment():
            return None
        return default_stack_name(self.directory)

    def optional(self, resource: str) -> str | None:
        """The resource, or None when neither given nor in the stack (a stack that does not exist is an error)."""
        value = self.given.get(resource)
        if value:
            return value
        if not self._explicit_stack:
            value = self._from_environment().get(resource)
            if value:
                return value
        return self.outputs().get(self._output_key(resource))

    def required(self, resource: str) -> str:
        """The resource, else TargetError naming the option, the variable and the stack output that would give it."""
        value = self.optional(resource)
        if not value:
            raise TargetError(f"no {resource}: pass {OPTION_NAMES[resource]} or set {VARIABLES[resource]} "
                              f"({self._where(resource)})")
        return value

    def outputs(self) -> dict[str, str]:
        """The stack's outputs by key, read once."""
        name = self.stack_name
        if name is None:
            return {}
        if self._outputs is None:
            try:
                stacks = self.cloudformation().describe_stacks(StackName=name)["Stacks"]
            except Exception as error:  # botocore's ClientError (no such stack), or no credentials/endpoint
                unset = _UNSET_CONFIGURATION.get(type(error).__name__)
                if unset:
                    raise TargetError(f"cannot read stack {name!r}{self._asked()}: {unset}") from error
                raise TargetError(f"cannot read stack {name!r}{self._asked()} ({error}); pass --stack NAME, set the "
                                  f"deployment's variables ({contract.QUEUE_URL_VARIABLE}, {contract.DLQ_URL_VARIABLE}, "
                                  "...: make run prints them), or pass the resources (--queue-url, --dlq-url, "
                                  "--state-table)") from error
            outputs = (stacks[0].get("Outputs") or []) if stacks else []
            self._outputs = {o["OutputKey"]: o["OutputValue"] for o in outputs}
        return self._outputs

    def _asked(self) -> str:
        """Where DescribeStacks went, when not to AWS itself: the local environment's export line sets AWS_ENDPOINT_URL."""
        endpoint = self.endpoint()
        if not endpoint:
            return ""
        source = "--endpoint-url" if endpoint != self.environ.get(ENDPOINT_VARIABLE) else ENDPOINT_VARIABLE
        return (f" at {endpoint} (from {source}; a shell with make run's export line asks the local environment: "
                f"unset {ENDPOINT_VARIABLE} to ask AWS)")

    @property
    def _explicit_stack(self) -> str | None:
        return self.stack or self.environ.get(STACK_VARIABLE) or None

    def _from_environment(self) -> dict[str, str]:
        return {resource: self.environ[name] for resource, name in VARIABLES.items() if self.environ.get(name)}

    def _output_key(self, resource: str) -> str:
        worker = self.worker or self.environ.get(WORKER_VARIABLE) or ""
        return f"{worker}{STACK_OUTPUTS[resource]}"

    def _where(self, resource: str) -> str:
        name = self.stack_name
        if name is None:
            return "no stack is read when resources are given without --stack"
        keys = sorted(self.outputs())
        return f"stack {name!r} has no {self._output_key(resource)} output" + (f"; it has {', '.join(keys)}" if keys else "")
