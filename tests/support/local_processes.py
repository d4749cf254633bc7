"""Python processes started from the repository, as `make run` and `worker-tier` run (the e2e tests' own).

``python_process`` starts ``python *args`` with the checkout's ``src`` and root importable and kills it if the test
leaves it running; ``read_until`` reads its stdout up to a line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def python_process(*args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """``python *args`` from the repository (``env`` over this process's own); killed at the end if still running."""
    environment = {**os.environ, **(env or {}), "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    process = subprocess.Popen([sys.executable, *args], env=environment, cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def read_until(process: subprocess.Popen, pattern: re.Pattern[str], seconds: float = 30) -> str:
    """The process's stdout up to and including the first line matching ``pattern``."""
    read, deadline = "", time.monotonic() + seconds
    while not pattern.search(read):
        assert time.monotonic() < deadline and process.poll() is None, f"{pattern.pattern!r} never appeared: {read!r}"
        read += process.stdout.readline()
    return read
