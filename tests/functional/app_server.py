"""A small app server for the HTTP forwarding tests, run as its own process: ``python app_server.py [options]``.

It prints its port on the first line of stdout, records every request (``GET /_requests`` returns them,
with the connection each came on) and answers by path:

- ``GET /health``: 503 for the first ``--unhealthy`` checks, then 200;
- ``/ok``: 200; ``/fail``: 500 with a long body; ``/busy``: 429 with ``Retry-After: 7``;
- ``/slow``: 200 after ``--slow-seconds``; ``/signed``: 200 when the check docs/container-worker.md shows
  verifies the signature (keyed with ``--secret``), else 401; ``/signed-v2...``: the same with its v2 check;
- ``/fail-once``: 500 the first time, then 200;
- ``/drop``: closes the connection without answering; ``/drop-reused-once``: the same, once, and only on a
  connection that served a request before (a keep-alive race).
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from pathlib import Path
from typing import Any, Callable

DOCS = Path(__file__).resolve().parents[2] / "docs" / "container-worker.md"

REQUESTS: list[dict] = []
STATE = {"health_checks": 0, "failed_once": False, "dropped_once": False}
LOCK = threading.Lock()
CONNECTION_IDS = count(1)
OPTIONS = argparse.Namespace()


def documented_verify(name: str = "verify") -> Callable[..., bool]:
    """A signature check docs/container-worker.md shows an app (``verify``: v1, ``verify_v2``), run from the page
    itself so the page stays true."""
    [block] = [b for b in re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S) if f"def {name}(" in b]
    namespace: dict[str, Any] = {}
    exec(block, namespace)
    return namespace[name]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = -1  # an answer goes out in one write: headers then body in two would meet the client's delayed ACK

    def setup(self) -> None:
        self.timeout = OPTIONS.idle_timeout
        super().setup()
        self.connection_id = next(CONNECTION_IDS)
        self.served = 0

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/_requests":
            with LOCK:
                return self._answer(200, json.dumps(REQUESTS).encode())
        self._record(b"")
        with LOCK:
            STATE["health_checks"] += 1
            healthy = STATE["health_checks"] > OPTIONS.unhealthy
        self._answer(200 if healthy else 503, b"up" if healthy else b"starting")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._record(body)
        self.served += 1
        if self.path == "/drop" or (self.path == "/drop-reused-once" and self.served > 1 and self._first("dropped_once")):
            self.close_connection = True
            return
        self._answer(*self._status(body))

    def _status(self, body: bytes) -> tuple[int, bytes, dict[str, str]]:
        if self.path == "/fail" or (self.path == "/fail-once" and self._first("failed_once")):
            return 500, b"boom " + b"x" * 2000, {}
        if self.path == "/busy":
            return 429, b"slow down", {"Retry-After": "7"}
        if self.path == "/slow":
            time.sleep(OPTIONS.slow_seconds)
        if self.path == "/signed" and not OPTIONS.verify(OPTIONS.secret.encode(), self.headers, body):
            return 401, b"bad signature", {}
        if self.path.startswith("/signed-v2") and not OPTIONS.verify_v2(
            OPTIONS.secret.encode(), self.command, self.path, self.headers, body
        ):
            return 401, b"bad signature", {}
        return 200, b"done", {}

    def _first(self, flag: str) -> bool:
        with LOCK:
            first, STATE[flag] = not STATE[flag], True
        return first

    def _record(self, body: bytes) -> None:
        with LOCK:
            REQUESTS.append({"method": self.command, "path": self.path, "headers": list(self.headers.items()),
                             "body": body.decode(errors="replace"), "connection": self.connection_id})

    def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--unhealthy", type=int, default=0)
    parser.add_argument("--slow-seconds", type=float, default=3.0)
    parser.add_argument("--secret", default="")
    parser.add_argument("--idle-timeout", type=float, default=None)
    parser.parse_args(namespace=OPTIONS)
    OPTIONS.verify = documented_verify()
    OPTIONS.verify_v2 = documented_verify("verify_v2")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
