"""worker-tier-local's inputs: ./cdk.json and ./cron.yaml are optional, a file named on the command line is not."""

from __future__ import annotations

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
