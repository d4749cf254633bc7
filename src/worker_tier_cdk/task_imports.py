"""The worker's task modules imported at synth, from its staged asset, so a missing package fails synth in one line.

``check_imports`` runs ``worker_tier.worker.task_imports.main`` in a subprocess of this interpreter,
isolated (``-I -S``: no site-packages, no PYTHONPATH, no current directory) on a path of the staged asset
(the runtime, the task directories and the requirements installed for Lambda), then what Lambda itself
provides: boto3, botocore and Powertools with their dependencies (``RUNTIME_IMPORT_NAMES``), linked from
this interpreter. So ``import requests`` fails here as in Lambda when requirements.txt does not list it,
however the developer's venv is filled.

An ImportError raised by a task directory's own line fails synth (``TaskImportError``), and so does an
import that ends the process (``sys.exit``, ``os._exit``: Lambda's init would stop there too) or that does
not finish within IMPORT_TIMEOUT_SECONDS, each in one line naming the module, with the import's last output.
The requirements are built for Lambda's platform (Linux arm64, its CPython) and a compiled one may not import
here; a failure inside them, and any other exception at import (a variable only Lambda sets), is Lambda's
to judge. The subprocess says what happened in a result file, not on stdout, which the modules may write to. The subprocess gets placeholder credentials, an unreachable endpoint and no config files, so an
AWS call at import time fails fast and calls nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker_tier.core.errors import TaskImportError
from worker_tier_cdk.code import RUNTIME_IMPORT_NAMES, TaskCode

# A cold import of heavy requirements (pandas, scipy) on a slow CI disk takes tens of seconds: 120 s is well past
# that, yet stops an import that hangs (a network call with no timeout) long before a CI job's own limit.
IMPORT_TIMEOUT_SECONDS = 120
# How much of the import's stdout and stderr an exit or a timeout quotes: its last lines, shortened to one line.
OUTPUT_QUOTED_LINES = 3
OUTPUT_QUOTED_CHARACTERS = 200
# Port 9 (discard) on the loopback refuses at once: a call at import time fails instead of reaching AWS.
UNREACHABLE_ENDPOINT_URL = "http://127.0.0.1:9"
_ISOLATED_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "synth-import-check", "AWS_SECRET_ACCESS_KEY": "synth-import-check",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": UNREACHABLE_ENDPOINT_URL,
    "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_MAX_ATTEMPTS": "1", "POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "CRITICAL",
}
# The staged asset first, then the runtime's packages; then task_imports.main(RESULT_FILE MODULE,...) runs.
_BOOTSTRAP = ("import sys; sys.path[:0] = sys.argv[1:3]; from worker_tier.worker.task_imports import main; "
              "sys.exit(main(sys.argv[3:]))")
# (asset directory, modules) already imported: equal content is one staged directory, so one check per synth.
_checked: set[tuple[Path, str, bool]] = set()


@dataclass(frozen=True)
class _ImportRun:
    """What the subprocess did: its result file's steps, its exit code (None: timed out), its stdout and stderr."""

    steps: list[dict[str, Any]]
    returncode: int | None
    output: str


def check_imports(asset: Path, task_code: TaskCode, task_modules: str, timeout_seconds: float | None = None,
                  fifo: bool = False) -> None:
    """TaskImportError when a ``task_modules`` module, imported from ``asset``, fails on a task directory's line,
    exits, or takes longer than ``timeout_seconds`` (default IMPORT_TIMEOUT_SECONDS); on a ``fifo`` stack, also when
    a task has a rate or concurrency limit (flow control needs standard queues: docs/flow-control.md)."""
    modules = ",".join(m.strip() for m in task_modules.split(",") if m.strip())
    if not modules or not task_code.directories or (asset, modules, fifo) in _checked:
        return
    timeout = IMPORT_TIMEOUT_SECONDS if timeout_seconds is None else timeout_seconds
    with tempfile.TemporaryDirectory(prefix="worker-tier-import-check-") as scratch:
        run = _run(asset, modules, Path(scratch), timeout)
    failure = _judge(run, {d.name for d in task_code.directories}, timeout)
    if failure is not None:
        raise failure
    flow = next((step.get("flow_controlled") or [] for step in run.steps if step.get("ok")), [])
    if fifo and flow:
        raise TaskImportError(
            f"task {flow[0]!r} has a rate_limit or concurrency, and this stack's queue is FIFO (fifo: true); flow control "
            "gives a throttled message back to wait, which a FIFO queue's message group cannot do without holding up the "
            "group or changing its order: use a standard queue for these tasks, or drop rate_limit and concurrency"
        )
    _checked.add((asset, modules, fifo))


def _run(asset: Path, modules: str, scratch: Path, timeout_seconds: float) -> _ImportRun:
    """Import ``modules`` in the isolated subprocess; its output goes to a file, so a killed child leaves no pipe."""
    runtime, result_file, output_file = scratch / "runtime", scratch / "result.jsonl", scratch / "output.txt"
    runtime.mkdir()
    _link_runtime_packages(runtime)
    result_file.touch()
    with output_file.open("wb") as output:
        try:
            returncode: int | None = subprocess.run(
                [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, str(asset), str(runtime), str(result_file), modules],
                cwd=asset, env={"PATH": os.environ.get("PATH", ""), **_ISOLATED_ENVIRONMENT}, stdin=subprocess.DEVNULL,
                stdout=output, stderr=subprocess.STDOUT, timeout=timeout_seconds, check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            returncode = None
    return _ImportRun(_steps(result_file.read_text(encoding="utf-8")), returncode,
                      output_file.read_bytes().decode("utf-8", "replace"))


def _steps(text: str) -> list[dict[str, Any]]:
    """The result file's JSON lines; a line cut short by the process's end is left out."""
    steps = []
    for line in text.splitlines():
        try:
            steps.append(json.loads(line))
        except ValueError:
            continue
    return steps


def _judge(run: _ImportRun, task_directories: set[str], timeout_seconds: float) -> TaskImportError | None:
    """The error ``run`` means for synth, or None (it passed, or what failed is Lambda's to judge)."""
    module = next((step["importing"] for step in reversed(run.steps) if "importing" in step), None)
    if module is None:
        return None  # the check's own start failed before any task module: nothing to blame a task module for
    last = run.steps[-1]
    if run.returncode is None:
        return TaskImportError(f"task module {module!r} did not finish importing within {timeout_seconds:g} s at synth "
                               "(IMPORT_TIMEOUT_SECONDS); something at import waits (a network call, a lock), and "
                               f"Lambda's init would wait too: move it into the task function{_quoted(run.output)}")
    if "failed" in last:
        in_task_code = last["file"].split(os.sep)[0] in task_directories
        return TaskImportError(last["failed"], last["file"]) if in_task_code else None
    if "exited" in last:
        where = f" at {last['file']} line {last['line']}" if last["file"] else ""
        return TaskImportError(f"task module {module!r} exits at import ({last['exited']}){where}; Lambda's init "
                               "would stop there too: exit only under `if __name__ == '__main__':`"
                               f"{_quoted(run.output)}")
    if "ok" in last or "raised" in last:
        return None
    status = f"signal {-run.returncode}" if run.returncode < 0 else f"exit code {run.returncode}"
    return TaskImportError(f"task module {module!r} exits at import (the process ended with {status} inside the "
                           "import: os._exit or a crash); Lambda's init would stop there too"
                           f"{_quoted(run.output)}")


def _quoted(output: str) -> str:
    """``; its last output: '...'`` with the output's last lines on one line, or "" when it wrote nothing."""
    lines = [line.strip() for line in output.splitlines() if line.strip()][-OUTPUT_QUOTED_LINES:]
    text = " / ".join(lines)
    if len(text) > OUTPUT_QUOTED_CHARACTERS:
        text = "..." + text[-(OUTPUT_QUOTED_CHARACTERS - 3):]
    return f"; its last output: {text!r}" if text else ""


def _link_runtime_packages(directory: Path) -> None:
    """A link in ``directory`` to each of RUNTIME_IMPORT_NAMES this interpreter has (a package or a module file)."""
    for name in sorted(RUNTIME_IMPORT_NAMES):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        source = origin.parent if spec.submodule_search_locations is not None else origin
        (directory / source.name).symlink_to(source, target_is_directory=source.is_dir())
