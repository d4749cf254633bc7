"""HTTP forwarding against a real app server process on 127.0.0.1 (tests/functional/app_server.py)."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from tests.functional.app_server import documented_verify
from tests.support.aws_world import AwsWorld
from tests.support.container import depth
from worker_tier import Client
from worker_tier.core import contract, observability
from worker_tier.app.app_target import SqsdRequest
from worker_tier.container.consumer import Consumer, concurrency
from worker_tier.container.protection import TaskProtection
from worker_tier.app.forwarding import (
    AppTimeoutError,
    AppUnreachableError,
    HttpTarget,
    RESPONSE_KEPT_BYTES,
    SigningSecretError,
    parameter_name,
    read_signing_secret,
    signature,
    signature_v2,
)
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.worker.batch import Worker

APP_SERVER = Path(__file__).with_name("app_server.py")
REGION = "us-east-1"
SECRET = "s3cr3t-signing-key"


@dataclass
class AppServer:
    """The app server process, its port, and what it received."""

    process: subprocess.Popen
    port: int

    def requests(self, path: str | None = None) -> list[dict]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_requests", timeout=5) as answer:
            seen = json.loads(answer.read())
        return [r for r in seen if path is None or r["path"] == path]


@pytest.fixture
def start_app():
    started: list[subprocess.Popen] = []

    def start(*options: str) -> AppServer:
        process = subprocess.Popen([sys.executable, str(APP_SERVER), *options], stdout=subprocess.PIPE, text=True)
        started.append(process)
        return AppServer(process, int(process.stdout.readline()))

    yield start
    for process in started:
        process.kill()
        process.wait()


def target_for(app: AppServer, **settings) -> HttpTarget:
    return HttpTarget(Settings(container_worker=True, app_port=app.port, **settings))


def post(path: str, body: bytes = b'{"task": "x"}', headers: tuple[tuple[str, str], ...] = ()) -> SqsdRequest:
    base = (("Content-Type", "application/json"), ("User-Agent", "aws-sqsd/2.4"), ("X-Aws-Sqsd-Msgid", "m-1"))
    return SqsdRequest(path, base + headers, body)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_posts_the_request_as_given_and_returns_the_answer(start_app):
    # GIVEN an app and a request with sqsd's headers, to a path with a query string
    app = start_app()
    target = target_for(app)
    request = post("/ok?source=cron", b'{"task": "report", "arguments": [1]}', (("X-Aws-Sqsd-Attr-color", "blue"),))

    # WHEN it is delivered
    response = target.deliver(request)

    # THEN the app got that POST, header for header and byte for byte, and its answer comes back
    assert (response.status, response.body) == (200, b"done")
    [seen] = app.requests("/ok?source=cron")
    assert seen["method"] == "POST" and seen["body"] == '{"task": "report", "arguments": [1]}'
    headers = dict(seen["headers"])
    assert {name: headers[name] for name, _ in request.headers} == dict(request.headers)
    assert headers["Content-Length"] == str(len(request.body))
    assert contract.SIGNATURE_HEADER not in headers


def test_retry_after_comes_back_in_the_answer(start_app):
    # GIVEN an app that answers 429 with Retry-After
    app = start_app()

    # WHEN a message is delivered
    response = target_for(app).deliver(post("/busy"))

    # THEN the status, the header (lower-case name) and the body come back for the worker's outcome rules
    assert (response.status, response.headers["retry-after"], response.body) == (429, "7", b"slow down")


def test_a_failure_status_keeps_the_first_kib_of_the_body(start_app):
    # GIVEN an app that answers 500 with a 2005-byte body
    app = start_app()
    target = target_for(app)

    # WHEN a message is delivered
    response = target.deliver(post("/fail"))

    # THEN the answer is returned, not raised, with the first KiB the worker's failure reason uses
    assert response.status == 500 and response.body.startswith(b"boom ") and len(response.body) == RESPONSE_KEPT_BYTES == 1024
    # AND the rest was read off the connection, which stays alive for the next request
    assert target.deliver(post("/ok")).status == 200
    assert len({r["connection"] for r in app.requests()}) == 1


def test_a_refused_connection_raises_naming_the_port():
    # GIVEN nothing listening on app_port
    port = free_port()
    target = HttpTarget(Settings(container_worker=True, app_port=port))

    # WHEN a message is delivered
    with pytest.raises(AppUnreachableError) as raised:
        target.deliver(post("/ok"))

    # THEN the failure says the connection was refused, and where
    assert str(raised.value) == (
        f"the app refused the connection to 127.0.0.1:{port} for POST /ok: nothing listens on app_port {port} "
        "(is the app up?)"
    )


def test_a_slow_app_times_out_after_inactivity_timeout_without_a_second_post(start_app):
    # GIVEN an app that takes 4 s, and inactivity_timeout 2 s (the least timeout_margin 1 allows)
    app = start_app("--slow-seconds", "4")
    target = target_for(app, inactivity_timeout=2, timeout_margin=1)

    # WHEN a message is delivered
    started = time.monotonic()
    with pytest.raises(AppTimeoutError) as raised:
        target.deliver(post("/slow"))

    # THEN it fails after about 2 s, naming the timeout, and the app got the POST once
    assert time.monotonic() - started < 3.5
    assert str(raised.value) == (
        f"the app at 127.0.0.1:{app.port} did not answer POST /slow within inactivity_timeout 2 s "
        "(EB InactivityTimeout): raise inactivity_timeout if the app needs longer"
    )
    assert len(app.requests("/slow")) == 1


def test_keep_alive_connections_are_reused(start_app):
    # GIVEN an app
    app = start_app()
    target = target_for(app)

    # WHEN five messages are delivered one after another
    statuses = [target.deliver(post("/ok")).status for _ in range(5)]

    # THEN all went over one connection
    assert statuses == [200] * 5
    assert {r["connection"] for r in app.requests("/ok")} == {app.requests("/ok")[0]["connection"]}


def test_threads_share_the_pool_one_connection_each_at_most(start_app):
    # GIVEN an app and four threads delivering at once
    app = start_app()
    target = target_for(app)

    # WHEN each delivers five messages
    def deliver_five() -> None:
        for _ in range(5):
            assert target.deliver(post("/ok")).status == 200

    threads = [threading.Thread(target=deliver_five) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # THEN the app got all twenty on at most four connections
    seen = app.requests("/ok")
    assert len(seen) == 20 and len({r["connection"] for r in seen}) <= 4


def test_a_kept_alive_connection_closed_as_the_post_went_out_is_posted_again_once(start_app, caplog):
    # GIVEN a kept-alive connection that the app closes when the next request arrives, without answering
    caplog.set_level(logging.INFO, logger=observability.logger.name)
    app = start_app()
    target = target_for(app)
    target.deliver(post("/ok"))

    # WHEN a message goes out on it
    response = target.deliver(post("/drop-reused-once"))

    # THEN it is posted again on a new connection, and answered
    assert response.status == 200
    assert [r for r in caplog.records if "posting again on a new connection" in r.getMessage()]
    first, second = app.requests("/drop-reused-once")
    assert first["connection"] == app.requests("/ok")[0]["connection"] != second["connection"]


def test_a_new_connection_closed_without_an_answer_is_a_failure_and_is_not_posted_again(start_app):
    # GIVEN an app that closes the connection without answering
    app = start_app()
    target = target_for(app)

    # WHEN a message goes out on a new connection
    with pytest.raises(AppUnreachableError) as raised:
        target.deliver(post("/drop"))

    # THEN it is the message's failure, and the app got it once: it may have acted on it
    assert str(raised.value).startswith(f"POST /drop to the app at 127.0.0.1:{app.port} got no answer: ")
    assert len(app.requests("/drop")) == 1


def test_a_connection_the_app_closed_while_idle_is_replaced_before_use(start_app, caplog):
    # GIVEN an app that closes connections idle for 0.2 s, and one kept-alive connection
    caplog.set_level(logging.INFO, logger=observability.logger.name)
    app = start_app("--idle-timeout", "0.2")
    target = target_for(app)
    target.deliver(post("/ok"))
    time.sleep(0.6)

    # WHEN the next message goes out
    response = target.deliver(post("/ok"))

    # THEN it went on a new connection, once: the closed one carried nothing, so nothing was posted again
    assert response.status == 200
    seen = app.requests("/ok")
    assert len(seen) == 2 and seen[0]["connection"] != seen[1]["connection"]
    assert not [r for r in caplog.records if "posting again" in r.getMessage()]


def test_the_health_gate_waits_for_200(start_app):
    # GIVEN an app whose health check answers 503 twice, then 200
    app = start_app("--unhealthy", "2")
    target = target_for(app, app_health_path="/health")

    # WHEN the worker waits for it
    healthy = target.wait_until_healthy(threading.Event())

    # THEN it is healthy after the third check
    assert healthy is True
    assert [r["method"] for r in app.requests("/health")] == ["GET"] * 3


def test_a_stop_during_the_health_gate_ends_the_wait(start_app):
    # GIVEN an app that never gets healthy
    app = start_app("--unhealthy", "1000")
    target = target_for(app, app_health_path="/health")
    stop = threading.Event()

    # WHEN SIGTERM sets the stop event during the wait
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    healthy = target.wait_until_healthy(stop)

    # THEN the wait ends at once, unhealthy
    assert healthy is False
    assert time.monotonic() - started < 1.5


def test_a_stop_while_connecting_to_an_app_whose_listen_queue_is_full_ends_the_wait():
    # GIVEN an app listening but not yet accepting, its listen queue full: a connect neither succeeds nor is refused
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    target = HttpTarget(Settings(container_worker=True, app_port=port, app_health_path="/health", connect_timeout=30))
    stop = threading.Event()

    # WHEN SIGTERM sets the stop event while the health check connects
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    try:
        healthy = target.wait_until_healthy(stop)
    finally:
        for open_socket in (*fillers, server):
            open_socket.close()

    # THEN the wait ends, unhealthy, long before connect_timeout (30 s)
    assert healthy is False
    assert time.monotonic() - started < 10


def test_without_a_health_path_the_app_counts_as_healthy():
    # GIVEN no app_health_path (and no app listening)
    target = HttpTarget(Settings(container_worker=True, app_port=free_port()))

    # WHEN / THEN the gate opens at once
    assert target.wait_until_healthy(threading.Event()) is True


@pytest.fixture
def secrets():
    with mock_aws():
        yield boto3.client("secretsmanager", region_name=REGION), boto3.client("ssm", region_name=REGION)


def test_a_signed_post_verifies_on_the_app_side(start_app, secrets):
    # GIVEN the signing key in Secrets Manager, and an app that checks signatures with it
    secretsmanager, _ = secrets
    arn = secretsmanager.create_secret(Name="worker/signing", SecretString=SECRET)["ARN"]
    app = start_app("--secret", SECRET)
    settings = Settings(container_worker=True, app_port=app.port, app_signing_secret_arn=arn)

    # WHEN the target is made from the settings and delivers a message
    response = HttpTarget.from_settings(settings, secretsmanager=secretsmanager).deliver(post("/signed"))

    # THEN the app verified the signature
    assert response.status == 200
    [seen] = app.requests("/signed")
    assert dict(seen["headers"])[contract.SIGNATURE_HEADER].startswith("v1=")


def test_a_post_signed_with_another_key_is_refused_by_the_app(start_app, secrets):
    # GIVEN an app that checks signatures with another key
    app = start_app("--secret", "another-key")

    # WHEN a message is signed with ours
    target = HttpTarget(Settings(container_worker=True, app_port=app.port), secret=SECRET.encode())
    response = target.deliver(post("/signed"))

    # THEN the app refuses it
    assert (response.status, response.body) == (401, b"bad signature")


def test_a_post_carries_a_v2_signature_the_documented_check_verifies(start_app):
    # GIVEN an app that checks v2 signatures with our key, by the check docs/container-worker.md shows
    app = start_app("--secret", SECRET)
    target = HttpTarget(Settings(container_worker=True, app_port=app.port), secret=SECRET.encode())

    # WHEN messages are posted to a path, and to a path with a query
    answers = [target.deliver(post(path)) for path in ("/signed-v2", "/signed-v2/reports?day=1")]

    # THEN the app verified both; each POST carried v1 and v2
    assert [(a.status, a.body) for a in answers] == [(200, b"done"), (200, b"done")]
    for seen in app.requests("/signed-v2") + app.requests("/signed-v2/reports?day=1"):
        headers = dict(seen["headers"])
        assert headers[contract.SIGNATURE_HEADER].startswith("v1=")
        assert headers[contract.SIGNATURE_V2_HEADER].startswith("v2=")


def replay(port: int, path: str, headers: dict[str, str], body: bytes) -> int:
    """POST a captured request again, as an attacker who saw it would: the status the app answers."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("POST", path, body=body, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def test_a_captured_post_replayed_with_another_message_id_or_path_fails_v2(start_app):
    # GIVEN a signed POST captured on its way to the app
    app = start_app("--secret", SECRET)
    target = HttpTarget(Settings(container_worker=True, app_port=app.port), secret=SECRET.encode())
    assert target.deliver(post("/signed-v2/a")).status == 200
    [seen] = app.requests("/signed-v2/a")
    captured = {name: value for name, value in seen["headers"] if name.lower() not in ("host", "content-length")}
    body = seen["body"].encode()

    # WHEN it is replayed as it was, with another message id, and to another path
    same = replay(app.port, "/signed-v2/a", captured, body)
    other_id = replay(app.port, "/signed-v2/a", {**captured, "X-Aws-Sqsd-Msgid": "m-2"}, body)
    other_path = replay(app.port, "/signed-v2/b", captured, body)

    # THEN v2 refuses both changes (the unchanged replay within the window is the app's to spot by message id)
    assert (same, other_id, other_path) == (200, 401, 401)
    # AND v1, which signs only the timestamp and the body, would have let both through (the documented difference)
    assert replay(app.port, "/signed", {**captured, "X-Aws-Sqsd-Msgid": "m-2"}, body) == 200


NOW = str(int(time.time()))


@pytest.mark.parametrize(
    ("timestamp", "signature_value"),
    [
        ("\u00b2", "v1=00"),  # a Unicode digit: str.isdigit() says yes, int() raises
        ("\u0661\u0667\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660", "v1=00"),  # Arabic-Indic digits
        ("9" * 5000, "v1=00"),  # more digits than int() reads
        ("", "v1=00"),
        ("-5", "v1=00"),
        (NOW, "v1=\u00e9"),  # a non-ASCII signature: hmac.compare_digest raises on such str
        (NOW, None),
    ],
    ids=["unicode-digit", "arabic-indic-digits", "5000-digits", "empty", "negative", "non-ascii-signature", "no-signature"],
)
def test_the_documented_checks_return_false_on_malformed_headers(timestamp, signature_value):
    # GIVEN the checks docs/container-worker.md shows, and headers an attacker made
    verify, verify_v2 = documented_verify(), documented_verify("verify_v2")
    headers = {"X-Worker-Tier-Timestamp": timestamp, "X-Aws-Sqsd-Msgid": "m-1",
               contract.SIGNATURE_HEADER: signature_value, contract.SIGNATURE_V2_HEADER: signature_value}

    # WHEN they check them  THEN both say no, without raising
    assert verify(SECRET.encode(), headers, b"{}") is False
    assert verify_v2(SECRET.encode(), "POST", "/work", headers, b"{}") is False


def test_the_documented_v2_check_refuses_a_newline_or_a_non_text_part():
    # GIVEN a valid v2 signature for one request, made now (not at import: a long run would outlast its 300 s tolerance)
    verify_v2, now = documented_verify("verify_v2"), str(int(time.time()))
    headers = {"X-Worker-Tier-Timestamp": now, "X-Aws-Sqsd-Msgid": "m-1",
               contract.SIGNATURE_V2_HEADER: signature_v2(SECRET.encode(), "POST", "/work", "m-1", now, b"{}")}
    assert verify_v2(SECRET.encode(), "POST", "/work", headers, b"{}") is True

    # WHEN a part is not text, holds a newline, or the body is not bytes  THEN it says no, without raising
    assert verify_v2(SECRET.encode(), None, "/work", headers, b"{}") is False
    assert verify_v2(SECRET.encode(), "POST", "/work\nm-1", headers, b"{}") is False
    assert verify_v2(SECRET.encode(), "POST", "/work", headers, "{}") is False
    assert verify_v2(SECRET.encode(), "GET", "/work", headers, b"{}") is False


def test_the_signing_key_can_come_from_an_ssm_secure_string(secrets):
    # GIVEN the key in an SSM SecureString parameter under a path
    _, ssm = secrets
    ssm.put_parameter(Name="/worker/signing", Value=SECRET, Type="SecureString")
    arn = ssm.get_parameter(Name="/worker/signing")["Parameter"]["ARN"]

    # WHEN it is read by its ARN
    key = read_signing_secret(arn, ssm=ssm)

    # THEN it is the decrypted value
    assert key == SECRET.encode()


class BlankSecrets:
    """A Secrets Manager stand-in whose secret has no value (the API refuses to store one; a rotation could clear it)."""

    def get_secret_value(self, SecretId: str) -> dict:
        return {"ARN": SecretId, "SecretString": ""}


def test_an_empty_signing_key_is_refused():
    # GIVEN a secret whose value is empty
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:worker/blank-AbCdEf"

    # WHEN it is read / THEN the error names the ARN and the rule
    with pytest.raises(SigningSecretError) as raised:
        read_signing_secret(arn, secretsmanager=BlankSecrets())
    assert str(raised.value) == f"app_signing_secret_arn {arn} holds an empty value: the signing key must not be empty"


def forwarding_consumer(aws: AwsWorld, settings: Settings) -> Consumer:
    """A container worker forwarding the work queue to the app, as ``python -m worker_tier worker`` builds it."""
    worker = Worker(settings, queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                    registry=Registry(), sqs=aws.sqs, dynamodb=aws.dynamodb, app_target=HttpTarget(settings))
    return Consumer(worker, aws.sqs, aws.queue_url, concurrency=concurrency(settings), poll_wait_seconds=1,
                    heartbeat_interval=1, protection=TaskProtection(agent_uri=""))


def forwarding_settings(app: AppServer, **overrides) -> Settings:
    return Settings(container_worker=True, app_port=app.port, app_health_path="/health", error_visibility_timeout=1,
                    **overrides)


def wait_for(condition, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_the_container_worker_forwards_after_the_health_gate_backs_off_a_500_and_deletes_on_200(aws, start_app):
    # GIVEN an app healthy after two checks whose route fails once with 500, then answers 200
    app = start_app("--unhealthy", "2")
    settings = forwarding_settings(app, http_path="/fail-once")
    Client(aws.queue_url, sqs=aws.sqs).send("/reports", '{"task": "report"}')
    consumer = forwarding_consumer(aws, settings)

    # WHEN the container worker runs until the app got the message twice
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    wait_for(lambda: len(app.requests("/fail-once")) == 2 and depth(aws) == 0)
    consumer.stopping.set()
    thread.join(10)

    # THEN no message went out before the app was healthy; the 500 backed off and the 200 deleted it
    assert [r["method"] for r in app.requests()] == ["GET"] * 3 + ["POST"] * 2
    first, second = app.requests("/fail-once")
    assert [dict(r["headers"])["X-Aws-Sqsd-Receive-Count"] for r in (first, second)] == ["1", "2"]
    assert dict(first["headers"])["X-Aws-Sqsd-Path"] == "/reports" and first["body"] == '{"task": "report"}'
    assert aws.dead_letters() == [] and not thread.is_alive()


def test_the_container_worker_dead_letters_with_the_status_and_body_after_max_retries(aws, start_app):
    # GIVEN an app whose route always answers 500
    app = start_app()
    settings = forwarding_settings(app, http_path="/fail", max_retries=2)
    Client(aws.queue_url, sqs=aws.sqs).send("/reports", "{}")
    consumer = forwarding_consumer(aws, settings)

    # WHEN the container worker runs until the message left the queue
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    wait_for(lambda: depth(aws) == 0)
    consumer.stopping.set()
    thread.join(10)

    # THEN it was posted max_retries times and dead-lettered with the status and the body's start
    assert len(app.requests("/fail")) == 2
    [dead] = aws.dead_letters()
    reason = dead["MessageAttributes"][contract.FAILURE_ATTRIBUTE]["StringValue"]
    assert "the app answered 500 to POST /fail; only 200 deletes a message (sqsd's rule). Its body starts 'boom x" in reason


def test_a_stop_while_the_app_is_unhealthy_takes_no_message(aws, start_app):
    # GIVEN an app that never gets healthy, and a message
    app = start_app("--unhealthy", "1000")
    Client(aws.queue_url, sqs=aws.sqs).send("/reports", "{}")
    consumer = forwarding_consumer(aws, forwarding_settings(app))
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    wait_for(lambda: len(app.requests("/health")) >= 2)

    # WHEN SIGTERM sets the stop
    consumer.stopping.set()
    thread.join(5)

    # THEN the worker ended without taking the message: this is its first receive
    assert not thread.is_alive()
    got = aws.sqs.receive_message(QueueUrl=aws.queue_url, MessageSystemAttributeNames=["ApproximateReceiveCount"])
    assert got["Messages"][0]["Attributes"]["ApproximateReceiveCount"] == "1"
    assert app.requests("/") == [] and [r["method"] for r in app.requests()] == ["GET"] * len(app.requests())


def test_forwarding_runs_http_connections_threads_and_tasks_container_concurrency():
    # GIVEN settings with and without app_port / WHEN / THEN the container worker's threads follow EB's HttpConnections
    assert concurrency(Settings(container_worker=True, app_port=8080, http_connections=7)) == 7
    assert concurrency(Settings(container_worker=True, container_concurrency=3, http_connections=7)) == 3


@pytest.mark.parametrize(
    ("arn", "name"),
    [
        ("arn:aws:ssm:eu-west-1:123456789012:parameter/worker/signing", "/worker/signing"),
        ("arn:aws:ssm:eu-west-1:123456789012:parameter/signing", "signing"),
    ],
)
def test_an_ssm_arn_names_its_parameter_with_or_without_a_path(arn, name):
    # GIVEN an SSM parameter ARN / WHEN its name is read / THEN a path keeps its leading slash, a plain name has none
    assert parameter_name(arn) == name


def test_a_signing_key_shared_from_another_account_is_read_by_its_arn():
    # GIVEN a SecureString parameter another account shares (the settings name it by ARN), and botocore's Stubber
    # standing for SSM, which reads a shared parameter only by its full ARN (a bare name is the caller's own)
    arn = "arn:aws:ssm:eu-west-1:210987654321:parameter/shared/signing"
    ssm = boto3.client("ssm", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ssm) as stub:
        stub.add_response("get_parameter", {"Parameter": {"Name": "/shared/signing", "Value": "k3y"}},
                          {"Name": arn, "WithDecryption": True})

        # WHEN the container worker reads its signing key
        key = read_signing_secret(arn, ssm=ssm)

        # THEN it asked for the parameter by ARN, and got the shared key
        stub.assert_no_pending_responses()
    assert key == b"k3y"


# --------------------------------------------------------------------------- signing


def test_the_signature_covers_what_the_docs_claim_and_they_name_what_it_does_not():
    """signing covers what it claims. v1 signs the timestamp and the body only, so two empty-body ticks
    to different paths in the same second share a signature (v2, signature_v2, binds them; its replay
    tests are in test_forwarding.py)
    It checks that
    v1 binds what it claims and that docs/container-worker.md states the gap and what an app should do."""
    # GIVEN v1 signatures  THEN the timestamp and the body are bound, the path is not
    assert signature(b"key", "1700000000", b"") != signature(b"key", "1700000001", b"")
    assert signature(b"key", "1700000000", b"a") != signature(b"key", "1700000000", b"b")
    docs = (Path(__file__).parents[2] / "docs" / "container-worker.md").read_text(encoding="utf-8")
    assert "not the method, the path or the sqsd headers" in docs
    assert "also verifies for a POST of another path in the same second" in docs
