"""Synth imports the worker's task modules from its staged asset, as Lambda will, and says a failing import in one line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import aws_cdk as cdk
import pytest

from worker_tier.core.errors import TaskImportError
from worker_tier.core.settings import Settings
from worker_tier_cdk.code import TaskCode
from worker_tier_cdk.stack import WorkerTierStack
from worker_tier_cdk.task_imports import UNREACHABLE_ENDPOINT_URL

TASK = "from worker_tier import task\n\n\n@task('/bill')\ndef bill(t):\n    return None\n"


def _synth(tmp_path: Path, billing: str, **settings: object) -> WorkerTierStack:
    """A stack whose task code is ./tasks with ``billing`` as tasks/billing.py, the module task_modules names."""
    tasks = tmp_path / "project" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "__init__.py").write_text("")
    (tasks / "billing.py").write_text(billing)
    app = cdk.App(outdir=str(tmp_path / "cdk.out"))
    return WorkerTierStack(app, "Jobs", settings=Settings(task_modules="tasks.billing", **settings),  # type: ignore[arg-type]
                           task_code=TaskCode.from_directories(tasks))


def test_a_task_module_importing_a_missing_package_fails_synth_naming_the_module_the_name_and_the_line(tmp_path):
    # GIVEN tasks/billing.py importing a package that exists nowhere, on its line 3
    # WHEN the stack is synthesized  THEN synth fails in one line: the module, the missing name, the line, what to do
    with pytest.raises(TaskImportError) as error:
        _synth(tmp_path, "import json\n\nimport requestz\n" + TASK)
    assert str(error.value) == ("task module 'tasks.billing' cannot be imported: No module named 'requestz' "
                                "(tasks/billing.py line 3); add it to the requirements file the task code installs "
                                "(TaskCode.from_directories(..., requirements='requirements.txt')) or fix the import")


def test_a_package_only_the_synth_environment_has_fails_synth_as_it_would_fail_in_lambda(tmp_path):
    # GIVEN a task importing requests, which this venv has but neither the requirements nor Lambda's runtime bring
    assert importlib.util.find_spec("requests") is not None
    # WHEN synthesized  THEN it fails as the deployed worker would
    with pytest.raises(TaskImportError, match=r"^task module 'tasks.billing' cannot be imported: No module named "
                                              r"'requests' \(tasks/billing.py line 1\)"):
        _synth(tmp_path, "import requests\n" + TASK)


def test_a_name_missing_from_a_module_says_to_fix_the_import(tmp_path):
    # GIVEN a task importing a name its module does not define
    # WHEN synthesized  THEN the error says so, at its line
    with pytest.raises(TaskImportError, match=r"^task module 'tasks.billing' cannot be imported: cannot import name "
                                              r"'tusk' from 'worker_tier' .*\(tasks/billing.py line 1\); fix the import$"):
        _synth(tmp_path, "from worker_tier import tusk\n" + TASK)


def test_the_import_at_synth_reaches_no_aws_account_and_other_import_errors_are_lambdas_to_judge(tmp_path):
    # GIVEN a task module that records the AWS settings it sees, then reads a variable only Lambda sets
    seen = tmp_path / "seen.json"
    module = (f"import json, os\nopen({str(seen)!r}, 'w').write(json.dumps({{k: v for k, v in os.environ.items() "
              "if k.startswith('AWS_')}))\nQUEUE = os.environ['WORKER_TIER_QUEUE_URL']\n" + TASK)
    # WHEN synthesized
    _synth(tmp_path, module)
    # THEN synth passes (a KeyError at import is not an import that fails), and the import saw no real credentials
    aws = json.loads(seen.read_text())
    assert aws["AWS_ENDPOINT_URL"] == UNREACHABLE_ENDPOINT_URL
    assert aws["AWS_ACCESS_KEY_ID"] == "synth-import-check" and "AWS_SESSION_TOKEN" not in aws
    assert aws["AWS_CONFIG_FILE"] == aws["AWS_SHARED_CREDENTIALS_FILE"] == "/dev/null"


def test_a_task_module_that_writes_to_stdout_without_a_newline_then_fails_import_fails_synth_in_one_line(tmp_path):
    # GIVEN a task module that prints a progress mark (no newline) at import, then imports a missing package
    # WHEN synthesized  THEN synth still fails with the one-line TaskImportError (not a JSONDecodeError traceback)
    with pytest.raises(TaskImportError, match=r"No module named 'requestz'"):
        _synth(tmp_path, "import sys\nsys.stdout.write('loading billing... ')\nimport requestz\n" + TASK)


def test_a_task_module_that_exits_at_import_fails_synth_in_one_line_naming_the_module(tmp_path):
    # GIVEN a task module that calls sys.exit(3) at import (a script-style guard) -- 3 is the check's own failure code
    # WHEN synthesized  THEN synth fails with one line naming the module (not an IndexError traceback)
    with pytest.raises(TaskImportError, match=r"tasks.billing"):
        _synth(tmp_path, "import sys\nsys.exit(3)\n" + TASK)


def test_a_task_module_that_hangs_at_import_fails_synth_in_one_line_naming_the_module(tmp_path, monkeypatch):
    # GIVEN a task module whose import waits (a network call to a host that does not answer), and a short timeout
    from worker_tier_cdk import task_imports

    monkeypatch.setattr(task_imports, "IMPORT_TIMEOUT_SECONDS", 3)
    # WHEN synthesized  THEN synth fails with a WorkerTierError line naming the module and the timeout,
    # not subprocess.TimeoutExpired's traceback
    with pytest.raises(TaskImportError, match=r"tasks.billing") as error:
        _synth(tmp_path, "import time\nprint('connecting to db', flush=True)\ntime.sleep(60)\n" + TASK)
    assert str(error.value) == ("task module 'tasks.billing' did not finish importing within 3 s at synth "
                                "(IMPORT_TIMEOUT_SECONDS); something at import waits (a network call, a lock), and "
                                "Lambda's init would wait too: move it into the task function; its last output: "
                                "'connecting to db'")


@pytest.mark.parametrize("exit_line, shown", [("sys.exit(1)", "sys.exit(1)"), ("sys.exit(0)", "sys.exit(0)"),
                                              ("sys.exit('no config')", "sys.exit('no config')")])
def test_a_task_module_that_exits_at_import_with_any_code_fails_synth_naming_the_line_and_its_output(tmp_path, exit_line,
                                                                                                    shown):
    # GIVEN a task module that says why on stderr, then exits at import (Lambda's init would stop there)
    module = f"import sys\nprint('missing BILLING_URL', file=sys.stderr)\n{exit_line}\n" + TASK
    # WHEN synthesized  THEN synth fails in one line: the module, the exit, its line, the last output
    with pytest.raises(TaskImportError) as error:
        _synth(tmp_path, module)
    assert str(error.value) == (f"task module 'tasks.billing' exits at import ({shown}) at tasks/billing.py line 3; "
                                "Lambda's init would stop there too: exit only under `if __name__ == '__main__':`; its "
                                "last output: 'missing BILLING_URL'")


def test_a_task_module_that_ends_the_process_at_import_fails_synth_naming_the_module(tmp_path):
    # GIVEN a task module that ends its process with os._exit at import: no Python code runs after it
    # WHEN synthesized  THEN synth fails in one line naming the module and the exit code
    with pytest.raises(TaskImportError) as error:
        _synth(tmp_path, "import os\nprint('bye', flush=True)\nos._exit(0)\n" + TASK)
    assert str(error.value) == ("task module 'tasks.billing' exits at import (the process ended with exit code 0 inside "
                                "the import: os._exit or a crash); Lambda's init would stop there too; its last output: "
                                "'bye'")



def test_a_task_module_not_on_the_path_says_how_to_put_it_there():
    # GIVEN task_modules naming a module no directory on sys.path holds (plain `pytest` from a project without
    # pythonpath = .)  WHEN the worker imports it
    from worker_tier.worker.task_imports import import_task_modules

    with pytest.raises(TaskImportError) as error:
        import_task_modules(["shop_tasks_not_on_the_path"])
    # THEN the line says where the module must be found from, not "fix the import" at importlib's own line
    assert str(error.value) == (
        "task module 'shop_tasks_not_on_the_path' cannot be imported: No module named 'shop_tasks_not_on_the_path'; "
        "run from the project directory that holds it (python -m pytest adds it to sys.path; plain pytest needs "
        "pythonpath = . in its configuration), or correct the task_modules setting")


def test_a_rate_limited_task_on_a_fifo_stack_fails_synth_saying_why_and_what_to_do(tmp_path):
    # GIVEN a task with a rate limit, on a stack whose queue is FIFO
    limited = "from worker_tier import task\n\n\n@task('/bill', rate_limit='5/s')\ndef bill(t):\n    return None\n"
    # WHEN synthesized  THEN synth fails in one line naming the task, the rule and the fix
    with pytest.raises(TaskImportError, match=r"^task '/bill' has a rate_limit or concurrency, and this stack's queue is "
                                              r"FIFO \(fifo: true\); .*: use a standard queue for these tasks, or drop "
                                              r"rate_limit and concurrency$"):
        _synth(tmp_path, limited, fifo=True)
