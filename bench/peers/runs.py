"""What every framework's no-op task does: note its run in a file, and fail the first run of every tenth task if asked.

The consumers are separate processes (Celery's prefork children among them), so runs are
appended to one file, one short line per ``write`` on an ``O_APPEND`` file, which lands whole.
The bench reads the file back to count each task's runs: exactly once, or exactly twice for a
task that fails once. A first failure is claimed by creating a marker file exclusively, so it
happens once per task whichever process runs it.
"""

from __future__ import annotations

import os
from pathlib import Path

# Both are set by the bench in each consumer's environment.
RUNS_DIR_VARIABLE = "PEERS_BENCH_RUNS_DIR"
FAIL_EVERY_VARIABLE = "PEERS_BENCH_FAIL_EVERY"  # 0: no task fails
RUNS_FILE = "runs"


class FirstRunFailure(Exception):
    """The planned failure of a task's first run; its retry succeeds."""


def fails_once(task_id: str, fail_every: int) -> bool:
    """Whether ``task_id`` is one of the tasks planned to fail their first run."""
    return fail_every > 0 and int(task_id) % fail_every == 0


def record(task_id: str) -> None:
    """Note one run of ``task_id``; raise FirstRunFailure if it is planned to fail and has not failed yet."""
    directory = Path(os.environ[RUNS_DIR_VARIABLE])
    descriptor = os.open(directory / RUNS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{task_id}\n".encode())
    finally:
        os.close(descriptor)
    if not fails_once(task_id, int(os.environ.get(FAIL_EVERY_VARIABLE, "0"))):
        return
    try:
        os.close(os.open(directory / f"failed-{task_id}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return
    raise FirstRunFailure(f"task {task_id} fails its first run, as planned for every {os.environ[FAIL_EVERY_VARIABLE]}th task")
