"""`tail` (the worker's outcomes from CloudWatch Logs, as make run prints them) and `cron next`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from tests.cli.deployment import NOW, parsed
from worker_tier.core.contract import OUTCOME_LOG_MESSAGES
from worker_tier_cli.cron import CRON_EXTRA_MISSING
from worker_tier_cli.tail import NO_LOG_GROUP

REPO = Path(__file__).resolve().parents[2]
GROUP = "/aws/lambda/worker"
NOW_MS = int(NOW.timestamp() * 1000)


def _line(message, level="WARNING", **keys):
    """A worker log line as Powertools writes it (JSON, with the running record's message_id and path)."""
    return json.dumps({"level": level, "location": "fates.py:196", "message": message, "service": "worker-tier",
                       "timestamp": "2026-11-22 12:00:00,000+0000", **keys})


def _logs(*lines, at_ms=NOW_MS):
    logs = boto3.client("logs", region_name="us-east-1")
    logs.create_log_group(logGroupName=GROUP)
    logs.create_log_stream(logGroupName=GROUP, logStreamName="s")
    _put(logs, lines, at_ms)
    return logs


def _put(logs, lines, at_ms):
    logs.put_log_events(logGroupName=GROUP, logStreamName="s",
                        logEvents=[{"timestamp": at_ms + i, "message": line} for i, line in enumerate(lines)])


def _outcome_lines():
    return [
        "START RequestId: 1 Version: $LATEST",
        _line("task failed; retrying", message_id="11111111-aaaa", path="/flaky", error="ConnectionError('down')",
              retry_in_seconds=30),
        _line("task dead-lettered", level="ERROR", message_id="22222222-bbbb", path="/poison",
              error="NonRetryableError('order 42')", attempts=3),
        json.dumps({"_aws": {"CloudWatchMetrics": []}, "Succeeded": 5}),
        _line("message not due yet: held back", level="INFO", message_id="33333333-cccc", path="/hello",
              due_at="2026-11-22T12:05:00Z"),
        _line("idempotency lease taken", level="INFO", message_id="x", path="/hello"),
    ]


def test_tail_prints_the_logged_outcomes_as_make_run_does(deployment):
    # GIVEN the worker's log group with a retry, a dead letter, a hold, and lines that are no outcome
    _logs(*_outcome_lines())
    # WHEN tail runs without following
    result = deployment.run("tail", "--no-follow", "--since", "1m", options=("--log-group", GROUP))
    # THEN one line per outcome, make run's marks and columns, the rest left out
    assert result.exit_code == 0, result.output
    lines = [re.sub(r"^\d\d:\d\d:\d\d  ", "", line) for line in result.stdout.splitlines()]
    assert lines == [
        "retry /flaky   11111111  ConnectionError('down') -> retry in 30s",
        "DLQ  /poison  22222222  receive 3  NonRetryableError('order 42')",
        "hold /hello   33333333  due at 2026-11-22T12:05:00Z",
    ]


def test_tail_follows_new_events_once_each_until_ctrl_c(deployment):
    # GIVEN one dead letter logged, and another logged while tail waits
    logs = _logs(_line("task dead-lettered", level="ERROR", message_id="aaaaaaaa", path="/a", error="E()", attempts=1))
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 1:
            _put(logs, [_line("task dead-lettered", level="ERROR", message_id="bbbbbbbb", path="/b", error="E()",
                              attempts=1)], NOW_MS + 5000)
        if len(sleeps) == 3:
            raise KeyboardInterrupt

    deployment.runtime.sleep = sleep
    # WHEN tail follows, as JSON
    result = deployment.run("tail", "--json", "--since", "1m", options=("--log-group", GROUP))
    # THEN each outcome is printed once, in order, and Ctrl-C ends it cleanly
    assert result.exit_code == 0, result.output
    shown = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(s["path"], s["status"], s["receive_count"]) for s in shown] == [("/a", "dead_lettered", 1),
                                                                             ("/b", "dead_lettered", 1)]


def test_tail_without_a_log_group_says_the_local_environment_prints_its_own(deployment):
    result = deployment.run("tail", "--no-follow", options=("--log-group", "/nope"))
    assert result.exit_code == 1
    assert NO_LOG_GROUP.format(group="/nope") in " ".join(result.stderr.split())


def test_tail_reads_the_messages_the_worker_logs():
    # The worker's outcome lines are the contract's: each message is logged by worker_tier.worker.fates as written.
    fates = (REPO / "src" / "worker_tier" / "worker" / "fates.py").read_text()
    assert all(f'"{text}"' in fates for text in OUTCOME_LOG_MESSAGES.values())


CRON_YAML = """version: 1
cron:
 - name: "backup"
   url: "/backup"
   schedule: "0 */6 * * *"
 - name: "report"
   url: "/report"
   schedule: "30 9 * * 1-5"
   timezone: "Europe/Paris"
"""


def test_cron_next_lists_each_entrys_next_ticks(deployment, tmp_path):
    # GIVEN a cron.yaml of two entries
    (tmp_path / "cron.yaml").write_text(CRON_YAML)
    # WHEN cron next runs, as text and as JSON
    text = deployment.run("cron", "next", str(tmp_path / "cron.yaml"), "--count", "2")
    shown = parsed(deployment.run("cron", "next", str(tmp_path / "cron.yaml"), "--count", "2", "--json"))
    # THEN each entry's next ticks after NOW (Sunday 12:00 UTC), in UTC and its zone
    assert text.exit_code == 0, text.output
    assert "backup  '0 */6 * * *' (UTC) -> /backup" in text.stdout
    assert "2026-11-23 08:30 UTC   2026-11-23 09:30 CET" in text.stdout
    assert shown[0]["next_ticks"] == ["2026-11-22T18:00:00+00:00", "2026-11-23T00:00:00+00:00"]
    assert shown[1]["timezone"] == "Europe/Paris" and shown[1]["next_ticks"][0] == "2026-11-23T08:30:00+00:00"


def test_cron_next_of_a_bad_file_names_the_problem(deployment, tmp_path):
    (tmp_path / "cron.yaml").write_text("version: 2\ncron: []\n")
    result = deployment.run("cron", "next", str(tmp_path / "cron.yaml"))
    assert result.exit_code == 1 and "version" in result.stderr


@pytest.mark.parametrize("missing", ["croniter", "yaml"])
def test_cron_next_without_croniter_or_yaml_says_to_install_the_cli_extra(missing, tmp_path):
    # GIVEN an interpreter where aws_cdk and one of the preview's packages cannot be imported
    (tmp_path / "cron.yaml").write_text(CRON_YAML)
    code = (f"import sys; sys.modules.update(dict.fromkeys(('aws_cdk', 'constructs', {missing!r}))); "
            f"from worker_tier_cli import main; sys.exit(main(['cron', 'next', {str(tmp_path / 'cron.yaml')!r}]))")
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])})
    # THEN a usage error naming what to install
    assert result.returncode == 2
    assert CRON_EXTRA_MISSING.format(missing=missing) in result.stderr


def test_cron_next_works_without_aws_cdk_lib(tmp_path):
    (tmp_path / "cron.yaml").write_text(CRON_YAML)
    code = ("import sys; sys.modules.update(dict.fromkeys(('aws_cdk', 'constructs', 'cdk_nag'))); "
            f"from worker_tier_cli import main; sys.exit(main(['cron', 'next', {str(tmp_path / 'cron.yaml')!r}]))")
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])})
    assert result.returncode == 0, result.stderr
    assert "backup" in result.stdout and "report" in result.stdout


def test_tail_with_the_local_environments_variables_says_it_has_no_log_group(deployment):
    # GIVEN the deployment named by its queues alone, as make run's export line names it (no log group)
    # WHEN tail runs  THEN it says where the local environment's outcomes are, not only which option is missing
    result = deployment.run("tail", "--no-follow")
    assert result.exit_code == 2
    assert "no worker_log_group: pass --log-group or set WORKER_TIER_LOG_GROUP" in result.stderr
    assert "the local environment (make run) has no log group: it prints every outcome in its own terminal" in result.stderr
