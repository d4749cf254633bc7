"""`make run`: start the local environment, send the example tasks (or an app's messages), print each outcome."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import inspect
import json
import os
import shlex
import signal
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
from worker_tier_local import messages
from worker_tier_local.messages import ExampleMessage
from worker_tier_local.pending import SentLedger
from worker_tier.core.errors import SettingsError, TaskImportError, WorkerTierError
from worker_tier.core.settings import Settings

if "--verbose" not in sys.argv:
    # Powertools reads these when the worker's logger and metrics are created, so before that import.
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "CRITICAL")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")

from worker_tier.worker.fates import (
    OUTCOME_DEAD_LETTERED,
    OUTCOME_HELD_BACK,
    OUTCOME_THROTTLED,
    OUTCOME_RELEASED,
    OUTCOME_RESCHEDULED,
    OUTCOME_RETRYING,
    OUTCOME_SUCCEEDED,
    Outcome,
    add_outcome_listener,
)
from worker_tier.worker.registry import DEFAULT_REGISTRY

# Read from the project directory it is started in, like `cdk`; its task modules import from there too.
# Both are optional: without cdk.json the settings are the defaults, without cron.yaml no cron fires.
# With an app (--app, or cdk.json's app setting), cron.yaml is the nearest one from the app's module up to
# the directory its top-level package is in: EB reads it at the root of the app's source bundle, which is
# there for `application.py` (./cron.yaml still) and for a Django project's `mysite/wsgi.py` (beside manage.py).
DEFAULT_CDK_JSON = Path("cdk.json")
CRON_YAML = "cron.yaml"
DEFAULT_CRON_YAML = Path(CRON_YAML)
# What the local extra adds to a runtime-only install that this command imports (moto, and PyYAML for cron.yaml).
LOCAL_EXTRA_MODULES = ("moto", "yaml")
LOCAL_EXTRA_INSTALL = "pip install 'worker-tier[local]'"
MAX_PORT = 65535
DASHBOARD_PORT = 8642  # worker-tier ui's default (worker_tier_cli.ui.serve.DEFAULT_PORT, which needs the ui extra)
_MARKS = {
    OUTCOME_SUCCEEDED: "ok  ",
    OUTCOME_RETRYING: "retry",
    OUTCOME_DEAD_LETTERED: "DLQ ",
    OUTCOME_RELEASED: "back",
    OUTCOME_HELD_BACK: "hold",
    OUTCOME_RESCHEDULED: "later",
    OUTCOME_THROTTLED: "wait",
}


def main(argv: list[str] | None = None) -> int:
    """Run until --duration passes, Ctrl-C or SIGTERM; a configuration error ends it in one line."""
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _run(_parse(argv))
    except _TerminatedError:  # before the run loop: nothing was sent yet
        raise SystemExit("worker-tier-local: stopped (SIGTERM) while starting") from None
    except WorkerTierError as error:  # settings, cron.yaml, task code: the line synth prints too
        raise SystemExit(f"worker-tier-local: {type(error).__name__}: {error}") from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    """``main`` once the arguments are read."""
    _check_local_extra()
    if os.getcwd() not in sys.path:  # the console script does not put the project directory on the path
        sys.path.insert(0, os.getcwd())
    settings = _settings(args.settings, args.app)
    _check_task_modules(settings)
    app_directories = _app_directories(settings.app) if settings.app else []
    entries = _cron_entries(args.cron or _nearest(app_directories, CRON_YAML), settings.fifo, missing_ok=args.cron is None)
    examples = _examples(args, settings, app_directories)
    settings_source = args.settings or (DEFAULT_CDK_JSON if DEFAULT_CDK_JSON.is_file() else "defaults (no ./cdk.json)")
    add_outcome_listener(_print_outcome)
    ledger = SentLedger()
    add_outcome_listener(lambda outcome: _settle(ledger, outcome))
    env = LocalEnvironment(
        settings, cron_entries=entries, on_tick=_print_tick, on_dispatcher_run=_print_dispatcher_run,
        container=args.container, port=args.port,
    )
    try:
        env.start()
    except TaskImportError as error:
        env.stop()
        raise SystemExit(f"worker-tier-local: {error}") from None
    except BaseException:
        env.stop()
        raise
    with contextlib.ExitStack() as cleanup:  # started once above; stopped however the run ends
        cleanup.callback(env.stop)
        dashboard = _start_dashboard(env, args.ui_port, cleanup) if args.ui else None
        _print_banner(env, dashboard)
        _say(f"settings from {settings_source} (defaults where it sets none): max_retries={settings.max_retries}, "
             f"error_visibility_timeout={settings.error_visibility_timeout}s, task_modules={settings.task_modules}")
        if settings.app:
            _say(f"app   {settings.app} gets every message no @task path claims, as sqsd POSTs it: ordinary "
                 f"messages to {settings.http_path}, ticks to their cron.yaml url")
        for entry in entries:
            state = "" if entry.enabled else " (disabled)"
            _say(f"cron  {entry.name}: {entry.schedule} {entry.timezone} -> {entry.url}{state}")
            for warning in getattr(entry, "warnings", ()):  # what EB would read differently, as synth warns it
                _say(f"cron  {entry.name}: warning: {warning}")
        if env.cron is not None and env.cron.next_due() is not None:
            _say(f"next cron tick at {env.cron.next_due():%H:%M:%S %Z}")
        for example in _registered(examples, settings):
            ledger.sent(example.path, _send(env, example), example.delay)
        _loop(env, args.duration)
        _report_dead_letters(env)
        for line in dataclasses.replace(env.pending(), unhandled=ledger.unhandled()).lines():
            _say(line)
    return 0


def _examples(args: argparse.Namespace, settings: Settings, app_directories: list[Path]) -> list[ExampleMessage]:
    """What to send: --messages's file; with an app, the nearest messages.json (as cron.yaml); else the example tasks."""
    if args.no_examples:
        return []
    if args.messages is not None:
        return messages.load(args.messages, settings.http_path)
    if app_directories:
        nearest = _nearest(app_directories, messages.APP_MESSAGES_FILE)
        if nearest is None:
            _say(f"no {messages.APP_MESSAGES_FILE} in {', '.join(map(str, app_directories))}: no example messages "
                 "sent (--messages FILE sends some)")
            return []
        return messages.load(nearest, settings.http_path)
    container = [messages.CONTAINER_TASK_EXAMPLE] if args.container else []
    return [*messages.TASK_EXAMPLES, *container, messages.DELAYED_TASK_EXAMPLE]


def _registered(examples: list[ExampleMessage], settings: Settings) -> list[ExampleMessage]:
    """The examples to send: a messages file's all; this repo's example messages only to this repo's example tasks.

    In another project they would dead-letter (UnknownPathError) or reach its own task of the same path with a body
    written for ours; one line says so and how to send one of its own.
    """
    ours = _example_task_paths()
    kept = [e for e in examples if e not in messages.BUILT_IN_EXAMPLES or e.path in ours]
    skipped = sorted({e.path for e in examples if e not in kept})
    if skipped:
        registered = _project_paths(settings.task_modules)
        missing = [path for path in skipped if DEFAULT_REGISTRY.get(path) is None]
        own = [path for path in skipped if path not in missing]
        reasons = [f"registers no {', '.join(missing)}"] if missing else []
        reasons += [f"its own {', '.join(own)} {'is' if len(own) == 1 else 'are'} not this repo's example "
                    f"{'task' if len(own) == 1 else 'tasks'}"] if own else []
        path = registered[0] if registered else "/your-task"
        _say(f"example tasks not sent: task_modules {settings.task_modules!r} {' and '.join(reasons)}; send "
             f"one of yours with: worker-tier send {path} '{{}}' (in a shell with the export line above)")
    return kept


def _example_task_paths() -> set[str]:
    """The registered paths whose handler is defined in this repo's tasks/examples.py."""
    definitions = (DEFAULT_REGISTRY.get(path) for path in DEFAULT_REGISTRY.paths())
    return {d.path for d in definitions if d is not None and _source_file(d.handler) == messages.EXAMPLE_TASKS_FILE}


def _source_file(handler: object) -> Path | None:
    """The resolved file ``handler`` (unwrapped) is defined in; None when it has none (a builtin, a C callable)."""
    try:
        return Path(inspect.getfile(inspect.unwrap(handler))).resolve()  # type: ignore[arg-type]
    except TypeError:
        return None


def _project_paths(task_modules: str) -> list[str]:
    """The registered paths whose handlers are in the task modules (or their submodules), sorted."""
    modules = tuple(m.strip() for m in task_modules.split(",") if m.strip())
    definitions = (DEFAULT_REGISTRY.get(path) for path in DEFAULT_REGISTRY.paths())
    return [d.path for d in definitions
            if d is not None and any(_within(getattr(d.handler, "__module__", None) or "", m) for m in modules)]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _send(env: LocalEnvironment, example: ExampleMessage) -> str:
    """Send one example message and say so, with what is special about it; return its id."""
    message_id = env.client.send(example.path, example.text, delay=example.delay, attributes=example.attributes or None)
    note = ""
    if example == messages.CONTAINER_TASK_EXAMPLE:
        note = "  a long task: the Lambda worker forwards it to the container worker"
    elif example.delay and example.delay > LOCAL_LONG_DELAY_THRESHOLD_SECONDS:
        note = (f"  delay {example.delay:g} s via the delay table (locally anything over "
                f"{LOCAL_LONG_DELAY_THRESHOLD_SECONDS} s goes there, not 900 s, so you can watch it)")
    elif example.delay:
        note = f"  delay {example.delay:g} s"
    _say(f"sent  {example.path:<8} {message_id[:8]}  {example.text}{note}")
    return message_id


def _check_task_modules(settings: Settings) -> None:
    """SystemExit naming the setting when a task module cannot be found (the worker would fail on every message)."""
    for module in filter(None, (name.strip() for name in settings.task_modules.split(","))):
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            hint = f" (with only an app, its module: {settings.app.partition(':')[0]!r})" if settings.app else ""
            raise SystemExit(f"worker-tier-local: task_modules {settings.task_modules!r}: no module {module!r} importable "
                             f"from {os.getcwd()}; set task_modules in cdk.json to the modules of your @task "
                             f"functions{hint}")


def _nearest(directories: list[Path], name: str) -> Path | None:
    """The first ``directories`` entry's file ``name`` that exists, or None."""
    return next((directory / name for directory in directories if (directory / name).is_file()), None)


def _app_directories(app: str) -> list[Path]:
    """The app module's directory, then each one up to the directory its top-level package is in (nearest first).

    Found without importing the module (``package.module`` of ``package.module:attribute``).
    """
    module = app.partition(":")[0]
    try:
        spec = importlib.util.find_spec(module)
    except ImportError as error:
        spec, reason = None, f": {error}"
    else:
        reason = ""
    if spec is None or spec.origin is None:
        raise SystemExit(f"worker-tier-local: app {app!r}: no module {module!r} importable from {os.getcwd()}{reason}; "
                         "run from the directory the module path is relative to")
    package_levels = module.count(".") + (2 if spec.submodule_search_locations is not None else 1)
    return list(Path(spec.origin).parents[:package_levels])


def _start_dashboard(env: LocalEnvironment, port: int, cleanup: contextlib.ExitStack) -> str:
    """``worker-tier ui`` over this environment, in a thread, its outcomes this process's worker's; its URL.

    The port asked for, else (in use) any free one. SystemExit naming the ui extra when it is not installed.
    """
    try:
        from worker_tier_cli.ui import serve
        from worker_tier_cli.ui.guard import new_token
        from worker_tier_cli.ui.outcomes import OutcomeFeed
    except ImportError as error:
        raise SystemExit(f"worker-tier-local: --ui: {(error.name or '').split('.')[0]} not installed; the dashboard "
                         "needs the ui extra: pip install 'worker-tier[ui]'") from None
    feed = cleanup.enter_context(OutcomeFeed())
    session = serve.local_session(env.shell_environment())
    try:
        served = serve.bind(session, serve.DEFAULT_HOST, port, new_token(), feed)
    except OSError:
        served = serve.bind(session, serve.DEFAULT_HOST, 0, new_token(), feed)
    serve.start_in_background(served)
    cleanup.callback(served.stop)
    return served.url


def _print_banner(env: LocalEnvironment, dashboard: str | None = None) -> None:
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
    if env.payload_bucket is not None:
        _say(f"payload bucket   {env.payload_bucket}  (bodies too large for the queue go to S3 here: docs/large-payloads.md)")
    if dashboard is not None:
        _say(f"dashboard        {dashboard}  (open it in a browser: the token in it logs you in; docs/dashboard.md)")
    _say("from another shell, paste this line: then `worker-tier`, `Client.from_env()` and the AWS CLI reach this "
         "environment with no other flag")
    print(f"  {_export_line(env)}")
    _say("for example (the second needs the AWS CLI installed)")
    print("  worker-tier status")
    print(f"  {_aws_example(env.endpoint_url, env.queue_url)}", flush=True)


def _export_line(env: LocalEnvironment) -> str:
    """The ``export`` of ``env.shell_environment()``, one line pasted as printed; run from a virtual environment,
    its ``bin`` first on PATH too, so ``worker-tier`` and ``python`` there are the ones with this checkout's code."""
    values = [f"{name}={shlex.quote(value)}" for name, value in env.shell_environment().items()]
    if sys.prefix != sys.base_prefix:
        values.append(f'PATH={shlex.quote(str(Path(sys.prefix) / "bin"))}:"$PATH"')
    return "export " + " ".join(values)


def _aws_example(endpoint_url: str, queue_url: str) -> str:
    """An AWS CLI command that works as printed once ``_export_line(env)`` ran: the queue's attributes."""
    return f"aws --endpoint-url {endpoint_url} sqs get-queue-attributes --queue-url {queue_url} --attribute-names All"


class _TerminatedError(BaseException):  # as KeyboardInterrupt: no `except Exception` on the way swallows it
    """SIGTERM (`kill`, a process manager, make's own ending) arrived: stop as Ctrl-C does."""


def _loop(env: LocalEnvironment, duration: float | None) -> None:
    """Poll until the duration passes; Ctrl-C or SIGTERM ends it early and cleanly, with the exit summary."""
    deadline = None if duration is None else time.monotonic() + duration
    try:
        while deadline is None or time.monotonic() < deadline:
            env.poll_once(wait_seconds=1)
    except KeyboardInterrupt:
        _say("stopping (Ctrl-C)")
    except _TerminatedError:
        _say("stopping (SIGTERM)")


def _terminated(signum: int, frame: Any) -> None:
    raise _TerminatedError


def _settle(ledger: SentLedger, outcome: Outcome) -> None:
    """A message that succeeded or was dead-lettered is handled; the other fates bring it back."""
    if outcome.status in (OUTCOME_SUCCEEDED, OUTCOME_DEAD_LETTERED):
        ledger.finished(outcome.message_id, outcome.path)


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


def _cron_entries(path: Path | None, fifo: bool, missing_ok: bool | None = None) -> list:
    """cron.yaml's entries, validated as at synth; none when a default cron.yaml is absent, an error for a --cron that is.

    ``missing_ok`` defaults to whether ``path`` is None (./cron.yaml).
    """
    from worker_tier.periodic.cron_config import load

    return load(path or DEFAULT_CRON_YAML, fifo=fifo, missing_ok=path is None if missing_ok is None else missing_ok)


def _print_outcome(outcome: Outcome) -> None:
    detail = outcome.detail
    if outcome.status == OUTCOME_RETRYING:
        detail = f"{detail} -> retry in {outcome.visibility_seconds}s"
    elif outcome.status == OUTCOME_RESCHEDULED:
        detail = f"{detail} -> again in {outcome.visibility_seconds}s"
    _say(f"{_MARKS.get(outcome.status, outcome.status)} {outcome.path:<8} {outcome.message_id[:8]}  "
         f"receive {outcome.receive_count}  {detail}".rstrip())


def _say(text: str) -> None:
    print(f"{datetime.now().astimezone():%H:%M:%S}  {text}", flush=True)


def _settings(cdk_json: Path | None, app: str | None = None) -> Settings:
    """The stack's settings, from cdk.json's worker_tier context (the defaults without ./cdk.json); --app wins."""
    settings = _cdk_json_settings(cdk_json)
    if app is None:
        return settings
    try:
        return dataclasses.replace(settings, app=app)
    except SettingsError as error:
        raise SystemExit(f"worker-tier-local: --app: {error}") from None


def _cdk_json_settings(cdk_json: Path | None) -> Settings:
    """The settings of cdk.json's worker_tier context; the defaults when ./cdk.json is absent."""
    if cdk_json is None:
        if not DEFAULT_CDK_JSON.is_file():
            return Settings()
        cdk_json = DEFAULT_CDK_JSON
    elif not cdk_json.is_file():
        raise SystemExit(f"worker-tier-local: --settings {str(cdk_json)!r} (resolved to {str(cdk_json.resolve())!r}) "
                         "is not a file; pass your CDK app's cdk.json, or leave --settings out to use ./cdk.json "
                         "(the default settings when there is none)")
    try:
        context = json.loads(cdk_json.read_text()).get("context", {})
    except ValueError as error:
        raise SystemExit(f"worker-tier-local: {str(cdk_json)!r} could not be read as JSON: {error}; fix it, or pass "
                         "--settings with another cdk.json") from None
    return Settings.from_mapping(context.get("worker_tier", {}))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m worker_tier_local", description=__doc__)
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    parser.add_argument("--settings", type=Path, default=None,
                        help="cdk.json to read settings from (default: ./cdk.json, or the default settings without one)")
    parser.add_argument("--app", default=None, metavar="PACKAGE.MODULE:ATTRIBUTE",
                        help="a WSGI or ASGI app (EB worker app) that gets every message no @task path claims, as sqsd "
                             "POSTs it (default: cdk.json's app setting)")
    parser.add_argument("--cron", type=Path, default=None,
                        help="cron.yaml to fire (default: with an app, the nearest from its module up to its top-level "
                             "package's directory; else ./cron.yaml; none if absent)")
    parser.add_argument("--messages", type=Path, default=None,
                        help=f"a JSON list of messages to send (default: with an app, the nearest {messages.APP_MESSAGES_FILE}, "
                             "found as cron.yaml is; else the example tasks)")
    parser.add_argument("--port", type=_port, default=LOCAL_DEFAULT_PORT,
                        help=f"moto's port on 127.0.0.1 (default {LOCAL_DEFAULT_PORT}; a free one when it is taken; 0: any)")
    parser.add_argument("--container", action="store_true", help="also run the container worker for long tasks")
    parser.add_argument("--ui", action="store_true",
                        help="also serve the web dashboard (worker-tier ui; the ui extra) on 127.0.0.1, its URL in the banner")
    parser.add_argument("--ui-port", type=_port, default=DASHBOARD_PORT,
                        help=f"the dashboard's port with --ui (default {DASHBOARD_PORT}; a free one when it is taken; 0: any)")
    parser.add_argument("--no-examples", action="store_true", help="do not send the example tasks or messages")
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
