"""An EB worker app whose answer each message's body decides, for forwarding against real app servers.

The same rules serve every server the tests start: ``wsgi`` (gunicorn, waitress), ``asgi`` (uvicorn,
hypercorn), and ``python forwarding_app.py PORT_FILE`` (the standard library's ``http.server`` at HTTP/1.0 by
default, the only one of them that can send interim 1xx answers). The body is JSON; every key is optional:

- ``status`` (200): the final answer's status; ``retry_after``: its ``Retry-After`` header;
- ``close``: answer with ``Connection: close``; ``chunked``: a body without ``Content-Length`` (chunked on
  HTTP/1.1); ``split``: the body in pieces written apart, ``pause`` seconds between them (0.05);
- ``size``: a body of that many bytes (``x`` after ``"answer <status> "``); ``sleep``: seconds before answering;
- ``interim`` (stdlib server only): 1xx statuses sent before the final answer; with ``die``, the connection is
  closed right after them, with no final answer;
- ``body`` (stdlib server only): the body of a 204 or 304, declared in ``Content-Length`` and written after the
  headers; ``content_length``: the ``Content-Length`` value as written (``"2, 2"``); ``headers``: that many more
  header lines.

A POST to ``/early`` (stdlib server only) is answered ``503`` with ``Retry-After: 120`` and ``Connection: close``
before its body is read, and its connection closed: an app refusing work without reading it.

Each request is recorded as one line ``<method> <path> <X-Aws-Sqsd-Msgid>`` appended to the file named by
``FORWARDING_APP_LOG`` (one ``write`` per line, in append mode: safe across processes and threads).
``GET /health`` answers 200 once ``FORWARDING_APP_UNHEALTHY`` (0) checks have answered 503.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

LOG = os.environ.get("FORWARDING_APP_LOG", "")
UNHEALTHY = int(os.environ.get("FORWARDING_APP_UNHEALTHY", "0"))
_health = {"checks": 0}
_lock = threading.Lock()


def record(method: str, path: str, message_id: str) -> None:
    if LOG:
        descriptor = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, f"{method} {path} {message_id or '-'}\n".encode())
        finally:
            os.close(descriptor)


def health() -> tuple[int, list[tuple[str, str]], list[bytes], float]:
    with _lock:
        _health["checks"] += 1
        healthy = _health["checks"] > UNHEALTHY
    body = b"up" if healthy else b"starting"
    return (200 if healthy else 503), [("Content-Length", str(len(body)))], [body], 0.0


def decide(method: str, path: str, message_id: str, body: bytes) -> tuple[int, list[tuple[str, str]], list[bytes], float]:
    """The answer: status, headers, the body's pieces (written apart), and the pause between pieces."""
    record(method, path, message_id)
    if method == "GET" and path == "/health":
        return health()
    try:
        ask: dict[str, Any] = json.loads(body or b"{}")
    except ValueError:
        ask = {}
    time.sleep(float(ask.get("sleep", 0)))
    status = int(ask.get("status", 200))
    text = f"answer {status} ".encode()
    size = int(ask.get("size", 0))
    payload = (text + b"x" * max(0, size - len(text)))[: max(size, 0)] if size else text.strip()
    headers = [("Content-Type", "text/plain")]
    if "retry_after" in ask:
        headers.append(("Retry-After", str(ask["retry_after"])))
    if ask.get("close"):
        headers.append(("Connection", "close"))
    if status in (204, 304):
        payload = str(ask.get("body", "")).encode()
    if not ask.get("chunked"):
        headers.append(("Content-Length", str(ask.get("content_length", len(payload)))))
    headers += [(f"X-Pad-{n}", "x") for n in range(int(ask.get("headers", 0)))]
    pieces = [payload[i : i + 64 * 1024] for i in range(0, len(payload), 64 * 1024)] or [b""]
    if ask.get("split"):
        middle = max(1, len(payload) // 2)
        pieces = [payload[:middle], payload[middle:]]
    return status, headers, pieces, float(ask.get("pause", 0.05)) if ask.get("split") else 0.0


REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error",
           503: "Service Unavailable"}


def wsgi(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
    """The app for a WSGI server (gunicorn, waitress)."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    status, headers, pieces, pause = decide(environ["REQUEST_METHOD"], environ["PATH_INFO"],
                                            environ.get("HTTP_X_AWS_SQSD_MSGID", ""), body)
    if "waitress" in environ.get("SERVER_SOFTWARE", ""):  # waitress refuses hop-by-hop headers from an app (PEP 3333)
        headers = [(name, value) for name, value in headers if name != "Connection"]
    start_response(f"{status} {REASONS.get(status, 'Status')}", headers)
    return _paced(pieces, pause)


def _paced(pieces: list[bytes], pause: float) -> Iterator[bytes]:
    for index, piece in enumerate(pieces):
        if index:
            time.sleep(pause)
        yield piece


async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The app for an ASGI server (uvicorn, hypercorn): the same rules as ``wsgi``."""
    import asyncio

    if scope["type"] == "lifespan":
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    headers = {name.decode().lower(): value.decode() for name, value in scope["headers"]}
    status, answer_headers, pieces, pause = await asyncio.to_thread(
        decide, scope["method"], scope["path"], headers.get("x-aws-sqsd-msgid", ""), body)
    await send({"type": "http.response.start", "status": status,
                "headers": [(name.lower().encode(), value.encode()) for name, value in answer_headers]})
    for index, piece in enumerate(pieces):
        if index:
            await asyncio.sleep(pause)
        await send({"type": "http.response.body", "body": piece, "more_body": index < len(pieces) - 1})


class Handler(BaseHTTPRequestHandler):
    """The standard library's server: HTTP/1.0 unless ``FORWARDING_APP_HTTP11`` is set; headers and body written
    apart (unbuffered, as ``http.server`` writes by default)."""

    protocol_version = "HTTP/1.1" if os.environ.get("FORWARDING_APP_HTTP11") else "HTTP/1.0"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve(b"")

    def do_POST(self) -> None:
        if self.path == "/early":
            record(self.command, self.path, self.headers.get("X-Aws-Sqsd-Msgid", ""))
            self.send_response(503)
            for name, value in (("Retry-After", "120"), ("Connection", "close"), ("Content-Length", "0")):
                self.send_header(name, value)
            self.end_headers()
            self.close_connection = True
            return
        self._serve(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def _serve(self, body: bytes) -> None:
        try:
            ask = json.loads(body or b"{}")
            interim, die = ask.get("interim", []), ask.get("die", False)
        except (ValueError, AttributeError):
            interim, die = [], False
        status, headers, pieces, pause = decide(self.command, self.path, self.headers.get("X-Aws-Sqsd-Msgid", ""), body)
        for code in interim:
            self.send_response_only(int(code))
            self.end_headers()
            if die:
                continue
            time.sleep(0.05)  # the interim answer arrives alone, as a server sends it while it works
        if die:  # the app works on it, then dies (a worker killed): no final answer
            self.close_connection = True
            return
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        chunked = self.protocol_version == "HTTP/1.1" and not any(n == "Content-Length" for n, _ in headers)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif not any(n == "Content-Length" for n, _ in headers):
            self.close_connection = True
        self.end_headers()
        for index, piece in enumerate(pieces):
            if index:
                time.sleep(pause)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked and piece else piece)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")


def main() -> None:
    """``python forwarding_app.py``: serve on a free port, printed as the first line of stdout."""
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
