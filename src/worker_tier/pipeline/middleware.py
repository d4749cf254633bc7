"""The worker's middleware pipeline: an ordered list of middleware, each with hooks on a message's way through.

A middleware subclasses ``Middleware`` and overrides the hooks it needs; a hook it leaves alone
is never called (the pipeline keeps only overridden hooks, so it costs nothing per message).

- ``before_batch(batch)`` / ``after_batch(batch)``: around each batch (one per Lambda invocation,
  one message per batch on the container worker); ``after_batch`` runs in reverse order, after the
  batch's visibility changes went out.
- ``before_task(batch, task)``: each message, before anything is decided for it.
- ``around_task(batch, task, call_next)``: wraps the task's call (or the EB app's delivery);
  ``call_next(batch, task)`` runs the rest of the chain and the task. ``wraps(definition)`` says
  for which tasks (``definition`` None: the app), so a chain is only as long as its task needs.
- ``after_task(batch, task, outcome)``: each message's fate (``worker_tier.worker.fates.Outcome``):
  succeeded, retrying, dead-lettered, rescheduled, held back or released, with ``outcome.error``.
- ``on_dead_letter(batch, task, error)``: a message's copy is now in the dead-letter queue.
- ``on_send(entry)``: every message the worker or a task's ``Client`` sends: the SendMessage
  request or SendMessageBatch entry (``MessageBody``, ``MessageAttributes``,
  ``MessageSystemAttributes``), changed in place.

The chain is built once per Worker and, for ``around_task``, once per task path. Errors: see
``docs/middleware.md`` ("Errors"); a raising hook never loses a message nor skips its fate.
"""

from __future__ import annotations

import contextvars
import importlib
import sys
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from worker_tier.core.errors import MiddlewareError

if TYPE_CHECKING:
    from worker_tier.core.envelope import Envelope
    from worker_tier.worker.fates import Outcome, _Invocation as Batch
    from worker_tier.worker.registry import TaskDefinition
    from worker_tier.core.task import Task

__all__ = ["Middleware", "Pipeline", "load", "on_send"]

CallNext = Callable[["Batch", "Task"], None]
HOOKS = ("before_batch", "after_batch", "before_task", "after_task", "on_dead_letter", "on_send")


class Middleware:
    """The base of every middleware: each hook does nothing until a subclass overrides it.

    Examples
    --------
    >>> class Count(Middleware):
    ...     seen = 0
    ...     def before_task(self, batch, task):
    ...         Count.seen += 1
    >>> Pipeline([Count()]).before_task != ()
    True
    """

    def before_batch(self, batch: Batch) -> None:
        """Before a batch's first message; raising fails every message of the batch with the error."""

    def after_batch(self, batch: Batch) -> None:
        """After every message of the batch has its fate; raising is logged."""

    def before_task(self, batch: Batch, task: Task) -> None:
        """Before a message is routed; raising is the message's failure (retried, or dead-lettered)."""

    def wraps(self, definition: TaskDefinition | None) -> bool:
        """Whether ``around_task`` wraps this task's calls (``definition`` None: the EB app's deliveries)."""
        return True

    def around_task(self, batch: Batch, task: Task, call_next: CallNext) -> None:
        """Wrap the call: ``call_next(batch, task)`` runs it; raising is the message's failure."""
        call_next(batch, task)

    def after_task(self, batch: Batch, task: Task, outcome: Outcome) -> None:
        """A message's fate, once decided; raising is logged and changes nothing."""

    def on_dead_letter(self, batch: Batch, task: Task, error: BaseException) -> None:
        """The message's copy is in the dead-letter queue; raising is logged and changes nothing."""

    def on_send(self, message: Envelope) -> None:
        """Change an outgoing message in place (its ``body``, ``attributes``, ``system_attributes``); raising fails that send."""


def _overrides(middleware: Middleware, hook: str) -> bool:
    return getattr(type(middleware), hook) is not getattr(Middleware, hook)


class Pipeline:
    """The hooks of an ordered list of middleware, only those overridden, ready to call.

    ``after_batch`` is kept in reverse order, so the first middleware sees the batch first and last.
    """

    def __init__(self, middleware: Sequence[Middleware]) -> None:
        self.middleware = tuple(middleware)
        for name in HOOKS:
            setattr(self, name, tuple(getattr(m, name) for m in self.middleware if _overrides(m, name)))
        self.after_batch = self.after_batch[::-1]

    before_batch: tuple[Callable[[Batch], None], ...]
    after_batch: tuple[Callable[[Batch], None], ...]
    before_task: tuple[Callable[[Batch, Task], None], ...]
    after_task: tuple[Callable[[Batch, Task, Outcome], None], ...]
    on_dead_letter: tuple[Callable[[Batch, Task, BaseException], None], ...]
    on_send: tuple[Callable[[Envelope], None], ...]

    def extended(self, middleware: Sequence[Middleware]) -> Pipeline:
        """This pipeline with ``middleware`` after its own (a task's own middleware)."""
        return self if not middleware else Pipeline(self.middleware + tuple(middleware))

    def chain(self, definition: TaskDefinition | None, innermost: CallNext) -> CallNext:
        """``innermost`` wrapped by every ``around_task`` that wraps ``definition``, the first middleware outermost."""
        call = innermost
        for middleware in reversed(self.middleware):
            if _overrides(middleware, "around_task") and middleware.wraps(definition):
                call = partial(middleware.around_task, call_next=call)
        return call


# The on_send hooks of the worker running on this thread (set for each batch); None outside a worker.
_sending: contextvars.ContextVar[tuple[Callable[[Envelope], None], ...] | None] = contextvars.ContextVar(
    "worker_tier_on_send", default=None
)


def sending_through(pipeline: Pipeline) -> contextvars.Token[Any]:
    """Route this thread's sends through ``pipeline``'s ``on_send`` hooks until the token is reset."""
    return _sending.set(pipeline.on_send)


def reset_sending(token: contextvars.Token[Any]) -> None:
    """Route this thread's sends as before ``sending_through``."""
    _sending.reset(token)


def on_send(message: Envelope) -> Envelope:
    """Run the ``on_send`` hooks on an outgoing message, and return it.

    Inside a worker: the worker's pipeline. Outside one (a producer): the trace header of the
    current OpenTelemetry span, when the process has imported OpenTelemetry (``worker_tier.pipeline.tracing``);
    a process that never did has no span to carry, and pays one dictionary lookup.
    """
    hooks = _sending.get()
    if hooks is None:
        if "opentelemetry.trace" in sys.modules:
            from worker_tier.pipeline.trace_header import add_trace_header

            add_trace_header(message)
        return message
    for hook in hooks:
        hook(message)
    return message


def load(references: Iterable[str], setting: str = "middleware") -> list[Middleware]:
    """The middleware named by ``module:attribute`` references: a Middleware subclass (built with no arguments) or instance."""
    return [_loaded(reference.strip(), setting) for reference in references if reference.strip()]


def _loaded(reference: str, setting: str) -> Middleware:
    module_name, _, attribute = reference.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except Exception as error:  # not only ImportError: a module may raise anything as it is imported
        raise MiddlewareError(
            f"{setting} {reference!r} could not be loaded ({type(error).__name__}: {_text(error)}); each entry must be "
            "'module:attribute' naming a Middleware subclass or instance in a deployed module: fix the name or deploy the module"
        ) from error
    return checked(found, f"{setting} {reference!r}")


def checked(value: Any, what: str) -> Middleware:
    """``value`` as a Middleware: an instance as it is, a subclass built with no arguments; MiddlewareError otherwise."""
    if isinstance(value, type) and issubclass(value, Middleware):
        try:
            return value()
        except Exception as error:
            raise MiddlewareError(
                f"{what}: {value.__name__}() raised {type(error).__name__}: {_text(error)}; a middleware named by its class "
                "is built with no arguments: give its parameters defaults, or name an instance (module:instance)"
            ) from error
    if isinstance(value, Middleware):
        return value
    raise MiddlewareError(
        f"{what} is {type(value).__name__} {value!r:.60}, not a middleware; it must be a worker_tier.pipeline.middleware.Middleware "
        "subclass or instance"
    )


def _text(error: BaseException) -> str:
    """An error's text on one line, even when its ``__str__`` raises."""
    try:
        return " ".join(str(error).split())[:300]
    except Exception:
        return f"<str() of {type(error).__name__} raised>"
