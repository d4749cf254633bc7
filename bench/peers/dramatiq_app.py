"""Dramatiq on SQS (dramatiq-sqs) with its broker's defaults, the settings its README shows for production.

- https://github.com/Bogdanp/dramatiq_sqs#readme : ``SQSBroker(namespace=...)``, long polling of
  20 s (``MAX_WAIT_TIME_SECONDS``), receives of up to ``min(prefetch, 10)`` where the worker's
  prefetch is twice its threads, one DeleteMessage per ack, visibility timeout 12 h.
- https://dramatiq.io/cookbook.html and https://dramatiq.io/reference.html#dramatiq.middleware.Retries :
  the default middleware; Retries re-enqueues a failed message as a NEW message with a delay
  (SQS ``DelaySeconds``) and acks (deletes) the original, so SQS's receive count starts again
  at 1 and a redrive policy never sees the retries.

The bench shortens the retry backoff to 1 s (Dramatiq's default minimum is 15 s).
"""

from __future__ import annotations


import dramatiq
from dramatiq_sqs import SQSBroker

from bench.peers.runs import record

QUEUE_NAME = "default"
ACTOR_NAME = "noop"
RETRY_BACKOFF_MS = 1000


def new_broker(endpoint: str, namespace: str) -> SQSBroker:
    """An SQS broker on ``http://endpoint`` whose queue is ``<namespace>_default``."""
    return SQSBroker(namespace=namespace, endpoint_url=f"http://{endpoint}", region_name="us-east-1")


def message(task_id: str) -> dramatiq.Message:
    """The message ``noop.send(task_id)`` would enqueue."""
    return dramatiq.Message(queue_name=QUEUE_NAME, actor_name=ACTOR_NAME, args=(task_id,), kwargs={}, options={})


def declare_actor(broker: SQSBroker) -> dramatiq.Actor:
    """Declare the no-op actor on ``broker``: three retries, 1 s apart."""

    def noop(task_id: str) -> None:
        record(task_id)

    return dramatiq.actor(
        noop, actor_name=ACTOR_NAME, queue_name=QUEUE_NAME, broker=broker,
        max_retries=3, min_backoff=RETRY_BACKOFF_MS, max_backoff=RETRY_BACKOFF_MS,
    )
