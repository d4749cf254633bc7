"""Repro: in ``TaskWorld`` a dead-lettered (or rescheduled) offloaded message's lifecycle restart fails, with a warning.

docs/large-payloads.md: the worker copies a dead-lettered offloaded message's object onto itself (CopyObject) so its
lifecycle clock restarts; "a copy S3 refuses is logged". The testing helper's in-memory S3 (``MemoryObjects``) has
PutObject, GetObject and DeleteObject only, so in every ``TaskWorld`` the worker's CopyObject fails (not a refusal by
S3: ``MemoryObjects`` has no ``copy_object``), and each dead-letter of an offloaded message logs "could not restart the
lifecycle clock": the helper cannot show the behaviour it is meant to let users test, and warns on correct code.
"""

from __future__ import annotations

import logging

from worker_tier import NonRetryableError
from worker_tier.testing import TaskWorld
from worker_tier.worker.registry import Registry


def test_a_dead_lettered_offloaded_message_in_a_task_world_restarts_its_objects_clock_without_a_warning(caplog):
    tasks = Registry()
    tasks.task("/bad")(lambda task: (_ for _ in ()).throw(NonRetryableError("bad input")))
    with TaskWorld((), registry=tasks) as world, caplog.at_level(logging.WARNING):
        # GIVEN a 2 MB body (offloaded) WHEN its task fails for good
        message_id = world.client.send("/bad", "x" * 2_000_000)
        assert world.run().outcome(message_id).status == "dead_lettered"
        # THEN its object is kept and its clock restarted, with no warning about it
        assert len(world.objects.buckets[world.payload_bucket]) == 1
    problems = [r.getMessage() for r in caplog.records if "lifecycle clock" in r.getMessage()]
    assert problems == []
