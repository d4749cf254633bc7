"""Repro: TaskWorld's own ``world.client`` refuses a body too large for the queue, though the world has a payload bucket.

Promise 3 (the testing helper): TaskWorld keeps a payload bucket in memory and names it in
WORKER_TIER_PAYLOAD_BUCKET; its docstring says "Messages sent with ``client`` (or any ``Client.from_env()``) go
through the real Worker". ``Client.from_env()`` in the world offloads a 2 MB body, but ``world.client`` is built
without ``payload_bucket`` (worker_tier/testing/world.py, ``self.client = Client(...)``), so the same send raises
MessageError, and its fix ("set WORKER_TIER_PAYLOAD_BUCKET") names a variable the world has already set.
"""

from __future__ import annotations

from worker_tier import Client, Task
from worker_tier.testing import TaskWorld
from worker_tier.worker.registry import Registry

TWO_MB = "x" * (2 * 1024 * 1024)


def _tasks(seen: list[int]) -> Registry:
    registry = Registry()
    registry.task("/big")(lambda task: seen.append(len(task.body)))
    return registry


def test_from_env_in_the_world_offloads_a_2_mb_body(tmp_path):
    seen: list[int] = []
    with TaskWorld(task_modules=[], registry=_tasks(seen)) as world:
        message_id = Client.from_env().send("/big", TWO_MB)
        assert world.run().outcome(message_id).status == "succeeded"
    assert seen == [len(TWO_MB)]


def test_the_worlds_own_client_offloads_a_2_mb_body(tmp_path):
    seen: list[int] = []
    with TaskWorld(task_modules=[], registry=_tasks(seen)) as world:
        message_id = world.client.send("/big", TWO_MB)  # raises MessageError: "... set WORKER_TIER_PAYLOAD_BUCKET ..."
        assert world.run().outcome(message_id).status == "succeeded"
    assert seen == [len(TWO_MB)]
