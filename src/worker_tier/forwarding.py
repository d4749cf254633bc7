"""HTTP forwarding: the container worker POSTs each message to an app on localhost, as sqsd does.

``HttpTarget`` is the ``AppTarget`` for an app that runs as its own server, in any language
(the ``app_port`` setting). It sends the ``SqsdRequest`` as it is, over keep-alive
connections kept in a pool as large as the container worker's threads (``http_connections``).

- Connecting gets ``connect_timeout`` seconds; the whole answer must come within
  ``inactivity_timeout`` (EB InactivityTimeout) of the POST, else ``AppTimeoutError``.
- A refused connection or a socket error raises ``AppUnreachableError``: the worker backs
  the message off and, after ``max_retries``, dead-letters it with that reason.
- A POST is sent again only once, on a new connection, and only when the connection was a
  reused keep-alive one and the app closed it (FIN or RST) before any byte of an answer: the
  app shut an idle connection as the request went out ("connection closed by server", which
  sqsd re-posts too). An idle connection the app already closed is seen before it is used and
  never carries a request. Any other error after the request went out is the message's failure.
- With ``app_signing_secret_arn``, each POST carries ``X-Worker-Tier-Timestamp`` and
  ``X-Worker-Tier-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>``.
- ``wait_until_healthy`` GETs ``app_health_path`` until it answers 200; the container worker
  takes no message before.

Standard library only (``http.client``): the runtime adds no dependency for it.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import select
import socket
import threading
import time
from typing import Any, Callable

from worker_tier import contract
from worker_tier.app_target import AppResponse, SqsdRequest
from worker_tier.aws import new_client
from worker_tier.errors import WorkerTierError
from worker_tier.message import safe_repr
from worker_tier.observability import logger
from worker_tier.settings import Settings

APP_HOST = "127.0.0.1"
# A health check's answer must come within this (or inactivity_timeout, if shorter); connecting gets connect_timeout.
HEALTH_ANSWER_TIMEOUT_SECONDS = 10
# Between health checks: 0.5, 1, 2... seconds, at most 5; a failing check is logged at most once per interval.
HEALTH_PAUSE_BASE_SECONDS = 0.5
HEALTH_PAUSE_MAX_SECONDS = 5.0
HEALTH_LOG_INTERVAL_SECONDS = 30.0
RESPONSE_READ_CHUNK_BYTES = 64 * 1024
# The app closed the connection before any byte of its answer: what a keep-alive race looks like.
_CLOSED_BEFORE_ANSWER = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class AppUnreachableError(WorkerTierError):
    """No answer from the app: the connection was refused or broke (the message's failure)."""


class AppTimeoutError(AppUnreachableError):
    """The app did not answer within inactivity_timeout (the message's failure)."""


class SigningSecretError(WorkerTierError):
    """The app_signing_secret_arn secret could not be used as a signing key."""


class _ClosedBeforeAnswerError(WorkerTierError):
    """A reused keep-alive connection was closed by the app before any byte of an answer."""


class HttpTarget:
    """Delivers sqsd's POSTs to an app listening on ``127.0.0.1:<app_port>``; thread-safe.

    Parameters
    ----------
    settings
        Reads ``app_port``, ``connect_timeout``, ``inactivity_timeout``, ``http_connections``
        (the pool's size) and ``app_health_path``.
    secret
        The signing key, or None to send unsigned POSTs (``from_settings`` reads it by ARN).
    clock
        Monotonic seconds, for the answer's deadline and the health log's interval.
    wall_clock
        Unix seconds, for the signature's timestamp.

    Examples
    --------
    >>> target = HttpTarget(Settings(container_worker=True, app_port=8080))
    >>> target.address
    '127.0.0.1:8080'
    """

    def __init__(
        self,
        settings: Settings,
        *,
        secret: bytes | None = None,
        host: str = APP_HOST,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.host = host
        self.port = settings.app_port
        self._secret = secret
        self._clock = clock
        self._wall_clock = wall_clock
        self._pool = _Pool(settings.http_connections)

    @classmethod
    def from_settings(cls, settings: Settings, *, secretsmanager: Any = None, ssm: Any = None, **options: Any) -> HttpTarget:
        """The target for ``settings``, its signing key read now by ``app_signing_secret_arn`` (if set)."""
        arn = settings.app_signing_secret_arn
        secret = read_signing_secret(arn, secretsmanager=secretsmanager, ssm=ssm) if arn else None
        return cls(settings, secret=secret, **options)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def deliver(self, request: SqsdRequest) -> AppResponse:
        """POST ``request`` and return the app's answer; raise ``AppUnreachableError`` when none came."""
        headers = self._headers(request)
        connection = self._pool.take()
        if connection is not None:
            try:
                return self._exchange(connection, request, headers, reused=True)
            except _ClosedBeforeAnswerError as closed:
                logger.info(
                    "the app closed a kept-alive connection before answering: posting again on a new connection",
                    extra={"path": request.path, "error": safe_repr(closed.__cause__)},
                )
        return self._exchange(self._connect(request), request, headers, reused=False)

    def wait_until_healthy(self, stop: threading.Event) -> bool:
        """GET ``app_health_path`` until it answers 200 (True), or until ``stop`` is set (False).

        Without a health path the app counts as healthy at once.
        """
        path = self.settings.app_health_path
        failures, logged_at = 0, None
        while path and not stop.is_set():
            problem = self._health_problem(path)
            if problem is None:
                logger.info("the app is healthy: taking messages", extra={"path": path, "failed_checks": failures})
                return True
            failures += 1
            if logged_at is None or self._clock() - logged_at >= HEALTH_LOG_INTERVAL_SECONDS:
                logged_at = self._clock()
                logger.warning(
                    "the app is not healthy yet: no message is taken until it answers 200",
                    extra={"url": f"http://{self.address}{path}", "problem": problem, "failed_checks": failures},
                )
            stop.wait(min(HEALTH_PAUSE_MAX_SECONDS, HEALTH_PAUSE_BASE_SECONDS * 2 ** min(failures - 1, 10)))
        return not stop.is_set()

    def close(self) -> None:
        """Close the idle connections."""
        self._pool.close()

    def _headers(self, request: SqsdRequest) -> list[tuple[str, str]]:
        """The request's headers, with Host, Content-Length and the signature when they are missing or due."""
        headers = list(request.headers)
        present = {name.lower() for name, _ in headers}
        if "host" not in present:
            headers.append(("Host", f"localhost:{self.port}"))
        if "content-length" not in present:
            headers.append(("Content-Length", str(len(request.body))))
        if self._secret is not None:
            timestamp = str(int(self._wall_clock()))
            headers.append((contract.SIGNATURE_TIMESTAMP_HEADER, timestamp))
            headers.append((contract.SIGNATURE_HEADER, signature(self._secret, timestamp, request.body)))
        return headers

    def _connect(self, request: SqsdRequest) -> http.client.HTTPConnection:
        """A new connection to the app, within connect_timeout."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.settings.connect_timeout)
        try:
            connection.connect()
        except ConnectionRefusedError as error:
            raise AppUnreachableError(
                f"the app refused the connection to {self.address} for {request.method} {request.path}: nothing "
                f"listens on app_port {self.port} (is the app up?)"
            ) from error
        except TimeoutError as error:
            raise AppUnreachableError(
                f"no connection to the app at {self.address} within connect_timeout {self.settings.connect_timeout} s "
                f"(EB ConnectTimeout) for {request.method} {request.path}"
            ) from error
        except OSError as error:
            raise AppUnreachableError(f"connecting to the app at {self.address} failed: {safe_repr(error)}") from error
        return connection

    def _exchange(
        self, connection: http.client.HTTPConnection, request: SqsdRequest, headers: list[tuple[str, str]], *, reused: bool
    ) -> AppResponse:
        """Send the request and read the whole answer by the deadline; the connection goes back to the pool or is closed."""
        deadline = self._clock() + self.settings.inactivity_timeout
        sock, answered = connection.sock, False
        try:
            sock.settimeout(self._left(deadline, request))
            _send(connection, request, headers)
            response = self._answer(sock, connection, deadline, request)
            answered = True
            body = self._read_body(sock, response, deadline, request)
        except Exception as error:
            connection.close()
            failure = self._failure(error, request, reused=reused and not answered)
            if failure is error:
                raise
            raise failure from error
        self._pool.give(connection)
        return AppResponse(response.status, {name.lower(): value for name, value in response.getheaders()}, body)

    def _answer(
        self, sock: socket.socket, connection: http.client.HTTPConnection, deadline: float, request: SqsdRequest
    ) -> http.client.HTTPResponse:
        """The answer's status line and headers, within the time left."""
        sock.settimeout(self._left(deadline, request))
        return connection.getresponse()

    def _read_body(
        self, sock: socket.socket, response: http.client.HTTPResponse, deadline: float, request: SqsdRequest
    ) -> bytes:
        """The whole body, each read given only the time left before the deadline."""
        chunks: list[bytes] = []
        while True:
            sock.settimeout(self._left(deadline, request))
            chunk = response.read(RESPONSE_READ_CHUNK_BYTES)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)

    def _left(self, deadline: float, request: SqsdRequest) -> float:
        """Seconds left before the deadline; past it, the request has timed out."""
        left = deadline - self._clock()
        if left <= 0:
            raise self._timeout(request)
        return left

    def _failure(self, error: BaseException, request: SqsdRequest, *, reused: bool) -> BaseException:
        """What a failed exchange raises: a re-post signal, a timeout, or the app unreachable."""
        if reused and isinstance(error, _CLOSED_BEFORE_ANSWER):
            return _ClosedBeforeAnswerError("the app closed a reused connection before answering")
        if isinstance(error, AppTimeoutError | TimeoutError):
            return self._timeout(request)
        if isinstance(error, OSError | http.client.HTTPException):
            return AppUnreachableError(
                f"{request.method} {request.path} to the app at {self.address} got no answer: {safe_repr(error)}"
            )
        return error

    def _timeout(self, request: SqsdRequest) -> AppTimeoutError:
        timeout = self.settings.inactivity_timeout
        return AppTimeoutError(
            f"the app at {self.address} did not answer {request.method} {request.path} within inactivity_timeout "
            f"{timeout} s (EB InactivityTimeout): raise inactivity_timeout if the app needs longer"
        )

    def _health_problem(self, path: str) -> str | None:
        """None when GET ``path`` answers 200; otherwise what went wrong."""
        answer_seconds = min(HEALTH_ANSWER_TIMEOUT_SECONDS, self.settings.inactivity_timeout)
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.settings.connect_timeout)
        try:
            connection.connect()
            connection.sock.settimeout(answer_seconds)
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
        except (OSError, http.client.HTTPException) as error:
            return safe_repr(error)
        finally:
            connection.close()
        return None if response.status == 200 else f"status {response.status}"


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Worker-Tier-Signature`` value of a POST: ``v1=`` and the hex HMAC-SHA256 of ``<timestamp>.<body>``.

    >>> signature(b"key", "1700000000", b"{}")[:3]
    'v1='
    """
    digest = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"{contract.SIGNATURE_VERSION}={digest}"


def read_signing_secret(arn: str, *, secretsmanager: Any = None, ssm: Any = None) -> bytes:
    """The signing key stored at ``arn``: a Secrets Manager secret (its string or binary) or an SSM parameter (decrypted)."""
    service, region = arn.split(":")[2:4]
    if service == "secretsmanager":
        client = secretsmanager if secretsmanager is not None else new_client("secretsmanager", region_name=region)
        answer = client.get_secret_value(SecretId=arn)
        value = answer["SecretBinary"] if answer.get("SecretBinary") else answer.get("SecretString", "").encode()
    else:
        client = ssm if ssm is not None else new_client("ssm", region_name=region)
        value = client.get_parameter(Name=parameter_name(arn), WithDecryption=True)["Parameter"]["Value"].encode()
    if not value:
        raise SigningSecretError(f"app_signing_secret_arn {arn} holds an empty value: the signing key must not be empty")
    return bytes(value)


def parameter_name(arn: str) -> str:
    """An SSM parameter's name from its ARN: ``...:parameter/a/b`` is ``/a/b``, ``...:parameter/a`` is ``a``.

    >>> parameter_name("arn:aws:ssm:us-east-1:123456789012:parameter/worker/key")
    '/worker/key'
    """
    rest = arn.split(":parameter/", 1)[1]
    return f"/{rest}" if "/" in rest else rest


def _send(connection: http.client.HTTPConnection, request: SqsdRequest, headers: list[tuple[str, str]]) -> None:
    """Write the request line, the headers as given, and the body."""
    connection.putrequest(request.method, request.path, skip_host=True, skip_accept_encoding=True)
    for name, value in headers:
        connection.putheader(name, value)
    connection.endheaders(request.body)


class _Pool:
    """Idle keep-alive connections to the app, at most ``size``; the most recently used is taken first."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def take(self) -> http.client.HTTPConnection | None:
        """An idle connection still open, or None; those the app closed meanwhile are dropped."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                connection = self._idle.pop()
            if not _closed_by_peer(connection):
                return connection
            connection.close()

    def give(self, connection: http.client.HTTPConnection) -> None:
        """Keep an open connection for the next request, unless the pool is full."""
        with self._lock:
            if connection.sock is not None and len(self._idle) < self._size:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """True when an idle connection is readable: the app closed it (EOF) or sent what nobody asked for."""
    sock: socket.socket | None = connection.sock
    if sock is None:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
