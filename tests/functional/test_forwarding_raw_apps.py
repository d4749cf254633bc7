"""HTTP forwarding against raw socket apps on 127.0.0.1 that misbehave: drips, half-written, huge or garbage
answers, header rules, cron.yaml entries as forwarded ticks, and when a request is posted again.

Each test's docstring states the behaviour it checks. The raw apps play the misbehaving app (no code under test is
patched).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from worker_tier.app.app_target import SqsdRequest
from worker_tier.app.forwarding import AppTimeoutError, AppUnreachableError, HttpTarget
from worker_tier.core.settings import Settings
from worker_tier.app.sqsd import request_for
from worker_tier.core.task import Task
from worker_tier.core.errors import CronConfigError
from worker_tier.periodic import cron_config


# --------------------------------------------------------------------------- raw app helper


class RawApp:
    """A listening socket whose every connection is served by ``handler(conn, app)`` in its own thread."""

    def __init__(self, handler):
        self.handler = handler
        self.raw: list[bytes] = []  # each request as received (headers + body)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            self.handler(conn, self)
        except OSError:
            pass
        finally:
            conn.close()

    def read_request(self, conn) -> bytes | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length:
            body += conn.recv(65536)
        self.raw.append(head + b"\r\n\r\n" + body)
        return head

    def close(self):
        self.sock.close()


@pytest.fixture
def raw_app():
    apps: list[RawApp] = []

    def start(handler) -> RawApp:
        app = RawApp(handler)
        apps.append(app)
        return app

    yield start
    for app in apps:
        app.close()


def target(app: RawApp, **settings) -> HttpTarget:
    values = {"inactivity_timeout": 2, "timeout_margin": 1, "connect_timeout": 1, **settings}
    return HttpTarget(Settings(container_worker=True, app_port=app.port, **values))


def post(path: str = "/", body: bytes = b'{"task": "x"}', headers=()) -> SqsdRequest:
    base = (("Content-Type", "application/json"), ("User-Agent", "aws-sqsd/2.4"), ("X-Aws-Sqsd-Msgid", "m-1"))
    return SqsdRequest(path, base + tuple(headers), body)


def drip(conn, data: bytes, pause: float) -> None:
    for i in range(len(data)):
        conn.sendall(data[i : i + 1])
        time.sleep(pause)


# --------------------------------------------------------------------------- timeouts bound every call


def test_a_header_drip_is_cut_off_at_inactivity_timeout(raw_app):
    """'the whole answer must come within inactivity_timeout of the POST'. An app that drips its
    headers one byte at a time (each recv inside the per-recv socket timeout) holds the thread far longer."""

    def handler(conn, app):
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        drip(conn, b"X-Drip: abcdefghijklmnopqrstuvwxyz1234567\r\n", 0.15)  # ~6 s of headers
        conn.sendall(b"Content-Length: 0\r\n\r\n")

    app = raw_app(handler)
    started = time.monotonic()
    with pytest.raises(AppTimeoutError):
        target(app).deliver(post())
    assert time.monotonic() - started < 3.5, f"took {time.monotonic() - started:.1f} s with inactivity_timeout 2 s"


def test_a_body_drip_is_cut_off_at_inactivity_timeout(raw_app):
    """timeouts bound every call. read(64 KiB) on a Content-Length body blocks until all of it came."""

    def handler(conn, app):
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n")
        drip(conn, b"x" * 45, 0.13)  # ~6 s

    app = raw_app(handler)
    started = time.monotonic()
    with pytest.raises(AppTimeoutError):
        target(app).deliver(post())
    assert time.monotonic() - started < 3.5, f"took {time.monotonic() - started:.1f} s with inactivity_timeout 2 s"


def test_a_stop_during_a_dripping_health_check_ends_the_gate_promptly(raw_app):
    """a SIGTERM during the health gate exits cleanly (ECS kills after stopTimeout). The stop event is
    only looked at between checks, and one check is bounded per recv, not in total."""

    def handler(conn, app):
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        drip(conn, b"X-Drip: " + b"a" * 50 + b"\r\n", 0.15)  # ~7 s
        conn.sendall(b"Content-Length: 0\r\n\r\n")

    app = raw_app(handler)
    http = target(app, app_health_path="/health")
    stop = threading.Event()
    result: list[bool] = []
    worker = threading.Thread(target=lambda: result.append(http.wait_until_healthy(stop)), daemon=True)
    worker.start()
    time.sleep(0.3)
    stop.set()
    stopped_at = time.monotonic()
    worker.join(timeout=15)
    assert time.monotonic() - stopped_at < 3.0, f"the gate returned {time.monotonic() - stopped_at:.1f} s after the stop"
    assert result == [False], "a stop during the gate must not report the app healthy"


# --------------------------------------------------------------------------- half-written / huge / garbage answers


def test_a_200_whose_body_is_cut_short_is_not_a_success(raw_app):
    """a half-written response ends in a failure with a reason, never a silent success.
    http.client's read(amt) returns short at EOF without IncompleteRead."""

    def handler(conn, app):
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")

    app = raw_app(handler)
    with pytest.raises(AppUnreachableError):
        answer = target(app).deliver(post())
        print("delivered as", answer.status, len(answer.body), "bytes of 100")


def test_a_huge_answer_is_not_buffered_whole(raw_app):
    """a huge response ends in a failure or is capped; the reason keeps only 1 KiB, yet the
    whole body is read into memory (an app streaming GBs OOM-kills the container and every in-flight message)."""
    size = 48 * 1024 * 1024

    def handler(conn, app):
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n" % size)
        block = b"x" * (1024 * 1024)
        for _ in range(48):
            conn.sendall(block)

    app = raw_app(handler)
    try:
        answer = target(app, inactivity_timeout=30).deliver(post())
    except AppUnreachableError:
        return
    assert len(answer.body) <= 1024 * 1024, f"{len(answer.body)} bytes held in memory for one answer"


def test_a_non_http_answer_is_a_failure_with_a_reason(raw_app):
    def handler(conn, app):
        app.read_request(conn)
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    app = raw_app(handler)
    with pytest.raises(AppUnreachableError, match="could not be read as HTTP: BadStatusLine"):
        target(app).deliver(post())


def test_100_continue_then_200_is_a_success(raw_app):
    def handler(conn, app):
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    app = raw_app(handler)
    assert target(app).deliver(post()).status == 200


@pytest.mark.parametrize("head", [b"HTTP/1.0 200 OK\r\n", b"HTTP/1.1 200 OK\r\nConnection: close\r\n"])
def test_an_answer_that_closes_its_connection_is_read_whole_when_its_body_comes_later(raw_app, head):
    # GIVEN an app that says it will close the connection, and sends its body a moment after its headers
    # (gunicorn's sync worker does both; http.client closes the socket as soon as it reads such headers)
    def handler(conn, app):
        while app.read_request(conn) is not None:
            conn.sendall(head + b"\r\n")
            time.sleep(0.1)
            conn.sendall(b"done")
            return

    app = raw_app(handler)
    http_target = target(app, app_health_path="/health")

    # WHEN a message is posted, and the health gate checks  THEN both read the whole answer
    answer = http_target.deliver(post())
    assert (answer.status, answer.body) == (200, b"done")
    assert http_target.wait_until_healthy(threading.Event()) is True
    assert app.connections == 2


def test_a_connection_with_bytes_past_its_answer_is_not_reused(raw_app):
    # GIVEN an app whose first answer carries more bytes than its Content-Length on a kept-alive connection
    answers = iter([b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndoneHTTP/1.1 500 Stale\r\nContent-Length: 0\r\n\r\n",
                    b"HTTP/1.1 500 Boom\r\nContent-Length: 4\r\n\r\nboom"])

    def handler(conn, app):
        while app.read_request(conn) is not None:
            conn.sendall(next(answers))

    app = raw_app(handler)
    http_target = target(app)

    # WHEN two messages are posted one after the other
    first, second = http_target.deliver(post()), http_target.deliver(post())

    # THEN each got its own answer, and the second went out on a new connection
    assert (first.status, first.body) == (200, b"done")
    assert (second.status, second.body) == (500, b"boom")
    assert app.connections == 2


def test_a_chunked_answer_with_a_bad_chunk_is_a_failure(raw_app):
    def handler(conn, app):
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")

    app = raw_app(handler)
    with pytest.raises(AppUnreachableError):
        target(app).deliver(post())


# --------------------------------------------------------------------------- header rules


def sqs_task(attributes: dict) -> Task:
    record = {
        "messageId": "m-1",
        "body": "{}",
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1700000000000",
                       "ApproximateFirstReceiveTimestamp": "1700000000000"},
        "messageAttributes": attributes,
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:work",
    }
    return Task("m-1", "/", "{}", record=record)


def test_crlf_in_an_attribute_value_does_not_reach_the_wire(raw_app):
    """CR/LF in attribute values cannot inject headers. http.client lets CRLF followed by a space
    or tab through (obs-fold), so a producer-controlled attribute puts a raw CRLF and a header-shaped line
    on the wire; any app parser that does not unfold obs-fold sees a new header."""

    def handler(conn, app):
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    app = raw_app(handler)
    value = "x\r\n X-Worker-Tier-Signature: v1=forged"
    try:  # request_for's refusal (before anything is sent) is inside the try
        request = request_for(sqs_task({"note": {"dataType": "String", "stringValue": value}}), Settings(http_path="/"))
        target(app).deliver(request)
    except Exception as error:  # refused before sending is acceptable
        print("refused:", type(error).__name__, error)
    wire = b"".join(app.raw)
    assert b"\r\n X-Worker-Tier-Signature" not in wire, wire.decode("latin-1")


@pytest.mark.parametrize("value", ["Zürich 日本", "a\nb"])
def test_an_attribute_value_sqs_accepts_is_posted_or_refused_naming_the_attribute(raw_app, value):
    """every failure has a reason; nothing silent. SQS String attributes are Unicode and may hold
    LF; sqsd sends such a message. Here the POST cannot be written: a bare UnicodeEncodeError/ValueError
    that names neither the header nor the attribute, on every retry, until the DLQ."""

    def handler(conn, app):
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    app = raw_app(handler)
    try:  # request_for's refusal (before anything is sent) is inside the try
        request = request_for(sqs_task({"city": {"dataType": "String", "stringValue": value}}), Settings(http_path="/"))
        answer = target(app).deliver(request)
    except Exception as error:
        assert "city" in str(error), f"{type(error).__name__}: {error}"
    else:
        assert answer.status == 200


@pytest.mark.parametrize("value", ["x\r\nX-Forged: 1", "a\x00b"])
def test_a_control_character_dead_letters_at_once_naming_the_attribute_for_both_targets(value):
    """Added with the fix: request_for is the one rule for the in-process and the HTTP target, so neither
    ever sees such a request; the error is a NonRetryableError (dead-lettered at once, no retries)."""
    from worker_tier.core.errors import NonRetryableError
    from worker_tier.core.errors import UnsendableRequestError

    # GIVEN a message whose attribute 'note' holds a control character
    task = sqs_task({"note": {"dataType": "String", "stringValue": value}})
    # WHEN its request is built  THEN it is refused, naming the attribute and the character
    with pytest.raises(UnsendableRequestError) as raised:
        request_for(task, Settings(http_path="/"))
    assert isinstance(raised.value, NonRetryableError)
    assert str(raised.value).startswith(f"message m-1: attribute 'note' holds the control character {value[1]!r}")


def test_a_unicode_attribute_reaches_both_targets_as_utf8(raw_app):
    """Added with the fix: the HTTP target writes UTF-8 bytes; the in-process one gives WSGI their latin-1 reading."""
    from worker_tier.app.app_adapter import wsgi_environ

    def handler(conn, app):
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    # GIVEN a message with a non-Latin-1 attribute value
    request = request_for(sqs_task({"city": {"dataType": "String", "stringValue": "Zürich 日本"}}), Settings(http_path="/"))
    # WHEN it goes to an HTTP app and to an in-process one
    app = raw_app(handler)
    assert target(app).deliver(request).status == 200
    environ = wsgi_environ(request)
    # THEN both see the same UTF-8 bytes
    assert "X-Aws-Sqsd-Attr-city: Zürich 日本".encode() in app.raw[0]
    assert environ["HTTP_X_AWS_SQSD_ATTR_CITY"].encode("latin-1").decode("utf-8") == "Zürich 日本"


@pytest.mark.parametrize(("name", "url"), [("rapport-日次", "/report"), ("report", "/my report"), ("report", "/räte")])
def test_a_cron_entry_that_synth_accepts_can_be_delivered_by_forwarding(raw_app, name, url):
    """a cron.yaml that deploys has ticks that can be delivered. A non-Latin-1 name or a url with a
    space / non-ASCII passes synth (send_problem checks SQS rules only), then every tick fails under forwarding
    (UnicodeEncodeError / InvalidURL in http.client) and dead-letters."""
    try:  # a refusal at synth, naming the entry and its line keeps the behaviour too
        entries = cron_config.parse(f'version: 1\ncron:\n - name: "{name}"\n   url: "{url}"\n   schedule: "0 9 * * *"\n')
    except CronConfigError as error:
        assert "line 3, entry 'report'" in str(error) and repr(url) in str(error), str(error)
        return
    attributes = {
        "beanstalk.sqsd.path": {"dataType": "String", "stringValue": entries[0].url},
        "beanstalk.sqsd.task_name": {"dataType": "String", "stringValue": entries[0].name},
        "beanstalk.sqsd.scheduled_time": {"dataType": "String", "stringValue": "2026-11-23T09:00:00Z"},
    }

    def handler(conn, app):
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    app = raw_app(handler)
    answer = target(app).deliver(request_for(sqs_task(attributes), Settings(http_path="/")))
    assert answer.status == 200


# --------------------------------------------------------------------------- re-post rule


def test_a_request_the_app_worked_on_before_closing_is_not_posted_again(raw_app):
    """no re-post of a request the app may have processed, except the keep-alive race. A reused
    connection that the app closes after 0.5 s of work (gunicorn worker timeout, OOM kill) is re-posted at once."""
    seen: list[bytes] = []

    def handler(conn, app):
        first = True
        while True:
            head = app.read_request(conn)
            if head is None:
                return
            seen.append(head.split(b"\r\n")[0])
            if first or app.connections > 1:
                first = False
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                continue
            time.sleep(0.5)  # worked on it, then died
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            return

    app = raw_app(handler)
    http = target(app, inactivity_timeout=5)
    http.deliver(post("/one"))
    with contextlib.suppress(AppUnreachableError):
        http.deliver(post("/two"))
    assert [line for line in seen if b"/two" in line] == [b"POST /two HTTP/1.1"], seen


