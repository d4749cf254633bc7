"""An emulator of EventBridge Scheduler for cron.yaml entries: invokes the real cron handler on each tick.

croniter computes the ticks (in each entry's time zone) because the local
environment must not depend on the converter it would be checking.
"""

from __future__ import annotations

import time
import zoneinfo
from datetime import datetime, timezone
from typing import Any, Callable, Sequence


class CronEmulator:
    """Fires every enabled entry at its real times, as Scheduler would, with Scheduler's input."""

    def __init__(
        self,
        entries: Sequence[Any],
        handler: Callable[[dict[str, Any], Any], Any],
        context_factory: Callable[[], Any],
        clock: Callable[[], float] = time.time,
    ) -> None:
        from croniter import croniter

        self._handler = handler
        self._context_factory = context_factory
        self._clock = clock
        start = datetime.fromtimestamp(clock(), tz=timezone.utc)
        self._schedules = [
            (entry, croniter(entry.schedule, start.astimezone(zoneinfo.ZoneInfo(entry.timezone))))
            for entry in entries
            if entry.enabled
        ]
        self._due = [iterator.get_next(datetime) for _, iterator in self._schedules]

    def fire_due(self) -> list[Any]:
        """Invoke the handler for every tick due by now; return the handler's results."""
        now = datetime.fromtimestamp(self._clock(), tz=timezone.utc)
        results = []
        for index, (entry, iterator) in enumerate(self._schedules):
            while self._due[index] <= now:
                event = {
                    "name": entry.name,
                    "url": entry.url,
                    "body": entry.body,
                    "scheduled_time": self._due[index].astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
                results.append(self._handler(event, self._context_factory()))
                self._due[index] = iterator.get_next(datetime)
        return results

    def next_due(self) -> datetime | None:
        """The earliest upcoming tick, if any entry is enabled."""
        return min(self._due) if self._due else None
