"""The stack outputs through which ``worker-tier --stack NAME`` finds a deployment, published by each construct.

Each construct publishes the outputs of what it makes (``worker_tier.core.contract.STACK_OUTPUTS``), so a stack
holding only a ``WorkerQueue`` is as reachable as ``WorkerTierStack``. The outputs live at the stack's top
level: the first construct to publish a key takes the plain name (``QueueUrl``, as deployed stacks already
have it), a later one puts its construct id in front (``InvoicesQueueUrl``, read with ``--worker Invoices``).
"""

from __future__ import annotations

import re

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from worker_tier.core.contract import STACK_OUTPUTS

_NOT_ALPHANUMERIC = re.compile(r"[^A-Za-z0-9]")


def publish(construct: Construct, resource: str, value: str) -> CfnOutput:
    """``construct``'s output for ``resource`` (a ``STACK_OUTPUTS`` key), in its stack."""
    stack = Stack.of(construct)
    key = STACK_OUTPUTS[resource]
    if stack.node.try_find_child(key) is not None:
        key = _NOT_ALPHANUMERIC.sub("", construct.node.id) + key
    return CfnOutput(stack, key, value=value, description=f"worker-tier: {resource} of {construct.node.path}")
