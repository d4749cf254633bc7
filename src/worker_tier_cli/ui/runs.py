"""Redrives started from the dashboard: each runs ``redrive.move_batches`` in a thread of its own, and its page
follows the live ``MoveReport`` (moved, skipped, failed...) to the end, as the command line's progress bar does.

One redrive at a time per dashboard: a second is refused naming the first, since two runs over one DLQ would
each hold what the other needs to read.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from worker_tier.core.errors import WorkerTierError
from worker_tier_cli import redrive
from worker_tier_cli.dead_letters import Filter
from worker_tier_cli.session import Session


@dataclass
class RedriveRun:
    """One redrive: what it moves (``which``, said in ``scope``), from where to where, its report so far, its end."""

    run_id: str
    which: Filter
    scope: str
    dlq_url: str
    queue_url: str
    report: redrive.MoveReport = field(default_factory=redrive.MoveReport)
    done: bool = False
    problem: str = ""  # why it could not start (the journal unreadable)

    @property
    def counts(self) -> str:
        return redrive.counts_line(self.report)

    @property
    def notes(self) -> list[str]:
        return redrive.report_notes(self.report)


# One reader of the DLQ at a time in this process: a page's read holds every letter it reads (invisible) until it
# ends, so a redrive beside it would end early, and two page reads would each show part of the DLQ.
DLQ_ACCESS = threading.Lock()
DLQ_WAIT_SECONDS = 20  # how long a page waits for another read or a redrive before it says so


class DeadLettersBusyError(WorkerTierError):
    """The DLQ is being read or redriven by this dashboard, longer than a page waits."""


@contextmanager
def dlq_access(what: str) -> Iterator[None]:
    """Hold the DLQ for ``what`` (a page's read); DeadLettersBusyError when a redrive or another read keeps it."""
    if not DLQ_ACCESS.acquire(timeout=DLQ_WAIT_SECONDS):
        raise DeadLettersBusyError(f"{what} waited {DLQ_WAIT_SECONDS} s for this dashboard's other read or redrive "
                                   "of the DLQ, which holds the letters it reads: try again when it ends")
    try:
        yield
    finally:
        DLQ_ACCESS.release()


class RunningError(WorkerTierError):
    """A redrive is already running (its run is ``running``)."""

    def __init__(self, running: RedriveRun) -> None:
        super().__init__(f"a redrive is already running: {running.scope}")
        self.running = running


class Runs:
    """The dashboard's redrives, by id."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.runs: dict[str, RedriveRun] = {}
        self._lock = threading.Lock()

    def start(self, which: Filter, scope: str) -> RedriveRun:
        """Start moving what ``which`` matches; RunningError while another redrive runs."""
        target = self.session.target
        with self._lock:
            running = next((run for run in self.runs.values() if not run.done), None)
            if running is not None:
                raise RunningError(running)
            run = RedriveRun(secrets.token_hex(8), which, scope, target.required("dlq_url"), target.required("queue_url"))
            self.runs[run.run_id] = run
        threading.Thread(target=self._move, args=(run,), name=f"redrive-{run.run_id}", daemon=True).start()
        return run

    def wait(self, run: RedriveRun, timeout: float) -> bool:
        """Whether ``run`` ended within ``timeout`` seconds (tests, and a page that waits a moment)."""
        thread = next((t for t in threading.enumerate() if t.name == f"redrive-{run.run_id}"), None)
        if thread is not None:
            thread.join(timeout)
        return run.done

    def _move(self, run: RedriveRun) -> None:
        session = self.session
        runtime = session.runtime
        try:
            journal = redrive.Journal.for_queue(runtime.state_dir, run.dlq_url, runtime.clock)
            levels = redrive.priority_levels(session.target, run.queue_url)
            with dlq_access("the redrive"):
                run.report = redrive.move_batches(
                    session.client("sqs"), run.dlq_url, run.queue_url, run.which, runtime.wait_seconds,
                    lambda report: _follow(run, report), runtime.clock, runtime.sleep, journal, False, lambda: None,
                    session.client("sqs", redrive.NO_RETRIES), levels if levels.enabled else None)
        except Exception as error:  # the journal unreadable, or the queues not found: said on the run's page
            run.problem = f"{type(error).__name__}: {error}"
        finally:
            run.done = True


def _follow(run: RedriveRun, report: Any) -> None:
    """The live report, shown by the run's page while it moves."""
    run.report = report
