"""The wheel as a team uses it: built, installed into a fresh venv, and run by an app outside this repo.

The fresh venv gets the wheel itself (``pip install --no-deps --no-index``). Its third-party
dependencies (aws-cdk-lib, boto3, moto, ...) are not downloaded again: one ``.pth`` line puts
the test venv's site-packages on its path. A ``.pth`` line only appends a directory to
``sys.path``; it does not make it a site directory, so the ``.pth`` files inside it, among
them this checkout's editable install, are not processed. ``worker_tier`` and
``worker_tier_cdk`` can then come only from the wheel, and each test asserts that they do.
The source is copied before the build, so the build writes nothing into the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from worker_tier_cdk.code import RUNTIME_LEFT_OUT

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_SECONDS = 180
RUN_TIMEOUT_SECONDS = 120
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "node_modules", "cdk.out", "dist", "build", "*.egg-info",
                                    "__pycache__", "*.pyc", ".pytest_cache", ".hypothesis", "results")
# The public contract: teams on SAM or Terraform write these strings into their own templates.
DEPLOYED_HANDLERS = {
    "worker_tier.handlers.worker.lambda_handler",
    "worker_tier.handlers.dispatcher.lambda_handler",
    "worker_tier.handlers.periodic.lambda_handler",
    "worker_tier.handlers.recovery.lambda_handler",
}
COMPATIBLE_HANDLERS = {"worker_tier.handlers.scheduler.lambda_handler", "worker_tier.handlers.cron.lambda_handler"}

TASKS = '''
    """A team's own tasks, in its own repo."""
    import os
    from pathlib import Path

    from worker_tier import Task, task


    @task("/greet")
    def greet(t: Task) -> None:
        Path(os.environ["GREETINGS_FILE"]).write_text(f"hello {t.json()['name']}")
'''
CRON = '''
    version: 1
    cron:
     - name: "morning-greeting"
       url: "/greet"
       schedule: "0 8 * * *"
'''
APP = '''
    """A team's own CDK app: the stack with a container worker, its task package and its cron.yaml. argv[1]: task_modules."""
    import sys

    import aws_cdk as cdk

    from worker_tier_cdk import Settings, TaskCode, WorkerTierStack

    app = cdk.App()
    WorkerTierStack(app, "Jobs", settings=Settings(task_modules=sys.argv[1], container_worker=True),
                    task_code=TaskCode.from_directories("myjobs"), cron_file="cron.yaml")
    app.synth()
'''
RUN_WORKER = '''
    """The worker function's handler as Lambda calls it, on one message for /greet, against moto. argv[1]: result file."""
    import json
    import os
    import sys

    import boto3
    from moto import mock_aws

    import worker_tier
    from worker_tier import Client
    from worker_tier.core.envelope import lambda_record
    from worker_tier.core.settings import Settings
    from worker_tier_local.context import LocalContext

    REGION = "us-east-1"
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        dead_letter_queue = sqs.create_queue(QueueName="jobs-dlq")["QueueUrl"]
        queue = sqs.create_queue(QueueName="jobs")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        os.environ.update(Settings(task_modules="myjobs.tasks").to_environment())
        os.environ.update(WORKER_TIER_QUEUE_URL=queue, WORKER_TIER_DLQ_URL=dead_letter_queue)
        Client(queue, sqs=sqs).send("/greet", {"name": "Ada"})
        received = sqs.receive_message(QueueUrl=queue, MessageAttributeNames=["All"],
                                       MessageSystemAttributeNames=["All"])["Messages"]
        from worker_tier.handlers.worker import lambda_handler

        response = lambda_handler({"Records": [lambda_record(m, arn, REGION) for m in received]},
                                  LocalContext("jobs-worker", 60, 256, REGION, "123456789012"))
    with open(sys.argv[1], "w") as result:
        json.dump({"response": response, "received": len(received), "runtime": worker_tier.__file__}, result)
'''


def _write(directory: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(textwrap.dedent(text).lstrip())


def _run(command: list[str], cwd: Path, timeout: float = RUN_TIMEOUT_SECONDS, **extra: str) -> subprocess.CompletedProcess:
    """``command`` as a plain shell would run it: no PYTHONPATH, no activated venv."""
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return subprocess.run(command, check=False, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**environment, **extra})


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source") / "worker-tier"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    out = tmp_path_factory.mktemp("dist")
    build = _run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], source, BUILD_TIMEOUT_SECONDS)
    assert build.returncode == 0, build.stdout + build.stderr
    [built] = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> Path:
    """A fresh venv holding the wheel, with the test venv's third-party packages on its path."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=RUN_TIMEOUT_SECONDS)
    python = root / "bin" / "python"
    install = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", "--disable-pip-version-check", str(wheel)], root)
    assert install.returncode == 0, install.stderr
    own = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).stdout.strip()
    shared = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(own) / "shared-third-party.pth").write_text("".join(f"{path}\n" for path in shared))
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A team's project outside this repo: its tasks, cron.yaml, CDK app and a script that runs the worker."""
    root = tmp_path_factory.mktemp("team-project")
    _write(root, {"myjobs/__init__.py": "", "myjobs/tasks.py": TASKS, "cron.yaml": CRON, "app.py": APP,
                  "run_worker.py": RUN_WORKER})
    return root


@pytest.fixture(scope="module")
def synthesized(venv, project) -> Path:
    out = project / "cdk.out"
    result = _run([str(venv / "bin" / "python"), "app.py", "myjobs.tasks"], project, CDK_OUTDIR=str(out))
    assert result.returncode == 0, result.stderr
    return out


def _function_assets(out: Path) -> dict[str, Path]:
    """Each Lambda function's handler, and the directory its code asset was staged from."""
    template = json.loads((out / "Jobs.template.json").read_text())
    files = json.loads((out / "Jobs.assets.json").read_text())["files"]
    functions = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    return {f["Handler"]: out / files[f["Code"]["S3Key"].removesuffix(".zip")]["source"]["path"] for f in functions}


def test_the_synthesized_functions_are_the_documented_entry_points(synthesized):
    # GIVEN the team's app synthesized by the fresh venv  THEN its functions run the documented handlers
    assert set(_function_assets(synthesized)) == DEPLOYED_HANDLERS


def test_the_worker_asset_is_the_installed_runtime_plus_the_team_tasks(synthesized, wheel):
    # GIVEN the worker function's asset directory
    asset = _function_assets(synthesized)["worker_tier.handlers.worker.lambda_handler"]
    # THEN it holds the runtime and the team's package, and nothing else (no tests, constructs, local environment)
    assert sorted(p.name for p in asset.iterdir()) == ["myjobs", "worker_tier"]
    assert sorted(p.relative_to(asset).as_posix() for p in (asset / "myjobs").rglob("*")) == ["myjobs/__init__.py",
                                                                                             "myjobs/tasks.py"]
    # AND its runtime is the wheel's, file for file, but the testing helper (users' tests only: RUNTIME_LEFT_OUT)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    packaged = {n for n in names if n.startswith("worker_tier/") and not n.startswith(RUNTIME_LEFT_OUT)}
    assert any(n.startswith("worker_tier/testing/") for n in names)
    staged = {p.relative_to(asset).as_posix() for p in (asset / "worker_tier").rglob("*") if p.is_file()}
    assert staged == packaged


def test_the_container_image_is_built_from_the_runtime_the_team_tasks_and_its_dockerfile(synthesized):
    # GIVEN the container worker's image asset
    [image] = json.loads((synthesized / "Jobs.assets.json").read_text())["dockerImages"].values()
    context = synthesized / image["source"]["directory"]
    # THEN its build context is the runtime, the team's package, the Dockerfile, its pins and the team's requirements
    # (none here: the placeholder that lists none), and nothing else
    assert sorted(p.name for p in context.iterdir()) == ["app-requirements.txt", "myjobs", "requirements.txt",
                                                         "worker.Dockerfile", "worker_tier"]


def test_the_other_functions_run_only_the_runtime(synthesized):
    for handler, asset in _function_assets(synthesized).items():
        if handler != "worker_tier.handlers.worker.lambda_handler":
            assert [p.name for p in asset.iterdir()] == ["worker_tier"], handler


def test_a_task_module_the_task_code_lacks_fails_synth_naming_it(venv, project, tmp_path):
    # GIVEN task_modules with a typo  WHEN the team's app is synthesized
    result = _run([str(venv / "bin" / "python"), "app.py", "myjobs.taks"], project, CDK_OUTDIR=str(tmp_path))
    # THEN synth fails with a TaskCodeError naming the module and the files it looked for
    assert result.returncode != 0
    assert (f"TaskCodeError: task_modules names 'myjobs.taks', but its task code directory '{project / 'myjobs'}' "
            "has no myjobs/taks.py or myjobs/taks/__init__.py; name a module that the directory contains") in result.stderr


def test_the_worker_handler_runs_the_team_task_from_the_wheel(venv, project, tmp_path):
    # GIVEN the wheel's runtime in the fresh venv and a message for /greet in a moto queue
    greetings, result = tmp_path / "greetings.txt", tmp_path / "result.json"
    # WHEN worker_tier.handlers.worker.lambda_handler gets it as Lambda's SQS event
    run = _run([str(venv / "bin" / "python"), "run_worker.py", str(result)], project, GREETINGS_FILE=str(greetings),
               AWS_DEFAULT_REGION="us-east-1", AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    assert run.returncode == 0, run.stderr
    # THEN the task ran, the batch reports no failures, and the runtime was the wheel's
    outcome = json.loads(result.read_text())
    assert greetings.read_text() == "hello Ada"
    assert outcome["received"] == 1
    assert outcome["response"] == {"batchItemFailures": []}
    assert Path(outcome["runtime"]).is_relative_to(venv)


def test_every_entry_point_and_the_console_script_import_from_the_wheel(venv, project):
    # GIVEN the fresh venv  WHEN each handler module is imported and worker-tier-local asked for its usage
    probe = ("import importlib, json, worker_tier, worker_tier_cdk; "
             f"[getattr(importlib.import_module(h.rsplit('.', 1)[0]), 'lambda_handler') for h in "
             f"{sorted(DEPLOYED_HANDLERS | COMPATIBLE_HANDLERS)!r}]; "
             "print(json.dumps([worker_tier.__file__, worker_tier_cdk.__file__]))")
    imported = _run([str(venv / "bin" / "python"), "-c", probe], project, AWS_DEFAULT_REGION="us-east-1")
    usage = _run([str(venv / "bin" / "worker-tier-local"), "--help"], project)
    # THEN they import from the wheel, and the console script runs
    assert imported.returncode == 0, imported.stderr
    assert all(Path(f).is_relative_to(venv) for f in json.loads(imported.stdout.splitlines()[-1]))
    assert usage.returncode == 0, usage.stderr
    assert usage.stdout.startswith("usage: ") and "--duration" in usage.stdout


def test_the_wheel_carries_the_apache_license_text(wheel):
    # GIVEN the built wheel  WHEN its metadata is read
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [license_path] = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        text = archive.read(license_path).decode()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    # THEN it holds the repo's LICENSE, the Apache-2.0 text, and names it
    assert text == (REPO / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "License-Expression: Apache-2.0" in metadata
    assert "License-File: LICENSE" in metadata


def test_the_wheel_carries_the_dashboards_templates_and_static_files(wheel):
    # GIVEN the dashboard's templates, stylesheet and script in the source
    ui = REPO / "src" / "worker_tier_cli" / "ui"
    shipped = {str(path.relative_to(REPO / "src")) for folder in ("templates", "static") for path in (ui / folder).iterdir()}
    # WHEN the wheel's files are listed THEN every one of them is there (package-data), or `worker-tier ui` could not render
    with zipfile.ZipFile(wheel) as archive:
        assert shipped and shipped <= set(archive.namelist())
