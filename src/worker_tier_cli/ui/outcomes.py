"""Live outcomes for the dashboard, from one of two sources, each read by the page's poll (``/outcomes.json``).

- ``OutcomeFeed``: the outcomes of a worker in this very process (``make run ARGS=--ui``), from an outcome listener,
  successes included, kept in a ring of the latest ``FEED_SIZE``.
- ``LogOutcomes``: a deployed worker's, from its CloudWatch Logs log group (``tail``'s reading: FilterLogEvents),
  successes excluded, since the worker logs none.

Each line is ``tail.render``'s: what ``make run`` prints.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Protocol

from botocore.exceptions import ClientError

from worker_tier.worker.fates import Outcome, add_outcome_listener, remove_outcome_listener
from worker_tier_cli import tail
from worker_tier_cli.session import Session

FEED_SIZE = 500
LOG_LOOKBACK_MS = 5 * 60 * 1000  # the first poll shows the last five minutes, as `tail` does by default
NO_SOURCE = ("no live outcomes here: the local environment's worker runs in the `make run` process, which prints "
             "them; start the dashboard with `make run ARGS=--ui` to see them here. Against a stack, pass --stack "
             "(its WorkerLogGroupName output) or --log-group.")


class OutcomeSource(Protocol):
    """Where the page's outcomes come from: the lines after ``cursor``, the next cursor, and a note (why none)."""

    def after(self, cursor: int) -> tuple[list[dict[str, Any]], int, str]: ...


class OutcomeFeed:
    """The outcomes of the workers in this process, as they are decided (an outcome listener)."""

    def __init__(self, clock: Callable[[], float] = time.time, size: int = FEED_SIZE) -> None:
        self._clock = clock
        self._lines: deque[tuple[int, dict[str, Any]]] = deque(maxlen=size)
        self._count = 0
        self._lock = threading.Lock()

    def __enter__(self) -> OutcomeFeed:
        add_outcome_listener(self.add)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        remove_outcome_listener(self.add)

    def add(self, decided: Outcome) -> None:
        shown = tail.from_outcome(decided, int(self._clock() * 1000))
        with self._lock:
            self._count += 1
            self._lines.append((self._count, {**shown, "line": tail.render(shown)}))

    def after(self, cursor: int) -> tuple[list[dict[str, Any]], int, str]:
        with self._lock:
            lines = [shown for number, shown in self._lines if number > cursor]
            oldest = self._lines[0][0] if self._lines else self._count + 1
            lost = oldest - cursor - 1 if oldest > cursor + 1 else 0
            note = (f"{lost} outcomes before these are not kept here (the feed holds the latest "
                    f"{self._lines.maxlen})") if lost > 0 else ""
            return lines, self._count, note


class LogOutcomes:
    """A deployed worker's logged outcomes, from its log group; the cursor is the latest event's time (ms)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def after(self, cursor: int) -> tuple[list[dict[str, Any]], int, str]:
        group = self.session.target.optional("worker_log_group")
        if not group:
            return [], cursor, NO_SOURCE
        start = cursor + 1 if cursor else int(self.session.runtime.clock() * 1000) - LOG_LOOKBACK_MS
        shown: list[dict[str, Any]] = []
        try:
            for event in tail.events(self.session.client("logs"), group, start, False, self.session.runtime.sleep):
                cursor = max(cursor, int(event["timestamp"]))
                found = tail.outcome(event)
                if found is not None:
                    shown.append({**found, "line": tail.render(found)})
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            return [], cursor, tail.NO_LOG_GROUP.format(group=group)
        return shown, cursor, ""
