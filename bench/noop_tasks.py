"""A no-op task for the per-message CPU benchmark."""

from worker_tier import Task, task


@task("/noop")
def noop(t: Task) -> None:
    """Does nothing: the benchmark measures the worker around it."""
