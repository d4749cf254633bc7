"""worker-tier-local's inputs: ./cdk.json and ./cron.yaml are optional, a file named on the command line is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker_tier.core.settings import Settings
from worker_tier_local import __main__ as command


def test_without_cdk_json_the_settings_are_the_defaults(tmp_path, monkeypatch):
    # GIVEN a project directory with no cdk.json  WHEN the command reads its settings  THEN they are the defaults
    monkeypatch.chdir(tmp_path)
    assert command._settings(None) == Settings()


def test_a_settings_file_that_does_not_exist_is_named_with_what_to_do(tmp_path, monkeypatch):
    # GIVEN --settings naming a file that is not there
    monkeypatch.chdir(tmp_path)
    # WHEN the command starts  THEN it stops naming the file and what to pass instead
    with pytest.raises(SystemExit) as stop:
        command.main(["--settings", "cdk.jsn", "--duration", "0"])
    assert str(stop.value) == (f"worker-tier-local: --settings 'cdk.jsn' (resolved to {str(tmp_path / 'cdk.jsn')!r}) is "
                               "not a file; pass your CDK app's cdk.json, or leave --settings out to use ./cdk.json "
                               "(the default settings when there is none)")


def test_a_cron_file_named_on_the_command_line_must_exist(tmp_path, monkeypatch):
    # GIVEN --cron naming a file that is not there, and no ./cron.yaml  WHEN read  THEN it is an error, ./cron.yaml is not
    from worker_tier.core.errors import CronConfigError

    monkeypatch.chdir(tmp_path)
    assert command._cron_entries(None, fifo=False) == []
    with pytest.raises(CronConfigError, match=r"cron file 'cron.yml' \(resolved to .*\) does not exist"):
        command._cron_entries(Path("cron.yml"), fifo=False)


@pytest.mark.parametrize("files, line", [
    ({"cron.yaml": "version: 1\ncron:\n - name: a\n   url: /a\n   schedule: 'cron(30 3 * * ? *)'\n"},
     "worker-tier-local: CronConfigError: cron.yaml line 3, entry 'a': schedule 'cron(30 3 * * ? *)' cron(...) is "
     "EventBridge's syntax"),
    ({"cdk.json": json.dumps({"context": {"worker_tier": {"max_retrys": 3}}})},
     "worker-tier-local: SettingsError: unknown setting 'max_retrys' (did you mean 'max_retries'?)"),
    ({"cdk.json": '{"context": {"worker_tier": {},}}'}, "worker-tier-local: 'cdk.json' could not be read as JSON: "),
])
def test_a_configuration_error_stops_the_command_in_one_line_as_synth_says_it(tmp_path, monkeypatch, files, line):
    # GIVEN a project with an EventBridge schedule in cron.yaml, a misspelt setting, or a cdk.json that is not JSON
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    # WHEN the command starts  THEN it stops with the one line (no traceback)
    with pytest.raises(SystemExit) as stop:
        command.main(["--duration", "0", "--no-examples"])
    assert str(stop.value).startswith(line) and "\n" not in str(stop.value), stop.value


def _project(tmp_path, monkeypatch, package: str, module: str) -> None:
    """A project directory whose cdk.json names ``package`` as task_modules, its __init__.py being ``module``."""
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text(module)
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {"worker_tier": {"task_modules": package}}}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_a_task_module_that_cannot_be_imported_stops_the_command_in_one_line(tmp_path, monkeypatch):
    # GIVEN a project whose task module imports a package that is not installed, on its line 2
    _project(tmp_path, monkeypatch, "billing_jobs_missing_import", "import json\nimport requestz\n")
    # WHEN the command starts  THEN it stops before any message, in one line naming the module, the name and the line
    with pytest.raises(SystemExit) as stop:
        command.main(["--duration", "0"])
    assert str(stop.value) == ("worker-tier-local: task module 'billing_jobs_missing_import' cannot be imported: No "
                               "module named 'requestz' (billing_jobs_missing_import/__init__.py line 2); add it to the requirements file "
                               "the task code installs (TaskCode.from_directories(..., requirements='requirements.txt')) "
                               "or fix the import")


@pytest.fixture
def another_process(monkeypatch):
    """The task registry of another project's process: none of this repo's tasks, whatever this test process
    imported before (restored after, so a later test can register tasks/examples.py's paths)."""
    from worker_tier.worker.registry import DEFAULT_REGISTRY

    monkeypatch.setattr(DEFAULT_REGISTRY, "_definitions", {})


@pytest.mark.usefixtures("another_process")
def test_in_another_project_the_example_tasks_are_not_sent_and_one_line_says_how_to_send_one(tmp_path, monkeypatch, capsys):
    # GIVEN a project of its own, whose one task is /own-invoice (not this repo's /hello, /flaky, /poison)
    _project(tmp_path, monkeypatch, "own_invoice_jobs",
             "from worker_tier import task\n\n\n@task('/own-invoice')\ndef invoice(t):\n    return None\n")
    # WHEN the local environment starts there
    assert command.main(["--duration", "0"]) == 0
    # THEN no example is sent (each would dead-letter as UnknownPathError), and one line says how to send one
    lines = [line.split("  ", 1)[1] for line in capsys.readouterr().out.splitlines() if "  " in line]
    assert not [line for line in lines if line.startswith("sent ")]
    assert ("example tasks not sent: task_modules 'own_invoice_jobs' registers no /flaky, /hello, /poison; send one of "
            "yours with: worker-tier send /own-invoice '{}' (in a shell with the export line above)") in lines


@pytest.mark.usefixtures("another_process")
def test_in_another_project_with_its_own_hello_task_this_repos_examples_are_not_sent_to_it(tmp_path, monkeypatch, capsys):
    # GIVEN a project of its own whose first task is /hello (the path a newcomer's first task has)
    _project(tmp_path, monkeypatch, "own_hello_jobs",
             "from worker_tier import task\n\n\n@task('/hello')\ndef hello(t):\n    return None\n")
    # WHEN the local environment starts there
    assert command.main(["--duration", "0"]) == 0
    # THEN this repo's example bodies ({"name": "Ada"}, "Grace, 150 s later") are not sent to the project's /hello
    out = capsys.readouterr().out
    assert "Ada" not in out and "Grace" not in out, out
    assert ("example tasks not sent: task_modules 'own_hello_jobs' registers no /flaky, /poison and its own /hello is "
            "not this repo's example task; send one of yours with: worker-tier send /hello '{}' (in a shell with the "
            "export line above)") in out
