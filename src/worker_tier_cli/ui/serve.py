"""Serving the dashboard: a socket bound first (so port 0 is known), its URL with the token printed, then uvicorn.

``serve`` runs in the foreground (``worker-tier ui``); ``start_in_background`` in a thread beside ``make run``'s
worker (``make run ARGS=--ui``), where the outcomes come from that process's own worker.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any

import uvicorn

from worker_tier_cli.session import Session
from worker_tier_cli.ui.guard import TOKEN_PARAMETER, allowed_hosts, check_token
from worker_tier_cli.ui.outcomes import OutcomeSource
from worker_tier_cli.ui.web import build_app

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642
URL_LINE = "Worker Tier dashboard: {url}"


@dataclass
class Served:
    """A dashboard bound and about to serve: its URL (with the token), its socket and its uvicorn server."""

    url: str
    sock: socket.socket
    server: uvicorn.Server

    def run(self) -> None:
        self.server.run(sockets=[self.sock])

    def stop(self) -> None:
        self.server.should_exit = True


def bind(session: Session, host: str, port: int, token: str | None, outcomes: OutcomeSource | None = None) -> Served:
    """Check the token rule, bind ``host``:``port`` (0: any free port) and build the app; GuardError, OSError."""
    check_token(host, token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    bound = sock.getsockname()[1]
    app = build_app(session, token=token, hosts=allowed_hosts(host, bound), port=bound, outcomes=outcomes)
    # log_config None: uvicorn leaves the process's logging as it is (make run keeps the worker's JSON logs quiet)
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", server_header=False)
    name = f"[{host}]" if ":" in host else host
    url = f"http://{name}:{bound}/" + (f"?{TOKEN_PARAMETER}={token}" if token else "")
    return Served(url, sock, uvicorn.Server(config))


def start_in_background(served: Served) -> threading.Thread:
    """Serve in a daemon thread (uvicorn installs no signal handlers off the main thread); ``served.stop()`` ends it."""
    thread = threading.Thread(target=served.run, name="worker-tier-ui", daemon=True)
    thread.start()
    return thread


def local_session(environ: dict[str, str], **runtime: Any) -> Session:
    """A session on the variables ``make run`` exports (``LocalEnvironment.shell_environment()``)."""
    from worker_tier_cli.session import Runtime

    return Session.open(Runtime(environ=environ, **runtime), environ.get("AWS_ENDPOINT_URL"), environ.get("AWS_REGION"))
