"""Task code for the container worker run as a real process (``python -m worker_tier worker``, test_container_process).

Each task writes its message body's ``marker`` file once it has done its part, so a test knows when to send SIGTERM.
"""

from __future__ import annotations

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
