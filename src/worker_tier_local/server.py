"""``LocalServer``: moto's server, run as moto's ``ThreadedMotoServer`` runs it, behind the local environment's own
answers (``worker_tier_local.move_tasks``) for what moto does not implement."""

from __future__ import annotations

import threading
from typing import Any

from worker_tier_local.move_tasks import MoveTasks


class LocalServer:
    """A threaded werkzeug server of moto's app wrapped in ``MoveTasks``; ``port`` 0 takes a free port."""

    def __init__(self, host: str, port: int, region: str) -> None:
        self._host, self._port, self._region = host, port, region
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._client: Any = None

    def start(self) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        app = MoveTasks(DomainDispatcherApplication(create_backend_app), self._sqs)
        self._server = make_server(self._host, self._port, app, threaded=True, request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-server", daemon=True)
        self._thread.start()

    def get_host_and_port(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def _sqs(self) -> Any:
        """An SQS client on this server, for the move tasks (made once)."""
        if self._client is None:
            import boto3

            host, port = self.get_host_and_port()
            self._client = boto3.client("sqs", endpoint_url=f"http://{host}:{port}", region_name=self._region,
                                        aws_access_key_id="local", aws_secret_access_key="local")
        return self._client
