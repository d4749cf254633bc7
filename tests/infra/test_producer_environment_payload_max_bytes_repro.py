"""Repro: a stack's lowered payload_max_bytes never reaches a producer configured from ``producer_environment()``.

docs/large-payloads.md: ``payload_max_bytes`` / ``WORKER_TIER_PAYLOAD_MAX_BYTES`` is "the largest body offloaded
(default 64 MiB); a larger one is refused at send", and "a producer outside the stack gets it from
``stack.producer_environment()``". The worker reads the stack's setting (``Settings.to_environment()``), but the
producer environment omits the variable, so ``Client.from_env(stack.producer_environment())`` keeps the 64 MiB default:
a body between the two is uploaded and sent, then dead-lettered at once by the worker as over payload_max_bytes.
"""

from __future__ import annotations

import aws_cdk as cdk

from tests.support.synth import TASK_CODE
from worker_tier import Client
from worker_tier.core.settings import Settings
from worker_tier_cdk.stack import WorkerTierStack

EIGHT_MIB = 8 * 1024 * 1024


def test_a_producer_from_the_stacks_environment_refuses_what_the_stacks_worker_would_dead_letter():
    # GIVEN a stack whose workers read bodies up to 8 MiB
    stack = WorkerTierStack(cdk.App(), "Jobs", settings=Settings(payload_max_bytes=EIGHT_MIB), task_code=TASK_CODE,
                            cron_entries=[])
    # WHEN a producer outside it is configured as documented
    client = Client.from_env(stack.producer_environment())
    # THEN it refuses at send what the worker would dead-letter
    assert client.payload_max_bytes == EIGHT_MIB, (
        f"producer_environment() gives {sorted(stack.producer_environment())}: the producer offloads bodies up to "
        f"{client.payload_max_bytes} bytes, the stack's workers dead-letter any over {EIGHT_MIB}")
