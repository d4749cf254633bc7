"""Repro: a pointer body that is valid JSON but not a list of two (``[]``, ``{}``, ``5``) is not dead-lettered.

docs/large-payloads.md: "What cannot be read is dead-lettered at once, with a PayloadError reason naming the bucket
and the key: a malformed pointer, ...". ``payloads.pointer_of`` indexes ``parsed[0]`` before checking the shape, so
these bodies raise IndexError/KeyError/TypeError, which ``Worker._offloaded_body`` does not catch: the record is
reported failed with no decision, then *released* (visibility 0) as if a FIFO group had stopped, and it comes back
at once, again and again, with no reason, until SQS's redrive policy moves it bare.
"""

from __future__ import annotations

import pytest

from tests.functional.test_offloaded_bodies import make_worker, offload, reason_of, recording_tasks, world  # noqa: F401
from worker_tier.core import contract


@pytest.mark.parametrize("pointer_body", ["[]", "{}", "5", "true", '{"s3BucketName": "payloads", "s3Key": "k"}'])
def test_a_pointer_body_of_valid_json_of_the_wrong_shape_is_dead_lettered_at_once(world, pointer_body):
    aws, s3 = world
    offload(aws, s3, "real body", pointer_body=pointer_body)
    seen: list[str] = []
    worker = make_worker(aws, recording_tasks(seen), s3)
    response = worker.handle(aws.receive_event(), None)
    assert seen == []
    # promised: dead-lettered at once with a PayloadError reason (reported done)
    dead = aws.dead_letters()
    assert len(dead) == 1, f"not dead-lettered; batch response {response}, visibility calls {aws.params('ChangeMessageVisibilityBatch')}"
    assert "pointer" in reason_of(dead[0])["error"]
    assert response["batchItemFailures"] == []
