"""The stack's queues and tables are the shape the contract states, so the local environment can make the same ones."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Template

from tests.support.synth import synth
from worker_tier.core import contract
from worker_tier.core.settings import Settings


def _as_attributes(properties: dict) -> dict[str, str]:
    """A CloudFormation queue's properties in SQS API attribute form (the redrive policy and tags aside)."""
    return {name: str(value).lower() if isinstance(value, bool) else str(value)
            for name, value in properties.items() if name not in ("RedrivePolicy", "Tags")}


@pytest.mark.parametrize("settings", [Settings(container_worker=True), Settings(fifo=True, container_worker=True, visibility_timeout=600)],
                         ids=["standard", "fifo"])
def test_every_queue_is_the_contracts_shape(settings, tmp_path):
    # GIVEN a synthesized stack with the container worker: the work queue, its DLQ, and the container worker's queue
    stack, _ = synth(settings=settings, outdir=str(tmp_path), cron_entries=[])
    queues = Template.from_stack(stack).find_resources("AWS::SQS::Queue")

    def shape(queue) -> dict[str, str]:
        return _as_attributes(queues[stack.get_logical_id(queue.node.default_child)]["Properties"])

    # WHEN each queue's properties are read as SQS attributes
    # THEN each is the shape the contract states, and the local environment creates
    assert shape(stack.worker.queue) == contract.queue_attributes(settings)
    assert shape(stack.container_worker.queue) == contract.queue_attributes(settings)
    assert shape(stack.worker.dead_letter_queue) == contract.queue_attributes(settings, dead_letter=True)


def test_the_state_table_is_keyed_as_the_contract_says(template):
    [table] = [t for t in template.find_resources("AWS::DynamoDB::GlobalTable").values()
               if t["Properties"]["KeySchema"] == [{"AttributeName": contract.STATE_PARTITION_KEY, "KeyType": "HASH"}]]
    assert table["Properties"]["TimeToLiveSpecification"] == {"AttributeName": contract.STATE_TTL_ATTRIBUTE, "Enabled": True}
