"""``worker-tier job ID``: one tracked job (docs/jobs.md), its state, result and history, as text or JSON."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from worker_tier.core.jobs import JobStatus
from worker_tier_cli.output import printable, table
from worker_tier_cli.session import Session


def when(epoch_ms: int | None) -> str | None:
    """Epoch milliseconds as ``YYYY-MM-DD HH:MM:SS.mmm UTC``; None stays None."""
    if epoch_ms is None:
        return None
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def lookup(session: Session, job_id: str) -> JobStatus:
    """The tracked job ``job_id`` in the deployment's state table (a result kept in the payload bucket read with the
    session's S3 client). JobNotFoundError when there is none; MessageError when ``job_id`` is no job id."""
    from worker_tier.producer.jobs import JobRecords

    target = session.target
    bucket = target.optional("payload_bucket")
    records = JobRecords(target.required("state_table"), session.client("dynamodb"), session.runtime.clock,
                         s3=(lambda: session.client("s3")) if bucket else None, bucket=bucket)
    return records.status(job_id)


def fields(status: JobStatus) -> list[tuple[str, Any]]:
    """The job's fields as people read them, those it has only (``render``'s, and the dashboard's job page)."""
    shown: list[tuple[str, Any]] = [
        ("job", status.job_id), ("state", status.state + (" (final)" if status.final else "")), ("path", status.path),
        ("created", when(status.created_at)), ("updated", when(status.updated_at)), ("due", when(status.due_at)),
        ("attempt", status.attempt), ("next try", when(status.next_try_at)), ("worker", _worker(status.worker)),
        ("result", _result(status)), ("reason", status.reason), ("parent", status.parent),
    ]
    return [(name, value) for name, value in shown if value is not None]


def history(status: JobStatus) -> list[tuple[str | None, Any, str]]:
    """The job's history, oldest first: when, state, details."""
    return [(when(event.get("at")), event.get("state"), _details(event.get("details") or {})) for event in status.history]


def render(status: JobStatus, terminal: bool = False) -> str:
    """The job as people read it: its fields (those it has), then its history, oldest first."""
    lines = [f"{name:<9} {printable(str(value))}" for name, value in fields(status)]
    dropped = f"\n({status.events_dropped} later events not kept: the history holds the first ones)" if status.events_dropped else ""
    return "\n".join(lines) + "\n\n" + table(["at", "state", "details"], history(status), terminal) + dropped


def _worker(worker: dict[str, Any] | None) -> str | None:
    if not worker:
        return None
    return " ".join(f"{k}={v}" for k, v in worker.items() if v is not None)


def _result(status: JobStatus) -> str | None:
    if status.result_dropped:
        size = status.result_dropped.get("bytes")
        return f"(not kept{f', {size} bytes' if size is not None else ''}: {status.result_dropped.get('reason')})"
    if status.result is None and status.state != "succeeded":
        return None
    return json.dumps(status.result, ensure_ascii=False)


def _details(details: dict[str, Any]) -> str:
    return " ".join(f"{k}={when(v) if k.endswith('_at') and isinstance(v, int) else v}" for k, v in details.items())
