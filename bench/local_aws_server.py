"""A moto server for the worker's cold-start figure: the AWS endpoint both handlers' fresh processes call.

Run as ``python -m bench.local_aws_server``: it prints ``ready <port>``, then serves moto's backends on
127.0.0.1 until killed. Each request is tallied by its action (the JSON protocol's ``X-Amz-Target``,
else the query protocol's ``Action``); ``GET /local-aws/calls`` returns the tallies (not counted itself),
so the bench can say which AWS calls a handler's first batch made.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from typing import Any, Callable, Iterable

from bench.peers.server import read_action

CALLS_PATH = "/local-aws/calls"
HOST = "127.0.0.1"


class CountingApp:
    """WSGI middleware that counts requests by action, one at a time (moto's SQS is not thread-safe)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with self._lock:
            if environ.get("PATH_INFO") == CALLS_PATH:
                body = json.dumps(dict(self._calls)).encode()
                start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
                return [body]
            self._calls[read_action(environ)] += 1
            return list(self._app(environ, start_response))


def main() -> int:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    class QuietHandler(MotoRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            """Not each request on stderr: the bench makes thousands."""

    server = make_server(HOST, 0, CountingApp(DomainDispatcherApplication(create_backend_app)), True,
                         request_handler=QuietHandler)
    print(f"ready {server.server_port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
