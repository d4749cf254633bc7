"""The tasks of the worker benchmarks: a no-op for the per-message CPU figure, and one that can fail for cold start."""

from worker_tier import Task, task


@task("/noop")
def noop(t: Task) -> None:
    """Does nothing: the benchmark measures the worker around it."""


@task("/parse-or-fail")
def parse_or_fail(t: Task) -> None:
    """Parses the body, as the cold-start baseline's record handler does, and fails on the JSON string ``"fail"``."""
    if t.json() == "fail":
        raise RuntimeError("this record fails: the cold-start figure's failure scenario")
