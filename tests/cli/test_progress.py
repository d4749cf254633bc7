"""Progress bars: on a terminal (a pseudo-terminal here), never with --json, never when piped.

The command runs as a subprocess (``python -m worker_tier``) against moto's server, as a person runs it.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.cli.deployment import NOW
from worker_tier.core import contract, envelope, message
from worker_tier.core.errors import NonRetryableError

REPO = Path(__file__).resolve().parents[2]
BAR = "━"  # rich's bar character
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def server():
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    yield f"http://{host}:{port}"
    moto.stop()


@pytest.fixture
def queues(server, request):
    sqs = boto3.client("sqs", endpoint_url=server, region_name="us-east-1", aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    name = request.node.name[-40:].replace("[", "-").replace("]", "")
    work, dlq = (sqs.create_queue(QueueName=f"{name}-{kind}")["QueueUrl"] for kind in ("work", "dlq"))
    original = {contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/a"}}
    reason = message.failure_reason(NonRetryableError("bad"), attempts=3, path="/a", failed_at=NOW)
    for n in range(25):
        sqs.send_message(QueueUrl=dlq, MessageBody=f"m{n}", MessageAttributes=envelope.dead_letter_attributes(original, reason))
    return ["--endpoint-url", server, "--region", "us-east-1", "--queue-url", work, "--dlq-url", dlq]


def _on_terminal(args: list[str]) -> str:
    """Run the command with stdin, stdout and stderr on a pseudo-terminal; everything it wrote."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "worker_tier", *args], stdin=terminal, stdout=terminal,
                               stderr=terminal, env=_environment(), close_fds=True)
    os.close(terminal)
    written = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        written += chunk
    process.wait(timeout=120)
    os.close(controller)
    assert process.returncode == 0, written.decode(errors="replace")
    return written.decode(errors="replace")


def _piped(args: list[str]) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "worker_tier", *args], capture_output=True, text=True, timeout=120,
                            env=_environment(), check=False, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    return result


def _environment() -> dict[str, str]:
    return {**os.environ, **CREDENTIALS, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
            "COLUMNS": "120"}


@pytest.mark.parametrize("command", [["dlq", "list"], ["redrive", "--path", "/a", "--yes"]])
def test_the_progress_bar_appears_on_a_terminal(queues, command):
    # WHEN the command walks 25 dead letters on a terminal
    written = _on_terminal([*queues, *command])
    # THEN a progress bar was drawn, and it reached all 25
    assert BAR in written and "25/25" in written


@pytest.mark.parametrize("command", [["dlq", "list", "--json"], ["redrive", "--path", "/a", "--yes", "--json"]])
def test_no_progress_bar_with_json_even_on_a_terminal(queues, command):
    written = _on_terminal([*queues, *command])
    assert BAR not in written and "25/25" not in written and '"' in written


@pytest.mark.parametrize("command", [["dlq", "list"], ["redrive", "--path", "/a"]])
def test_no_progress_bar_when_piped(queues, command):
    result = _piped([*queues, *command])
    assert BAR not in result.stdout + result.stderr and "\x1b[" not in result.stdout + result.stderr
    assert "/a" in result.stdout or "moved 25" in result.stdout
