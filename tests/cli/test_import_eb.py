"""`worker-tier import-eb PATH`: EB worker options (tests/cli/eb_samples) into cdk.json's worker_tier context."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from worker_tier_cli import cli, import_eb
from worker_tier_cli.import_eb import UNMAPPED_SQSD_REASONS, eb_option_settings

SAMPLES = Path(__file__).parent / "eb_samples"
REPO = Path(__file__).resolve().parents[2]
CDK_JSON = {"app": "python app.py", "context": {"worker_tier": {"fifo": False, "max_retries": 10}, "other": {"keep": 1}}}


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["import-eb", *args])


@pytest.fixture
def cdk_json(tmp_path) -> Path:
    path = tmp_path / "cdk.json"
    path.write_text(json.dumps(CDK_JSON, indent=1))
    return path


def _context(path: Path) -> dict:
    return json.loads(path.read_text())["context"]["worker_tier"]


def test_every_sqsd_option_but_the_queue_url_has_a_setting_from_settings_py():
    # GIVEN settings.py's eb_option metadata (the one home of the mapping)  THEN it covers EB's sqsd options
    assert sorted(eb_option_settings()) == [
        "ConnectTimeout", "ErrorVisibilityTimeout", "HttpConnections", "HttpPath", "InactivityTimeout", "MaxRetries",
        "MimeType", "RetentionPeriod", "VisibilityTimeout",
    ]
    assert list(UNMAPPED_SQSD_REASONS) == ["WorkerQueueURL"]


def test_the_mapping_form_is_merged_into_cdk_json_keeping_every_other_key(cdk_json):
    # GIVEN an app whose two configuration files set sqsd options (the later one wins), and a cdk.json with other keys
    # WHEN imported
    result = _run(str(SAMPLES / "mapping_app"), "--cdk-json", str(cdk_json))
    # THEN every sqsd option is a setting, the other keys are kept, and the change is shown line by line
    assert result.exit_code == 0, result.output
    document = json.loads(cdk_json.read_text())
    assert document["app"] == "python app.py" and document["context"]["other"] == {"keep": 1}
    assert _context(cdk_json) == {
        "fifo": False, "max_retries": 7, "http_path": "/worker", "mime_type": "application/json", "http_connections": 10,
        "connect_timeout": 5, "inactivity_timeout": 120, "visibility_timeout": 720, "error_visibility_timeout": 30,
        "retention_period": 86400,
    }
    assert "  ~ max_retries: 10 -> 7  (aws:elasticbeanstalk:sqsd MaxRetries in .ebextensions/02-override.config)" in result.output
    assert '  + http_path: "/worker"  (aws:elasticbeanstalk:sqsd HttpPath in .ebextensions/01-worker.config)' in result.output
    assert ".ebextensions/01-worker.config: packages not imported (not options)" in result.output
    assert ("note: EB's HttpConnections is per instance, so up to 4 x 10 = 40 messages ran at once there; "
            "http_connections is the whole worker's concurrency: raise it to 40 to keep that") in result.output


def test_options_without_a_setting_are_named_with_their_reason(cdk_json):
    # WHEN the mapping-form app is imported  THEN its autoscaling and environment options are listed as not mapped
    result = _run(str(SAMPLES / "mapping_app"), "--cdk-json", str(cdk_json))
    assert "not mapped (3):" in result.output
    assert ("  - aws:autoscaling:asg MaxSize = 4 (.ebextensions/01-worker.config): EC2 instances: the Lambda worker "
            "scales itself up to http_connections invocations at once") in result.output
    assert ("  - aws:elasticbeanstalk:application:environment DJANGO_SETTINGS_MODULE = 'mysite.settings' "
            "(.ebextensions/01-worker.config): an environment property of the app") in result.output


def test_the_cron_yaml_beside_the_app_is_checked_and_its_warnings_shown(cdk_json):
    # WHEN an app with a cron.yaml EB accepts (a description, a url without '/') is imported
    result = _run(str(SAMPLES / "mapping_app"), "--cdk-json", str(cdk_json))
    # THEN it says the file deploys, what to pass, and each difference as a warning
    cron = SAMPLES / "mapping_app" / "cron.yaml"
    assert f"{cron}: deploys 2 periodic task(s); pass WorkerTierStack(..., cron_file={str(cron)!r})" in result.output
    assert "  warning: cron.yaml line 3, entry 'refresh-feeds': url 'update/hourly' has no leading '/'" in result.output


def test_the_list_form_with_the_queue_url_and_an_environment_property(cdk_json):
    # GIVEN the list form, with WorkerQueueURL and an item without a namespace  WHEN imported
    result = _run(str(SAMPLES / "list_app"), "--cdk-json", str(cdk_json))
    # THEN the options with a setting are written, and the queue URL is named with how to keep that queue
    assert result.exit_code == 0, result.output
    assert _context(cdk_json) == {"fifo": False, "max_retries": 3, "http_path": "/tasks"}
    assert ("  - aws:elasticbeanstalk:sqsd WorkerQueueURL = 'https://sqs.us-east-1.amazonaws.com/123456789012/"
            "awseb-e-abc-stack-AWSEBWorkerQueue-XYZ' (.ebextensions/worker.config): WorkerTierStack creates its own "
            "queue") in result.output
    assert "  - aws:elasticbeanstalk:application:environment LOG_LEVEL = 'debug'" in result.output


def test_the_json_form_with_numbers_written_as_text(cdk_json):
    # GIVEN a JSON configuration file (tab-indented, which YAML would refuse) with "600"-style values
    result = _run(str(SAMPLES / "json_app"), "--cdk-json", str(cdk_json))
    # WHEN imported  THEN the values are whole numbers in cdk.json
    assert result.exit_code == 0, result.output
    assert _context(cdk_json) == {"fifo": False, "max_retries": 10, "inactivity_timeout": 600, "visibility_timeout": 3600}


def test_a_saved_configuration_overrides_the_configuration_files(cdk_json):
    # GIVEN an app with .ebextensions and a saved configuration setting MaxRetries differently
    result = _run(str(SAMPLES / "saved_app"), "--cdk-json", str(cdk_json))
    # WHEN imported  THEN the saved configuration wins (EB's precedence), and options of other namespaces are named
    assert result.exit_code == 0, result.output
    assert _context(cdk_json) == {"fifo": False, "max_retries": 9, "http_path": "/from-ebextensions", "error_visibility_timeout": 60}
    assert "aws:elasticbeanstalk:container:python WSGIPath = 'application:application'" in result.output
    assert "EnvironmentConfigurationMetadata, EnvironmentTier, Platform not imported (not options)" in result.output


def test_a_saved_configuration_file_alone(cdk_json):
    saved = SAMPLES / "saved_app" / ".elasticbeanstalk" / "saved_configs" / "worker-prod.cfg.yml"
    result = _run(str(saved), "--cdk-json", str(cdk_json))
    assert result.exit_code == 0, result.output
    assert _context(cdk_json) == {"fifo": False, "max_retries": 9, "error_visibility_timeout": 60}


def test_an_unknown_sqsd_option_is_named_with_eb_s_options(cdk_json):
    # GIVEN a sqsd option EB does not have  WHEN imported
    result = _run(str(SAMPLES / "single_files" / "unknown-option.config"), "--cdk-json", str(cdk_json))
    # THEN the rest is written and the unknown one named, with the options EB has
    assert result.exit_code == 0, result.output
    assert _context(cdk_json)["max_retries"] == 4
    assert ("  - aws:elasticbeanstalk:sqsd HttpKeepAlive = True (unknown-option.config): not an option of "
            "aws:elasticbeanstalk:sqsd (EB's are ConnectTimeout, ErrorVisibilityTimeout, HttpConnections, HttpPath, "
            "InactivityTimeout, MaxRetries, MimeType, RetentionPeriod, VisibilityTimeout, WorkerQueueURL)") in result.output


def test_an_out_of_range_value_names_eb_s_option_and_our_rule_and_writes_nothing(cdk_json):
    # GIVEN MaxRetries 0  WHEN imported
    before = cdk_json.read_text()
    result = _run(str(SAMPLES / "single_files" / "out-of-range.config"), "--cdk-json", str(cdk_json))
    # THEN it fails with Settings' rule, EB's option and the file, and cdk.json is untouched
    assert result.exit_code == 1
    assert result.output == (
        "Error: max_retries must be 1..100 (EB MaxRetries), got 0; from aws:elasticbeanstalk:sqsd MaxRetries = 0 "
        "(out-of-range.config)\n"
    )
    assert cdk_json.read_text() == before


def test_a_cron_yaml_that_would_not_deploy_exits_1_with_the_reason(cdk_json):
    result = _run(str(SAMPLES / "bad_cron_app"), "--cdk-json", str(cdk_json))
    assert result.exit_code == 1
    assert (f"{SAMPLES / 'bad_cron_app' / 'cron.yaml'}: does not deploy: cron.yaml line 3, entry 'quartz': "
            "schedule '0 0 12 * * ? *': schedule '0 0 12 * * ? *' has 7 fields") in result.output
    assert _context(cdk_json)["max_retries"] == 4


def test_dry_run_prints_the_json_and_changes_nothing(cdk_json):
    # WHEN run with --dry-run
    before = cdk_json.read_text()
    result = CliRunner().invoke(cli, ["import-eb", str(SAMPLES / "list_app"), "--cdk-json", str(cdk_json), "--dry-run"])
    # THEN stdout is the whole cdk.json it would write, the account goes to stderr, and the file is unchanged
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {**CDK_JSON, "context": {**CDK_JSON["context"], "worker_tier": {
        "fifo": False, "max_retries": 3, "http_path": "/tasks"}}}
    assert result.stderr.startswith(f"would write {cdk_json}\n")
    assert cdk_json.read_text() == before


def test_a_second_import_leaves_cdk_json_unchanged(cdk_json):
    # GIVEN an import done once  WHEN repeated  THEN nothing changes, and it says so line by line
    _run(str(SAMPLES / "list_app"), "--cdk-json", str(cdk_json))
    before = cdk_json.read_text()
    result = _run(str(SAMPLES / "list_app"), "--cdk-json", str(cdk_json))
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"left unchanged {cdk_json}\n")
    assert '  = http_path: "/tasks"  (aws:elasticbeanstalk:sqsd HttpPath in .ebextensions/worker.config, unchanged)' in result.output
    assert cdk_json.read_text() == before


def test_a_missing_cdk_json_is_created(tmp_path):
    path = tmp_path / "new" / "cdk.json"
    path.parent.mkdir()
    result = _run(str(SAMPLES / "json_app"), "--cdk-json", str(path))
    assert result.exit_code == 0, result.output
    assert json.loads(path.read_text()) == {"context": {"worker_tier": {"inactivity_timeout": 600, "visibility_timeout": 3600}}}


@pytest.mark.parametrize(
    "files, message",
    [
        ({}, "has no .ebextensions/*.config and no .elasticbeanstalk/saved_configs/*.cfg.yml"),
        ({".ebextensions/a.config": "option_settings: [\n"}, "Error: .ebextensions/a.config line 2: not valid YAML"),
        ({".ebextensions/a.config": '{"option_settings": [}'}, "Error: .ebextensions/a.config line 1: not valid JSON"),
        ({".ebextensions/a.config": "option_settings:\n  aws:elasticbeanstalk:sqsd:\n    MaxRetries: five\n"},
         "Error: max_retries must be a whole number (EB MaxRetries), got 'five' from .ebextensions/a.config"),
        ({".ebextensions/a.config": "option_settings:\n  aws:elasticbeanstalk:sqsd:\n    HttpPath: /caf\xe9\n"},
         "Error: .ebextensions/a.config line 3: byte 0xE9 is not UTF-8; save the file as UTF-8"),
        ({".elasticbeanstalk/saved_configs/a.cfg.yml": "OptionSettings: {}\n",
          ".elasticbeanstalk/saved_configs/b.cfg.yml": "OptionSettings: {}\n"}, "has 2 saved configurations"),
    ],
)
def test_a_source_that_cannot_be_read_is_refused_naming_the_file(tmp_path, cdk_json, files, message):
    # GIVEN an app directory with no source, bad YAML or JSON, a value that is no number, or two saved configurations
    app = tmp_path / "app"
    app.mkdir()
    for name, text in files.items():
        (app / name).parent.mkdir(parents=True, exist_ok=True)
        (app / name).write_bytes(text.encode("latin-1"))
    # WHEN imported  THEN it fails naming the file and the problem
    result = _run(str(app), "--cdk-json", str(cdk_json))
    assert result.exit_code == 1
    assert message in result.output


def test_python_m_worker_tier_import_eb_runs_the_command(tmp_path):
    # GIVEN an app directory and a cdk.json, in a fresh interpreter as a user runs it
    shutil.copytree(SAMPLES / "list_app", tmp_path / "app")
    (tmp_path / "cdk.json").write_text(json.dumps(CDK_JSON))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    # WHEN `python -m worker_tier import-eb app` runs in that directory
    result = subprocess.run([sys.executable, "-m", "worker_tier", "import-eb", "app"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    # THEN ./cdk.json has the settings
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("wrote cdk.json\n")
    assert _context(tmp_path / "cdk.json") == {"fifo": False, "max_retries": 3, "http_path": "/tasks"}


def test_the_command_line_imports_the_cdk_extra_only_for_import_eb():
    # GIVEN a fresh interpreter  WHEN the command line is imported  THEN neither yaml nor the constructs are
    code = ("import sys, worker_tier_cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('yaml', 'worker_tier_cdk', 'aws_cdk')))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_without_the_cdk_extra_import_eb_says_to_install_it():
    # GIVEN a fresh interpreter where PyYAML is not installed (the cli extra alone)
    code = ("import sys; sys.modules['yaml'] = None; from worker_tier.__main__ import main; "
            f"sys.exit(main(['import-eb', {str(SAMPLES / 'list_app')!r}, '--dry-run']))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    # WHEN import-eb runs  THEN it exits 2 naming the extra
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert result.stderr.endswith("Error: import-eb needs the cdk extra (yaml is missing): pip install 'worker-tier[cdk,cli]'\n")


# -- .ebextensions and cdk.json edge cases -----------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def import_plan(tmp_path: Path) -> import_eb.Plan:
    options, notes = import_eb.read_options(import_eb.sources(tmp_path), tmp_path)
    return import_eb.plan(options, {}, notes)


def test_a_later_file_overriding_with_a_function_does_not_leave_the_earlier_value(tmp_path):
    """import-eb never writes a value EB would not use. EB applies 02 over 01; 02's value is a
    function the import cannot map, so the setting must be left out, not 01's overridden 600."""
    write(tmp_path / ".ebextensions/01-base.config",
          "option_settings:\n  aws:elasticbeanstalk:sqsd:\n    VisibilityTimeout: 600\n")
    write(tmp_path / ".ebextensions/02-env.config",
          'option_settings:\n  aws:elasticbeanstalk:sqsd:\n    VisibilityTimeout: {"Fn::GetOptionSetting": {"OptionName": "VT", "DefaultValue": "900"}}\n')
    result = import_plan(tmp_path)
    assert "visibility_timeout" not in result.after, f"wrote {result.after.get('visibility_timeout')} from 01-base.config, which 02-env.config overrides"


def test_a_config_file_with_a_stray_optionsettings_key_keeps_its_option_settings(tmp_path):
    """import-eb names every option it cannot map. A .ebextensions file is read by EB through
    option_settings only; a stray OptionSettings key makes the import drop the real option_settings,
    reported as 'not options'."""
    write(tmp_path / ".ebextensions/01.config",
          "OptionSettings: {}\noption_settings:\n  aws:elasticbeanstalk:sqsd:\n    VisibilityTimeout: 600\n    MaxRetries: 5\n")
    # 60 < the default inactivity_timeout 299 is refused by Settings whichever key is read; 600 is valid
    result = import_plan(tmp_path)
    assert result.after.get("visibility_timeout") == 600, (result.after, result.notes)


def test_a_cdk_json_that_is_not_an_object_is_refused_naming_the_file(tmp_path):
    cdk = write(tmp_path / "cdk.json", "[1, 2]")
    with pytest.raises(import_eb.EbImportError, match=r"cdk\.json"):
        import_eb.read_cdk_json(cdk)


def test_other_cdk_json_keys_survive_an_import(tmp_path):
    write(tmp_path / ".ebextensions/01.config", '{"option_settings": [{"namespace": "aws:elasticbeanstalk:sqsd", '
          '"option_name": "HttpPath", "value": "/work"}, {"option_name": "HttpPath", "value": "/x"}]}')
    cdk = write(tmp_path / "cdk.json", json.dumps({"app": "python app.py", "watch": {"include": ["**"]},
                                                   "context": {"other": 1, "worker_tier": {"memory_size": 512}}}))
    assert import_eb.run(tmp_path, cdk, dry_run=False) == 0
    document = json.loads(cdk.read_text())
    assert document["app"] == "python app.py" and document["watch"] == {"include": ["**"]}
    assert document["context"]["other"] == 1
    assert document["context"]["worker_tier"] == {"memory_size": 512, "http_path": "/work"}


def test_an_out_of_range_value_names_eb_option(tmp_path):
    write(tmp_path / ".ebextensions/01.config",
          "option_settings:\n  - namespace: aws:elasticbeanstalk:sqsd\n    option_name: HttpConnections\n    value: 1\n")
    with pytest.raises(import_eb.EbImportError, match="HttpConnections"):
        import_plan(tmp_path)


def test_a_yaml_flow_mapping_config_is_read_as_yaml(tmp_path):
    """JSON vs YAML. A .config in YAML flow style starts with '{' and is valid YAML (EB reads it); the
    import takes every '{' file for JSON and refuses it as 'not valid JSON'."""
    write(tmp_path / ".ebextensions/01.config",
          '{option_settings: {"aws:elasticbeanstalk:sqsd": {HttpPath: /work, MaxRetries: 5}}}\n')
    result = import_plan(tmp_path)
    assert result.after.get("http_path") == "/work"
