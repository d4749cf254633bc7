"""The container worker as ECS runs it: ``python -m worker_tier worker`` as a subprocess, against moto's server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.functional.process_tasks import LINGERING_THREAD
from worker_tier.core import contract
from worker_tier.container.consumer import EXIT_CODE_CONFIGURATION

REPO = Path(__file__).resolve().parents[2]
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
# The grace that leaves a 1 s long poll within ECS's 120 s stop timeout (120 - 114 - 5 s to release): a quick drain.
QUICK_DRAIN_GRACE = "114"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def queues(endpoint: str, name: str) -> tuple[str, str]:
    sqs = boto3.client("sqs", endpoint_url=endpoint, **_client_credentials())
    return sqs.create_queue(QueueName=f"{name}-work")["QueueUrl"], sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]


def start_worker(endpoint: str, queue_url: str, dlq_url: str) -> subprocess.Popen[str]:
    environ = {
        **os.environ, **CREDENTIALS, "AWS_ENDPOINT_URL": endpoint,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
        contract.QUEUE_URL_VARIABLE: queue_url, contract.DLQ_URL_VARIABLE: dlq_url,
        contract.setting_variable("task_modules"): "tests.functional.process_tasks",
        "POWERTOOLS_LOG_LEVEL": "INFO",  # the exit's warning is what the test reads
    }
    # A session of its own: a failed test kills it with whatever it forked (a child holding its pipes open).
    return subprocess.Popen([sys.executable, "-m", "worker_tier", "worker", "--grace", QUICK_DRAIN_GRACE], env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def kill(process: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGKILL the worker and every process it forked (its session's group); what it wrote."""
    os.killpg(process.pid, signal.SIGKILL)
    return process.communicate()


def finish(process: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    """The exit code, stdout and stderr; the process is killed (and the test fails) if it has not ended by ``timeout``."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = kill(process)
        pytest.fail(f"the worker did not exit within {timeout} s; it wrote:\n{out[-3000:]}\n{err[-3000:]}")
    return process.returncode, out, err


def _client_credentials() -> dict[str, str]:
    return {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def test_a_missing_queue_at_start_exits_78_with_one_line_naming_the_queue_and_the_fix(endpoint):
    # GIVEN a queue URL no queue answers to
    missing = f"{endpoint}/123456789012/no-such-queue"
    # WHEN the container worker starts on it
    code, _, err = finish(start_worker(endpoint, missing, f"{endpoint}/123456789012/no-such-dlq"))
    # THEN it exits with EX_CONFIG and one line saying which queue, what SQS said and what to check: no traceback
    assert code == EXIT_CODE_CONFIGURATION, err
    assert err.strip().splitlines() == [
        f"GetQueueAttributes on {missing} was refused with AWS.SimpleQueueService.NonExistentQueue: check the queue URL "
        f"({contract.QUEUE_URL_VARIABLE}) and the task role's sqs:GetQueueAttributes permission"
    ]


def run_until_marked(endpoint: str, name: str, path: str, marker: Path) -> tuple[subprocess.Popen[str], Any, str]:
    """A worker started on new queues holding one message for ``path``, once its task wrote ``marker``: (the
    process, the SQS client, the queue URL). The test fails if no marker comes within 60 s."""
    queue_url, dlq_url = queues(endpoint, name)
    sqs = boto3.client("sqs", endpoint_url=endpoint, **_client_credentials())
    sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps({"marker": str(marker)}),
                     MessageAttributes={contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": path}})
    process = start_worker(endpoint, queue_url, dlq_url)
    deadline = time.monotonic() + 60
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if not marker.exists():
        out, err = kill(process)
        pytest.fail(f"the task did not finish; the worker wrote:\n{out[-3000:]}\n{err[-3000:]}")
    return process, sqs, queue_url


def test_a_thread_a_task_left_running_does_not_hold_the_exit_after_a_clean_drain(endpoint, tmp_path):
    # GIVEN a running worker whose task succeeded leaving a non-daemon thread that never ends
    marker = tmp_path / "done"
    process, sqs, queue_url = run_until_marked(endpoint, "lingering-thread", "/linger", marker)
    # WHEN ECS stops it (SIGTERM) and the drain finds nothing running
    process.send_signal(signal.SIGTERM)
    code, out, err = finish(process)
    # THEN it exits 0 (before ECS's SIGKILL), its log naming the thread it left behind
    assert code == 0, err
    left = [json.loads(line) for line in out.splitlines() if "threads left running" in line]
    assert [(line["message"], line["threads"], line["exit_code"]) for line in left] == [
        ("threads left running by tasks do not hold the exit: ending the process without them", [LINGERING_THREAD], 0)
    ]
    # AND the message was deleted: it succeeded
    assert sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"][
        "ApproximateNumberOfMessagesNotVisible"] == "0"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX's")
def test_a_tasks_forked_child_that_calls_sys_exit_ends_there(endpoint, tmp_path):
    # GIVEN a running worker whose task forks a child that calls sys.exit(0), and waits for it
    marker = tmp_path / "child-status"
    # WHEN the task runs
    process, _, _ = run_until_marked(endpoint, "forking-task", "/fork", marker)
    # THEN the child ended with status 0 (it did not go back to the worker's thread pool), and the task finished
    assert marker.read_text() == "0"
    process.send_signal(signal.SIGTERM)
    code, _, err = finish(process)
    assert code == 0, err
