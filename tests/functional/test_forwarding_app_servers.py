"""HTTP forwarding against real app servers, each its own process on 127.0.0.1: gunicorn (sync and gthread
workers), waitress, uvicorn, hypercorn, and the standard library's ``http.server`` (HTTP/1.0, and HTTP/1.1 for
interim answers). One app (tests/apps/forwarding_app.py) decides each answer from the message's body, so every
message's fate can be checked against the answer the app gave, by sqsd's rules (docs/container-worker.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from worker_tier.core import contract
from worker_tier.app.app_target import SqsdRequest
from worker_tier.core.errors import AppStatusError, RetryLater
from worker_tier.app.forwarding import RESPONSE_KEPT_BYTES, AppUnreachableError, HttpTarget
from worker_tier.core.settings import Settings
from worker_tier.app.sqsd import check_response

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "tests" / "apps" / "forwarding_app.py"
PYTHON = [sys.executable, "-m"]
SERVERS = {
    "gunicorn-sync": [*PYTHON, "gunicorn", "--workers", "1", "--log-level", "warning", "--bind", "127.0.0.1:{port}",
                      "tests.apps.forwarding_app:wsgi"],
    "gunicorn-gthread": [*PYTHON, "gunicorn", "--workers", "1", "--worker-class", "gthread", "--threads", "4",
                         "--log-level", "warning", "--bind", "127.0.0.1:{port}", "tests.apps.forwarding_app:wsgi"],
    "waitress": [*PYTHON, "waitress", "--listen=127.0.0.1:{port}", "tests.apps.forwarding_app:wsgi"],
    "uvicorn": [*PYTHON, "uvicorn", "--host", "127.0.0.1", "--port", "{port}", "--no-access-log", "--log-level", "warning",
                "tests.apps.forwarding_app:asgi"],
    "hypercorn": [*PYTHON, "hypercorn", "--bind", "127.0.0.1:{port}", "tests.apps.forwarding_app:asgi"],
    "stdlib-http10": [sys.executable, str(APP), "{port}"],
}
STARTUP_SECONDS = 30


@dataclass
class RunningApp:
    """An app server process on ``port``; ``log`` holds one line per request it received."""

    name: str
    port: int
    log: Path
    process: subprocess.Popen

    def requests(self) -> list[tuple[str, str, str]]:
        text = self.log.read_text() if self.log.exists() else ""
        return [tuple(line.split(" ", 2)) for line in text.splitlines()]  # type: ignore[misc]

    def posts_of(self, message_id: str) -> int:
        return sum(1 for method, _, seen in self.requests() if method == "POST" and seen == message_id)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


@contextlib.contextmanager
def app_server(name: str, log: Path, **environment: str):
    """Start the named server with the forwarding app; terminate it (then kill it) however the tests end."""
    port = free_port()
    command = [part.format(port=port) for part in SERVERS[name]]
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}", "FORWARDING_APP_LOG": str(log), **environment}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not listening(port):
            assert process.poll() is None, f"{name} exited: {process.stderr.read().decode()[-2000:]}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, f"{name} did not listen on {port} within {STARTUP_SECONDS} s"
            time.sleep(0.05)
        yield RunningApp(name, port, log, process)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module", params=list(SERVERS))
def app(request, tmp_path_factory):
    name = request.param
    with app_server(name, tmp_path_factory.mktemp(name) / "requests.log") as running:
        yield running


@pytest.fixture(scope="module")
def stdlib_http11(tmp_path_factory):
    with app_server("stdlib-http10", tmp_path_factory.mktemp("stdlib11") / "requests.log", FORWARDING_APP_HTTP11="1") as running:
        yield running


_ids = iter(range(1, 1_000_000))


def message(ask: dict, path: str = "/work") -> SqsdRequest:
    """A POST as sqsd makes it, with a fresh message id, whose body tells the app how to answer."""
    headers = (("Content-Type", "application/json"), ("User-Agent", "aws-sqsd/2.4"), ("X-Aws-Sqsd-Msgid", f"m-{next(_ids)}"))
    return SqsdRequest(path, headers, json.dumps(ask).encode())


def fate(target: HttpTarget, request: SqsdRequest) -> tuple:
    """What the worker does with the message, by sqsd's rules: ("delete",), ("retry after", s), ("fail", status, kept
    body), or ("no answer", reason)."""
    try:
        response = target.deliver(request)
    except AppUnreachableError as error:
        return ("no answer", str(error))
    try:
        check_response(request, response, time.time())
    except RetryLater as later:
        return ("retry after", later.delay_seconds)
    except AppStatusError as failed:
        return ("fail", failed.status, failed.response_body)
    return ("delete",)


def answer_body(status: int, size: int = 0) -> bytes:
    text = f"answer {status} ".encode()
    return (text + b"x" * (size - len(text)))[:size] if size else text.strip()


# What each message asks of the app, and the fate sqsd's rules give that answer.
MATRIX = [
    ({}, ("delete",)),
    ({"status": 404}, ("fail", 404, answer_body(404))),
    ({"status": 500}, ("fail", 500, answer_body(500))),
    ({"status": 429, "retry_after": 7}, ("retry after", 7)),
    ({"status": 503, "retry_after": 3}, ("retry after", 3)),
    ({"status": 503}, ("fail", 503, answer_body(503))),
    ({"close": True}, ("delete",)),
    ({"status": 500, "close": True}, ("fail", 500, answer_body(500))),
    ({"chunked": True}, ("delete",)),
    ({"status": 500, "chunked": True}, ("fail", 500, answer_body(500))),
    ({"split": True}, ("delete",)),
    ({"split": True, "pause": 0.3, "size": 2000}, ("delete",)),  # a slow body
    ({"sleep": 0.3}, ("delete",)),
    ({"size": 300_000}, ("delete",)),  # a large body: read whole, the connection kept
    ({"status": 500, "size": 5000}, ("fail", 500, answer_body(500, 5000)[:RESPONSE_KEPT_BYTES])),
    ({"status": 500, "size": 5000, "chunked": True}, ("fail", 500, answer_body(500, 5000)[:RESPONSE_KEPT_BYTES])),
    ({}, ("delete",)),
]


def test_every_message_fares_as_the_app_answered_and_each_is_posted_once(app):
    # GIVEN the app behind a real server, and a target whose kept-alive connections carry the messages in turn
    target = HttpTarget(Settings(container_worker=True, app_port=app.port, inactivity_timeout=20))
    requests = [message(ask) for ask, _ in MATRIX]

    # WHEN each message is forwarded (twice over, so answers meet reused connections and fresh ones)
    fates = [fate(target, request) for request in requests]
    again = [fate(target, request) for request in requests]
    target.close()

    # THEN each fate is the one sqsd's rules give the app's answer, and the app got each message once per forward
    assert fates == [expected for _, expected in MATRIX]
    assert again == fates
    ids = [request.header("X-Aws-Sqsd-Msgid") for request in requests]
    assert {message_id: app.posts_of(message_id) for message_id in ids} == dict.fromkeys(ids, 2)


def test_the_health_gate_passes_once_the_app_answers_200(app):
    # GIVEN the app behind a real server
    target = HttpTarget(Settings(container_worker=True, app_port=app.port, app_health_path="/health"))

    # WHEN the container worker's health gate checks it  THEN it passes, at the first check
    stop = threading.Event()
    started = len(app.requests())
    assert target.wait_until_healthy(stop) is True
    assert [line[:2] for line in app.requests()[started:]] == [("GET", "/health")]


def test_threads_forwarding_at_once_each_get_their_own_answer(app):
    # GIVEN messages whose answers differ, forwarded by four threads sharing one target's pool
    target = HttpTarget(Settings(container_worker=True, app_port=app.port, inactivity_timeout=20, http_connections=4))
    cases = [(ask, expected) for ask, expected in MATRIX if not ask.get("sleep") and not ask.get("pause")] * 2
    requests = [message(ask) for ask, _ in cases]
    fates: dict[int, tuple] = {}

    def run(indexes: range) -> None:
        for index in indexes:
            fates[index] = fate(target, requests[index])

    # WHEN they run at once
    threads = [threading.Thread(target=run, args=(range(n, len(requests), 4),)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    target.close()

    # THEN every message's fate is its own answer's
    assert [fates[index] for index in range(len(requests))] == [expected for _, expected in cases]


@pytest.mark.parametrize("interim", [[100], [103], [100, 103], [103, 103]])
def test_interim_answers_are_skipped_and_the_final_answer_decides(stdlib_http11, interim):
    # GIVEN an app that sends interim (1xx) answers before its final one, on a kept-alive connection
    target = HttpTarget(Settings(container_worker=True, app_port=stdlib_http11.port, inactivity_timeout=20))
    ok, failed = message({"interim": interim, "sleep": 0.3}), message({"status": 500})

    # WHEN a message answered 200 after them is forwarded, then one the app answers 500
    fates = [fate(target, ok), fate(target, failed)]
    target.close()

    # THEN the first succeeds and the second fails with its own 500: no message reads another's answer
    assert fates == [("delete",), ("fail", 500, answer_body(500))]
    assert stdlib_http11.posts_of(ok.header("X-Aws-Sqsd-Msgid")) == 1
    assert stdlib_http11.posts_of(failed.header("X-Aws-Sqsd-Msgid")) == 1


def test_a_101_answer_is_a_failure_and_its_connection_is_not_reused(stdlib_http11):
    # GIVEN an app that answers 101 Switching Protocols (then HTTP no more) on a kept-alive connection
    target = HttpTarget(Settings(container_worker=True, app_port=stdlib_http11.port, inactivity_timeout=20))

    # WHEN a message gets it, and another message follows
    switched = fate(target, message({"interim": [101]}))
    after = fate(target, message({}))
    target.close()

    # THEN the first fails with status 101; the next one is answered on its own connection and succeeds
    assert switched[:2] == ("fail", 101)
    assert after == ("delete",)


def test_an_interim_answer_before_a_chunked_final_one_over_http11(stdlib_http11):
    # GIVEN an app that sends 103 Early Hints, then a chunked 500
    target = HttpTarget(Settings(container_worker=True, app_port=stdlib_http11.port, inactivity_timeout=20))

    # WHEN the message is forwarded, then another that succeeds
    fates = [fate(target, message({"interim": [103], "status": 500, "chunked": True})), fate(target, message({}))]
    target.close()

    # THEN the final answer decides each
    assert fates == [("fail", 500, answer_body(500)), ("delete",)]


def test_a_204_that_declares_a_body_never_leaves_it_for_the_next_message(stdlib_http11):
    # GIVEN an app that answers 204 with Content-Length: 2 and writes those 2 bytes after its headers (as
    # http.server does), on a kept-alive connection: http.client reads no body for a 204
    target = HttpTarget(Settings(container_worker=True, app_port=stdlib_http11.port, inactivity_timeout=20))
    pairs = [(message({"status": 204, "body": "{}"}), message({})) for _ in range(10)]

    # WHEN each is followed at once by a message the app answers 200
    fates = [(fate(target, first), fate(target, second)) for first, second in pairs]
    target.close()

    # THEN every message fares by its own answer (a 204 is not sqsd's 200), and each was posted once
    assert fates == [(("fail", 204, b""), ("delete",))] * 10
    assert {stdlib_http11.posts_of(m.header("X-Aws-Sqsd-Msgid")) for pair in pairs for m in pair} == {1}


def test_an_app_dying_after_an_interim_answer_is_not_posted_the_message_again(stdlib_http11):
    # GIVEN an app that sends 103 Early Hints for a message on a kept-alive connection, works on it, and dies
    target = HttpTarget(Settings(container_worker=True, app_port=stdlib_http11.port, inactivity_timeout=20))
    assert fate(target, message({})) == ("delete",)
    dying = message({"interim": [103], "die": True})

    # WHEN it is forwarded
    outcome = fate(target, dying)
    target.close()

    # THEN it is the message's failure (retried later by SQS), never a second POST at once: the app had answered
    assert outcome[0] == "no answer"
    assert stdlib_http11.posts_of(dying.header("X-Aws-Sqsd-Msgid")) == 1


def test_an_answer_sent_before_the_app_read_the_message_decides_its_fate(stdlib_http11):
    # GIVEN an app that answers 503 with Retry-After: 120 and closes before reading a large message
    target = HttpTarget(Settings(container_worker=True, app_port=stdlib_http11.port, inactivity_timeout=20))
    big = b"x" * 4_000_000  # more than the sockets' buffers hold: the send breaks on the closed connection
    requests = [SqsdRequest("/early", (("X-Aws-Sqsd-Msgid", f"early-{n}"),), big) for n in range(3)]

    # WHEN each is forwarded (the send breaks on the closed connection)
    fates = [fate(target, request) for request in requests]
    target.close()

    # THEN the app's answer decides: retried after 120 s, not "no answer" with the ordinary backoff
    assert fates == [("retry after", 120)] * 3


def test_a_content_length_repeating_one_value_is_that_length(stdlib_http11):
    # GIVEN an app answering 200 with "Content-Length: 2, 2" (a proxy folding two equal lines) on a kept-alive connection
    target = HttpTarget(Settings(container_worker=True, app_port=stdlib_http11.port, inactivity_timeout=5, timeout_margin=1))

    # WHEN a message gets it, then a message gets a Content-Length of two lengths
    same = fate(target, message({"content_length": "2, 2", "size": 2}))
    mixed = fate(target, message({"content_length": "2, 3", "size": 2}))
    target.close()

    # THEN the first is read as 2 bytes and succeeds at once (RFC 9110 8.6); the second fails, naming the header
    assert same == ("delete",)
    assert mixed[0] == "no answer" and "Content-Length '2, 3' is not one length" in mixed[1]


def test_an_answer_beyond_the_readers_limits_fails_saying_it_could_not_be_read(stdlib_http11):
    # GIVEN an app that answers 200 with more header lines than http.client reads (100)
    target = HttpTarget(Settings(container_worker=True, app_port=stdlib_http11.port, inactivity_timeout=20))

    # WHEN a message gets that answer
    outcome = fate(target, message({"headers": 120}))
    target.close()

    # THEN it fails, saying the answer came but could not be read and why, not that none came
    assert outcome[0] == "no answer"
    assert "could not be read as HTTP: HTTPException('got more than 100 headers')" in outcome[1]
    assert "at most 100 header lines of 64 KiB" in outcome[1]


# --------------------------------------------------------------------------- the container worker process


@pytest.fixture(scope="module")
def moto_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
# Messages the worker process forwards: what each asks of the app, and where it must end.
PROCESS_CASES = [
    *[({"n": n}, "deleted") for n in range(12)],
    *[({"n": n, "close": True}, "deleted") for n in range(4)],
    ({"chunked": True}, "deleted"),
    ({"split": True, "size": 3000}, "deleted"),
    ({"status": 500, "size": 3000}, "dead-lettered"),
    ({"status": 404}, "dead-lettered"),
    ({"status": 503}, "dead-lettered"),
]


@pytest.mark.parametrize("server_name", ["gunicorn-sync", "stdlib-http10", "uvicorn"])
def test_the_container_worker_process_deletes_each_200_once_and_dead_letters_each_failure(
    moto_endpoint, tmp_path, server_name
):
    # GIVEN a work queue and its DLQ on a moto server, and the app behind a real server
    sqs = boto3.client("sqs", endpoint_url=moto_endpoint, region_name="us-east-1", aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    work = sqs.create_queue(QueueName=f"{server_name}-work")["QueueUrl"]
    dlq = sqs.create_queue(QueueName=f"{server_name}-dlq")["QueueUrl"]
    sent = {}
    for ask, ending in PROCESS_CASES:
        message_id = sqs.send_message(QueueUrl=work, MessageBody=json.dumps(ask))["MessageId"]
        sent[message_id] = (ask, ending)
    with app_server(server_name, tmp_path / "requests.log") as running:
        environment = {
            **os.environ, **CREDENTIALS, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}", "AWS_ENDPOINT_URL": moto_endpoint,
            contract.QUEUE_URL_VARIABLE: work, contract.DLQ_URL_VARIABLE: dlq, "POWERTOOLS_LOG_LEVEL": "WARNING",
            contract.setting_variable("app_port"): str(running.port),
            contract.setting_variable("container_worker"): "true",
            contract.setting_variable("app_health_path"): "/health",
            contract.setting_variable("http_connections"): "4",
            contract.setting_variable("max_retries"): "2",
            contract.setting_variable("error_visibility_timeout"): "1",
            contract.setting_variable("inactivity_timeout"): "20",
        }
        environment.pop(contract.CONTAINER_QUEUE_URL_VARIABLE, None)
        # A grace this long leaves 1 s long polls within the 120 s stop timeout: SIGTERM ends the process at once.
        worker = subprocess.Popen([*PYTHON, "worker_tier", "worker", "--grace", "114"], cwd=REPO, env=environment,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            # WHEN the worker process runs until every message left the queue
            deadline = time.monotonic() + 45
            while depth(sqs, work) or len(dead(sqs, dlq)) < sum(1 for _, e in PROCESS_CASES if e == "dead-lettered"):
                assert worker.poll() is None, worker.stdout.read()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "the messages did not all leave the queue"
                time.sleep(0.3)
        finally:
            worker.terminate()
            output, _ = worker.communicate(timeout=30)
        posts = Counter(seen for method, _, seen in running.requests() if method == "POST")

    # THEN each 200 message was posted once and deleted; each failure posted max_retries times and dead-lettered
    assert worker.returncode == 0, output[-3000:]
    expected_posts = {message_id: 1 if ending == "deleted" else 2 for message_id, (_, ending) in sent.items()}
    assert dict(posts) == expected_posts, output[-3000:]
    dead_bodies = sorted(m["Body"] for m in dead(sqs, dlq))
    assert dead_bodies == sorted(json.dumps(ask) for ask, ending in PROCESS_CASES if ending == "dead-lettered")


def depth(sqs, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])


def dead(sqs, url: str) -> list[dict]:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    if not int(attributes["ApproximateNumberOfMessages"]):
        return []
    found: dict[str, dict] = {}
    for _ in range(5):
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0,
                                  MessageAttributeNames=["All"]).get("Messages", [])
        found.update({m["MessageId"]: m for m in got})
    return list(found.values())
