"""The example tasks that `make run` sends: one succeeds, one fails twice then succeeds, one dead-letters."""

from __future__ import annotations

import time

from worker_tier import NonRetryableError, RetryLater, Task, task

FLAKY_FAILURES = 2


@task("/hello")
def hello(t: Task) -> dict[str, str]:
    """Succeeds at once; its greeting is the result a tracked job keeps (`worker-tier send /hello {} --track`)."""
    name = t.json().get("name", "world")
    print(f"hello, {name}")
    return {"greeting": f"hello, {name}"}


@task("/flaky")
def flaky(t: Task) -> None:
    """Fails on its first two receives, then succeeds: shows backoff and retry."""
    if t.receive_count <= FLAKY_FAILURES:
        raise ConnectionError(f"upstream not ready (receive {t.receive_count} of {FLAKY_FAILURES + 1})")


@task("/poison")
def poison(t: Task) -> None:
    """Refuses its input: goes to the dead-letter queue at once with the reason."""
    raise NonRetryableError(f"order {t.json().get('order_id')} references a deleted customer")


@task("/report")
def report(t: Task) -> None:
    """A periodic task (cron.yaml "minutely-report"): knows its name and tick."""
    print(f"report {t.task_name} for {t.scheduled_at:%H:%M} UTC")


@task("/cleanup")
def cleanup(t: Task) -> None:
    """A nightly periodic task (cron.yaml "nightly-cleanup", Europe/Berlin time)."""


@task("/render", container=True, heartbeat=True)
def render(t: Task) -> None:
    """A long task: runs in the container worker when there is one, its message kept invisible by heartbeats."""
    frames = t.json().get("frames", 1)
    print(f"rendering {frames} frames", flush=True)
    for _ in range(frames):
        if t.lease_expired():
            raise RetryLater(0, "message released at SQS's 12-hour cap; another worker continues")
        time.sleep(1)
    print(f"rendered {frames} frames")
