"""HTTP forwarding: the container worker POSTs each message to an app on localhost, as sqsd does.

One idea, kept whole: one HTTP/1.1 exchange per message with a local server, read as strictly as sqsd reads it.

``HttpTarget`` is the ``AppTarget`` for an app that runs as its own server, in any language
(the ``app_port`` setting). It sends the ``SqsdRequest`` as it is, over keep-alive
connections kept in a pool as large as the container worker's threads (``http_connections``).

- Connecting gets ``connect_timeout`` seconds; the whole answer must come within
  ``inactivity_timeout`` (EB InactivityTimeout) of the POST, else ``AppTimeoutError``: one
  deadline per request, re-checked before every socket read, so an app that drips its headers
  or body a byte at a time is cut off at it too.
- An answer shorter than its ``Content-Length`` (or a broken chunked one) is a failure, never a
  success. Only the first ``RESPONSE_KEPT_BYTES`` of a body are kept (all the dead-letter reason
  uses); the rest is read and dropped up to ``RESPONSE_DRAIN_MAX_BYTES``, past which the
  connection is closed instead of kept alive, so a huge answer never fills the memory.
- A refused connection or a socket error raises ``AppUnreachableError``: the worker backs
  the message off and, after ``max_retries``, dead-letters it with that reason.
- A POST is sent again only once, on a new connection, and only when the connection was a
  reused keep-alive one and the app closed it (FIN or RST) before any byte of an answer and
  within ``REPOST_WINDOW_SECONDS`` of the request going out: the app shut an idle connection as
  the request went out ("connection closed by server", which sqsd re-posts too). A close that
  comes later means the app may have worked on the request (a worker timeout, an OOM kill): it
  is the message's failure, never a second POST. An idle connection the app already closed is seen before it is used and
  never carries a request. Any other error after the request went out is the message's failure.
- With ``app_signing_secret_arn``, each POST carries ``X-Worker-Tier-Timestamp``,
  ``X-Worker-Tier-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`` and
  ``X-Worker-Tier-Signature-V2: v2=<hex HMAC-SHA256(secret, "v2\n<method>\n<path>\n<msgid>\n<timestamp>\n<body>")>``
  (``signature_v2``): v1 verifies for any path and message id, v2 only for the request it was made for.
- An interim answer (1xx) is skipped and the final one read (``http.client`` skips only 100); a ``101`` is the
  message's failure. A connection is kept alive only when its answer was read whole, did not say
  ``Connection: close`` (nor was HTTP/1.0 without keep-alive), nothing came past its end, and it was no 204
  or 304 declaring a body (which ``http.client`` never reads, and the app may write after its headers). An
  idle kept-alive connection with anything to read is closed, not used. Bytes an app writes past its answer
  later still, while the next request is on its way, cannot be told from that request's answer: such an app
  breaks HTTP/1.1, as it would behind sqsd.
- An interim answer counts as an answer: a connection closed after one is the message's failure, never a re-post.
- An app that answers before reading the whole request (a 503 with ``Retry-After``, a 413) and closes: the
  send breaks, and that answer, when it came, decides the message's fate; the connection is closed.
- A ``Content-Length`` of one value repeated (``2, 2``) is that length (RFC 9110 8.6); any other list, more than
  100 header lines, a header line over 64 KiB, or no HTTP at all is the message's failure, "could not be read as HTTP".
- ``wait_until_healthy`` GETs ``app_health_path`` until it answers 200; the container worker
  takes no message before. A stop (SIGTERM) ends it within ``HEALTH_STOP_POLL_SECONDS``, even
  in the middle of a check, connecting included (an app whose listen queue is full).

Standard library only: the runtime adds no dependency for it. ``http.client`` connects and reads the answers;
each request is written in one ``sendall`` (the bytes ``putrequest``/``putheader``/``endheaders`` write, refused
where they refuse), and an answer's plain header lines are split without the email parser (the same
``HTTPMessage`` answers): those two cost more CPU than the rest of an exchange (``docs/benchmarks.md``, "HTTP forwarding").
"""

from __future__ import annotations

import contextlib
import email.parser
import hashlib
import hmac
import http.client
import io
import re
import select
import socket
import sys
import threading
import time
from typing import Any, Callable

from worker_tier.core import contract
from worker_tier.app.app_target import AppResponse, SqsdRequest
from worker_tier.core.aws import new_client
from worker_tier.core.errors import WorkerTierError
from worker_tier.core.message import MAX_ERROR_MESSAGE_BYTES, safe_repr
from worker_tier.core.observability import logger
from worker_tier.core.settings import Settings

APP_HOST = "127.0.0.1"
# A health check's answer must come within this (or inactivity_timeout, if shorter); connecting gets connect_timeout.
HEALTH_ANSWER_TIMEOUT_SECONDS = 10
# Between health checks: 0.5, 1, 2... seconds, at most 5; a failing check is logged at most once per interval.
HEALTH_PAUSE_BASE_SECONDS = 0.5
HEALTH_PAUSE_MAX_SECONDS = 5.0
HEALTH_LOG_INTERVAL_SECONDS = 30.0
RESPONSE_READ_CHUNK_BYTES = 64 * 1024
# How much of an answer's body is kept: what the dead-letter reason uses (its first KiB).
RESPONSE_KEPT_BYTES = MAX_ERROR_MESSAGE_BYTES
# The rest of a body is read and dropped up to this, to keep the connection alive; past it the connection is closed.
RESPONSE_DRAIN_MAX_BYTES = 1024 * 1024
# A reused connection closed within this of the request going out is the keep-alive race: posted again once.
# A later close means the app may have worked on it; on 127.0.0.1 the race's RST comes back in well under 1 ms.
REPOST_WINDOW_SECONDS = 0.05
# How often a read in a health check looks at the stop event.
HEALTH_STOP_POLL_SECONDS = 0.2
# http.client's limits on an answer's headers (its _MAXLINE and _MAXHEADERS), kept by _read_headers.
MAX_HEADER_LINE_BYTES = 65536
MAX_HEADER_LINES = 100
# A header line the email parser would split at its first colon with nothing else to do: a token (RFC 9110's
# field-name, as the email parser's header pattern allows it), a colon, no CR or LF before the line's end.
# Lines of such fields up to the blank line (or the end of the answer), and one field's name and value (its leading
# blanks and line end left out, as the email parser leaves them out).
_PLAIN_HEADER_LINES = re.compile(r"(?:[!-9;-~]+:[^\r\n]*\r?\n)*(?:\r?\n)?")
_PLAIN_HEADER_FIELD = re.compile(r"([!-9;-~]+):[ \t]*([^\r\n]*)\r?\n")
# What http.client refuses in a request (its _contains_disallowed_method_pchar_re, _contains_disallowed_url_pchar_re,
# _is_legal_header_name and _is_illegal_header_value): _send writes the request itself and refuses the same.
_DISALLOWED_METHOD = re.compile(r"[\x00-\x1f]")
_DISALLOWED_TARGET = re.compile(r"[\x00-\x20\x7f]")
_LEGAL_HEADER_NAME = re.compile(r"[^:\s][^:\r\n]*", re.ASCII)
_LEGAL_HEADER_NAMES = re.compile(r"[^:\s][^:\r\n]*(?:\n[^:\s][^:\r\n]*)*", re.ASCII)  # names, one a line (not none)
_ILLEGAL_HEADER_VALUE = re.compile(r"\n(?![ \t])|\r(?![ \t\n])")
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


class _StoppedError(WorkerTierError):
    """The stop event was set during a health check."""


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
            problem = self._health_problem(path, stop)
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
            message_id = request.header("X-Aws-Sqsd-Msgid") or ""
            headers.append((contract.SIGNATURE_TIMESTAMP_HEADER, timestamp))
            headers.append((contract.SIGNATURE_HEADER, signature(self._secret, timestamp, request.body)))
            headers.append((
                contract.SIGNATURE_V2_HEADER,
                signature_v2(self._secret, request.method, request.path, message_id, timestamp, request.body),
            ))
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
        sent_at, response, early, progress = None, None, False, _Progress()
        connection.response_class = _deadline_response(self._clock, deadline, progress=progress)  # type: ignore[assignment]  # called as (sock, method=)
        try:
            connection.sock.settimeout(self._left(deadline, request))
            try:
                _send(connection, request, headers)
            except (BrokenPipeError, ConnectionResetError):
                # The app may have answered before reading the whole request (a 413, a 503 with Retry-After) and
                # closed: that answer, when it is there, is the message's; without one, the send's error is.
                response = _early_answer(connection)
                if response is None:
                    raise
                early = True
            sent_at = self._clock()
            if response is None:
                response = _answer(connection, request.method)
            body, whole = _read_body(response)
        except Exception as error:
            _close(connection, response)
            race = reused and not progress.bytes_read and sent_at is not None and self._clock() - sent_at <= REPOST_WINDOW_SECONDS
            failure = self._failure(error, request, reused=race, answered=progress.bytes_read > 0)
            if failure is error:
                raise
            raise failure from error
        if whole and not early and _reusable(response):
            self._pool.give(connection)
        else:
            _close(connection, response)  # a 101, an answer cut short or early, or one that may leave bytes behind
        return AppResponse(response.status, {name.lower(): value for name, value in response.getheaders()}, body)

    def _left(self, deadline: float, request: SqsdRequest) -> float:
        """Seconds left before the deadline; past it, the request has timed out."""
        left = deadline - self._clock()
        if left <= 0:
            raise self._timeout(request)
        return left

    def _failure(self, error: BaseException, request: SqsdRequest, *, reused: bool, answered: bool = False) -> BaseException:
        """What a failed exchange raises: a re-post signal (``reused``: the keep-alive race), a timeout, or the app
        unreachable (``answered``: bytes of an answer came, but not one ``http.client`` reads whole)."""
        if reused and isinstance(error, _CLOSED_BEFORE_ANSWER):
            return _ClosedBeforeAnswerError("the app closed a reused connection before answering")
        if isinstance(error, AppTimeoutError | TimeoutError):
            return self._timeout(request)
        unreadable = isinstance(error, http.client.HTTPException) and not isinstance(error, (*_CLOSED_BEFORE_ANSWER, http.client.IncompleteRead))
        if answered and unreadable:
            return AppUnreachableError(
                f"the app's answer to {request.method} {request.path} at {self.address} could not be read as HTTP: "
                f"{safe_repr(error)} (read are: a status line, at most 100 header lines of 64 KiB, one Content-Length)"
            )
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

    def _health_problem(self, path: str, stop: threading.Event) -> str | None:
        """None when GET ``path`` answers 200 within the health deadline; otherwise what went wrong (or the stop)."""
        answer_seconds = min(HEALTH_ANSWER_TIMEOUT_SECONDS, self.settings.inactivity_timeout)
        connection = http.client.HTTPConnection(self.host, self.port)
        response = None
        try:
            _connect_unless_stopped(connection, self.settings.connect_timeout, stop, self._clock)
            deadline = self._clock() + answer_seconds
            connection.sock.settimeout(answer_seconds)
            connection.request("GET", path)
            connection.response_class = _deadline_response(self._clock, deadline, stop)  # type: ignore[assignment]  # called as (sock, method=)
            response = connection.getresponse()
            _read_body(response)
        except _StoppedError:
            return "stopped during the check"
        except (OSError, http.client.HTTPException) as error:
            return safe_repr(error)
        finally:
            _close(connection, response)
        return None if response.status == 200 else f"status {response.status}"


class _DeadlineReader(io.RawIOBase):
    """A socket's reads, each given only the time left before one deadline; a set ``stop`` ends them too.

    It holds the socket's own file (``socket_file``, what ``http.client`` made of it) until it is closed:
    when an answer says ``Connection: close`` or is HTTP/1.0, ``http.client`` closes the connection's socket
    as soon as the headers are read, and only that file keeps its descriptor open for the body.
    """

    def __init__(
        self,
        sock: socket.socket,
        socket_file: io.RawIOBase,
        clock: Callable[[], float],
        deadline: float,
        stop: threading.Event | None,
        progress: _Progress,
    ) -> None:
        super().__init__()
        self._sock, self._socket_file = sock, socket_file
        self._clock, self._deadline, self._stop = clock, deadline, stop
        self._progress = progress
        self.nonblocking = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        """One ``recv_into`` within the time left; TimeoutError past the deadline, _StoppedError after a stop.

        With ``nonblocking`` set: None when nothing is there to read right now.
        """
        if self.nonblocking:
            if not _readable(self._sock):
                return None
            self._sock.settimeout(0)
            try:
                return self._sock.recv_into(buffer)
            except BlockingIOError:
                return None
        while True:
            left = self._deadline - self._clock()
            if left <= 0:
                raise TimeoutError("the answer did not come by its deadline")
            if self._stop is not None and self._stop.is_set():
                raise _StoppedError("the stop event was set")
            self._sock.settimeout(left if self._stop is None else min(left, HEALTH_STOP_POLL_SECONDS))
            try:
                count = self._sock.recv_into(buffer)
            except TimeoutError:
                continue  # the loop's checks decide: past the deadline, or stopped, or read on
            self._progress.bytes_read += count
            return count

    def close(self) -> None:
        if not self.closed:
            self._socket_file.close()  # the socket's descriptor closes now if the connection closed it meanwhile
        super().close()


class _Answer(http.client.HTTPResponse):
    """An ``http.client`` answer read through a ``_DeadlineReader``, which skips interim (1xx) answers and
    tells whether anything came past its end.

    ``http.client`` itself skips only ``100 Continue``: a ``103 Early Hints`` (or any other 1xx) would be
    taken as the final answer, and the real one left on the connection for the next request to read.
    ``101 Switching Protocols`` is returned as it is: the connection is no HTTP any more, and the message fails.
    ``unread`` is True when bytes were buffered or waiting on the socket as the body ended: such a
    connection must be closed, never kept for the next request.
    """

    reader: _DeadlineReader
    unread = False

    def begin(self) -> None:
        """``http.client.HTTPResponse.begin`` (Python 3.11-3.13), step for step, with the headers read by
        ``_read_headers`` (the same ``HTTPMessage``, without the email parser for plain lines) and a
        ``Content-Length`` list read as RFC 9110 reads it (``_content_length``)."""
        if self.headers is not None:
            return
        version, status, reason = self._read_status()  # interim answers skipped
        self.code = self.status = status
        self.reason = reason.strip()
        if version in ("HTTP/1.0", "HTTP/0.9"):
            self.version = 10
        elif version.startswith("HTTP/1."):
            self.version = 11
        else:
            raise http.client.UnknownProtocol(version)
        self.headers = self.msg = _read_headers(self.fp)
        transfer = self.msg.get("transfer-encoding")
        self.chunked = bool(transfer) and transfer.lower() == "chunked"
        if self.chunked:
            self.chunk_left = None
        self.will_close = self._check_close()
        self.length = None
        length = self.msg.get("content-length")
        if length and not self.chunked:
            with contextlib.suppress(ValueError):
                self.length = int(length) if int(length) >= 0 else None
        if status in (204, 304) or 100 <= status < 200 or self._method == "HEAD":
            self.length = 0
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True
        length = _content_length(self)
        if length != self.length:  # http.client took the connection as closing for want of a length it could read
            self.length, self.will_close = length, self._check_close()

    def _read_status(self) -> tuple[str, int, str]:
        while True:
            version, status, reason = super()._read_status()  # type: ignore[misc]  # http.client's own
            if not 100 <= status < 200 or status == 101:
                return version, status, reason
            _read_headers(self.fp)  # the interim answer's headers: dropped

    def _close_conn(self) -> None:
        fp = self.fp
        if fp is not None and not self.will_close:
            self.reader.nonblocking = True
            try:
                self.unread = bool(fp.peek(1))  # a BufferedReader (see _deadline_response)
            except (OSError, ValueError):
                self.unread = True
            finally:
                self.reader.nonblocking = False
        super()._close_conn()  # type: ignore[misc]  # http.client's own


def _read_headers(fp: Any) -> http.client.HTTPMessage:
    """An answer's headers as ``http.client.parse_headers`` reads them, the same limits and errors included
    (``MAX_HEADER_LINE_BYTES`` a line, ``MAX_HEADER_LINES`` lines).

    Plain ``Name: value`` lines (a token, a colon, no CR or LF but at the end) are split here, as the email
    parser would split them (the value without its leading blanks and its line end); anything else (a folded
    line, a bare CR, a line without a name) is handed to the email parser whole, as ``http.client`` does, so that
    every answer reads the same either way. The email parser costs more than the rest of an answer's reading.
    """
    lines = []
    while True:
        line = fp.readline(MAX_HEADER_LINE_BYTES + 1)
        if len(line) > MAX_HEADER_LINE_BYTES:
            raise http.client.LineTooLong("header line")
        lines.append(line)
        if len(lines) > MAX_HEADER_LINES:
            raise http.client.HTTPException(f"got more than {MAX_HEADER_LINES} headers")
        if line in (b"\r\n", b"\n", b""):
            break
    text = b"".join(lines).decode("iso-8859-1")
    if not _PLAIN_HEADER_LINES.fullmatch(text):
        return email.parser.Parser(_class=http.client.HTTPMessage).parsestr(text)
    return _PlainHeaders(_PLAIN_HEADER_FIELD.findall(text))


class _PlainHeaders(http.client.HTTPMessage):
    """An answer's headers read from plain lines (``_read_headers``), looked up by a lower-case index.

    ``get``, ``get_all`` and ``items`` answer as ``email.message.Message``'s do: its policy (compat32) hands a
    value back unchanged unless it holds surrogates, which text decoded from Latin-1 never does. Read-only, as
    ``http.client`` and ``HttpTarget`` use it.
    """

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        super().__init__()
        self._headers = fields
        self._index: dict[str, list[str]] = {}
        for name, value in fields:
            self._index.setdefault(name.lower(), []).append(value)

    def get(self, name: str, failobj: Any = None) -> Any:
        values = self._index.get(name.lower())
        return values[0] if values else failobj

    def get_all(self, name: str, failobj: Any = None) -> Any:
        values = self._index.get(name.lower())
        return list(values) if values else failobj

    def items(self) -> list[tuple[str, str]]:
        return list(self._headers)


def _content_length(answer: http.client.HTTPResponse) -> int | None:
    """The body's length as ``http.client`` found it, or, for a ``Content-Length`` it could not read, RFC 9110's
    reading (section 8.6): a list of one repeated value (``2, 2``) is that value; any other is no answer
    (``http.client`` would read it until the app closes, which a kept-alive app never does)."""
    values = answer.msg.get_all("content-length") or []
    closing = answer._check_close()  # type: ignore[attr-defined]  # http.client's own: Connection: close, HTTP/1.0
    if answer.length is not None or not values or answer.chunked or closing or answer.status in (204, 304) or answer.status < 200:
        return answer.length
    lengths = {part.strip() for value in values for part in value.split(",")}
    if len(lengths) == 1 and (length := lengths.pop()).isascii() and length.isdigit():
        return int(length)
    raise http.client.HTTPException(f"the answer's Content-Length {', '.join(values)!r} is not one length (RFC 9110 8.6)")


def _reusable(response: http.client.HTTPResponse) -> bool:
    """True when the connection can carry the next request: a final answer read whole, not closing, nothing past its
    end (an ``_Answer`` tells), and no body a 204 or 304 declared (``http.client`` reads none, the app may still send it)."""
    declared_body = response.status in (204, 304) and (
        response.getheader("content-length", "0").strip() not in ("", "0") or response.getheader("transfer-encoding")
    )
    return (
        response.status >= 200
        and not response.will_close
        and not declared_body
        and not (isinstance(response, _Answer) and response.unread)
    )


class _Progress:
    """How many bytes of an answer came back: none means the app closed before answering (the keep-alive race)."""

    bytes_read = 0


def _early_answer(connection: http.client.HTTPConnection) -> http.client.HTTPResponse | None:
    """The answer the app sent before it read the whole request and closed, or None when none is there."""
    sock = connection.sock
    if sock is None:
        return None
    answer = connection.response_class(sock, method="POST")
    try:
        answer.begin()
    except (OSError, http.client.HTTPException):
        answer.close()
        return None
    return answer


def _connect_unless_stopped(
    connection: http.client.HTTPConnection, timeout: float, stop: threading.Event, clock: Callable[[], float]
) -> None:
    """``connection.connect()`` within ``timeout``, tried again every ``HEALTH_STOP_POLL_SECONDS`` so that a stop
    ends it then (an app whose listen queue is full takes no connection and refuses none)."""
    deadline = clock() + timeout
    while True:
        if stop.is_set():
            raise _StoppedError("the stop event was set")
        left = deadline - clock()
        connection.timeout = max(0.001, min(left, HEALTH_STOP_POLL_SECONDS))
        try:
            connection.connect()
            return
        except TimeoutError:
            connection.close()
            if clock() >= deadline:
                raise


def _deadline_response(
    clock: Callable[[], float], deadline: float, stop: threading.Event | None = None, *, progress: _Progress | None = None
) -> Callable[..., http.client.HTTPResponse]:
    """An ``HTTPConnection.response_class`` whose every read respects ``deadline`` (and ``stop``), counting the
    bytes read into ``progress``."""

    def response(sock: socket.socket, *args: Any, **options: Any) -> http.client.HTTPResponse:
        answer = _Answer(sock, *args, **options)
        # The plain socket file http.client opened: kept (it holds the descriptor open) but read through the deadline.
        socket_file = answer.fp.detach()
        answer.reader = _DeadlineReader(sock, socket_file, clock, deadline, stop, progress or _Progress())
        answer.fp = io.BufferedReader(answer.reader)
        return answer

    return response


def _read_body(response: http.client.HTTPResponse) -> tuple[bytes, bool]:
    """The body's first RESPONSE_KEPT_BYTES, and whether it was read to its end (else the connection must close).

    The rest is read and dropped up to RESPONSE_DRAIN_MAX_BYTES. A body cut short of its Content-Length
    raises ``http.client.IncompleteRead`` (``read(amt)`` itself returns short at EOF without a word).
    """
    expected, kept, total = response.length, bytearray(), 0
    while total <= RESPONSE_DRAIN_MAX_BYTES:
        chunk = response.read(RESPONSE_READ_CHUNK_BYTES)
        if not chunk:
            if expected is not None and total < expected:
                raise http.client.IncompleteRead(bytes(kept), expected - total)
            return bytes(kept), True
        total += len(chunk)
        kept += chunk[: max(0, RESPONSE_KEPT_BYTES - len(kept))]
    return bytes(kept), False


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Worker-Tier-Signature`` value of a POST: ``v1=`` and the hex HMAC-SHA256 of ``<timestamp>.<body>``.

    >>> signature(b"key", "1700000000", b"{}")[:3]
    'v1='
    """
    digest = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"{contract.SIGNATURE_VERSION}={digest}"


def signature_v2(secret: bytes, method: str, path: str, message_id: str, timestamp: str, body: bytes) -> str:
    """The ``X-Worker-Tier-Signature-V2`` value of a request: ``v2=`` and the hex HMAC-SHA256 of
    ``"v2\n<method>\n<path>\n<message_id>\n<timestamp>\n"`` followed by the body.

    ``path`` is the request target as sent (path and query); ``message_id`` the ``X-Aws-Sqsd-Msgid`` value.
    None of the four texts can hold a newline (``sqsd.request_for`` refuses control characters), so no two
    requests share what is signed. Unlike v1, a captured signature verifies for no other path or message.

    >>> signature_v2(b"key", "POST", "/work", "m-1", "1700000000", b"{}")[:3]
    'v2='
    """
    signed = "\n".join((contract.SIGNATURE_V2_VERSION, method, path, message_id, timestamp, "")).encode() + body
    return f"{contract.SIGNATURE_V2_VERSION}={hmac.new(secret, signed, hashlib.sha256).hexdigest()}"


def read_signing_secret(arn: str, *, secretsmanager: Any = None, ssm: Any = None) -> bytes:
    """The signing key stored at ``arn``: a Secrets Manager secret (its string or binary) or an SSM parameter (decrypted)."""
    service, region = arn.split(":")[2:4]
    if service == "secretsmanager":
        client = secretsmanager if secretsmanager is not None else new_client("secretsmanager", region_name=region)
        answer = client.get_secret_value(SecretId=arn)
        value = answer["SecretBinary"] if answer.get("SecretBinary") else answer.get("SecretString", "").encode()
    else:
        client = ssm if ssm is not None else new_client("ssm", region_name=region)
        # By its ARN, not its name: a name reads the caller's own account, a parameter shared from another only by ARN.
        value = client.get_parameter(Name=arn, WithDecryption=True)["Parameter"]["Value"].encode()
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


def _close(connection: http.client.HTTPConnection, response: http.client.HTTPResponse | None) -> None:
    """Close a connection and its answer: after ``Connection: close`` the answer holds the socket, not the connection."""
    if response is not None:
        response.close()
    connection.close()


def _send(connection: http.client.HTTPConnection, request: SqsdRequest, headers: list[tuple[str, str]]) -> None:
    """Write the request line, the headers as given, and the body, in one ``sendall``.

    The bytes ``putrequest``, ``putheader`` and ``endheaders`` would write (with ``skip_host`` and
    ``skip_accept_encoding``), refused as they refuse them: a method or target with control characters, a header
    name that is no token, a value with a bare CR or LF. ``http.client``'s own calls cost more than the
    exchange's system calls; ``_answer`` reads the answer as ``getresponse`` would.
    """
    if (bad := _DISALLOWED_METHOD.search(request.method)) is not None:
        raise ValueError(f"method can't contain control characters. {request.method!r} (found at least {bad.group()!r})")
    target = request.path or "/"
    if (bad := _DISALLOWED_TARGET.search(target)) is not None:
        raise http.client.InvalidURL(f"URL can't contain control characters. {target!r} (found at least {bad.group()!r})")
    line = f"{request.method} {target} HTTP/1.1"
    if not line.isascii():
        line.encode("ascii")  # http.client's UnicodeEncodeError for a request line that is not ASCII
    names = "\n".join(name for name, _ in headers)
    # One check of every name and of every value (NUL between values: a value's own CR or LF still fails, as alone).
    lined = names.count("\n") == max(len(headers) - 1, 0)  # no name holds a line feed of its own
    if (headers and not (lined and names.isascii() and _LEGAL_HEADER_NAMES.fullmatch(names))) or _ILLEGAL_HEADER_VALUE.search("\0".join(
            value for _, value in headers)):
        for name, value in headers:  # the first one at fault, refused as http.client refuses it
            if not (name.isascii() and _LEGAL_HEADER_NAME.fullmatch(name)):
                name.encode("ascii")  # http.client's UnicodeEncodeError for a name that is not ASCII
                raise ValueError(f"Invalid header name {name.encode()!r}")
            if _ILLEGAL_HEADER_VALUE.search(value):
                raise ValueError(f"Invalid header value {value.encode()!r}")
    head = "\r\n".join([line, *(f"{name}: {value}" for name, value in headers), "", ""])
    connection.sock.sendall(head.encode("utf-8") + request.body)  # names ASCII, values UTF-8 (sqsd.request_for's rule)


def _answer(connection: http.client.HTTPConnection, method: str) -> http.client.HTTPResponse:
    """The answer to what ``_send`` wrote, as ``connection.getresponse()`` reads it: its status and headers read, the
    connection closed when the answer says it closes (the answer then holds the socket for its body)."""
    response = connection.response_class(connection.sock, method=method)
    try:
        response.begin()
    except BaseException:
        response.close()
        if isinstance(sys.exc_info()[1], ConnectionError):
            connection.close()
        raise
    if response.will_close:
        connection.close()
    return response


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
    return sock is None or _readable(sock)


def _readable(sock: socket.socket) -> bool:
    """True when a read on ``sock`` would not wait: bytes, an EOF or an error are there."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
