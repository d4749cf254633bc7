"""`make run` for a person at a terminal: lines that work as printed, a fixed port, and what is pending at exit."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

import boto3

from tests.support.local_processes import python_process, read_until
from worker_tier import Client
from worker_tier.core.settings import Settings
from worker_tier_local import LocalEnvironment
from worker_tier_local.environment import LOCAL_LONG_DELAY_THRESHOLD_SECONDS

REPO = Path(__file__).resolve().parents[2]
AWS_LINE = re.compile(r"^  aws --endpoint-url ", re.MULTILINE)


def test_banner_export_and_aws_lines_work_as_printed():
    # GIVEN `make run` started on any free port
    with _make_run("--port", "0", "--no-examples", "--duration", "6") as process:
        banner = _read_until(process, AWS_LINE)
        # WHEN a person pastes its export line and runs its aws line
        exported = _exported(banner)
        aws = shlex.split(next(line for line in banner.splitlines() if AWS_LINE.match(line)))
        endpoint, queue_url = aws[aws.index("--endpoint-url") + 1], aws[aws.index("--queue-url") + 1]
        sqs = boto3.client("sqs", endpoint_url=endpoint, region_name=exported["AWS_DEFAULT_REGION"],
                           aws_access_key_id=exported["AWS_ACCESS_KEY_ID"],
                           aws_secret_access_key=exported["AWS_SECRET_ACCESS_KEY"])
        # THEN the endpoint answers for the queue and the DLQ the banner names, in the region it names
        assert sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"] \
            == "arn:aws:sqs:us-east-1:123456789012:worker-tier-local-queue"
        dlq_url = re.search(r"  DLQ +(\S+)", banner).group(1)
        assert dlq_url.startswith(endpoint) and sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["All"])
        assert exported["AWS_REGION"] == exported["AWS_DEFAULT_REGION"] == "us-east-1"
        assert "any credentials work" in banner and "worker-tier-local-delays (delays)" in banner
        # AND the AWS CLI, where installed, runs the aws line as printed
        if _aws_cli_runs():
            shell = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **exported}
            cli = subprocess.run(aws, capture_output=True, text=True, timeout=30, env=shell, check=False)
            assert cli.returncode == 0, cli.stderr
            assert json.loads(cli.stdout)["Attributes"]["QueueArn"].endswith(":worker-tier-local-queue")
        output, errors = process.communicate(timeout=30)
    assert process.returncode == 0, errors
    assert "nothing pending at exit" in output


def test_port_is_the_one_asked_for_and_a_free_one_when_it_is_taken():
    # GIVEN a port that is free, and one that another server listens on
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy_port = taken.getsockname()[1]
        free_port = _free_port()
        # WHEN the local environment is asked for each
        with LocalEnvironment(Settings(), port=free_port) as fixed:
            fixed_endpoint, fixed_unavailable = fixed.endpoint_url, fixed.unavailable_port
        with LocalEnvironment(Settings(), port=busy_port) as fallback:
            fallback_endpoint, fallback_unavailable = fallback.endpoint_url, fallback.unavailable_port
            fallback_depth = fallback.queue_depth()
        # AND `make run` is
        with _make_run("--port", str(busy_port), "--no-examples", "--duration", "1") as process:
            output, errors = process.communicate(timeout=30)
    # THEN the free port is used as asked; the taken one is replaced by a free port that answers, with a clear line
    assert (fixed_endpoint, fixed_unavailable) == (f"http://127.0.0.1:{free_port}", None)
    assert fallback_unavailable == busy_port and not fallback_endpoint.endswith(f":{busy_port}") and fallback_depth == 0
    assert process.returncode == 0, errors
    moved = re.search(rf"port {busy_port} is in use \(another `make run`\?\); using a free one instead: "
                      r"http://127\.0\.0\.1:(\d+) \(--port chooses another\)", output)
    assert moved and int(moved.group(1)) != busy_port, output
    assert f"moto on http://127.0.0.1:{moved.group(1)}, region us-east-1" in output


def test_port_out_of_range_is_refused_with_the_range():
    # WHEN `make run` is given a port no socket can have  THEN it says what a port can be
    result = subprocess.run([sys.executable, "-m", "worker_tier_local", "--port", "70000"], capture_output=True,
                            text=True, timeout=30, env=_environment(), cwd=REPO, check=False)
    assert result.returncode == 2
    assert "--port: must be a port number 0..65535 (0: any free port), got '70000'" in result.stderr


def test_run_that_ends_with_work_pending_says_what_and_where_with_counts():
    # GIVEN `make run` for a few seconds
    with _make_run("--port", "0", "--no-examples", "--duration", "6") as process:
        banner = _read_until(process, AWS_LINE)
        exported = _exported(banner)
        endpoint = re.search(r"moto on (\S+),", banner).group(1)
        queue_url = re.search(r"  queue +(\S+)", banner).group(1)
        delay_table = re.search(r"tables +\S+ \(state\), (\S+) \(delays\)", banner).group(1)
        aws = {"endpoint_url": endpoint, "region_name": exported["AWS_DEFAULT_REGION"],
               "aws_access_key_id": "any", "aws_secret_access_key": "any"}
        # WHEN another shell sends a message delayed in SQS (as a dispatched one is) and one for the delay table
        client = Client(queue_url, delay_table, sqs=boto3.client("sqs", **aws), dynamodb=boto3.client("dynamodb", **aws),
                        long_delay_threshold=LOCAL_LONG_DELAY_THRESHOLD_SECONDS)
        client.send("/hello", '{"name": "in SQS"}', delay=60)
        due = time.time() + 600
        client.send("/hello", '{"name": "in the table"}', delay=600)
        output, errors = process.communicate(timeout=30)
    # THEN the run ends saying what is still pending, where, with counts
    assert process.returncode == 0, errors
    lines = output.splitlines()
    assert any(line.endswith("still pending at exit: 2 message(s), lost with moto's in-memory state") for line in lines), output
    assert any(line.endswith("  queue: 1 (0 waiting, 0 in flight, 1 delayed)") for line in lines), output
    [first_due] = [m.group(1) for line in lines if (m := re.search(
        rf"  delay table {delay_table}: 1 delayed message\(s\) not yet moved to the queue by the delay dispatcher, "
        r"the first due at (\d\d:\d\d:\d\d)$", line))]
    hours, minutes, seconds = map(int, first_due.split(":"))
    expected = time.localtime(due)
    apart = ((hours - expected.tm_hour) * 3600 + (minutes - expected.tm_min) * 60 + seconds - expected.tm_sec) % 86400
    assert min(apart, 86400 - apart) <= 2, (first_due, due)

def test_pending_counts_only_delayed_messages_the_dispatcher_has_not_sent():
    # GIVEN a message due in 150 s, and one whose producer's clock is 5 minutes behind (due 150 s ago)
    with LocalEnvironment(Settings()) as env:
        env.client.send("/hello", '{"name": "later"}', delay=150)
        env.new_client(clock=lambda: time.time() - 300).send("/hello", '{"name": "late"}', delay=150)
        before = env.pending()
        # WHEN the delay dispatcher runs once (nothing polls the queue)
        assert env.run_dispatcher()["sent"] == 1
        after = env.pending()
    # THEN both were pending in the table; then the late one is waiting in the queue, the other still in the table
    assert (before.undispatched, before.total) == (2, 2)
    assert (after.undispatched, [q.total for q in after.queues], after.total) == (1, [1], 2)
    assert after.next_due_ms is not None and after.next_due_ms / 1000 > time.time() + 100


def _make_run(*args: str) -> AbstractContextManager[subprocess.Popen]:
    """`make run`'s entry point with ``args``, from the repository; killed if the test leaves it running."""
    return python_process("-m", "worker_tier_local", *args)


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}


def _read_until(process: subprocess.Popen, pattern: re.Pattern[str], seconds: float = 20) -> str:
    """The process's stdout up to and including the first line matching ``pattern``."""
    return read_until(process, pattern, seconds)


def _exported(banner: str) -> dict[str, str]:
    """The variables the banner's export line sets, read as a shell would."""
    line = next(line for line in banner.splitlines() if line.startswith("  export "))
    words = shlex.split(line)
    assert words[0] == "export"
    # "$PATH" expands as a shell would: the line puts the venv's bin before the PATH the shell had
    return {name: value.replace("$PATH", os.environ["PATH"]) for name, value in (w.split("=", 1) for w in words[1:])}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _aws_cli_runs() -> bool:
    """Whether an AWS CLI is installed and starts (it is not a test dependency)."""
    if shutil.which("aws") is None:
        return False
    return subprocess.run(["aws", "--version"], capture_output=True, timeout=30, check=False).returncode == 0


# Another shell, as a person uses it: the banner's export line pasted, then the README's commands, no other flag.
# The Python lines are the README's Client.from_env() snippet with a 3-day delay.
ANOTHER_SHELL = r"""
set -eu
{export_line}
worker-tier status
first_id=$(worker-tier dlq list --json | python -c 'import json, sys; print(json.load(sys.stdin)["groups"][0]["message_ids"][0])')
worker-tier dlq show "$first_id"
worker-tier send /hello '{{"name": "Ada"}}' --delay 3600 --cancellable --dedupe-key greet-ada
worker-tier delayed cancel greet-ada
worker-tier redrive --yes
python - <<'PYTHON'
from datetime import timedelta
from worker_tier import Client
client = Client.from_env()
print("sent in 3 days", client.send("/hello", '{{"name": "Ada"}}', delay=timedelta(days=3)))
PYTHON
"""


def test_the_banners_one_line_configures_another_shell_for_every_command_and_the_client():
    # GIVEN `make run` with its examples, until /poison is dead-lettered
    with _make_run("--port", "0", "--duration", "600") as process:
        banner = _read_until(process, re.compile(r"DLQ +/poison"), seconds=60)
        export_line = next(line for line in banner.splitlines() if line.startswith("  export ")).strip()
        # WHEN another shell, with no AWS or Worker Tier variable of its own, pastes the line and runs the commands
        shell = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "WORKER_TIER_"))}
        shell["PATH"] = "/usr/bin:/bin"  # worker-tier and python come from the line's PATH, as in a fresh shell
        ran = subprocess.run(["bash", "-c", ANOTHER_SHELL.format(export_line=export_line)], capture_output=True,
                             text=True, timeout=240, env={**shell, **_environment_paths()}, cwd=REPO, check=False)
        exported = _exported(banner)
        dynamodb = boto3.client("dynamodb", endpoint_url=exported["AWS_ENDPOINT_URL"], region_name="us-east-1",
                                aws_access_key_id="any", aws_secret_access_key="any")
        delayed = dynamodb.scan(TableName=exported["WORKER_TIER_DELAY_TABLE"])["Items"]
        process.kill()
        process.communicate()
    # THEN every command worked as printed
    assert ran.returncode == 0, ran.stdout + ran.stderr
    out = ran.stdout
    assert re.search(r"^DLQ +1 ", out, re.MULTILINE), out                       # status found the DLQ
    assert re.search(r"^minutely-report +/report +\* \* \* \* \* ", out, re.MULTILINE), out  # and cron.yaml's tasks
    assert "NonRetryableError" in out and "order 42 references a deleted customer" in out  # dlq show
    assert "cancel: worker-tier delayed cancel greet-ada" in out and "cancelled" in out.lower()
    assert "move task COMPLETED: 1 moved" in out                                 # redrive, by the local move task
    sent = re.search(r"sent in 3 days (\S+)", out)
    assert sent, out
    # AND the 3-day message waits in the local environment's delay table
    assert sent.group(1) in json.dumps(delayed), delayed


def _environment_paths() -> dict[str, str]:
    """PYTHONPATH for a checkout that is not installed (the venv's editable install makes it unneeded)."""
    return {"PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}


def _exported_shell(env) -> dict[str, str]:
    """A fresh shell's environment after the banner's export line (as _export_line prints it) was pasted."""
    from worker_tier_local.__main__ import _export_line

    shell = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "WORKER_TIER_"))}
    ran = subprocess.run(["bash", "-c", f"{_export_line(env)}; env -0"], capture_output=True, env=shell, check=True)
    pairs = [item.split(b"=", 1) for item in ran.stdout.split(b"\0") if b"=" in item]
    return {**{k.decode(): v.decode() for k, v in pairs}, **_environment_paths()}


def test_a_stack_run_in_a_shell_with_the_export_line_does_not_silently_ask_the_local_endpoint():
    # GIVEN the local environment, and a shell with its export line pasted
    with LocalEnvironment(Settings(task_modules="tasks")) as env:
        shell = _exported_shell(env)
        # WHEN the operator looks at the deployed stack from that shell with --stack (which "ignores the variables")
        ran = subprocess.run([sys.executable, "-m", "worker_tier", "--stack", "Prod", "status"], capture_output=True,
                             text=True, env=shell, cwd=REPO, timeout=60, check=False)
    # THEN it does not report the production stack missing after asking moto with the line's test credentials:
    # it asks AWS, or it says which endpoint it asked and which variable sent it there
    assert ran.returncode != 0
    assert "Stack with id Prod does not exist" not in ran.stderr or "AWS_ENDPOINT_URL" in ran.stderr, ran.stderr


def test_send_with_stdin_closed_and_a_literal_body_sends_it_without_a_traceback():
    # GIVEN the local environment, and a shell with its export line pasted whose stdin is closed (cron, `<&-`)
    with LocalEnvironment(Settings(task_modules="tasks")) as env:
        shell = _exported_shell(env)
        # WHEN a literal body is sent (stdin is not asked for)
        ran = subprocess.run(["bash", "-c", f"{shlex.quote(sys.executable)} -m worker_tier send /hello hi <&-"],
                             capture_output=True, text=True, env=shell, cwd=REPO, timeout=60, check=False)
    # THEN it is sent, with no traceback
    assert "Traceback" not in ran.stderr, ran.stderr
    assert ran.returncode == 0 and ran.stdout.startswith("sent /hello "), ran.stdout + ran.stderr


def test_send_from_a_closed_stdin_is_refused_in_one_line_naming_stdin():
    with LocalEnvironment(Settings(task_modules="tasks")) as env:
        shell = _exported_shell(env)
        ran = subprocess.run(["bash", "-c", f"{shlex.quote(sys.executable)} -m worker_tier send /hello - <&-"],
                             capture_output=True, text=True, env=shell, cwd=REPO, timeout=60, check=False)
    assert "Traceback" not in ran.stderr and "stdin" in ran.stderr and len(ran.stderr.strip().splitlines()) == 1, ran.stderr


def test_sigterm_ends_the_run_with_its_exit_summary_and_the_fixed_port_when_it_is_free():
    # GIVEN `make run` on a free port asked for
    port = _free_port()
    with _make_run("--port", str(port), "--no-examples") as process:
        banner = _read_until(process, re.compile(r"next cron tick at "))
        time.sleep(1)  # in its run loop
        # WHEN it is sent SIGTERM (kill, a process manager)
        process.terminate()
        output, errors = process.communicate(timeout=30)
    # THEN it used that port (started once: no second server took it) and ended as Ctrl-C ends it, with its summary
    assert f"moto on http://127.0.0.1:{port}," in banner and "is in use" not in banner, banner
    assert process.returncode == 0, errors
    assert "stopping (SIGTERM)" in output and "nothing pending at exit" in output, output
