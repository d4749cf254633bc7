"""`make run`: start the local environment, send the example tasks, print each outcome."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from worker_tier_local.environment import (
    LOCAL_DEFAULT_PORT,
    LOCAL_LONG_DELAY_THRESHOLD_SECONDS,
    LOCAL_REGION,
    LocalEnvironment,
)
from worker_tier import contract
from worker_tier.settings import Settings

if "--verbose" not in sys.argv:
    # Powertools reads these when the worker's logger and metrics are created, so before that import.
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "CRITICAL")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")

from worker_tier.fates import (
    OUTCOME_DEAD_LETTERED,
    OUTCOME_HELD_BACK,
    OUTCOME_RELEASED,
    OUTCOME_RESCHEDULED,
    OUTCOME_RETRYING,
    OUTCOME_SUCCEEDED,
    Outcome,
    add_outcome_listener,
)

# Read from the project directory it is started in, like `cdk`; its task modules import from there too.
# Both are optional: without cdk.json the settings are the defaults, without cron.yaml no cron fires.
DEFAULT_CDK_JSON = Path("cdk.json")
DEFAULT_CRON_YAML = Path("cron.yaml")
# What the local extra adds to a runtime-only install that this command imports (moto, and PyYAML for cron.yaml).
LOCAL_EXTRA_MODULES = ("moto", "yaml")
LOCAL_EXTRA_INSTALL = "pip install 'worker-tier[local]'"
# moto accepts any credentials; these are the values its docs use.
EXAMPLE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
MAX_PORT = 65535
EXAMPLES: list[tuple[str, Any]] = [
    ("/hello", {"name": "Ada"}),
    ("/flaky", {"report": "monthly"}),
    ("/poison", {"order_id": 42}),
]
DELAYED_EXAMPLE = ("/hello", {"name": "Grace, 150 s later"}, 150)
_MARKS = {
    OUTCOME_SUCCEEDED: "ok  ",
    OUTCOME_RETRYING: "retry",
    OUTCOME_DEAD_LETTERED: "DLQ ",
    OUTCOME_RELEASED: "back",
    OUTCOME_HELD_BACK: "hold",
    OUTCOME_RESCHEDULED: "later",
}


def main(argv: list[str] | None = None) -> int:
    """Run until --duration passes or Ctrl-C."""
    args = _parse(argv)
    _check_local_extra()
    if os.getcwd() not in sys.path:  # the console script does not put the project directory on the path
        sys.path.insert(0, os.getcwd())
    settings = _settings(args.settings)
    entries = _cron_entries(args.cron, settings.fifo)
    settings_source = args.settings or (DEFAULT_CDK_JSON if DEFAULT_CDK_JSON.is_file() else "defaults (no ./cdk.json)")
    add_outcome_listener(_print_outcome)
    with LocalEnvironment(
        settings, cron_entries=entries, on_tick=_print_tick, on_dispatcher_run=_print_dispatcher_run,
        container=args.container, port=args.port,
    ) as env:
        _print_banner(env)
        _say(f"settings from {settings_source}: max_retries={settings.max_retries}, "
             f"error_visibility_timeout={settings.error_visibility_timeout}s, task_modules={settings.task_modules}")
        for entry in entries:
            state = "" if entry.enabled else " (disabled)"
            _say(f"cron  {entry.name}: {entry.schedule} {entry.timezone} -> {entry.url}{state}")
        if env.cron is not None and env.cron.next_due() is not None:
            _say(f"next cron tick at {env.cron.next_due():%H:%M:%S %Z}")
        if not args.no_examples:
            for path, body in EXAMPLES:
                message_id = env.client.send(path, json.dumps(body))
                _say(f"sent  {path:<8} {message_id[:8]}  {json.dumps(body)}")
            if args.container:
                message_id = env.client.send("/render", json.dumps({"frames": 3}))
                _say(f"sent  /render  {message_id[:8]}  a long task: the Lambda worker forwards it to the container worker")
            path, body, seconds = DELAYED_EXAMPLE
            message_id = env.client.send(path, json.dumps(body), delay=seconds)
            _say(f"sent  {path:<8} {message_id[:8]}  {json.dumps(body)}  delay {seconds} s via the delay table "
                 f"(locally anything over {LOCAL_LONG_DELAY_THRESHOLD_SECONDS} s goes there, not 900 s, so you can watch it)")
        _loop(env, args.duration)
        _report_dead_letters(env)
        for line in env.pending().lines():
            _say(line)
    return 0


def _print_banner(env: LocalEnvironment) -> None:
    """Where everything is, and two lines to paste into another shell (no timestamp, so they paste as they are)."""
    if env.unavailable_port is not None:
        _say(f"port {env.unavailable_port} is in use (another `make run`?); using a free one instead: "
             f"{env.endpoint_url} (--port chooses another)")
    _say(f"moto on {env.endpoint_url}, region {LOCAL_REGION} (its queues are there; another "
         "region finds none); any credentials work")
    _say(f"queue            {env.queue_url}")
    _say(f"DLQ              {env.dead_letter_queue_url}")
    if env.container_queue_url is not None:
        _say(f"container queue  {env.container_queue_url}  (the container worker, in this process, consumes it)")
    _say(f"tables           {env.state_table} (state), {env.delay_table} (delays)")
    _say("from another shell, paste these two lines: the export, then an AWS CLI command that works as printed")
    print(f"  {_export_line(env)}")
    print(f"  {_aws_example(env.endpoint_url, env.queue_url)}", flush=True)


def _export_line(env: LocalEnvironment) -> str:
    """The ``export`` a shell needs: region (both variables), any credentials, the endpoint, and the queue.

    With it, boto3 and the AWS CLI reach moto (``AWS_ENDPOINT_URL``), and ``Client.from_env()`` sends
    to the work queue.
    """
    values = {"AWS_DEFAULT_REGION": LOCAL_REGION, "AWS_REGION": LOCAL_REGION, **EXAMPLE_CREDENTIALS,
              "AWS_ENDPOINT_URL": env.endpoint_url, contract.QUEUE_URL_VARIABLE: env.queue_url}
    return "export " + " ".join(f"{name}={value}" for name, value in values.items())


def _aws_example(endpoint_url: str, queue_url: str) -> str:
    """An AWS CLI command that works as printed once ``_export_line(env)`` ran: the queue's attributes."""
    return f"aws --endpoint-url {endpoint_url} sqs get-queue-attributes --queue-url {queue_url} --attribute-names All"


def _loop(env: LocalEnvironment, duration: float | None) -> None:
    """Poll until the duration passes; Ctrl-C ends it early and cleanly."""
    deadline = None if duration is None else time.monotonic() + duration
    try:
        while deadline is None or time.monotonic() < deadline:
            env.poll_once(wait_seconds=1)
    except KeyboardInterrupt:
        _say("stopping (Ctrl-C)")


def _report_dead_letters(env: LocalEnvironment) -> None:
    for dead in env.dead_letters():
        _say(f"in DLQ: body {dead['body']}  reason {json.dumps(dead['failure'])}")


def _print_tick(result: dict) -> None:
    _say(f"tick  {result['tick']} -> {'enqueued' if result['enqueued'] else 'already enqueued'}")


def _print_dispatcher_run(result: dict) -> None:
    if result.get("sent"):
        _say(f"delay dispatcher: {result['sent']} message(s) moved from the delay table to the queue, due within "
             f"{LOCAL_LONG_DELAY_THRESHOLD_SECONDS} s")
    if result.get("dead_lettered"):
        _say(f"delay dispatcher: {result['dead_lettered']} message(s) refused by the queue went to the DLQ with a reason")


def _check_local_extra() -> None:
    """SystemExit naming what to install when this is a runtime-only install (no local extra)."""
    missing = [name for name in LOCAL_EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(f"worker-tier-local: {', '.join(missing)} not installed; the local environment needs the "
                         f"local extra: {LOCAL_EXTRA_INSTALL}")


def _cron_entries(path: Path | None, fifo: bool) -> list:
    """cron.yaml's entries, validated as at synth; none when ./cron.yaml is absent, an error for a --cron that is."""
    from worker_tier_cdk.cron_config import load

    return load(path or DEFAULT_CRON_YAML, fifo=fifo, missing_ok=path is None)


def _print_outcome(outcome: Outcome) -> None:
    detail = outcome.detail
    if outcome.status == OUTCOME_RETRYING:
        detail = f"{detail} -> retry in {outcome.visibility_seconds}s"
    _say(f"{_MARKS.get(outcome.status, outcome.status)} {outcome.path:<8} {outcome.message_id[:8]}  "
         f"receive {outcome.receive_count}  {detail}".rstrip())


def _say(text: str) -> None:
    print(f"{datetime.now().astimezone():%H:%M:%S}  {text}", flush=True)


def _settings(cdk_json: Path | None) -> Settings:
    """The stack's settings, from cdk.json's worker_tier context; the defaults when ./cdk.json is absent."""
    if cdk_json is None:
        if not DEFAULT_CDK_JSON.is_file():
            return Settings()
        cdk_json = DEFAULT_CDK_JSON
    elif not cdk_json.is_file():
        raise SystemExit(f"worker-tier-local: --settings {str(cdk_json)!r} (resolved to {str(cdk_json.resolve())!r}) "
                         "is not a file; pass your CDK app's cdk.json, or leave --settings out to use ./cdk.json "
                         "(the default settings when there is none)")
    context = json.loads(cdk_json.read_text()).get("context", {})
    return Settings.from_mapping(context.get("worker_tier", {}))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m worker_tier_local", description=__doc__)
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    parser.add_argument("--settings", type=Path, default=None,
                        help="cdk.json to read settings from (default: ./cdk.json, or the default settings without one)")
    parser.add_argument("--cron", type=Path, default=None, help="cron.yaml to fire (default: ./cron.yaml, if any)")
    parser.add_argument("--port", type=_port, default=LOCAL_DEFAULT_PORT,
                        help=f"moto's port on 127.0.0.1 (default {LOCAL_DEFAULT_PORT}; a free one when it is taken; 0: any)")
    parser.add_argument("--container", action="store_true", help="also run the container worker for long tasks")
    parser.add_argument("--no-examples", action="store_true", help="do not send the example tasks")
    parser.add_argument("--verbose", action="store_true", help="show the worker's JSON logs and metrics")
    return parser.parse_args(argv)


def _port(text: str) -> int:
    """--port's value: an int in 0..MAX_PORT."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"must be a port number 0..{MAX_PORT} (0: any free port), got {text!r}")
    return port


if __name__ == "__main__":
    sys.exit(main())
