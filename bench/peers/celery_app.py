"""Celery 5 on SQS (kombu's transport) with the settings its docs recommend for SQS.

- https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/sqs.html :
  long polling (``wait_time_seconds``, up to 20), ``polling_interval``, a ``visibility_timeout``
  longer than any task or countdown, no result backend, and no remote control or events
  (SQS has no broadcast).
- https://docs.celeryq.dev/en/stable/userguide/optimizing.html#prefetch-limits :
  ``worker_prefetch_multiplier=1`` with ``task_acks_late=True`` so a worker reserves only
  what it runs and a crash redelivers the message.

One departure, for Celery's sake: ``polling_interval`` is 0.1 s, not the default 1 s. Kombu
treats a full prefetch window like an empty poll and sleeps ``polling_interval`` before
looking again (``Channel._schedule_queue``), so with ``prefetch = concurrency`` and short
tasks the default caps a worker at about ``concurrency`` messages a second.

Retries: ``autoretry_for`` calls ``Task.retry``, which publishes a NEW message (the retry,
with a countdown the worker holds in memory) and acks (deletes) the original.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from bench.peers.runs import FirstRunFailedError, record

TASK_NAME = "peers.noop"
POLLING_INTERVAL_SECONDS = 0.1  # see the module docstring
RETRY_DELAY_SECONDS = 1  # the bench's countdown: comparable with our 2 s error visibility and Dramatiq's 1 s backoff


def settings(queue: str) -> dict[str, Any]:
    """Celery's recommended production settings for SQS, for one queue."""
    return {
        "worker_prefetch_multiplier": 1,
        "task_acks_late": True,
        "task_ignore_result": True,
        "worker_enable_remote_control": False,
        "worker_send_task_events": False,
        "broker_connection_retry_on_startup": True,
        "task_default_queue": queue,
        "broker_transport_options": {
            "region": "us-east-1",
            "visibility_timeout": 3600,
            "polling_interval": POLLING_INTERVAL_SECONDS,
            "wait_time_seconds": 20,
            "is_secure": False,
        },
    }


def new_app(endpoint: str, queue: str) -> Celery:
    """A Celery app on the SQS endpoint ``host:port`` with the no-op task registered."""
    app = Celery("peers", broker=f"sqs://bench:bench@{endpoint}")
    app.conf.update(settings(queue))

    @app.task(name=TASK_NAME, autoretry_for=(FirstRunFailedError,), default_retry_delay=RETRY_DELAY_SECONDS, max_retries=3)
    def noop(task_id: str) -> None:
        record(task_id)

    return app
