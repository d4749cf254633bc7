"""The ``worker_tier`` pytest plugin: the ``worker_tier_world`` fixture (registered in pyproject.toml's ``pytest11``)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from worker_tier.testing.world import TaskWorld


@pytest.fixture
def worker_tier_world() -> Iterator[Callable[..., TaskWorld]]:
    """Make a ``TaskWorld`` with ``TaskWorld``'s arguments; each is closed when the test ends.

    Examples
    --------
    >>> def test_hello(worker_tier_world):  # doctest: +SKIP
    ...     world = worker_tier_world(task_modules="tasks")
    ...     message_id = world.client.send("/hello", {"name": "Ada"})
    ...     assert world.run().outcome(message_id).status == "succeeded"
    """
    worlds: list[TaskWorld] = []

    def make(*args: Any, **kwargs: Any) -> TaskWorld:
        worlds.append(TaskWorld(*args, **kwargs))
        return worlds[-1]

    yield make
    for world in reversed(worlds):
        world.close()
