"""HTTP forwarding writes each request and reads each answer's headers itself: the same bytes and the same refusals as
``http.client``'s ``putrequest``/``putheader``/``endheaders``, and the same headers as ``http.client.parse_headers``."""

from __future__ import annotations

import http.client
import io

import pytest

from worker_tier.app import forwarding
from worker_tier.app.app_target import SqsdRequest

SQSD_HEADERS = [
    ("Content-Type", "application/json"), ("User-Agent", "aws-sqsd/2.4 worker-tier"), ("X-Aws-Sqsd-Msgid", "m-1"),
    ("X-Aws-Sqsd-Attr-city", "Zürich"), ("X-Aws-Sqsd-Attr-tabbed", "a\tb"), ("Host", "localhost:8080"),
    ("Content-Length", "2"),
]


class _Wire:
    """A socket that keeps what is sent."""

    def __init__(self) -> None:
        self.sent = b""

    def sendall(self, data: bytes) -> None:
        self.sent += data


def _connection() -> http.client.HTTPConnection:
    connection = http.client.HTTPConnection("127.0.0.1", 8080)
    connection.sock = _Wire()  # type: ignore[assignment]
    return connection


def _as_http_client_sends(request: SqsdRequest, headers: list[tuple[str, str]]) -> bytes:
    connection = _connection()
    connection.putrequest(request.method, request.path, skip_host=True, skip_accept_encoding=True)
    for name, value in headers:
        connection.putheader(name, value.encode("utf-8"))
    connection.endheaders(request.body)
    return connection.sock.sent  # type: ignore[union-attr]


def _as_forwarding_sends(request: SqsdRequest, headers: list[tuple[str, str]]) -> bytes:
    connection = _connection()
    forwarding._send(connection, request, headers)
    return connection.sock.sent  # type: ignore[union-attr]


@pytest.mark.parametrize("request_, headers", [
    (SqsdRequest("/work", (), b"{}"), SQSD_HEADERS),
    (SqsdRequest("/cron/daily?x=1", (), b""), [("Content-Length", "0")]),
    (SqsdRequest("/", (), b"{}"), []),
    (SqsdRequest("/", (), b"x"), [("X-Folded", "a\r\n b")]),  # http.client lets a folded value through
    (SqsdRequest("/", (), b"x"), [("Spaced Name", "v"), ("X-Nul", "a\x00b")]),  # and a space inside a name, a NUL
])
def test_a_request_goes_out_as_the_same_bytes_http_client_writes(request_, headers):
    # GIVEN a request and its headers
    # WHEN forwarding writes it, and http.client writes it
    # THEN the bytes are the same
    assert _as_forwarding_sends(request_, headers) == _as_http_client_sends(request_, headers)


@pytest.mark.parametrize("request_, headers", [
    (SqsdRequest("/work", (), b""), [(" Leading", "v")]),
    (SqsdRequest("/work", (), b""), [("X-Split", "a\r\nInjected: 1")]),
    (SqsdRequest("/work", (), b""), [("X-Line\nFeed", "v")]),
    (SqsdRequest("/work", (), b""), [("X-Ok", "v"), ("X-Ends", "v\r")]),
    (SqsdRequest("/work", (), b""), [("Nämé", "v")]),
    (SqsdRequest("/work", (), b""), [("", "v")]),  # an empty name, alone (putheader refuses it)
    (SqsdRequest("/a b", (), b""), []),
    (SqsdRequest("/é", (), b""), []),
    (SqsdRequest("/work", (), b"", method="PO\x01ST"), []),
    (SqsdRequest("/é", (), b""), [(" Leading", "v")]),  # the request line is refused first, as putrequest comes first
])
def test_a_request_http_client_refuses_is_refused_with_the_same_error(request_, headers):
    # GIVEN a request http.client would not write
    with pytest.raises(Exception) as theirs:
        _as_http_client_sends(request_, headers)
    # WHEN forwarding writes it
    connection = _connection()
    with pytest.raises(Exception) as ours:
        forwarding._send(connection, request_, headers)
    # THEN it refuses it with the same kind of error, and writes nothing
    assert type(ours.value) is type(theirs.value)
    assert connection.sock.sent == b""  # type: ignore[union-attr]


HEADER_BLOCKS = [
    b"Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n",
    b"content-length:2\r\nX-Trailing: value  \r\nX-Empty:\r\nX-Tab:\t\tv\r\n\r\n",
    b"Set-Cookie: a=1\r\nSet-Cookie: b=2\nConnection: close\n\n",
    b"X-Latin: caf\xe9\r\n\r\n",
    b"X-Folded: a\r\n continued\r\nContent-Length: 0\r\n\r\n",
    b"X-Bare-CR: a\rb\r\n\r\n",
    b"no colon here\r\nContent-Length: 0\r\n\r\n",
    b": no name\r\nContent-Length: 0\r\n\r\n",
    b"From nobody\r\nContent-Length: 0\r\n\r\n",
    b"Content-Length: 0\r\n",  # the answer ends before the blank line
    b"Content-Length: 0",  # nor a line end
    b"\r\n",
]


@pytest.mark.parametrize("block", HEADER_BLOCKS)
def test_an_answers_headers_read_the_same_as_http_client_reads_them(block):
    # GIVEN an answer's header block, plain or not
    # WHEN forwarding reads it, and http.client reads it
    ours = forwarding._read_headers(io.BufferedReader(io.BytesIO(block)))
    theirs = http.client.parse_headers(io.BufferedReader(io.BytesIO(block)))
    # THEN every lookup answers the same
    assert isinstance(ours, http.client.HTTPMessage)
    assert ours.items() == theirs.items()
    for name in ("content-length", "Content-Length", "set-cookie", "connection", "x-trailing", "x-absent"):
        assert ours.get(name) == theirs.get(name)
        assert ours.get_all(name) == theirs.get_all(name)
    assert ours.get("x-absent", "default") == "default"


def test_too_many_header_lines_or_too_long_a_line_is_refused_as_http_client_refuses_it():
    # GIVEN answers with 101 header lines, and with a 64 KiB + 1 line
    many = b"".join(b"X-%d: v\r\n" % i for i in range(101)) + b"\r\n"
    long = b"X-Long: " + b"v" * 65536 + b"\r\n\r\n"
    # WHEN forwarding reads them
    # THEN it refuses them with http.client's errors
    with pytest.raises(http.client.HTTPException, match="got more than 100 headers"):
        forwarding._read_headers(io.BufferedReader(io.BytesIO(many)))
    with pytest.raises(http.client.LineTooLong):
        forwarding._read_headers(io.BufferedReader(io.BytesIO(long)))
