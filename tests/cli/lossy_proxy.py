"""An HTTP proxy in front of moto's server that loses chosen answers: it forwards the request (so SQS acts on it),
then closes the client's connection without replying, as a dropped connection or a timeout does. It can also
answer 500 InternalError without forwarding, or hold an answer after SQS acted. Calls are named by their
X-Amz-Target action (SQS's JSON protocol), so botocore's own client and retry handler run unchanged against it.
"""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
import time
from typing import Any

INTERNAL_ERROR = b'{"__type":"com.amazonaws.sqs#InternalError","message":"We encountered an internal error."}'


class LossyProxy:
    """Forwards to ``127.0.0.1:upstream_port``; ``lose[action]`` answers to lose after forwarding, ``fail[action]``
    calls to answer 500 without forwarding (after the losses), ``hold[action]`` seconds to hold an answer.
    ``calls`` names every action forwarded, in order; ``events`` what the proxy did to them."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.lose: dict[str, int] = {}
        self.fail: dict[str, int] = {}
        self.hold: dict[str, float] = {}
        self.calls: list[str] = []
        self.events: list[str] = []
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                action = (self.headers.get("X-Amz-Target") or "").rpartition(".")[2] or self.path
                if proxy.fail.get(action, 0) > 0 and not proxy.lose.get(action, 0):
                    proxy.fail[action] -= 1
                    proxy.events.append(f"500 for {action}")
                    self.send_response(500)
                    self.send_header("Content-Type", "application/x-amz-json-1.0")
                    self.send_header("x-amzn-query-error", "InternalError;Receiver")
                    self.send_header("Content-Length", str(len(INTERNAL_ERROR)))
                    self.end_headers()
                    self.wfile.write(INTERNAL_ERROR)
                    return
                proxy.calls.append(action)
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
                upstream.request("POST", self.path, body=body,
                                 headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
                answer = upstream.getresponse()
                data = answer.read()
                if proxy.hold.get(action):
                    proxy.events.append(f"holding the answer of {action}")
                    time.sleep(proxy.hold[action])
                if proxy.lose.get(action, 0) > 0:
                    proxy.lose[action] -= 1
                    proxy.events.append(f"lost the answer of {action}")
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
