"""The worker's task modules imported at synth, from its staged asset, so a missing package fails synth in one line.

``check_imports`` runs ``python -m worker_tier.worker.task_imports`` in a subprocess of this interpreter,
isolated (``-I -S``: no site-packages, no PYTHONPATH, no current directory) on a path of the staged asset
(the runtime, the task directories and the requirements installed for Lambda), then what Lambda itself
provides: boto3, botocore and Powertools with their dependencies (``RUNTIME_IMPORT_NAMES``), linked from
this interpreter. So ``import requests`` fails here as in Lambda when requirements.txt does not list it,
however the developer's venv is filled.

Only an ImportError raised by a task directory's own line fails synth (``TaskImportError``). The
requirements are built for Lambda's platform (Linux arm64, its CPython) and a compiled one may not import
here; a failure inside them, and any other exception at import (a variable only Lambda sets), is Lambda's
to judge. The subprocess gets placeholder credentials, an unreachable endpoint and no config files, so an
AWS call at import time fails fast and calls nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from worker_tier.core.errors import TaskImportError
from worker_tier.worker.task_imports import IMPORT_FAILED_EXIT_CODE
from worker_tier_cdk.code import RUNTIME_IMPORT_NAMES, TaskCode

IMPORT_TIMEOUT_SECONDS = 120
# Port 9 (discard) on the loopback refuses at once: a call at import time fails instead of reaching AWS.
UNREACHABLE_ENDPOINT_URL = "http://127.0.0.1:9"
_ISOLATED_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "synth-import-check", "AWS_SECRET_ACCESS_KEY": "synth-import-check",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": UNREACHABLE_ENDPOINT_URL,
    "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_MAX_ATTEMPTS": "1", "POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "CRITICAL",
}
# The staged asset first, then the runtime's packages; then the subprocess's own `python -m`.
_BOOTSTRAP = ("import runpy, sys; sys.path[:0] = sys.argv[1:3]; del sys.argv[1:3]; "
              "runpy.run_module('worker_tier.worker.task_imports', run_name='__main__', alter_sys=True)")
# (asset directory, modules) already imported: equal content is one staged directory, so one check per synth.
_checked: set[tuple[Path, str]] = set()


def check_imports(asset: Path, task_code: TaskCode, task_modules: str) -> None:
    """TaskImportError when a ``task_modules`` module, imported from ``asset``, fails on a task directory's line."""
    modules = ",".join(m.strip() for m in task_modules.split(",") if m.strip())
    if not modules or not task_code.directories or (asset, modules) in _checked:
        return
    with tempfile.TemporaryDirectory(prefix="worker-tier-runtime-") as runtime:
        _link_runtime_packages(Path(runtime))
        result = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, str(asset), runtime, modules],
            cwd=asset, env={"PATH": os.environ.get("PATH", ""), **_ISOLATED_ENVIRONMENT},
            capture_output=True, text=True, timeout=IMPORT_TIMEOUT_SECONDS, check=False,
        )
    if result.returncode == IMPORT_FAILED_EXIT_CODE:
        failure = json.loads(result.stdout.strip().splitlines()[-1])
        if failure["file"].split(os.sep)[0] in {d.name for d in task_code.directories}:
            raise TaskImportError(failure["message"], failure["file"])
    _checked.add((asset, modules))


def _link_runtime_packages(directory: Path) -> None:
    """A link in ``directory`` to each of RUNTIME_IMPORT_NAMES this interpreter has (a package or a module file)."""
    for name in sorted(RUNTIME_IMPORT_NAMES):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        source = origin.parent if spec.submodule_search_locations is not None else origin
        (directory / source.name).symlink_to(source, target_is_directory=source.is_dir())
