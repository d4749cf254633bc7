"""The three workers side by side: how each is started, fed and configured, and how each retries on SQS.

Each framework gets its own queue per scenario on the one moto server. Its producer talks
to the server's uncounted port, through the framework's own client, so every message has the
framework's real wire format; its worker process talks to the counted port.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from bench.peers import celery_app, dramatiq_app, ours_tasks

REGION = "us-east-1"
CONCURRENCY = 4
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": REGION}


@dataclass(frozen=True)
class Endpoints:
    """The moto server's two ports as ``host:port``: worker processes use ``counted``, producers ``producer``."""

    counted: str
    producer: str

    def sqs(self) -> Any:
        """A boto3 SQS client on the producer's (uncounted) port."""
        import boto3

        return boto3.client("sqs", endpoint_url=f"http://{self.producer}", region_name=REGION,
                            aws_access_key_id="bench", aws_secret_access_key="bench")


@dataclass
class Feed:
    """One framework's queue for one scenario: how to send task ids to it, and its worker process's command line."""

    queue_url: str  # on the producer's port, for depth checks
    send: Callable[[list[str]], None]
    command: list[str]
    environment: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Framework:
    """A worker under test: its settings as run (named in the results), their sources, and its retry mechanism."""

    name: str
    settings: dict[str, Any]
    docs: list[str]
    retry: str
    feed: Callable[[Endpoints, str], Feed]


def _ours_feed(endpoints: Endpoints, queue: str) -> Feed:
    from worker_tier import Client
    from worker_tier.producer.outgoing import OutgoingMessage

    sqs = endpoints.sqs()
    dead_letters = sqs.create_queue(QueueName=f"{queue}-dlq")["QueueUrl"]
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    client = Client(url, sqs=sqs)

    def send(task_ids: list[str]) -> None:
        results = client.send_batch([OutgoingMessage(ours_tasks.PATH, task_id) for task_id in task_ids])
        failed = [r for r in results if not r.ok]
        if failed:
            raise RuntimeError(f"the bench's producer could not send {len(failed)} messages: {failed[0]}")

    counted = lambda u: u.replace(endpoints.producer, endpoints.counted)  # noqa: E731 - moto names the port in the URL
    environment = {
        "AWS_ENDPOINT_URL": f"http://{endpoints.counted}",
        "WORKER_TIER_QUEUE_URL": counted(url),
        "WORKER_TIER_DLQ_URL": counted(dead_letters),
        "WORKER_TIER_TASK_MODULES": "bench.peers.ours_tasks",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    command = [sys.executable, "-m", "worker_tier", "worker", "--concurrency", str(CONCURRENCY)]
    return Feed(url, send, command, environment)


def _celery_feed(endpoints: Endpoints, queue: str) -> Feed:
    url = endpoints.sqs().create_queue(QueueName=queue)["QueueUrl"]
    app = celery_app.new_app(endpoints.producer, queue)

    def send(task_ids: list[str]) -> None:
        with app.producer_or_acquire() as producer:
            for task_id in task_ids:
                app.send_task(celery_app.TASK_NAME, args=(task_id,), queue=queue, producer=producer)

    command = [
        sys.executable, "-m", "celery", "-A", "bench.peers.celery_worker", "worker", "--pool", "prefork",
        "--concurrency", str(CONCURRENCY), "--without-gossip", "--without-mingle", "--without-heartbeat",
        "--loglevel", "WARNING", "-Q", queue,
    ]
    return Feed(url, send, command, {"PEERS_BENCH_ENDPOINT": endpoints.counted, "PEERS_BENCH_QUEUE": queue})


def _dramatiq_feed(endpoints: Endpoints, queue: str) -> Feed:
    broker = dramatiq_app.new_broker(endpoints.producer, queue)
    broker.declare_queue(dramatiq_app.QUEUE_NAME)
    broker.consume(dramatiq_app.QUEUE_NAME).close()  # creates the queue (dramatiq-sqs does so lazily)
    url = broker.queues[dramatiq_app.QUEUE_NAME].url

    def send(task_ids: list[str]) -> None:
        for task_id in task_ids:
            broker.enqueue(dramatiq_app.message(task_id))

    command = [
        sys.executable, "-m", "dramatiq", "bench.peers.dramatiq_worker",
        "--processes", "1", "--threads", str(CONCURRENCY),
    ]
    return Feed(url, send, command, {"PEERS_BENCH_ENDPOINT": endpoints.counted, "PEERS_BENCH_QUEUE": queue})


OURS = Framework(
    name="worker_tier",
    settings={
        "command": f"python -m worker_tier worker --concurrency {CONCURRENCY}",
        "receive": "long poll WaitTimeSeconds=20, MaxNumberOfMessages = free threads (at most 10)",
        "delete": "after the task succeeds",
        "heartbeat_interval_seconds": 30,
        "error_visibility_timeout_seconds": 2,
    },
    docs=["README.md (container worker)", "src/worker_tier/container/consumer.py"],
    retry="a failed task's message is not deleted: one ChangeMessageVisibility gives it the error visibility "
          "timeout (2 s, then backoff), and SQS redelivers the same message, so its receive count, the DLQ "
          "redrive and the 12 h cap all still see it",
    feed=_ours_feed,
)

CELERY = Framework(
    name="celery",
    settings={"pool": "prefork", "concurrency": CONCURRENCY, **celery_app.settings("<queue>"),
              "worker_flags": "--without-gossip --without-mingle --without-heartbeat",
              "retry": f"autoretry_for=(FirstRunFailedError,), default_retry_delay={celery_app.RETRY_DELAY_SECONDS}"},
    docs=[
        "https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/sqs.html",
        "https://docs.celeryq.dev/en/stable/userguide/optimizing.html#prefetch-limits",
        "https://docs.celeryq.dev/en/stable/userguide/tasks.html#automatic-retry-for-known-exceptions",
    ],
    retry="Task.retry publishes a new message (SendMessage; the countdown is an ETA the worker holds in "
          "memory) and acks (DeleteMessage) the original: SQS's receive count and redrive policy never see a retry",
    feed=_celery_feed,
)

DRAMATIQ = Framework(
    name="dramatiq",
    settings={"processes": 1, "threads": CONCURRENCY, "broker": "SQSBroker(namespace=<queue>) defaults",
              "prefetch": f"2 x threads = {2 * CONCURRENCY} (receives of up to min(prefetch, 10))",
              "wait_time_seconds": 20, "visibility_timeout_seconds": 12 * 3600,
              "retry": f"max_retries=3, min_backoff=max_backoff={dramatiq_app.RETRY_BACKOFF_MS} ms"},
    docs=[
        "https://github.com/Bogdanp/dramatiq_sqs#readme",
        "https://dramatiq.io/reference.html#dramatiq.middleware.Retries",
    ],
    retry="the Retries middleware re-enqueues the failed message as a new SQS message (SendMessage with "
          "DelaySeconds) and acks (DeleteMessage) the original: the receive count starts again at 1, so a redrive "
          "policy never sees the retries",
    feed=_dramatiq_feed,
)

FRAMEWORKS = (OURS, CELERY, DRAMATIQ)
