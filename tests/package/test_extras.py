"""A runtime-only install (no extra) says which extra to install, instead of a bare ModuleNotFoundError."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _without(modules: tuple[str, ...], code: str, cwd: Path) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter where importing any of ``modules`` fails, as when they are not installed."""
    hide = f"import sys; sys.modules.update(dict.fromkeys({modules!r})); "
    return subprocess.run([sys.executable, "-c", hide + code], check=False, cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])})


def test_the_constructs_without_aws_cdk_say_to_install_the_cdk_extra(tmp_path):
    # GIVEN the runtime without the cdk extra  WHEN a team imports the stack
    result = _without(("aws_cdk",), "from worker_tier_cdk import WorkerTierStack", tmp_path)
    # THEN it fails naming the missing module and the install command
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == ("ModuleNotFoundError: worker_tier_cdk.WorkerTierStack needs aws_cdk, which "
                                              "is not installed; install the CDK extra: pip install 'worker-tier[cdk]'")


def test_task_code_imports_without_aws_cdk(tmp_path):
    # GIVEN the runtime without the cdk extra  WHEN TaskCode is imported  THEN it imports (it needs no aws_cdk)
    result = _without(("aws_cdk", "constructs"), "from worker_tier_cdk import TaskCode", tmp_path)
    assert result.returncode == 0, result.stderr


def test_the_local_command_without_the_local_extra_says_to_install_it(tmp_path):
    # GIVEN a runtime-only install: no moto, no PyYAML  WHEN worker-tier-local runs
    result = _without(("moto", "yaml"), "from worker_tier_local.__main__ import main; main(['--duration', '0'])", tmp_path)
    # THEN it stops naming what is missing and the install command
    assert result.returncode == 1
    assert result.stderr == ("worker-tier-local: moto, yaml not installed; the local environment needs the local extra: "
                             "pip install 'worker-tier[local]'\n")


def test_the_tracing_middleware_without_the_tracing_extra_says_to_install_it(tmp_path):
    # GIVEN the runtime without the tracing extra  WHEN a worker builds the tracing middleware
    result = _without(("opentelemetry",), "from worker_tier.pipeline.tracing import TracingMiddleware; TracingMiddleware()", tmp_path)
    # THEN it fails naming the missing module and the install command
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == ("ModuleNotFoundError: worker_tier.pipeline.tracing.TracingMiddleware needs opentelemetry, "
                                              "which is not installed; install the tracing extra: pip install 'worker-tier[tracing]'")


def test_the_dashboard_without_the_ui_extra_says_to_install_it(tmp_path):
    # GIVEN the command line without the ui extra (no starlette)  WHEN `worker-tier ui` runs
    result = _without(("starlette",), "from worker_tier_cli import main; raise SystemExit(main(['--queue-url', 'q', 'ui']))",
                      tmp_path)
    # THEN it stops in one line naming what is missing and the install command
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == ("Error: starlette not installed; the dashboard needs the ui extra: "
                                              "pip install 'worker-tier[ui]'")
