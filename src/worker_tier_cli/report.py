"""The ``status`` report: gathered once (``gather``) and shown as tables (``render``) or JSON."""

from __future__ import annotations

from typing import Any

from worker_tier_cli import status, ticks
from worker_tier_cli.output import table
from worker_tier_cli.session import Session

AGE_NOTE = "oldest: CloudWatch's ApproximateAgeOfOldestMessage (-: no datapoint, as on the local environment)"


def gather(session: Session) -> dict[str, Any]:
    """Every number ``status`` shows, as one JSON-able document."""
    target, now = session.target, session.runtime.clock()
    state_table, delay_table = target.optional("state_table"), target.optional("delay_table")
    dispatcher = status.watermark(session.client("dynamodb"), state_table, now) if state_table else None
    return {
        "queues": _queues(session, now),
        "delay_dispatcher": dispatcher,
        "delay_backlog": status.delay_backlog(session.client("dynamodb"), delay_table, now,
                                              dispatcher["minute"] if dispatcher else None) if delay_table else None,
        "periodic_tasks": periodic(session),
        "flow_limits": status.flow_limits(session.client("dynamodb"), state_table, now) if state_table else None,
        "alarms_in_alarm": (status.alarms_in_alarm(session.client("cloudwatch"), target.stack_name)
                            if target.stack_name else None),
    }


def _queues(session: Session, now: float) -> dict[str, dict[str, Any]]:
    target, sqs, cloudwatch = session.target, session.client("sqs"), session.client("cloudwatch")
    high, low = target.optional("high_queue_url"), target.optional("low_queue_url")  # the priorities setting's levels
    queues = {**({"high queue": high} if high else {}), "work queue": target.required("queue_url"),
              **({"low queue": low} if low else {}), "DLQ": target.required("dlq_url")}
    container = target.optional("container_queue_url")
    if container:
        queues["container queue"] = container
    return {name: {"url": url, **status.queue_counts(sqs, url),
                   "oldest_age_seconds": status.oldest_age_seconds(cloudwatch, url, now)}
            for name, url in queues.items()}


def periodic(session: Session) -> dict[str, Any] | None:
    """The deployed periodic tasks' rows (``ticks.periodic_tasks``), with a note when they cannot be read; None
    without a schedule group."""
    group = session.target.optional("schedule_group")
    if not group:
        return None
    try:
        rows = ticks.periodic_tasks(session.client("scheduler"), session.client("dynamodb"), group,
                                    session.target.optional("state_table"), session.now())
    except ModuleNotFoundError as missing:
        return {"group": group, "entries": [], "note": ticks.CRONITER_MISSING.format(missing=missing.name)}
    return {"group": group, "entries": rows, "note": ""}


def render(report: dict[str, Any], terminal: bool = False) -> str:
    """The report as people read it: tables, and one line per fact."""
    rows = [(name, q["visible"], q["in_flight"], q["delayed"], _age(q["oldest_age_seconds"]), q["url"])
            for name, q in report["queues"].items()]
    lines = [table(("queue", "visible", "in flight", "delayed", "oldest", "url"), rows, terminal), AGE_NOTE]
    lines += _dispatcher_lines(report["delay_dispatcher"], report["delay_backlog"], terminal)
    lines += _periodic_lines(report["periodic_tasks"], terminal)
    lines += _flow_lines(report["flow_limits"], terminal)
    lines += _alarm_lines(report["alarms_in_alarm"], terminal)
    return "\n".join(lines)


def _age(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    minutes, rest = divmod(seconds, 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


def _dispatcher_lines(dispatcher: dict[str, Any] | None, backlog: dict[str, Any] | None, terminal: bool) -> list[str]:
    if dispatcher is None:
        lines = ["delay dispatcher: no state table (pass --state-table or --stack)"]
    elif dispatcher["watermark"] is None:
        lines = [f"delay dispatcher: {dispatcher['note']}"]
    elif dispatcher["ahead_minutes"]:
        lines = [f"delay dispatcher: watermark {dispatcher['watermark']}, {dispatcher['ahead_minutes']} min ahead "
                 f"of now (dispatched ahead, on time), lag {dispatcher['lag_minutes']} min"]
    else:
        lines = [f"delay dispatcher: watermark {dispatcher['watermark']}, lag {dispatcher['lag_minutes']} min"]
    if backlog is None:
        return [*lines, "delay table backlog: no delay table (pass --delay-table or --stack)"]
    due = [(h["hour"], h["count"]) for h in backlog["by_hour"] if h["count"]]
    total = sum(count for _, count in due)
    lines.append(f"delay table backlog (not yet dispatched): {backlog['overdue']} overdue, {total} in the next 24 h, "
                 f"{backlog['later']} later")
    return lines + ([table(("hour (UTC)", "due"), due, terminal)] if due else [])


def _periodic_lines(periodic: dict[str, Any] | None, terminal: bool) -> list[str]:
    if periodic is None:
        return ["periodic tasks: none deployed (no ScheduleGroupName output; or pass --schedule-group)"]
    if periodic["note"]:
        return [f"periodic tasks: {periodic['note']}"]
    rows = [(e["name"], e["path"], e["schedule"], e["timezone"], e["state"], e["last_tick"], e["last_tick_fate"],
             e["next_tick"]) for e in periodic["entries"]]
    header = ("periodic task", "path", "schedule", "zone", "state", "last tick", "last tick fate", "next tick")
    return [table(header, rows, terminal)] if rows else [f"periodic tasks: no schedules in {periodic['group']}"]


def _flow_lines(limits: list[dict[str, Any]] | None, terminal: bool) -> list[str]:
    if limits is None:
        return ["flow limits: no state table (pass --state-table or --stack)"]
    if not limits:
        return ["flow limits: none used yet (rate_limit and concurrency tasks show here once they run)"]
    rows = [(row["path"], row["key"] or "-", row["kind"], row["limit"],
             "-" if row["booked_ahead_seconds"] is None else f"{row['booked_ahead_seconds']:g} s",
             "-" if row["held"] is None else row["held"], row["waiting"]) for row in limits]
    return [table(("task", "key", "limit", "rate or slots", "booked ahead", "held now", "waiting"), rows, terminal)]


def _alarm_lines(alarms: list[dict[str, Any]] | None, terminal: bool) -> list[str]:
    if alarms is None:
        return ["alarms: not read (no stack: pass --stack)"]
    if not alarms:
        return ["alarms in ALARM: none"]
    return [f"alarms in ALARM: {len(alarms)}",
            table(("alarm", "since", "reason"), [(a["name"], a["since"], a["reason"]) for a in alarms], terminal)]
