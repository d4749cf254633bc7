"""Our container worker's no-op task (``WORKER_TIER_TASK_MODULES=bench.peers.ours_tasks``)."""

from bench.peers.runs import record
from worker_tier import Task, task

PATH = "/peers-noop"


@task(PATH)
def noop(t: Task) -> None:
    """Records its run; a raised FirstRunFailedError is retried by a visibility change."""
    record(t.body)
