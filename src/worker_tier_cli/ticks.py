"""The last and next tick of each periodic task, from the stack's EventBridge Scheduler schedules.

Where the entries come from: the schedules themselves (ListSchedules and GetSchedule in the stack's
schedule group, the ``ScheduleGroupName`` output), so the command line reads what is deployed, not a
cron.yaml that may have changed since. Each schedule's description, written by
``worker_tier_cdk.periodic_tasks``, carries the entry's name, standard cron schedule, time zone and path;
croniter gives the previous and next ticks of that schedule in that zone. The last tick's fate comes from
the state table, where the periodic function claims each tick (``worker_tier.periodic.ticks.Tick.key``): sent,
pending, or absent (not enqueued).
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import datetime, timedelta
from typing import Any

from worker_tier.core.contract import STATE_PARTITION_KEY
from worker_tier.periodic.ticks import STATUS_ATTRIBUTE, Tick

# A schedule's description (worker_tier.periodic.cron_config.CronEntry.description, written by
# worker_tier_cdk.periodic_tasks and the local environment): "cron.yaml <name>: <schedule> (<zone>) -> <url>".
_DESCRIPTION = re.compile(r"cron\.yaml (?P<name>.+?): (?P<schedule>.+) \((?P<zone>[^()]+)\) -> (?P<url>\S+)")
CRONITER_MISSING = "{missing} not installed; the periodic tasks' ticks need the cli extra: pip install 'worker-tier[cli]'"
NOT_ENQUEUED = "not enqueued"


def periodic_tasks(scheduler: Any, dynamodb: Any, group: str, state_table: str | None, now: datetime) -> list[dict[str, Any]]:
    """One row per cron.yaml entry deployed in ``group``: its schedule, last tick (and its fate), next tick."""
    rows: dict[str, dict[str, Any]] = {}
    for summary in _schedules(scheduler, group):
        schedule = scheduler.get_schedule(Name=summary["Name"], GroupName=group)
        described = _DESCRIPTION.fullmatch(schedule.get("Description") or "")
        if described is None or described["name"] in rows:  # a both-day-fields entry has two schedules
            continue
        rows[described["name"]] = _row(described, schedule.get("State", "ENABLED"), dynamodb, state_table, now)
    return sorted(rows.values(), key=lambda row: row["name"])


def _schedules(scheduler: Any, group: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    request: dict[str, Any] = {"GroupName": group}
    while True:
        page = scheduler.list_schedules(**request)
        found += page.get("Schedules") or []
        if not page.get("NextToken"):
            return found
        request["NextToken"] = page["NextToken"]


def _row(described: re.Match[str], state: str, dynamodb: Any, state_table: str | None, now: datetime) -> dict[str, Any]:
    """The entry's ticks around ``now`` in its zone, and what the state table says of the last one."""
    from croniter import croniter  # optional: the cli extra has it; commands.py turns its absence into a message

    local = now.astimezone(zoneinfo.ZoneInfo(described["zone"]))
    last = croniter(described["schedule"], local + timedelta(seconds=1)).get_prev(datetime)  # a tick at now is the last
    [upcoming] = next_ticks(described["schedule"], described["zone"], now, 1)
    fate = _fate(dynamodb, state_table, Tick(described["name"], described["url"], last)) if state_table else None
    return {"name": described["name"], "path": described["url"], "schedule": described["schedule"],
            "timezone": described["zone"], "state": state, "last_tick": last.isoformat(), "last_tick_fate": fate,
            "next_tick": upcoming.isoformat()}


def next_ticks(schedule: str, zone: str, now: datetime, count: int) -> list[datetime]:
    """The next ``count`` ticks after ``now`` of a standard cron ``schedule`` in time zone ``zone``, in that zone."""
    from croniter import croniter

    ticks = croniter(schedule, now.astimezone(zoneinfo.ZoneInfo(zone)))
    return [ticks.get_next(datetime) for _ in range(count)]


def _fate(dynamodb: Any, state_table: str, tick: Tick) -> str:
    """The tick's claim in the state table: sent or pending; absent means it was never enqueued."""
    item = dynamodb.get_item(TableName=state_table, Key={STATE_PARTITION_KEY: {"S": tick.key}}).get("Item")
    return NOT_ENQUEUED if item is None else str(item.get(STATUS_ATTRIBUTE, {}).get("S", "pending"))
