"""Task code for the container worker run as a real process (``python -m worker_tier worker``, test_container_process).

Each task writes its message body's ``marker`` file once it has done its part, so a test knows when to send SIGTERM.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from worker_tier import Task, task

# The name of the thread ``/linger`` leaves behind: the exit's log line must name it.
LINGERING_THREAD = "report-uploader"
_never = threading.Event()


@task("/linger")
def linger(t: Task) -> None:
    """Succeeds, leaving a non-daemon thread that never ends (an uploader someone forgot to stop)."""
    threading.Thread(target=_never.wait, name=LINGERING_THREAD, daemon=False).start()
    Path(t.json()["marker"]).write_text("done")


@task("/fork")
def fork(t: Task) -> None:
    """Forks; the child leaves by ``sys.exit(0)``, the parent waits for it and writes its exit status to the marker."""
    child = os.fork()
    if child == 0:
        sys.exit(0)
    _, status = os.waitpid(child, 0)
    marker = Path(t.json()["marker"])
    marker.with_suffix(".partial").write_text(str(os.waitstatus_to_exitcode(status)))
    marker.with_suffix(".partial").replace(marker)  # whole when it appears: the test reads it at once
