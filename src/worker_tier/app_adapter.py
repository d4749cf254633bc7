"""The in-process app target: a WSGI or ASGI app called with sqsd's POST, in this process, without a socket.

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

An app that raises (or answers with an error it logged with its traceback, as Flask and Django do
for an unhandled exception) and does not answer 200 fails the message with ``AppExceptionError``,
whose message is the traceback, innermost call first. Any other answer goes back to the worker, which
judges it by sqsd's rules (``worker_tier.sqsd.check_response``).
"""

from __future__ import annotations

import contextvars
import importlib
import inspect
import logging
import sys
import threading
import traceback
from io import BytesIO
from typing import Any, Callable, Iterable
from urllib.parse import unquote_to_bytes

from worker_tier import contract, message
from worker_tier.app_target import AppResponse, SqsdRequest
from worker_tier.errors import AppExceptionError, AppLoadError

# How long an ASGI app's lifespan startup may take before loading fails.
LIFESPAN_STARTUP_TIMEOUT_SECONDS = 60
# The server an environ describes: sqsd POSTs to localhost:80 (EB's proxy, then the app).
SERVER_NAME = "localhost"
SERVER_PORT = "80"
# Frames of the app's traceback an AppExceptionError keeps (the reason keeps its first KiB anyway).
MAX_TRACEBACK_FRAMES = 12

# The environ key under which an ASGI app's exception comes back from the bridge's loop thread.
APP_ERROR_KEY = "worker_tier.app_error"

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
        self.reference = reference or getattr(app, "__qualname__", type(app).__name__)
        self.asgi = is_asgi(app)
        self._wsgi = _asgi_bridge(app, self.reference) if self.asgi else app
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
        """Call the app with ``request``; its answer, or AppExceptionError when it raised (or logged an error) and did not answer 200."""
        answer = _Answer()
        environ = wsgi_environ(request)
        capture = _ERROR_CAPTURE.start()
        try:
            body = _read(self._wsgi(environ, answer.start_response))
        except Exception as error:
            raise AppExceptionError(_exception_text(error, request, None)) from error
        finally:
            logged = _ERROR_CAPTURE.stop(capture)
        raised = answer.exc_info[1] if answer.exc_info else environ.get(APP_ERROR_KEY) or logged
        if raised is not None and answer.status != 200:
            raise AppExceptionError(_exception_text(raised, request, answer.status)) from raised
        return AppResponse(answer.status, answer.headers, body)


def load_app(reference: str) -> Callable[..., Any]:
    """Import ``package.module:attribute`` (the attribute may be dotted); AppLoadError naming the setting when it fails."""
    variable = contract.setting_variable("app")
    module_name, _, attribute = reference.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as error:
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
    """True for an ASGI app (an ``async def`` function, or an object whose ``__call__`` is one), False for WSGI."""
    if inspect.iscoroutinefunction(app):
        return True
    call = next((vars(cls)["__call__"] for cls in type(app).__mro__ if "__call__" in vars(cls)), None)
    return inspect.iscoroutinefunction(call)


def wsgi_environ(request: SqsdRequest) -> dict[str, Any]:
    """The PEP 3333 environ a WSGI server would build for ``request`` (no socket behind it).

    Header values travel as UTF-8 and are read back as latin-1, as PEP 3333 asks of a server.
    """
    path, _, query = request.path.partition("?")
    environ = dict(_BASE_ENVIRON)
    environ["REQUEST_METHOD"] = request.method
    environ["PATH_INFO"] = unquote_to_bytes(path).decode("latin-1")
    environ["QUERY_STRING"] = query
    environ["CONTENT_LENGTH"] = str(len(request.body))
    environ["wsgi.input"] = BytesIO(request.body)
    environ["wsgi.errors"] = sys.stderr
    for name, value in request.headers:
        key = _ENVIRON_KEYS.get(name) or _environ_key(name)
        environ[key] = value if value.isascii() else value.encode("utf-8").decode("latin-1")
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
        self.status = int(status[:3])
        self.headers = {name.lower(): value for name, value in headers}
        if exc_info is not None:
            self.exc_info = exc_info
        return _no_write

    def __repr__(self) -> str:
        return f"_Answer({self.status})"


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
        """One request, with the lifespan's state; an exception is also left in the environ for ``deliver``.

        Starlette answers 500 to an unhandled exception and re-raises it after, which a2wsgi drops.
        """
        if scope["type"] == "http":
            scope["state"] = dict(self.state)  # a shallow copy per request, as uvicorn gives
        try:
            await self.app(scope, receive, send)
        except Exception as error:
            environ = scope.get("wsgi_environ")
            if isinstance(environ, dict):
                environ[APP_ERROR_KEY] = error
            raise

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
