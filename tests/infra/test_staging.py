"""What stage() puts in an asset: the runtime and the task code, by content, in a directory that outlives synth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

import worker_tier

from worker_tier_cdk.code import RUNTIME_PACKAGE, STAGING_DIRECTORY, TaskCode, TaskCodeError, stage
from worker_tier_cdk.stack import WorkerTierStack

REPO = Path(__file__).resolve().parents[2]
TASKS_INIT = "from worker_tier import task\n\n\n@task('/hello')\ndef hello(body):\n    return None\n"


@pytest.fixture
def tasks(tmp_path) -> Path:
    """A project's ./tasks package with one task."""
    directory = tmp_path / "project" / "tasks"
    directory.mkdir(parents=True)
    (directory / "__init__.py").write_text(TASKS_INIT)
    return directory


def _app(tmp_path: Path, **context: object) -> cdk.App:
    return cdk.App(outdir=str(tmp_path / "cdk.out"), context=context)


def _worker_asset_key(stack: WorkerTierStack) -> str:
    """The S3 key of the worker function's code asset: its content hash."""
    functions = Template.from_stack(stack).find_resources("AWS::Lambda::Function")
    (worker,) = [f for f in functions.values() if f["Properties"]["Handler"].endswith("worker.lambda_handler")]
    return worker["Properties"]["Code"]["S3Key"]


def test_staging_leaves_out_dot_entries_dependencies_build_output_and_bytecode(tmp_path, tasks):
    # GIVEN a task directory holding a git checkout, secrets, a venv, node_modules, cdk.out and bytecode
    for directory in (".git", ".venv/lib", "node_modules/left-pad", "cdk.out", "__pycache__", "sub"):
        (tasks / directory).mkdir(parents=True)
        (tasks / directory / "file.py").write_text("")
    (tasks / ".env").write_text("SECRET=1\n")
    (tasks / "old.pyc").write_bytes(b"\0")
    (tasks / "alias.py").symlink_to(tasks / "sub" / "file.py")  # a symlinked file inside is fine
    # WHEN it is staged
    root = stage(_app(tmp_path), TaskCode.from_directories(tasks))
    # THEN only its modules are in the asset, beside the runtime
    staged = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.parts[len(root.parts)] == "tasks"}
    assert staged == {"tasks/__init__.py", "tasks/alias.py", "tasks/sub/file.py"}
    assert (root / RUNTIME_PACKAGE / "__init__.py").is_file()


def test_the_runtime_is_staged_without_its_testing_helper(tmp_path, tasks):
    # WHEN the runtime is staged for a function
    root = stage(_app(tmp_path), TaskCode.from_directories(tasks))
    # THEN the worker is there, and worker_tier.testing (users' tests only, with its in-memory AWS) is not
    assert (root / RUNTIME_PACKAGE / "worker" / "batch.py").is_file()
    assert (Path(worker_tier.__file__).parent / "testing" / "world.py").is_file()
    assert not (root / RUNTIME_PACKAGE / "testing").exists()


def test_a_symlinked_directory_pointing_outside_the_task_directory_is_refused(tmp_path, tasks):
    # GIVEN tasks/shared -> a directory outside tasks
    (tmp_path / "elsewhere").mkdir()
    (tasks / "shared").symlink_to(tmp_path / "elsewhere")
    # WHEN staged  THEN a TaskCodeError names the link, its task directory and its target
    with pytest.raises(TaskCodeError) as error:
        stage(_app(tmp_path), TaskCode.from_directories(tasks))
    assert str(error.value) == (f"symlinked directory {str(tasks / 'shared')!r} in task code points outside its task "
                                f"directory {str(tasks)!r}, to {str(tmp_path / 'elsewhere')!r}; copy what it needs "
                                "into the directory instead")


def test_a_symlinked_file_pointing_outside_the_task_directory_is_refused(tmp_path, tasks):
    # GIVEN tasks/credentials -> a file outside tasks (its content would be deployed)
    (tmp_path / "secret.txt").write_text("key\n")
    (tasks / "credentials").symlink_to(tmp_path / "secret.txt")
    # WHEN staged  THEN a TaskCodeError names the link and its target
    with pytest.raises(TaskCodeError) as error:
        stage(_app(tmp_path), TaskCode.from_directories(tasks))
    assert str(error.value) == (f"symlinked file {str(tasks / 'credentials')!r} in task code points outside its task "
                                f"directory {str(tasks)!r}, to {str(tmp_path / 'secret.txt')!r}: it would deploy that "
                                "file's content; copy what it needs into the directory instead")


def test_a_symlinked_directory_that_loops_is_refused_not_followed_forever(tmp_path, tasks):
    # GIVEN tasks/sub/again -> tasks/sub (synth used to hang, filling /tmp)
    (tasks / "sub").mkdir()
    (tasks / "sub" / "again").symlink_to(tasks / "sub")
    # WHEN staged  THEN a TaskCodeError names the loop
    with pytest.raises(TaskCodeError) as error:
        stage(_app(tmp_path), TaskCode.from_directories(tasks))
    assert str(error.value) == (f"symlinked directory {str(tasks / 'sub' / 'again')!r} in task code points to "
                                f"{str(tasks / 'sub')!r}, which contains it: a loop; remove the link")


def test_a_symlinked_directory_inside_the_task_directory_is_staged(tmp_path, tasks):
    # GIVEN tasks/current -> tasks/v2, a sibling inside the task directory
    (tasks / "v2").mkdir()
    (tasks / "v2" / "jobs.py").write_text("")
    (tasks / "current").symlink_to(tasks / "v2")
    # WHEN staged  THEN both paths hold the module
    root = stage(_app(tmp_path), TaskCode.from_directories(tasks))
    assert (root / "tasks" / "current" / "jobs.py").is_file()
    assert (root / "tasks" / "v2" / "jobs.py").is_file()


def test_a_task_directory_holding_the_apps_outdir_is_refused(tmp_path, tasks):
    # GIVEN an app whose outdir is inside the task directory
    app = cdk.App(outdir=str(tasks / "out"))
    # WHEN staged  THEN a TaskCodeError names both: each synth would deploy the one before
    with pytest.raises(TaskCodeError) as error:
        stage(app, TaskCode.from_directories(tasks))
    assert str(error.value) == (f"task code directory {str(tasks)!r} contains the CDK app's output directory "
                                f"{str(tasks / 'out')!r}; move the output (cdk.json \"output\", App(outdir=...)) out of it")


def test_staging_is_keyed_on_content_and_restaged_when_removed(tmp_path, tasks):
    # GIVEN the task code staged once, in the app's outdir
    app = _app(tmp_path)
    first = stage(app, TaskCode.from_directories(tasks))
    assert first.parent == tmp_path / "cdk.out" / STAGING_DIRECTORY
    # WHEN the same content is staged again, after its directory was removed  THEN it is the same, staged again
    os.rename(first, tmp_path / "removed")
    assert stage(app, TaskCode.from_directories(tasks)) == first
    assert (first / "tasks" / "__init__.py").read_text() == TASKS_INIT
    # WHEN a file is edited  THEN the staging is a new one holding the edit
    (tasks / "__init__.py").write_text(TASKS_INIT + "# edited\n")
    edited = stage(app, TaskCode.from_directories(tasks))
    assert edited != first
    assert (edited / "tasks" / "__init__.py").read_text().endswith("# edited\n")


def test_an_edit_between_two_stacks_changes_the_asset_and_equal_content_keeps_it(tmp_path, tasks):
    # GIVEN two stacks of the same task code in one process
    key = _worker_asset_key(WorkerTierStack(_app(tmp_path), "A", task_code=TaskCode.from_directories(tasks)))
    same = _worker_asset_key(WorkerTierStack(_app(tmp_path), "B", task_code=TaskCode.from_directories(tasks)))
    # WHEN a task is edited before a third  THEN equal content is one asset, and the edit is a new one
    (tasks / "__init__.py").write_text(TASKS_INIT + "\n\n@task('/new')\ndef new(body):\n    return None\n")
    edited = _worker_asset_key(WorkerTierStack(_app(tmp_path), "C", task_code=TaskCode.from_directories(tasks)))
    assert same == key
    assert edited != key


@pytest.mark.slow
def test_without_asset_staging_the_assets_outlive_the_synth(tmp_path, tasks):
    # GIVEN `cdk synth --no-staging` (and SAM): the assembly points at the staged directories themselves
    script = (
        "import aws_cdk as cdk, sys\n"
        "from worker_tier_cdk import TaskCode\n"
        "from worker_tier_cdk.stack import WorkerTierStack\n"
        "app = cdk.App(outdir=sys.argv[1], context={'aws:cdk:disable-asset-staging': True})\n"
        "WorkerTierStack(app, 'NoStaging', task_code=TaskCode.from_directories(sys.argv[2]))\n"
        "app.synth()\n"
    )
    outdir = tmp_path / "cdk.out"
    # WHEN synth runs in its own process, which then exits
    subprocess.run([sys.executable, "-c", script, str(outdir), str(tasks)], check=True, cwd=tmp_path, timeout=300,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])})
    # THEN every code asset's path still holds the runtime
    files = json.loads((outdir / "NoStaging.assets.json").read_text())["files"]
    paths = [Path(a["source"]["path"]) for a in files.values() if a["source"]["packaging"] == "zip"]
    assert paths
    assert all((p / RUNTIME_PACKAGE / "__init__.py").is_file() for p in paths), paths
