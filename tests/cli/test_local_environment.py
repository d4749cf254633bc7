"""The command line against the local environment (moto's server over HTTP), as an on-call person runs it."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import boto3
import pytest
from botocore.exceptions import ClientError
from click.testing import CliRunner

from worker_tier.core import contract
from worker_tier.core.errors import TaskImportError
from tests.cli.deployment import NOW
from worker_tier.core.settings import Settings
from worker_tier.periodic.cron_config import parse
from worker_tier_cli import cli
from worker_tier_cli.commands import MOVE_TASK_FALLBACK_NOTE
from worker_tier_cli.session import Runtime
from worker_tier_cli.tail import NO_LOG_GROUP
from worker_tier_local import LocalEnvironment
from worker_tier_local.environment import LOCAL_PAYLOAD_BUCKET, LOCAL_REGION
from worker_tier_local.event_source import HANDLER_ERROR_LINE


def test_each_command_shows_its_facts_against_the_local_environment(tmp_path):
    # GIVEN the local environment, where the worker dead-lettered /poison with its reason, and a message
    # waits in the delay table for tomorrow
    with LocalEnvironment(Settings()) as env:
        env.client.send("/poison", json.dumps({"order_id": 42}))
        env.client.send("/hello", "{}", delay=timedelta(days=1))
        assert env.poll_until(lambda: env.queue_depth() == 0, timeout_seconds=30)
        given = ["--endpoint-url", env.endpoint_url, "--region", LOCAL_REGION, "--queue-url", env.queue_url,
                 "--dlq-url", env.dead_letter_queue_url, "--state-table", env.state_table,
                 "--delay-table", env.delay_table, "--log-group", "/aws/lambda/worker"]
        runtime = Runtime(interactive=lambda: False, wait_seconds=0, state_dir=tmp_path)

        def run(*command: str, exit_code: int = 0):
            result = CliRunner().invoke(cli, [*given, *command], obj=runtime)
            assert result.exit_code == exit_code, result.output
            return result

        # WHEN status, dlq list, dlq show, redrive and tail run
        status = json.loads(run("status", "--json").stdout)
        status_text = run("status").stdout
        listed = run("dlq", "list")
        [group] = json.loads(run("dlq", "list", "--json").stdout)["groups"]
        letter_id = env.sqs.receive_message(QueueUrl=env.dead_letter_queue_url, VisibilityTimeout=0)["Messages"][0]["MessageId"]
        shown = json.loads(run("dlq", "show", letter_id, "--json").stdout)
        moved = run("redrive", "--json")
        tail = run("tail", "--no-follow", exit_code=1)
        # THEN status counts the dead letter and the delayed message, by its hour
        assert status["queues"]["DLQ"]["visible"] == 1 and status["queues"]["work queue"]["visible"] == 0
        assert sum(h["count"] for h in status["delay_backlog"]["by_hour"]) == 1
        assert status_text.splitlines()[2].split()[:2] == ["DLQ", "1"]
        assert "delay table backlog (not yet dispatched): 0 overdue, 1 in the next 24 h, 0 later" in status_text
        # AND the list names its path, error, count and reason; show has the whole message
        assert listed.stdout.splitlines()[1].split()[:3] == ["/poison", "NonRetryableError", "1"]
        assert "order 42 references a deleted customer" in listed.stdout
        assert (group["path"], group["error_type"], group["count"]) == ("/poison", "NonRetryableError", 1)
        assert shown["body"] == '{"order_id": 42}' and shown["reason"]["error_type"] == "NonRetryableError"
        # AND the redrive moves it with the move task the local environment answers (moto has none)
        assert MOVE_TASK_FALLBACK_NOTE not in moved.stderr
        assert json.loads(moved.stdout)["task"]["ApproximateNumberOfMessagesMoved"] == 1
        assert env.queue_depth() == 1 and env.queue_depth(env.dead_letter_queue_url) == 0
        # AND tail says where the local environment's outcomes are
        assert NO_LOG_GROUP.format(group="/aws/lambda/worker") in " ".join(tail.stderr.split())



def test_a_task_module_that_cannot_be_imported_stops_the_start_in_one_line_and_leaves_nothing_running(tmp_path, monkeypatch):
    # GIVEN task_modules naming a module that imports a package that is not installed
    (tmp_path / "broken_start_jobs.py").write_text("import requestz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    environment, before = LocalEnvironment(Settings(task_modules="broken_start_jobs")), dict(os.environ)
    # WHEN the environment starts  THEN it stops in one line, before any message, and restores the variables it set
    with pytest.raises(TaskImportError) as error:
        environment.__enter__()
    assert str(error.value) == ("task module 'broken_start_jobs' cannot be imported: No module named 'requestz' "
                                "(broken_start_jobs.py line 1); add it to the requirements file the task code installs "
                                "(TaskCode.from_directories(..., requirements='requirements.txt')) or fix the import")
    assert environment._server is None and dict(os.environ) == before


def test_a_worker_function_that_raises_returns_its_batch_and_the_environment_goes_on(capsys):
    # GIVEN a worker function that raises, as one whose task modules fail at its start would
    def raising(event, context):
        raise RuntimeError("init failed")

    with LocalEnvironment(Settings(), handler=raising) as env:
        env.client.send("/hello", "{}")
        # WHEN the event source invokes it
        given = env.poll_once(wait_seconds=5)
        # THEN polling goes on, one line says what became of the batch, and the message stays in the queue, as
        # Lambda returns a batch its function raised on
        assert given == 1
        assert capsys.readouterr().err == HANDLER_ERROR_LINE.format(count=1, error="RuntimeError: init failed") + "\n"
        assert env.queue_depth() == 1


def test_status_shows_the_local_environments_periodic_tasks_from_its_schedule_group(tmp_path):
    # GIVEN the local environment with two cron.yaml entries, one of them disabled, whose first ticks it fired
    entries = parse("version: 1\ncron:\n - name: backup\n   url: /backup\n   schedule: '* * * * *'\n"
                    " - name: report\n   url: /report\n   schedule: '30 9 * * *'\n   timezone: Europe/Paris\n"
                    "   enabled: false\n")
    clock = [NOW.timestamp() - 61]
    with LocalEnvironment(Settings(), cron_entries=entries, cron_clock=lambda: clock[0]) as env:
        clock[0] = NOW.timestamp()
        env.cron.fire_due()
        given = ["--endpoint-url", env.endpoint_url, "--region", LOCAL_REGION, "--queue-url", env.queue_url,
                 "--dlq-url", env.dead_letter_queue_url, "--state-table", env.state_table,
                 "--schedule-group", env.schedule_group]
        runtime = Runtime(clock=NOW.timestamp, interactive=lambda: False, wait_seconds=0, state_dir=tmp_path)
        # WHEN status runs with the local environment's schedule group, as JSON and as text
        shown = json.loads(CliRunner().invoke(cli, [*given, "status", "--json"], obj=runtime).stdout)
        text = CliRunner().invoke(cli, [*given, "status"], obj=runtime).stdout
    # THEN both name each entry, its state, and the last tick's fate the local environment's ticks left
    backup, report = shown["periodic_tasks"]["entries"]
    assert (backup["name"], backup["path"], backup["state"], backup["last_tick"], backup["last_tick_fate"]) == (
        "backup", "/backup", "ENABLED", "2026-11-22T12:00:00+00:00", "sent")
    assert (report["name"], report["timezone"], report["state"]) == ("report", "Europe/Paris", "DISABLED")
    assert "none deployed" not in text and "backup" in text and "Europe/Paris" in text


def test_the_local_environment_has_a_payload_bucket_named_in_its_variables_and_its_export_line():
    # GIVEN the local environment with large_payloads on (the default)
    with LocalEnvironment(Settings(task_modules="tasks")) as env:
        from worker_tier_local.__main__ import _export_line

        buckets = [b["Name"] for b in boto3.client("s3").list_buckets()["Buckets"]]
        in_process = os.environ.get(contract.PAYLOAD_BUCKET_VARIABLE)
        exported = env.shell_environment().get(contract.PAYLOAD_BUCKET_VARIABLE)
        line = _export_line(env)
    # THEN moto holds the bucket, and this process, another shell's line and the Client name it
    assert buckets == [LOCAL_PAYLOAD_BUCKET] == [env.payload_bucket]
    assert in_process == exported == LOCAL_PAYLOAD_BUCKET
    assert f" {contract.PAYLOAD_BUCKET_VARIABLE}={LOCAL_PAYLOAD_BUCKET} " in line
    # AND the variable is gone once the environment stopped
    assert os.environ.get(contract.PAYLOAD_BUCKET_VARIABLE) is None


def test_the_local_environment_without_large_payloads_has_no_bucket_and_unsets_a_stale_variable(monkeypatch):
    # GIVEN a shell where an earlier export line set the payload bucket, and large_payloads off
    monkeypatch.setenv(contract.PAYLOAD_BUCKET_VARIABLE, "stale-bucket")
    with LocalEnvironment(Settings(task_modules="tasks", large_payloads=False)) as env:
        buckets = boto3.client("s3").list_buckets()["Buckets"]
        in_process = os.environ.get(contract.PAYLOAD_BUCKET_VARIABLE)
        exported = env.shell_environment()
    # THEN no bucket, and no variable naming one, here or in the export line
    assert buckets == [] and env.payload_bucket is None
    assert in_process is None and contract.PAYLOAD_BUCKET_VARIABLE not in exported


def test_the_banner_names_the_payload_bucket(capsys):
    # GIVEN the local environment  WHEN make run prints its banner
    from worker_tier_local.__main__ import _print_banner

    with LocalEnvironment(Settings(task_modules="tasks")) as env:
        _print_banner(env)
    # THEN one line names the payload bucket
    banner = capsys.readouterr()
    assert f"payload bucket   {LOCAL_PAYLOAD_BUCKET}  (bodies too large for the queue go to S3 here" in banner.out + banner.err


def test_s3_reaches_the_local_environments_moto_through_its_endpoint_with_5_mb_bodies_untouched():
    # GIVEN the local environment, and boto3's S3 client as the worker and the Client make it (AWS_ENDPOINT_URL,
    # default configuration: no addressing style set)
    with LocalEnvironment(Settings(task_modules="tasks")) as env:
        s3, urls = boto3.client("s3"), []
        s3.meta.events.register("before-send.s3", lambda request, **_: urls.append(request.url))
        body = os.urandom(5 * 1024 * 1024 // 2).hex().encode()  # 5 MiB, no two alike
        # WHEN a 5 MiB object is put and read back through the local server (its move-task middleware in front)
        s3.put_object(Bucket=env.payload_bucket, Key="payloads/big", Body=body)
        got = s3.get_object(Bucket=env.payload_bucket, Key="payloads/big")
        read = got["Body"].read()
        with pytest.raises(ClientError) as missing:
            s3.get_object(Bucket=env.payload_bucket, Key="payloads/none")
    # THEN every byte comes back, and a missing key is NoSuchKey
    assert got["ContentLength"] == len(body) and read == body
    assert missing.value.response["Error"]["Code"] == "NoSuchKey"
    # AND botocore addresses the bucket in the path on the endpoint it was given (no virtual host to resolve)
    assert urls[0] == f"{env.endpoint_url}/{LOCAL_PAYLOAD_BUCKET}/payloads/big"


def test_a_tracked_job_sent_from_the_command_line_succeeds_with_its_result_in_the_local_environment(tmp_path):
    # GIVEN the local environment (make run) and the command line pointed at it
    with LocalEnvironment(Settings()) as env:
        given = ["--endpoint-url", env.endpoint_url, "--region", LOCAL_REGION, "--queue-url", env.queue_url,
                 "--dlq-url", env.dead_letter_queue_url, "--state-table", env.state_table]
        runtime = Runtime(interactive=lambda: False, wait_seconds=0, state_dir=tmp_path)

        def run(*command: str):
            result = CliRunner().invoke(cli, [*given, *command], obj=runtime)
            assert result.exit_code == 0, result.output
            return json.loads(result.stdout)

        # WHEN /hello is sent with --track
        job_id = run("send", "/hello", '{"name": "Ada"}', "--track", "--json")["job_id"]
        # THEN its job succeeds, with the task's return value as its result, in Client.status and `worker-tier job`
        assert env.poll_until(lambda: env.client.status(job_id).final, timeout_seconds=30)
        shown = run("job", job_id, "--json")
        assert (shown["state"], shown["result"]) == ("succeeded", {"greeting": "hello, Ada"})
        assert [e["state"] for e in shown["history"]] == ["queued", "running", "succeeded"]
