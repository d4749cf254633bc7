"""Repro: ``dlq show`` of an offloaded dead letter whose body is JSON of the wrong shape crashes instead of saying so.

docs/large-payloads.md: "When the body cannot be read (... a malformed pointer ...), one line says so and why, and
the pointer is printed as SQS holds it". ``worker_tier_cli.offloaded.read`` catches only PayloadError from
``payloads.pointer_of``, which raises IndexError/KeyError/TypeError for ``[]``, ``{}``, ``5``. Such a message does
reach the DLQ: the worker cannot dead-letter it (see tests/functional/test_offloaded_malformed_pointer_repro.py), so
SQS's redrive policy moves it there bare after maxReceiveCount.
"""

from __future__ import annotations

import pytest

from tests.cli.deployment import parsed
from worker_tier.core import contract, payloads


@pytest.mark.parametrize("pointer_body", ["[]", "{}", "5"])
def test_dlq_show_of_a_pointer_of_the_wrong_shape_says_so_and_prints_it(deployment, pointer_body):
    attributes = {contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/resize"}, **payloads.size_attribute(10)}
    message_id = deployment.sqs.send_message(QueueUrl=deployment.dlq_url, MessageBody=pointer_body,
                                             MessageAttributes=attributes)["MessageId"]
    text = deployment.run("dlq", "show", message_id)
    assert text.exit_code == 0, text.output
    assert "body: offloaded, not read:" in text.stdout
    shown = parsed(deployment.run("dlq", "show", message_id, "--json"))
    assert shown["body"] is None and shown["payload"]["pointer"] == pointer_body
