"""The in-process app target: a WSGI or ASGI app called with sqsd's POST, in this process, without a socket.

One idea, kept whole: turning one ``SqsdRequest`` into one call of the app and its answer back into sqsd's terms.

The ``app`` setting names it (``package.module:attribute``, as gunicorn and uvicorn do). It is imported
once per process (``InProcessTarget.load``); an app that cannot be imported fails the worker's start
with an error naming the setting and its value.

- **WSGI** (Flask, Django's ``WSGIHandler``, anything PEP 3333) is called directly with an environ built
  from the ``SqsdRequest`` (``wsgi_environ``), as a WSGI server would build it for sqsd's POST to
  ``localhost:80``: the Host is ``localhost``, which an app behind EB's proxy already allows.
- **ASGI** (FastAPI, Starlette, Django's ``ASGIHandler``: an ``async def __call__``) goes through
  a2wsgi's ``ASGIMiddleware``, which runs the app on an event loop of its own thread. a2wsgi is
  imported only then: ``pip install worker-tier[asgi]``. Its lifespan ``startup`` runs once at load,
  as a server would run it, and its state reaches each request's scope (``_Lifespan``).

An app that raises before answering (SystemExit and KeyboardInterrupt included), breaks PEP 3333
(``start_response`` twice without ``exc_info``, a status not three digits then a space), or ends
without an answer fails the message with ``AppExceptionError``, whose message is the traceback,
innermost call first. An answer goes back to the worker, which judges it by sqsd's rules
(``worker_tier.app.sqsd.check_response``), status first: an exception the app raised or logged (as Flask
and Django do for an unhandled one, and Starlette after answering) rides along in ``AppResponse.error``.

An ASGI delivery is bounded by ``SqsdRequest.timeout_seconds`` (the worker's ``inactivity_timeout``, within
the invocation's time): an app still running then is cancelled and the message fails, also when it had
answered and was running its work after the answer (FastAPI's and Starlette's ``BackgroundTasks``); that work raising
after a 200 fails the message too, naming the exception. The cancellation is awaited for ``CANCEL_GRACE_SECONDS``; a
background task Starlette runs in a thread (a plain ``def``) cannot be cancelled and may finish after the message
failed, so its retry may run that work twice. A BaseException of
the app (SystemExit, KeyboardInterrupt, CancelledError) is its request's failure, never the bridge loop's;
should the loop stop anyway, the next delivery builds a new bridge. Known gaps: a WSGI app, and an ASGI
app blocking its loop with synchronous code, are not bounded (Lambda's own timeout is their bound). An
ASGI app whose ``__call__`` is a plain ``def`` returning a coroutine is recognised by its three required
arguments, or else on its first call (a coroutine comes back).
"""

from __future__ import annotations

import contextvars
import importlib
import inspect
import logging
import re
import sys
import threading
import traceback
from io import BytesIO
from typing import Any, Callable, Iterable
from urllib.parse import unquote_to_bytes

from worker_tier.core import contract, message
from worker_tier.app.app_target import AppResponse, SqsdRequest
from worker_tier.core.errors import AppExceptionError, AppLoadError
from worker_tier.core.observability import logger

# How long an ASGI app's lifespan startup may take before loading fails.
LIFESPAN_STARTUP_TIMEOUT_SECONDS = 60
# How long a cancelled ASGI request is awaited after its deadline, for its cancellation to land.
CANCEL_GRACE_SECONDS = 1.0
# The server an environ describes: sqsd POSTs to localhost:80 (EB's proxy, then the app).
SERVER_NAME = "localhost"
SERVER_PORT = "80"
# Frames of the app's traceback an AppExceptionError keeps (the reason keeps its first KiB anyway).
MAX_TRACEBACK_FRAMES = 12

# The environ key under which an ASGI app's exception comes back from the bridge's loop thread.
APP_ERROR_KEY = "worker_tier.app_error"
# The positional arguments an ASGI app takes (scope, receive, send); a WSGI app takes two.
ASGI_PARAMETERS = 3
# The environ key that gives the bridge's loop a delivery's time limit (SqsdRequest.timeout_seconds).
TIMEOUT_KEY = "worker_tier.timeout_seconds"
# A WSGI status line: three digits, then a space and a reason phrase, or nothing (PEP 3333, RFC 9110).
STATUS_PATTERN = re.compile(r"[0-9]{3}(?: .*)?", re.DOTALL)

_BASE_ENVIRON: dict[str, Any] = {
    "REQUEST_METHOD": "POST",
    "SCRIPT_NAME": "",
    "SERVER_NAME": SERVER_NAME,
    "SERVER_PORT": SERVER_PORT,
    "SERVER_PROTOCOL": "HTTP/1.1",
    "REMOTE_ADDR": "127.0.0.1",
    "HTTP_HOST": SERVER_NAME,
    "wsgi.version": (1, 0),
    "wsgi.url_scheme": "http",
    "wsgi.multithread": True,  # the container worker runs messages on a pool of threads
    "wsgi.multiprocess": True,  # Lambda runs many copies
    "wsgi.run_once": False,
}
# Header names whose environ key is remembered (attribute headers make the names open-ended).
MAX_REMEMBERED_HEADER_NAMES = 256
_ENVIRON_KEYS: dict[str, str] = {}
_loaded: dict[str, InProcessTarget] = {}
_load_lock = threading.Lock()


class InProcessTarget:
    """Delivers sqsd's POST to a WSGI or ASGI app in this process (the ``app`` setting).

    Examples
    --------
    >>> def app(environ, start_response):
    ...     start_response("200 OK", [("Content-Type", "text/plain")])
    ...     return [environ["PATH_INFO"].encode()]
    >>> InProcessTarget(app).deliver(SqsdRequest("/work", (), b"")).body
    b'/work'
    """

    def __init__(self, app: Callable[..., Any], *, reference: str = "") -> None:
        self.app = app
        self.reference = reference or getattr(app, "__qualname__", type(app).__name__)
        self.asgi = is_asgi(app)
        self._wsgi = _asgi_bridge(app, self.reference) if self.asgi else app
        self._bridge_lock = threading.Lock()
        _ERROR_CAPTURE.install()

    @classmethod
    def load(cls, reference: str) -> InProcessTarget:
        """The target for ``package.module:attribute``, imported once per process; AppLoadError when it cannot be."""
        with _load_lock:
            target = _loaded.get(reference)
            if target is None:
                target = _loaded[reference] = cls(load_app(reference), reference=reference)
        return target

    def deliver(self, request: SqsdRequest) -> AppResponse:
        """Call the app with ``request``; its answer (with ``error`` when it raised or logged one), or
        AppExceptionError when it gave none: it raised first, broke PEP 3333, ended silent or ran out of time."""
        answer = _Answer()
        environ = wsgi_environ(request)
        environ[TIMEOUT_KEY] = request.timeout_seconds
        capture = _ERROR_CAPTURE.start()
        try:
            chunks = self._current_wsgi()(environ, answer.start_response)
            if not self.asgi and inspect.iscoroutine(chunks):  # an ASGI app behind a plain-def __call__
                chunks.close()
                self._become_asgi()
                return self.deliver(request)
            body = _read(chunks)
        except BaseException as error:  # SystemExit and KeyboardInterrupt too: the app's failure, with its traceback
            raise _failure(error, request, None) from _cause(error)
        finally:
            logged = _ERROR_CAPTURE.stop(capture)
        raised = answer.exc_info[1] if answer.exc_info else environ.get(APP_ERROR_KEY) or logged
        if isinstance(raised, _BridgeFailureError) or answer.status == 0:
            raise _failure(raised, request, None) from _cause(raised)
        described = _exception_text(raised, request, answer.status) if raised is not None and answer.status != 200 else ""
        return AppResponse(answer.status, answer.headers, body, described)

    def _current_wsgi(self) -> Callable[..., Any]:
        """The app as WSGI; for ASGI, a new bridge when its loop stopped (a BaseException that escaped to it)."""
        bridge = self._wsgi
        if self.asgi and not getattr(bridge, "loop").is_running():  # noqa: B009 - a2wsgi's ASGIMiddleware, typed as WSGI
            with self._bridge_lock:
                if self._wsgi is bridge:
                    logger.error("the ASGI app's event loop stopped; starting a new one", extra={"app": self.reference})
                    self._wsgi = _asgi_bridge(self.app, self.reference)
        return self._wsgi

    def _become_asgi(self) -> None:
        """Serve the app as ASGI from now on: its first call returned a coroutine."""
        with self._bridge_lock:
            if not self.asgi:
                self._wsgi = _asgi_bridge(self.app, self.reference)
                self.asgi = True


def load_app(reference: str) -> Callable[..., Any]:
    """Import ``package.module:attribute`` (the attribute may be dotted); AppLoadError naming the setting when it fails."""
    variable = contract.setting_variable("app")
    module_name, _, attribute = reference.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
    except GeneratorExit:
        raise
    except BaseException as error:  # SystemExit too: a settings check, argparse at module level
        raise AppLoadError(
            f"app {reference!r} ({variable}) could not be imported: importing {module_name!r} raised "
            f"{type(error).__name__}: {message.error_text(error, 300)}; deploy the module with the task code"
        ) from error
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise AppLoadError(f"app {reference!r} ({variable}): {module_name!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    if not callable(found):
        raise AppLoadError(
            f"app {reference!r} ({variable}) must name a WSGI or ASGI app (a callable), got {type(found).__name__}"
        )
    return found  # type: ignore[no-any-return]


def is_asgi(app: Any) -> bool:
    """True for an ASGI app (an ``async def`` function, an object whose ``__call__`` is one, or a callable that
    requires ASGI's three arguments: a wrapper returning the coroutine), False for WSGI."""
    if inspect.iscoroutinefunction(app):
        return True
    call = next((vars(cls)["__call__"] for cls in type(app).__mro__ if "__call__" in vars(cls)), None)
    return inspect.iscoroutinefunction(call) or _required_positional(app) == ASGI_PARAMETERS


def _required_positional(app: Any) -> int | None:
    """How many positional arguments ``app`` requires (3 for ASGI's scope, receive, send; 2 for WSGI); None when unknown."""
    try:
        parameters = inspect.signature(app).parameters.values()
    except (TypeError, ValueError):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for parameter in parameters if parameter.kind in positional and parameter.default is parameter.empty)


def wsgi_environ(request: SqsdRequest) -> dict[str, Any]:
    """The PEP 3333 environ a WSGI server would build for ``request`` (no socket behind it).

    Header values travel as UTF-8 and are read back as latin-1, as PEP 3333 asks of a server. Headers
    whose names differ only in case or in ``-`` vs ``_`` (two attributes ``trace-id`` and ``trace_id``)
    share one key, their values joined with ", ".
    """
    path, _, query = request.path.partition("?")
    environ = dict(_BASE_ENVIRON)
    environ["REQUEST_METHOD"] = request.method
    environ["PATH_INFO"] = unquote_to_bytes(path).decode("latin-1")
    environ["QUERY_STRING"] = query
    environ["CONTENT_LENGTH"] = str(len(request.body))
    environ["wsgi.input"] = BytesIO(request.body)
    environ["wsgi.errors"] = sys.stderr
    given: set[str] = set()
    for name, value in request.headers:
        key = _ENVIRON_KEYS.get(name) or _environ_key(name)
        text = value if value.isascii() else value.encode("utf-8").decode("latin-1")
        # Names differing in case or "-" vs "_" share a key: their values are joined, as HTTP joins repeats.
        environ[key] = f"{environ[key]}, {text}" if key in given else text
        given.add(key)
    return environ


def _environ_key(header: str) -> str:
    """A header's environ key (``X-Aws-Sqsd-Msgid`` -> ``HTTP_X_AWS_SQSD_MSGID``), remembered: the names repeat."""
    key = header.upper().replace("-", "_")
    if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        key = "HTTP_" + key
    if len(_ENVIRON_KEYS) < MAX_REMEMBERED_HEADER_NAMES:
        _ENVIRON_KEYS[header] = key
    return key


class _Answer:
    """What the app passed to ``start_response``."""

    __slots__ = ("exc_info", "headers", "status")

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.exc_info: Any = None

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        """PEP 3333's ``start_response``: a second call needs ``exc_info``; a status is 3 digits then a space or its end."""
        if self.status and exc_info is None:
            raise RuntimeError(f"start_response called again (status {status!r}) without exc_info, which PEP 3333 forbids")
        if not isinstance(status, str) or not STATUS_PATTERN.fullmatch(status):
            raise ValueError(f"status {status!r} is not 3 digits followed by a space or nothing (PEP 3333)")
        self.status = int(status[:3])
        self.headers = _joined_headers(headers)
        if exc_info is not None:
            self.exc_info = exc_info
        return _no_write

    def __repr__(self) -> str:
        return f"_Answer({self.status})"


def _joined_headers(headers: list[tuple[str, str]]) -> dict[str, str]:
    """The app's headers by lower-case name; a repeated name's values joined with ", ", as HTTP allows."""
    joined: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        joined[key] = f"{joined[key]}, {value}" if key in joined else value
    return joined


def _no_write(data: bytes) -> None:
    """PEP 3333's ``write`` callable: a legacy app's body chunks are not kept (none of the frameworks here uses it)."""


def _read(chunks: Iterable[bytes]) -> bytes:
    """The whole body of an app's answer, closing its iterable as PEP 3333 asks."""
    try:
        return b"".join(chunks)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


class _ErrorCapture(logging.Handler):
    """Keeps the first exception logged (with its traceback) in a delivery's context while it runs.

    Flask and Django answer 500 to an unhandled exception and log it; this gives the reason its traceback.
    A context variable, not a thread's: an ASGI app runs on the bridge's loop (and Django's views on
    asgiref's threads), in contexts copied from the delivering thread's.
    """

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self._errors: contextvars.ContextVar[list[BaseException] | None] = contextvars.ContextVar("app_errors", default=None)
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            logging.getLogger().addHandler(self)
            self._installed = True

    def start(self) -> contextvars.Token[list[BaseException] | None]:
        return self._errors.set([])

    def stop(self, token: contextvars.Token[list[BaseException] | None]) -> BaseException | None:
        errors = self._errors.get()
        self._errors.reset(token)
        return errors[0] if errors else None

    def emit(self, record: logging.LogRecord) -> None:
        errors = self._errors.get()
        if errors is not None and not errors and record.exc_info and record.exc_info[1] is not None:
            errors.append(record.exc_info[1])


_ERROR_CAPTURE = _ErrorCapture()


def _exception_text(error: BaseException, request: SqsdRequest, status: int | None) -> str:
    """What the app raised, where, and its traceback, innermost call first (the reason keeps the start)."""
    answered = f" (it answered {status})" if status else ""
    frames = traceback.extract_tb(error.__traceback__)[-MAX_TRACEBACK_FRAMES:]
    shown = [f"{'/'.join(frame.filename.split('/')[-2:])}:{frame.lineno} in {frame.name}" for frame in reversed(frames)]
    return (
        f"the app raised {type(error).__name__}: {message.error_text(error, 300)} handling {request.method} "
        f"{request.path}{answered}; traceback, innermost call first: {' <- '.join(shown) or 'none'}"
    )


class _BridgeFailureError(AppExceptionError):
    """How the bridge's loop reports a request that gave no answer: the app raised first (``__cause__``: what it
    raised, a BaseException included), returned without one, or ran out of time. a2wsgi passes it to ``deliver``."""


def _failure(error: BaseException | None, request: SqsdRequest, status: int | None) -> AppExceptionError:
    """The AppExceptionError of a delivery that gave no answer: the app's exception (its traceback), or why none came."""
    if isinstance(error, _BridgeFailureError):
        if error.__cause__ is None:
            return AppExceptionError(f"{error} handling {request.method} {request.path}")
        error = error.__cause__
    if error is None:
        return AppExceptionError(
            f"the app ended without an answer to {request.method} {request.path}: it returned without calling "
            "start_response (PEP 3333); sqsd would see the connection closed"
        )
    return AppExceptionError(_exception_text(error, request, status))


def _cause(error: BaseException | None) -> BaseException | None:
    """What an AppExceptionError of ``error`` is raised from: the app's own exception."""
    return error.__cause__ if isinstance(error, _BridgeFailureError) else error


def _asgi_bridge(app: Any, reference: str) -> Callable[..., Any]:
    """The ASGI app as a WSGI one, through a2wsgi, its lifespan started."""
    try:
        from a2wsgi import ASGIMiddleware
    except ImportError as error:
        raise AppLoadError(
            f"app {reference!r} ({contract.setting_variable('app')}) is an ASGI app: it needs a2wsgi "
            "(pip install 'worker-tier[asgi]')"
        ) from error
    lifespan = _Lifespan(app)
    bridge = ASGIMiddleware(lifespan.serve)  # type: ignore[arg-type]
    lifespan.start(bridge.loop, reference)
    return bridge


class _Progress:
    """How far an ASGI app's answer got: started (``http.response.start``), finished (its last body)."""

    __slots__ = ("_send", "finished", "started", "status")

    def __init__(self, send: Callable[[dict[str, Any]], Any]) -> None:
        self._send = send
        self.started = False
        self.finished = False
        self.status: Any = None

    async def send(self, event: dict[str, Any]) -> None:
        if event.get("type") == "http.response.start":
            self.started = True
            self.status = event.get("status")
        elif event.get("type") == "http.response.body" and not event.get("more_body", False):
            self.finished = True
        await self._send(event)


class _Lifespan:
    """An ASGI app's lifespan, run on the bridge's loop as a server runs it; its state reaches each request's scope.

    An app that does not speak lifespan (it raises on the lifespan scope, as Django does) runs without it,
    as uvicorn's default allows; one that reports ``lifespan.startup.failed`` fails the load. The shutdown
    never comes: the process ends with the app (Lambda gives no notice to an extension-less function).
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.state: dict[str, Any] = {}
        self._task: Any = None  # held, so the lifespan coroutine is not collected while the app lives

    async def serve(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """One request, with the lifespan's state, bounded by its time limit; the app's exception is left in the environ.

        An exception before the answer started, any BaseException, returning without an answer and running
        out of time raise ``_BridgeFailureError`` (an Exception: a2wsgi hands it to ``deliver``; a SystemExit
        reaching the loop would stop it). One after the whole answer (Starlette answers 500 to an unhandled
        exception, then re-raises it), whatever it is, is only left in the environ: the answer stands. Running
        out of time after the whole answer (Starlette's ``BackgroundTasks`` run then, inside the app's call)
        cancels that work and leaves a ``_BridgeFailureError`` in the environ: the message fails, as the work
        it asked for was not done (a2wsgi ends the WSGI body only once the app's call has ended).
        """
        import asyncio

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope["state"] = dict(self.state)  # a shallow copy per request, as uvicorn gives
        environ = scope.get("wsgi_environ")
        environ = environ if isinstance(environ, dict) else {}
        progress = _Progress(send)
        request = asyncio.ensure_future(self._guarded(scope, receive, progress.send))
        try:
            done, _ = await asyncio.wait({request}, timeout=environ.get(TIMEOUT_KEY))
        finally:
            if not request.done():
                request.cancel()
                # Let the cancellation land (an app's cleanup runs now, not beside the next message), for a
                # bounded while: an app may swallow it, and a thread's work (a plain-def background task) cannot
                # be cancelled at all; it may finish after the message failed.
                await asyncio.wait({request}, timeout=CANCEL_GRACE_SECONDS)
        if not done:
            if progress.finished:  # answered, but its work after the answer (BackgroundTasks) was cut: not a success
                environ[APP_ERROR_KEY] = _BridgeFailureError(
                    f"the app answered {progress.status}, but its work after the answer (a background task) did not "
                    f"finish within {environ.get(TIMEOUT_KEY)} s (inactivity_timeout) and was cancelled"
                )
                return
            raise _BridgeFailureError(f"the app did not finish within {environ.get(TIMEOUT_KEY)} s (inactivity_timeout)")
        raised = request.result()
        if raised is not None:
            environ[APP_ERROR_KEY] = raised
            if progress.finished and progress.status == 200:  # its work after a 200 (a background task) failed
                logger.error("the app's work after its 200 answer raised", exc_info=raised)
                environ[APP_ERROR_KEY] = _BridgeFailureError(
                    f"the app answered 200, but its work after the answer (a background task) raised "
                    f"{type(raised).__name__}: {message.error_text(raised, 300)}"
                )
                return
            if progress.finished:  # the whole answer came (Starlette's 500, re-raising after it): it stands
                return
            if progress.started and isinstance(raised, Exception):
                raise raised
            raise _BridgeFailureError(f"the app raised {type(raised).__name__}") from raised
        if not progress.started:
            raise _BridgeFailureError("the ASGI app returned without an answer (no http.response.start)")

    async def _guarded(self, scope: dict[str, Any], receive: Any, send: Any) -> BaseException | None:
        """Run the app; what it raised (any BaseException: CancelledError, SystemExit...), or None."""
        try:
            await self.app(scope, receive, send)
        except BaseException as error:  # kept from the loop, which a SystemExit or KeyboardInterrupt would stop
            return error
        return None

    def start(self, loop: Any, reference: str) -> None:
        """Run the startup; AppLoadError when the app reports it failed or it does not finish in time."""
        import asyncio

        future = asyncio.run_coroutine_threadsafe(self._startup(), loop)
        try:
            failure = future.result(LIFESPAN_STARTUP_TIMEOUT_SECONDS)
        except TimeoutError:
            failure = f"its lifespan startup did not finish within {LIFESPAN_STARTUP_TIMEOUT_SECONDS} s"
        if failure:
            raise AppLoadError(f"app {reference!r} ({contract.setting_variable('app')}) failed to start: {failure}")

    async def _startup(self) -> str:
        """Send ``lifespan.startup`` and wait for its answer; the failure text, or '' (started, or no lifespan)."""
        import asyncio

        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        shutdown = asyncio.Event()
        messages = iter([{"type": "lifespan.startup"}])

        async def receive() -> dict[str, Any]:
            following = next(messages, None)
            if following is not None:
                return following
            await shutdown.wait()  # never set: the process ends with the app
            return {"type": "lifespan.shutdown"}

        async def send(event: dict[str, Any]) -> None:
            if event["type"] == "lifespan.startup.complete" and not answer.done():
                answer.set_result("")
            elif event["type"] == "lifespan.startup.failed" and not answer.done():
                answer.set_result(str(event.get("message") or "lifespan.startup.failed"))

        def ended(task: asyncio.Task[Any]) -> None:
            if not task.cancelled():
                task.exception()  # retrieved: an app without lifespan support raises here, and that is no failure
            if not answer.done():  # it returned or raised before answering: no lifespan support
                answer.set_result("")

        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        self._task = asyncio.ensure_future(self.app(scope, receive, send))
        self._task.add_done_callback(ended)
        return await answer
