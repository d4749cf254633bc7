"""What each dashboard page shows, gathered by the command line's own modules (never computed here a second way)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from worker_tier.core import contract
from worker_tier.delays import cancellation
from worker_tier.core.message import format_due_at
from worker_tier_cli import dead_letters, delayed, redrive, report, status, ticks
from worker_tier_cli.session import Session
from worker_tier_cli.ui import metrics, runs

DEFAULT_DLQ_LIMIT = dead_letters.DEFAULT_PEEK_LIMIT  # messages a DLQ page reads, as `dlq list`; ?limit= fewer or more
MAX_DLQ_LIMIT = 10 * dead_letters.DEFAULT_PEEK_LIMIT
SHOWN_PER_GROUP = 20  # messages listed under each group (its count and its redrive cover them all)
NEXT_TICKS = 5


def overview(session: Session) -> dict[str, Any]:
    """``status``'s report, every alarm of the stack with its state, and the last hour's throughput."""
    shown = report.gather(session)
    stack = session.target.stack_name
    shown["alarms"] = status.stack_alarms(session.client("cloudwatch"), stack) if stack else None
    shown["last_hour"] = metrics.last_hour(session.client("cloudwatch"), session.runtime.clock())
    shown["dlq"] = shown["queues"]["DLQ"]
    return shown


@dataclass
class LetterGroup:
    """One path and error's dead letters, with their messages."""

    summary: dead_letters.Group
    letters: list[dead_letters.DeadLetter]


def dead_letter_groups(session: Session, limit: int) -> dict[str, Any]:
    """Up to ``limit`` DLQ messages (read and released: ``dlq list``'s peek), grouped by path and error type."""
    dlq_url = session.target.required("dlq_url")
    with runs.dlq_access("the DLQ page"), dead_letters.peek(session.client("sqs"), dlq_url, limit,
                                                           session.runtime.wait_seconds) as letters:
        dead, unjoined = dead_letters.join(letters)
    in_flight = redrive.in_flight(session.client("sqs"), dlq_url)
    by_id = {letter.message_id: letter for letter in dead}
    groups = dead_letters.group([letter for letter in dead if letter.points_to is None])
    return {"dlq_url": dlq_url, "read": len(dead), "limit": limit, "more": len(letters) >= limit,
            "groups": [LetterGroup(g, [by_id[i] for i in g.message_ids[:SHOWN_PER_GROUP]]) for g in groups],
            "pointers": [letter for letter in dead if letter.points_to is not None], "unjoined": unjoined,
            "in_flight": in_flight}


def matching(session: Session, which: dead_letters.Filter, limit: int = DEFAULT_DLQ_LIMIT) -> dict[str, Any]:
    """How many dead letters a redrive of ``which`` would move now, among up to ``limit`` read (a confirmation's count)."""
    dlq_url = session.target.required("dlq_url")
    with runs.dlq_access("the redrive's confirmation"), dead_letters.peek(session.client("sqs"), dlq_url, limit,
                                                                         session.runtime.wait_seconds) as letters:
        dead, _ = dead_letters.join(letters)
    moving = [letter for letter in dead if which.matches(letter) and letter.points_to is None]
    return {"count": len(moving), "read": len(dead), "more": len(letters) >= limit, "dlq_url": dlq_url,
            "queue_url": session.target.required("queue_url"), "sample": moving[:10]}


def coming(session: Session, path: str | None, within_minutes: int, limit: int) -> dict[str, Any]:
    """``delayed list``: the next messages due, in due order, and the minutes read."""
    found, window = delayed.coming(session, path, limit, within_minutes)
    return {"messages": found, **window, "within": within_minutes, "limit": limit, "path": path or ""}


def cancellable(session: Session, key: str) -> dict[str, Any]:
    """The cancellable message ``key`` names (its path, due time, id), or why there is none to cancel."""
    found = delayed.cancelling_client(session).cancellations().find(key)
    if isinstance(found, cancellation.Outcome):
        return {"key": key, "found": False, "detail": found.detail}
    path = found.attributes.get(contract.PATH_ATTRIBUTE, {}).get("StringValue", "")
    return {"key": key, "found": True, "path": path, "due": format_due_at(found.due_ms), "message_id": found.message_id}


def periodic(session: Session) -> dict[str, Any] | None:
    """The deployed periodic tasks (their schedules): last tick and its fate, and the next ``NEXT_TICKS`` ticks."""
    shown = report.periodic(session)
    if shown is None or shown["note"]:
        return shown
    now: datetime = session.now()
    for entry in shown["entries"]:
        entry["next_ticks"] = [tick.isoformat() for tick in
                               ticks.next_ticks(entry["schedule"], entry["timezone"], now, NEXT_TICKS)]
    return shown
