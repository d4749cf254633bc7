"""The example worker's jobs, shared by its Flask, Django and FastAPI versions (only the web glue differs).

``attempt`` is sqsd's ``X-Aws-Sqsd-Receive-Count``: 1 on the first delivery of a message.
"""

from __future__ import annotations

# What the partner API's 429 asks for, and what the apps pass on to the worker as Retry-After.
PARTNER_RETRY_AFTER_SECONDS = 3


class StoreBusyError(Exception):
    """The report store is not ready: the apps answer 500, and the message is tried again."""


class RateLimitedError(Exception):
    """The partner API refused for now: the apps answer 429 with Retry-After."""

    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__(f"partner API rate limit; retry after {retry_after_seconds} s")
        self.retry_after_seconds = retry_after_seconds


def send_welcome_email(attempt: int, email: str) -> str:
    """Succeeds at once."""
    print(f"welcome email to {email}", flush=True)
    return f"welcome email sent to {email}"


def build_report(attempt: int, month: str) -> str:
    """Fails on its first delivery (the app answers 500), then succeeds."""
    if attempt == 1:
        raise StoreBusyError(f"report store warming up; report {month} not built on attempt {attempt}")
    return f"report {month} built on attempt {attempt}"


def sync_inventory(attempt: int, warehouse: str) -> str:
    """Rate limited on its first delivery (the app answers 429 + Retry-After), then succeeds."""
    if attempt == 1:
        raise RateLimitedError(PARTNER_RETRY_AFTER_SECONDS)
    return f"inventory of {warehouse} synced on attempt {attempt}"


def charge_card(attempt: int, order_id: int) -> str:
    """Raises on every delivery: a bug the app does not handle."""
    raise LookupError(f"order {order_id} has no card on file")


TASKS = {
    "send_welcome_email": send_welcome_email,
    "build_report": build_report,
    "sync_inventory": sync_inventory,
    "charge_card": charge_card,
}


def update(frequency: str, task_name: str, scheduled_at: str) -> str:
    """A periodic update (cron.yaml ``/update/<frequency>``): knows its name and tick."""
    print(f"{frequency} update {task_name} for {scheduled_at}", flush=True)
    return f"{frequency} update done"


UPDATE_FREQUENCIES = ("often", "daily", "weekly")


def purge_sessions(scheduled_at: str) -> str:
    """A periodic task (cron.yaml ``/purge-sessions``)."""
    return f"sessions purged for {scheduled_at}"
