"""An emulator of EventBridge Scheduler for cron.yaml entries: invokes the real cron handler on each tick.

croniter computes the ticks (in each entry's time zone) because the local
environment must not depend on the converter it would be checking.

Like Lambda's asynchronous invocation, an invocation that raises is retried
after 1 and then 2 minutes; one that fails every attempt goes to ``dead_letters``
in the shape of Lambda's on-failure destination record, as the deployed
function's goes to the tick dead-letter queue.
"""

from __future__ import annotations

import logging
import time
import zoneinfo
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

# https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html
ASYNC_RETRY_DELAYS_SECONDS = (60, 120)
_log = logging.getLogger(__name__)


@dataclass
class _Invocation:
    """One asynchronous invocation of the handler, and when its next attempt is due."""

    event: dict[str, Any]
    due_at: float
    attempts: int = 0


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
        self._retries: list[_Invocation] = []
        self.dead_letters: list[dict[str, Any]] = []

    def fire_due(self) -> list[Any]:
        """Invoke the handler for every tick and retry due by now; return the results of those that succeeded."""
        now = self._clock()
        due = [invocation for invocation in self._retries if invocation.due_at <= now]
        self._retries = [invocation for invocation in self._retries if invocation.due_at > now]
        due += [_Invocation(event, now) for event in self._due_ticks(datetime.fromtimestamp(now, tz=timezone.utc))]
        results = []
        for invocation in due:
            try:
                results.append(self._attempt(invocation))
            except Exception as error:
                self._retry_or_dead_letter(invocation, error, now)
        return results

    def next_due(self) -> datetime | None:
        """The earliest upcoming tick or retry, if any."""
        times = self._due + [datetime.fromtimestamp(i.due_at, tz=timezone.utc) for i in self._retries]
        return min(times) if times else None

    def _due_ticks(self, now: datetime) -> list[dict[str, Any]]:
        """Scheduler's input for every schedule tick due by ``now``, advancing the schedules."""
        events = []
        for index, (entry, iterator) in enumerate(self._schedules):
            while self._due[index] <= now:
                events.append(
                    {
                        "name": entry.name,
                        "url": entry.url,
                        "body": entry.body,
                        "scheduled_time": self._due[index].astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    }
                )
                self._due[index] = iterator.get_next(datetime)
        return events

    def _attempt(self, invocation: _Invocation) -> Any:
        invocation.attempts += 1
        return self._handler(invocation.event, self._context_factory())

    def _retry_or_dead_letter(self, invocation: _Invocation, error: Exception, now: float) -> None:
        """Schedule Lambda's next retry, or, after the last, record the on-failure destination's record."""
        if invocation.attempts <= len(ASYNC_RETRY_DELAYS_SECONDS):
            invocation.due_at = now + ASYNC_RETRY_DELAYS_SECONDS[invocation.attempts - 1]
            self._retries.append(invocation)
            _log.warning("cron tick %s failed (attempt %d), retrying: %s", invocation.event.get("name"), invocation.attempts, error)
            return
        _log.error("cron tick %s failed every attempt, dead-lettered: %s", invocation.event.get("name"), error)
        self.dead_letters.append(
            {
                "requestContext": {"condition": "RetriesExhausted", "approximateInvokeCount": invocation.attempts},
                "requestPayload": invocation.event,
                "responsePayload": {"errorType": type(error).__name__, "errorMessage": str(error)},
            }
        )
