"""cdk.json's app command: `npx aws-cdk@2 synth` / `deploy` from a plain shell, with no venv activated."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
APP_COMMAND = json.loads((REPO / "cdk.json").read_text())["app"]
SYNTH_TIMEOUT_SECONDS = 180


def _plain_shell(command: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess:
    """``command`` as the CDK CLI runs it (``sh -c``), with no venv on PATH, none activated, no PYTHONPATH."""
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d).parent / "pyvenv.cfg").exists()]
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return subprocess.run(["sh", "-c", command], check=False, cwd=cwd, capture_output=True, text=True, timeout=SYNTH_TIMEOUT_SECONDS,
                          env={**environment, "PATH": os.pathsep.join(path), **extra})


def test_the_app_command_synthesizes_on_the_project_venv_without_it_on_path(tmp_path):
    # GIVEN `make venv` has made .venv (CI's `make test` does)
    assert (REPO / ".venv" / "bin" / "python").exists(), "run `make venv`: cdk.json's app runs .venv/bin/python"
    # WHEN cdk.json's app command runs from a plain shell, as `npx aws-cdk@2 synth` runs it
    result = _plain_shell(APP_COMMAND, REPO, CDK_OUTDIR=str(tmp_path))
    # THEN it synthesizes this repo's example app
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "WorkerTier.template.json").read_text())["Resources"]


def test_the_app_command_without_a_venv_says_to_make_one(tmp_path):
    # GIVEN a project with cdk.json's app script but no .venv
    (tmp_path / "bin").mkdir()
    shutil.copy2(REPO / "bin" / "cdk-app", tmp_path / "bin" / "cdk-app")
    # WHEN the app command runs  THEN it fails, naming the missing python and the command that makes it
    result = _plain_shell(APP_COMMAND, tmp_path)
    assert result.returncode == 1
    assert result.stderr == (f"bin/cdk-app: {tmp_path}/.venv/bin/python not found; run 'make venv' in {tmp_path} first "
                             "(the CDK app runs on the project's venv)\n")
