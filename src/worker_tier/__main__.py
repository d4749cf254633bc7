"""``python -m worker_tier worker``: the container worker, for tasks longer than Lambda's 15 minutes.

Configured like the Lambda worker, by the contract's resource variables and the settings'
variables (``worker_tier.core.contract``); the container_concurrency setting is how many tasks run at once, or
http_connections when it forwards each message to an app over HTTP (app_port).

Any other command (``status``, ``dlq``, ``redrive``, ``send``) is the ``worker-tier`` command line,
``worker_tier_cli``: imported only then, so the runtime never needs click.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from worker_tier.core import contract
from worker_tier.core.aws import new_heartbeat_client
from worker_tier.core.priority import PriorityQueues
from worker_tier.container.consumer import EXIT_CODE_CONFIGURATION, Consumer, concurrency, exit_now, threads_left
from worker_tier.core.errors import QueueConfigurationError, SettingsError
from worker_tier.worker.heartbeat import Heartbeat
from worker_tier.core.observability import logger
from worker_tier.core.settings import DEFAULT_CONTAINER_GRACE_SECONDS, Settings
from worker_tier.worker.batch import Worker

# It consumes its own queue (queue_url) and sends its tasks' follow-ups to the work queue (send_queue_url);
# it never forwards, so it reads no container_queue_url.
NEEDS = contract.Needs(
    "the container worker", required=("queue_url", "dlq_url"), optional=("state_table", "delay_table"), settings=True,
) | contract.PRODUCER_NEEDS
EXIT_CODE_USAGE = 2
WORKER_COMMAND = "worker"
CLI_EXTRA_MODULES = ("click", "rich")
CLI_EXTRA_MISSING = "worker-tier: {missing} not installed; the command line needs the cli extra: pip install 'worker-tier[cli]'"


def main(argv: list[str] | None = None) -> int:
    """``worker`` runs the container worker; anything else goes to the command line (``worker-tier --help``)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == [WORKER_COMMAND]:
        return run_worker(args)
    try:
        from worker_tier_cli import main as cli_main
    except ImportError as error:
        if error.name not in CLI_EXTRA_MODULES:
            raise
        print(CLI_EXTRA_MISSING.format(missing=error.name), file=sys.stderr)
        return EXIT_CODE_USAGE
    return cli_main(args)


def run_worker(argv: list[str]) -> int:
    """The container worker: ``worker [--concurrency N] [--grace SECONDS]``."""
    settings = Settings.from_environment(os.environ)
    parser = argparse.ArgumentParser(prog="python -m worker_tier", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker", help="consume the queue until SIGTERM")
    worker.add_argument("--concurrency", type=int, default=concurrency(settings),
                        help="messages run at once (default: http_connections with app_port, else container_concurrency)")
    worker.add_argument("--grace", type=float, default=DEFAULT_CONTAINER_GRACE_SECONDS,
                        help="seconds running tasks get after SIGTERM before the process exits without them")
    args = parser.parse_args(argv)
    try:
        resources = NEEDS.read(os.environ)
        queue_url = resources.named("queue_url")
    except SettingsError as error:
        print(error, file=sys.stderr)
        return EXIT_CODE_USAGE
    core = Worker.from_environment()
    heartbeat = Heartbeat(new_heartbeat_client(), queue_url, interval_seconds=core.settings.heartbeat_interval)
    try:
        # Deletes use the heartbeat's bounded client too: a task thread waits on its delete, so a hung call must end soon.
        consumer = Consumer(core, core.sqs(), queue_url, concurrency=args.concurrency, grace_seconds=args.grace,
                            heartbeat=heartbeat, delete_sqs=new_heartbeat_client(), heartbeat_sqs=new_heartbeat_client(),
                            priority_queue_urls=poll_order(settings, resources))
    except QueueConfigurationError as error:  # no such queue, access denied: before any message was taken
        print(error, file=sys.stderr)
        return EXIT_CODE_CONFIGURATION
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, frame: consumer.stopping.set())
    logger.info("container worker started", extra={"queue": queue_url, "concurrency": args.concurrency})
    try:
        consumer.run()
    except QueueConfigurationError as error:
        print(error, file=sys.stderr)
        return _exit(EXIT_CODE_CONFIGURATION)
    logger.info("container worker stopped")
    return _exit(0)


def poll_order(settings: Settings, resources: contract.Resources) -> list[str]:
    """The work queue's priority levels, highest first, when it reads the work queue itself (HTTP forwarding) and
    priorities are on; otherwise none (its own queue alone: the levels' variables are for its tasks' sends)."""
    queues = PriorityQueues.from_resources(resources, resources.named("queue_url"))
    return [url for _, url in queues.levels()] if settings.app_port and queues.enabled else []


def _exit(code: int) -> int:
    """``code`` once the drain is done; with threads a task left running (not daemon), the process ends now all the
    same (``exit_now``), saying so: ``sys.exit`` would wait for them until ECS's SIGKILL."""
    left = threads_left()
    if left:
        logger.warning(
            "threads left running by tasks do not hold the exit: ending the process without them",
            extra={"threads": [thread.name for thread in left], "exit_code": code},
        )
        exit_now(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
