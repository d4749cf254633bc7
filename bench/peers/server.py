"""One moto server on two ports: worker processes talk to the counted port, the bench's producer to the other.

Both ports serve the same in-process moto backends, so a message sent on one is received on
the other. Requests to the counted port are tallied by SQS action, read from the JSON
protocol's ``X-Amz-Target`` header or the query protocol's ``Action`` parameter: this is
what SQS would bill, whatever the client library batches or retries.
``GET /peers-bench/counts`` on the counted port returns the tallies (it is not counted).

Moto's SQS is not thread-safe: ``Queue.delete_message`` rebuilds the queue's message list
without a lock, so two deletes at once can undo one of them (the message comes back: a
duplicate no real SQS would make), and a send during a delete can vanish (a loss). Every
action but ReceiveMessage (which waits, up to 20 s, for messages) is therefore run one at a
time, on both ports.

Moto checks each message it returns against the queue's retention period by computing every
attribute of the queue (``SQSBackend.is_message_valid_based_on_retention_period`` calls
``get_queue_attributes``, which counts the visible, in-flight and delayed messages three times
over), so each received message costs the server time in proportion to the queue's depth: a
worker that keeps the queue shallower got cheaper receives, whatever its own speed, and a slower
one a deeper queue and dearer receives. Real SQS has no such cost. ``main`` reads the retention
period from the queue itself (the same check, in constant time) for every framework alike.

Run as ``python -m bench.peers.server``: it prints ``ready <counted port> <producer port>``.
"""

from __future__ import annotations

import io
import json
import sys
import threading
import urllib.parse
from collections import Counter
from typing import Any, Callable, Iterable

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

COUNTS_PATH = "/peers-bench/counts"
HOST = "127.0.0.1"

Environ = dict[str, Any]


UNSERIALIZED_ACTIONS = frozenset({"ReceiveMessage"})


class SerializedApp:
    """WSGI middleware that runs moto's SQS actions one at a time, but for ReceiveMessage's long polls."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        if _action(environ) in UNSERIALIZED_ACTIONS:
            return self._app(environ, start_response)
        with self._lock:
            return list(self._app(environ, start_response))


class CountingApp:
    """WSGI middleware that counts SQS requests by action before moto answers them."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, environ: Environ, start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == COUNTS_PATH:
            with self._lock:
                body = json.dumps(dict(self._counts)).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        action = _action(environ)
        with self._lock:
            self._counts[action] += 1
        return self._app(environ, start_response)


def _action(environ: Environ) -> str:
    """The SQS action of a request (JSON protocol header, else the query protocol's Action), rewinding its body."""
    if "peers_bench.action" in environ:
        return environ["peers_bench.action"]
    environ["peers_bench.action"] = action = read_action(environ)
    return action


def read_action(environ: Environ) -> str:
    """A request's AWS action (X-Amz-Target, the query's or the form's Action), its body rewound for moto."""
    target = environ.get("HTTP_X_AMZ_TARGET")
    if target:
        return target.rsplit(".", 1)[-1]
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    if "Action" in query:
        return query["Action"][0]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
    return form.get("Action", ["unknown"])[0]


def _check_retention_in_constant_time() -> None:
    """Moto's retention check of each received message, reading the one attribute it needs (see the docstring)."""
    from moto.core.utils import unix_time
    from moto.sqs.models import SQSBackend

    def is_message_valid_based_on_retention_period(self: SQSBackend, queue_name: str, message: Any) -> bool:
        retention_period = int(self.get_queue(queue_name).message_retention_period)
        return bool(retention_period + message.sent_timestamp / 1000 > unix_time())

    SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period  # type: ignore[method-assign]


def main() -> None:
    _check_retention_in_constant_time()
    app = SerializedApp(DomainDispatcherApplication(create_backend_app))
    counted = make_server(HOST, 0, CountingApp(app), True, request_handler=MotoRequestHandler)
    producer = make_server(HOST, 0, app, True, request_handler=MotoRequestHandler)
    threading.Thread(target=producer.serve_forever, daemon=True).start()
    print(f"ready {counted.server_port} {producer.server_port}", flush=True)
    counted.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
