"""What every framework's no-op task does: note its run in a file, and fail its first run if its id says so.

A task id is ``<fail_every>-<n>``: task ``n`` of a scenario in which every ``fail_every``th
task fails its first run (``0-n``: none fails). The workers are separate processes (Celery's
prefork children among them), so runs are appended to one file, one short line per ``write``
on an ``O_APPEND`` file, which lands whole. The bench reads the file back to count each
task's runs: exactly once, or exactly twice for a task that fails once. A first failure is
claimed by creating a marker file exclusively, so it happens once per task whichever process
runs it.
"""

from __future__ import annotations

import os
from pathlib import Path

RUNS_DIR_VARIABLE = "PEERS_BENCH_RUNS_DIR"  # set by the bench in each worker's environment
RUNS_FILE = "runs"


class FirstRunFailedError(Exception):
    """The planned failure of a task's first run; its retry succeeds."""


def task_id(fail_every: int, n: int) -> str:
    """The id of task ``n`` in a scenario where every ``fail_every``th task fails once (0: none)."""
    return f"{fail_every}-{n}"


def fails_once(task: str) -> bool:
    """Whether the task with this id is planned to fail its first run."""
    fail_every, n = (int(part) for part in task.split("-"))
    return fail_every > 0 and n % fail_every == 0


def record(task: str) -> None:
    """Note one run of the task with this id; raise FirstRunFailedError if it is planned to fail and has not yet."""
    directory = Path(os.environ[RUNS_DIR_VARIABLE])
    descriptor = os.open(directory / RUNS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{task}\n".encode())
    finally:
        os.close(descriptor)
    if not fails_once(task):
        return
    try:
        os.close(os.open(directory / f"failed-{task}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return
    raise FirstRunFailedError(f"task {task} fails its first run, as planned by its id (<fail_every>-<n>)")
