"""``tail``: the worker's outcomes as they happen, printed as ``make run`` prints them.

Read from the worker's CloudWatch Logs log group (the stack's ``WorkerLogGroupName`` output, or
``--log-group``) with FilterLogEvents: every page (``nextToken``) from a start time, then, following, again
from the latest event's time every ``FOLLOW_POLL_SECONDS``, skipping the events already printed at that
time. The worker logs each outcome but success (``contract.OUTCOME_LOG_MESSAGES``, Powertools JSON lines
with ``message_id`` and ``path``); its other warnings and errors print as ``warn``/``error``.

The local environment (``make run``) has no log group: its worker runs in that process, which prints every
outcome, successes included, in its own terminal. ``tail`` against it says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import click
from botocore.exceptions import ClientError

from worker_tier.core.contract import OUTCOME_LOG_MESSAGES
from worker_tier.worker.fates import (
    OUTCOME_DEAD_LETTERED, OUTCOME_HELD_BACK, OUTCOME_RELEASED, OUTCOME_RESCHEDULED, OUTCOME_RETRYING,
    OUTCOME_SUCCEEDED, OUTCOME_THROTTLED, Outcome,
)
from worker_tier_cli.target import TargetError
from worker_tier_cli.session import Session, parse_time

FOLLOW_POLL_SECONDS = 2.0
DEFAULT_SINCE = "5m"
# The marks of worker_tier_local's outcome lines (`make run`): the outcomes the worker logs, and the two it does not
# (successes and releases), which reach ``render`` only from a worker in the same process (``from_outcome``).
OUTCOME_MARKS = {OUTCOME_RETRYING: "retry", OUTCOME_DEAD_LETTERED: "DLQ ", OUTCOME_HELD_BACK: "hold",
                 OUTCOME_RESCHEDULED: "later", OUTCOME_THROTTLED: "wait", OUTCOME_SUCCEEDED: "ok  ",
                 OUTCOME_RELEASED: "back"}
LEVEL_MARKS = {"WARNING": "warn ", "ERROR": "error", "CRITICAL": "error"}
NO_LOG_GROUP = ("no log group {group!r} at this endpoint; the local environment (make run) has none: it prints "
                "every outcome in its own terminal. Against a stack, pass --stack (WorkerLogGroupName) or --log-group")
_STATUS_BY_MESSAGE = {text: status for status, text in OUTCOME_LOG_MESSAGES.items()}


def outcome(event: dict[str, Any]) -> dict[str, Any] | None:
    """An outcome (or warning) from one log event; None for anything else (START/REPORT, EMF, info lines)."""
    try:
        line = json.loads(event["message"])
    except (ValueError, TypeError):
        return None
    if not isinstance(line, dict) or "_aws" in line:
        return None
    status = _STATUS_BY_MESSAGE.get(line.get("message", ""))
    level = str(line.get("level", ""))
    if status is None and level not in LEVEL_MARKS:
        return None
    return {"time_ms": event["timestamp"], "status": status or level.lower(), "path": line.get("path"),
            "message_id": line.get("message_id"), "receive_count": line.get("attempts"),
            "detail": _detail(status, line)}


def _detail(status: str | None, line: dict[str, Any]) -> str:
    """What make run prints after the receive count: the error, and where it goes next."""
    if status == OUTCOME_HELD_BACK:
        return f"due at {line.get('due_at')}"
    if status == OUTCOME_THROTTLED:
        return f"{line.get('error')} -> back in {line.get('back_in_seconds')}s"
    text = str(line.get("error") or line.get("message", "")) if status else str(line.get("message", ""))
    wait = line.get("retry_in_seconds")
    return f"{text} -> retry in {wait}s" if wait is not None and status else text


def from_outcome(decided: Outcome, time_ms: int) -> dict[str, Any]:
    """An outcome decided by a worker in this process (an outcome listener's), in ``outcome``'s shape."""
    detail = decided.detail
    if decided.status == OUTCOME_RETRYING:
        detail = f"{detail} -> retry in {decided.visibility_seconds}s"
    elif decided.status == OUTCOME_RESCHEDULED:
        detail = f"{detail} -> again in {decided.visibility_seconds}s"
    return {"time_ms": time_ms, "status": decided.status, "path": decided.path, "message_id": decided.message_id,
            "receive_count": decided.receive_count, "detail": detail}


def render(shown: dict[str, Any]) -> str:
    """``HH:MM:SS  mark path id  receive n  detail``, as worker_tier_local prints an outcome."""
    stamp = datetime.fromtimestamp(shown["time_ms"] / 1000).astimezone()
    mark = OUTCOME_MARKS.get(shown["status"]) or LEVEL_MARKS.get(shown["status"].upper(), shown["status"])
    receive = f"  receive {shown['receive_count']}" if shown["receive_count"] is not None else ""
    text = f"{mark} {shown['path'] or '-':<8} {(shown['message_id'] or '-')[:8]}{receive}  {shown['detail']}"
    return f"{stamp:%H:%M:%S}  {text.rstrip()}"


def events(logs: Any, group: str, start_ms: int, follow: bool, sleep: Callable[[float], None],
           pattern: str | None = None) -> Iterator[dict[str, Any]]:
    """The group's events from ``start_ms``, each once; following, forever (until the caller stops)."""
    seen: dict[str, int] = {}  # event id -> its time, for the events at or after the next start time
    while True:
        for event in _pages(logs, group, start_ms, pattern):
            if event["eventId"] not in seen:
                seen[event["eventId"]] = event["timestamp"]
                yield event
        if not follow:
            return
        start_ms = max([start_ms, *seen.values()])  # again from the latest time; its events are in `seen`
        seen = {event_id: ms for event_id, ms in seen.items() if ms >= start_ms}
        sleep(FOLLOW_POLL_SECONDS)


def _pages(logs: Any, group: str, start_ms: int, pattern: str | None) -> Iterator[dict[str, Any]]:
    request: dict[str, Any] = {"logGroupName": group, "startTime": start_ms}
    if pattern:
        request["filterPattern"] = pattern
    while True:
        page = logs.filter_log_events(**request)
        yield from page.get("events") or []
        if not page.get("nextToken"):
            return
        request["nextToken"] = page["nextToken"]


@click.command("tail")
@click.option("--since", default=DEFAULT_SINCE, show_default=True,
              help="Start this long ago (30m, 2h) or at an ISO 8601 time.")
@click.option("--path", help="Only this task path (a FilterLogEvents pattern on the line's path).")
@click.option("--follow/--no-follow", default=True, show_default=True, help="Keep printing new outcomes until Ctrl-C.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line instead of make run's lines.")
def tail_command(since: str, path: str | None, follow: bool, as_json: bool) -> None:
    """The worker's outcomes (retries, dead letters, holds, reschedules) and warnings, live from its logs."""
    session: Session = click.get_current_context().find_object(Session)  # type: ignore[assignment]
    try:
        start = parse_time(since, session.now())
    except ValueError as problem:
        raise click.BadParameter(str(problem), param_hint="--since") from None
    try:
        group = session.target.required("worker_log_group")
    except TargetError as missing:  # the local environment's variables name no log group: it has none
        raise TargetError(f"{missing}; the local environment (make run) has no log group: it prints every outcome "
                          "in its own terminal") from None
    pattern = f'{{ $.path = "{path}" }}' if path else None
    found = events(session.client("logs"), group, int(start.timestamp() * 1000), follow, session.runtime.sleep, pattern)
    try:
        for event in found:
            shown = outcome(event)
            if shown is not None:
                click.echo(json.dumps(shown, sort_keys=True) if as_json else render(shown))
    except KeyboardInterrupt:
        click.echo("", err=True)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        raise click.ClickException(NO_LOG_GROUP.format(group=group)) from None
