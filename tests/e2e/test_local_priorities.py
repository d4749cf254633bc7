"""The local environment with priorities: the levels' queues made as the stack makes them, polled highest first."""

from __future__ import annotations

import json

from tests.support import stacks
from worker_tier.core import contract
from worker_tier.core.settings import Settings
from worker_tier_local import LocalEnvironment
from worker_tier_local.environment import LOCAL_PAYLOAD_BUCKET, LOCAL_PREFIX


def _enforce_priorities() -> None:
    """The priorities shape's roles over the local environment's queues (the conftest's shape has no levels)."""
    queues = {"WorkerQueue": f"{LOCAL_PREFIX}-queue", "WorkerHighQueue": f"{LOCAL_PREFIX}-queue-high",
              "WorkerLowQueue": f"{LOCAL_PREFIX}-queue-low", "WorkerDeadLetterQueue": f"{LOCAL_PREFIX}-dlq",
              "LongTasksLongTaskQueue": f"{LOCAL_PREFIX}-container"}
    stacks.enforce("priorities", queues=queues,
                   tables={"StateTable": f"{LOCAL_PREFIX}-state", "DelaysDelayTable": f"{LOCAL_PREFIX}-delays"},
                   buckets={stacks.PAYLOAD_BUCKET: LOCAL_PAYLOAD_BUCKET})


def test_the_local_event_source_takes_the_high_level_first(outcomes):
    _enforce_priorities()
    # GIVEN the local environment with priorities, three normal messages and then a high one
    with LocalEnvironment(Settings(priorities=True)) as env:
        for n in range(3):
            env.client.send("/hello", json.dumps({"name": f"normal-{n}"}))
        env.client.send("/hello", json.dumps({"name": "high"}), priority="high")
        # WHEN the Lambda-like event source polls once
        handled = env.poll_once()
        high_depth, normal_depth = env.queue_depth(env.level_queue_urls["high"]), env.queue_depth()
        # AND the variables it exports name the levels' queues
        exported = env.shell_environment()
    # THEN its batch was the high message alone, and the normal ones wait for the next polls
    assert (handled, high_depth, normal_depth) == (1, 0, 3)
    assert exported[contract.HIGH_QUEUE_URL_VARIABLE] == env.level_queue_urls["high"]
    assert [outcome.path for outcome in outcomes] == ["/hello"]
