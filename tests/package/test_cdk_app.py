"""cdk.json's app command: `npx aws-cdk@2 synth` / `deploy` from a plain shell, with no venv activated."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
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


OWN_TASKS = "from worker_tier import task\n\n\n@task('/invoice')\ndef invoice(t):\n    return None\n"
OWN_CRON = "version: 1\ncron:\n - name: nightly\n   url: /invoice\n   schedule: '0 3 * * *'\n"


def _readme_own_app() -> str:
    """The README's own-app snippet (the first python block after 'Into your own CDK app')."""
    readme = (REPO / "README.md").read_text()
    return readme.split("**Into your own CDK app:**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def _own_project(directory: Path, worker_tier: dict, *, tasks: str = OWN_TASKS, cron: str = OWN_CRON) -> Path:
    """A project outside this repository: the README's own app, its cdk.json, ./tasks, ./billing and cron.yaml."""
    for package, module in (("tasks", "__init__.py"), ("billing", "tasks.py")):
        (directory / package).mkdir(parents=True)
        (directory / package / "__init__.py").touch()
        (directory / package / module).write_text(tasks if package == "tasks" else OWN_TASKS)
    (directory / "app.py").write_text(_readme_own_app())
    (directory / "cron.yaml").write_text(cron)
    (directory / "cdk.json").write_text(json.dumps({"app": "python app.py", "context": {"worker_tier": worker_tier}}))
    return directory


def _python_app(project: Path, outdir: Path, **extra: str) -> subprocess.CompletedProcess:
    """``python app.py`` in the project on this interpreter, with this checkout's packages."""
    environment = {k: v for k, v in os.environ.items() if k not in ("CDK_CONTEXT_JSON", "CDK_OUTDIR")}
    return subprocess.run([sys.executable, "app.py"], check=False, cwd=project, capture_output=True, text=True,
                          timeout=SYNTH_TIMEOUT_SECONDS,
                          env={**environment, "PYTHONPATH": str(REPO / "src"), "CDK_OUTDIR": str(outdir), **extra})


def _worker_variable(outdir: Path, name: str) -> str:
    """The worker function's environment variable ``name`` in the Jobs stack's template."""
    resources = json.loads((outdir / "Jobs.template.json").read_text())["Resources"].values()
    [worker] = [r for r in resources if r["Type"] == "AWS::Lambda::Function"
                and r["Properties"]["Handler"] == "worker_tier.handlers.worker.lambda_handler"]
    return worker["Properties"]["Environment"]["Variables"][name]


def test_the_readme_own_app_synthesizes_cdk_jsons_settings_with_python_app_py_as_under_the_cdk_cli(tmp_path):
    # GIVEN an own project (outside this repository) whose cdk.json sets max_retries, and the README's app.py
    project = _own_project(tmp_path / "own", {"max_retries": 7})
    context = json.loads((project / "cdk.json").read_text())["context"]
    # WHEN it synthesizes as `python app.py`, and as the CDK CLI runs it (cdk.json's context in CDK_CONTEXT_JSON)
    plain = _python_app(project, tmp_path / "plain")
    cli = _python_app(project, tmp_path / "cli", CDK_CONTEXT_JSON=json.dumps(context))
    # THEN both deploy the setting
    assert plain.returncode == 0 and cli.returncode == 0, plain.stderr + cli.stderr
    assert _worker_variable(tmp_path / "plain", "WORKER_TIER_MAX_RETRIES") == "7"
    assert _worker_variable(tmp_path / "cli", "WORKER_TIER_MAX_RETRIES") == "7"


@pytest.mark.parametrize("case", ["settings", "cron", "task import"])
def test_a_configuration_error_under_python_app_py_is_one_line_on_stderr_and_exit_code_1(tmp_path, case):
    # GIVEN the README's own app with one mistake: a setting out of range, EventBridge's syntax in cron.yaml, or a
    # task module importing a package that is not installed
    worker_tier, project = {"max_retries": 0} if case == "settings" else {}, tmp_path / "own"
    _own_project(project, worker_tier, cron=OWN_CRON.replace("'0 3 * * *'", "'cron(0 3 * * ? *)'") if case == "cron" else OWN_CRON,
                 tasks="import requestz\n" if case == "task import" else OWN_TASKS)
    # WHEN `python app.py` runs (as the CDK CLI runs it)
    result = _python_app(project, tmp_path / "cdk.out")
    # THEN it exits 1, and stderr is the one line that names the mistake, not a traceback ending in it
    # (jsii's notice about this machine's Node version, lines of '!!', is no part of the app's output)
    stderr = [line for line in result.stderr.splitlines() if not line.startswith("b'!!")]
    expected = {
        "settings": "SettingsError: max_retries must be 1..100 (EB MaxRetries), got 0",
        "cron": "CronConfigError: cron.yaml line 3, entry 'nightly': schedule 'cron(0 3 * * ? *)' cron(...) is "
                "EventBridge's syntax, not cron.yaml's (5 fields: minute hour day-of-month month day-of-week); write "
                "'0 3 * * *'",
        "task import": "TaskImportError: task module 'tasks' cannot be imported: No module named 'requestz' "
                       "(tasks/__init__.py line 1); add it to the requirements file the task code installs "
                                "(TaskCode.from_directories(..., requirements='requirements.txt')) or fix the import",
    }
    assert (result.returncode, stderr) == (1, [expected[case]])
