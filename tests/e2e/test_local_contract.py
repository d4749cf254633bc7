"""The local environment makes what the stack makes, and names it to the functions as the stack does."""

from __future__ import annotations

import json
import os

import pytest

from worker_tier.core import contract
from worker_tier.core.settings import Settings
from worker_tier_local import LocalEnvironment
from worker_tier_local.environment import LOCAL_DELAY_HORIZON_SECONDS


@pytest.mark.parametrize("settings", [Settings(), Settings(fifo=True, visibility_timeout=600)], ids=["standard", "fifo"])
def test_local_queues_are_the_contracts_shape(settings):
    # GIVEN the local environment with the container worker
    with LocalEnvironment(settings, container=True) as env:
        def attributes(queue_url: str) -> dict[str, str]:
            return env.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]

        # WHEN its queues' attributes are read  THEN each has every attribute the stack's queue has
        for queue_url in (env.queue_url, env.container_queue_url):
            queue = attributes(queue_url)
            assert contract.queue_attributes(settings).items() <= queue.items()
            # AND redrives to the DLQ after the receives the stack allows
            assert json.loads(queue["RedrivePolicy"]) == {
                "deadLetterTargetArn": attributes(env.dead_letter_queue_url)["QueueArn"],
                "maxReceiveCount": settings.redrive_max_receive_count,
            }
        assert contract.queue_attributes(settings, dead_letter=True).items() <= attributes(env.dead_letter_queue_url).items()


def test_local_functions_read_the_resources_and_settings_as_deployed():
    # GIVEN the local environment with the container worker and a setting changed
    settings = Settings(max_retries=4)
    before = contract.Resources.from_environment(os.environ)
    with LocalEnvironment(settings, container=True) as env:
        # WHEN the functions' variables are read back through the contract
        resources = contract.Resources.from_environment(os.environ)
        # THEN they name this environment's resources, the local horizon, and the settings
        assert resources == env.resources()
        assert (resources.container_queue_url, resources.delay_horizon_seconds) == (env.container_queue_url, LOCAL_DELAY_HORIZON_SECONDS)
        assert Settings.from_environment(os.environ) == settings
    # AND once stopped, the resource variables are as they were before
    assert contract.Resources.from_environment(os.environ) == before
