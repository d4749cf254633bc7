"""`make cron-next`: each cron.yaml entry's next run times, in UTC and in its own time zone.

Run before deploying to check that a schedule means what you think. The times
come from croniter on the standard expression in the entry's zone, which is what
the converted EventBridge schedules reproduce (tests/unit/test_cron_expression.py).
"""

from __future__ import annotations

import argparse
import sys
import zoneinfo
from datetime import datetime, timezone
from pathlib import Path

from croniter import croniter

from worker_tier.core.errors import CronConfigError
from worker_tier.periodic.cron_config import CronEntry, load

DEFAULT_COUNT = 5


def next_runs(entry: CronEntry, now: datetime, count: int = DEFAULT_COUNT) -> list[datetime]:
    """The next ``count`` run times after ``now``, aware, in the entry's time zone."""
    times = croniter(entry.schedule, now.astimezone(zoneinfo.ZoneInfo(entry.timezone)))
    return [times.get_next(datetime) for _ in range(count)]


def render(entries: list[CronEntry], now: datetime, count: int = DEFAULT_COUNT) -> str:
    """A readable listing of every entry's schedule, EventBridge expressions and next runs."""
    lines = []
    for entry in entries:
        state = "" if entry.enabled else "  [disabled]"
        lines.append(f"{entry.name}  {entry.schedule!r} ({entry.timezone}) -> {entry.url}{state}")
        lines.append(f"  EventBridge: {'  +  '.join(entry.expressions)}")
        lines.extend(f"  warning: {warning}" for warning in entry.warnings)
        for moment in next_runs(entry, now, count):
            utc = moment.astimezone(timezone.utc)
            lines.append(f"  {utc:%Y-%m-%d %H:%M} UTC   {moment:%Y-%m-%d %H:%M %Z}")
    return "\n".join(lines) if lines else "cron.yaml has no entries"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker_tier.periodic.cron_preview", description=__doc__)
    parser.add_argument("cron_yaml", nargs="?", type=Path, default=Path("cron.yaml"))
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT)
    parser.add_argument("--fifo", action="store_true", help="check the entries for a FIFO queue (name = MessageGroupId)")
    args = parser.parse_args(argv)
    try:
        entries = load(args.cron_yaml, fifo=args.fifo)
    except CronConfigError as error:
        print(error, file=sys.stderr)
        return 1
    print(render(entries, datetime.now(timezone.utc), args.count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
