"""The task registry: which handler runs for which path, with its options."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

from worker_tier.core import limits
from worker_tier.core.contract import IDEMPOTENCY_KEY_PREFIX
from worker_tier.core.errors import MiddlewareError, TaskRegistrationError
from worker_tier.pipeline.middleware import Middleware, checked
from worker_tier.worker.task_imports import import_task_modules
from worker_tier.core.task import Task

if TYPE_CHECKING:
    from worker_tier.flow.limiter import Rate

# A task returns nothing that matters: returning is success, whatever it returns.
TaskHandler = Callable[[Task], object]
HandlerT = TypeVar("HandlerT", bound=TaskHandler)

DEFAULT_IDEMPOTENCY_EXPIRY_SECONDS = 60 * 60
# An idempotent task's record key in the state table is IDEMPOTENCY_KEY_PREFIX, its path, "#" and Powertools' 32-hex
# MD5 of (path, idempotency key) (``worker_tier.worker.idempotency.record_key``): only the path's length varies, and the key
# must fit DynamoDB's partition key, so the path may be at most this many bytes of UTF-8.
IDEMPOTENCY_RECORD_HASH_BYTES = len("#") + 32
MAX_IDEMPOTENT_PATH_BYTES = limits.DYNAMODB_MAX_PARTITION_KEY_BYTES - len(IDEMPOTENCY_KEY_PREFIX) - IDEMPOTENCY_RECORD_HASH_BYTES


@dataclass(frozen=True)
class TaskDefinition:
    """A registered task: its path, handler and options."""

    path: str
    handler: TaskHandler
    parser: Callable[[str], Any] | None = None
    idempotent: bool = False
    idempotency_key: str | Callable[[Task], str] | None = None
    idempotency_expiry: int = DEFAULT_IDEMPOTENCY_EXPIRY_SECONDS
    heartbeat: bool = False
    container: bool = False
    middleware: tuple[Middleware, ...] = ()  # the task's own, innermost but for idempotency (worker_tier.pipeline.middleware)
    # Flow control (worker_tier.flow): a rate across every worker, per rate_key when given; at most `concurrency`
    # at once, per concurrency_key when given.
    rate_limit: str | None = None
    rate_key: str | Callable[[Task], Any] | None = None
    rate_burst: int = 1
    concurrency: int | None = None
    concurrency_key: str | Callable[[Task], Any] | None = None

    @cached_property
    def rate(self) -> Rate | None:
        """``rate_limit`` parsed (checked at registration), or None."""
        if self.rate_limit is None:
            return None
        from worker_tier.flow.limiter import Rate  # only for a task with a rate: kept off the worker's cold start

        return Rate.parse(self.rate_limit, self.rate_burst, f"rate_limit for {self.path!r}")


_OPTIONS = ("parser", "idempotent", "idempotency_key", "idempotency_expiry", "heartbeat", "container", "middleware",
            "rate_limit", "rate_key", "rate_burst", "concurrency", "concurrency_key")


class Registry:
    """Paths to task definitions.

    Examples
    --------
    >>> registry = Registry()
    >>> @registry.task("/hello")
    ... def hello(task): ...
    >>> registry.get("/hello").handler is hello
    True
    """

    def __init__(self) -> None:
        self._definitions: dict[str, TaskDefinition] = {}
        self.generation = 0  # counts registrations: a worker's routes by path are worked out again after one

    def task(self, path: str, **options: Any) -> Callable[[HandlerT], HandlerT]:
        """Decorator registering ``handler`` for ``path`` (see ``worker_tier.core.task``)."""
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise TaskRegistrationError(
                f"@task({path!r}) got unknown option {unknown[0]!r}; options are: {', '.join(_OPTIONS)}"
            )

        if "middleware" in options:
            options["middleware"] = _task_middleware(path, options["middleware"])

        def register(handler: HandlerT) -> HandlerT:
            self.register(TaskDefinition(path=path, handler=handler, **options))
            return handler

        return register

    def register(self, definition: TaskDefinition) -> None:
        """Add a definition, refusing a bad path or a second handler for the same path."""
        _check_definition(definition)
        existing = self._definitions.get(definition.path)
        if existing is not None and _qualified_name(existing.handler) != _qualified_name(definition.handler):
            raise TaskRegistrationError(
                f"path {definition.path!r} is already registered to {_qualified_name(existing.handler)}; "
                f"cannot register {_qualified_name(definition.handler)} too"
            )
        self._definitions[definition.path] = definition
        self.generation += 1

    def get(self, path: str) -> TaskDefinition | None:
        """The definition for ``path``, or None."""
        return self._definitions.get(path)

    def any_flow_control(self, path: str | None = None) -> bool:
        """True when some registered task (the one at ``path``, when given) has a rate limit or a concurrency limit."""
        definitions = self._definitions.values() if path is None else [d for d in (self._definitions.get(path),) if d]
        return any(d.rate_limit is not None or d.concurrency is not None for d in definitions)

    def any_heartbeat(self) -> bool:
        """True when some registered task asks for heartbeats."""
        return any(d.heartbeat for d in self._definitions.values())

    def paths(self) -> list[str]:
        """Registered paths, sorted."""
        return sorted(self._definitions)

    def import_modules(self, modules: Iterable[str]) -> None:
        """Import task modules so that their ``@task`` decorators run; TaskImportError says a failure in one line."""
        import_task_modules(modules)


def _check_definition(definition: TaskDefinition) -> None:
    """Raise TaskRegistrationError for an invalid path or option value."""
    if not isinstance(definition.path, str) or not definition.path.startswith("/"):
        raise TaskRegistrationError(f"task path must be a string starting with '/', got {definition.path!r}")
    if not callable(definition.handler):
        raise TaskRegistrationError(f"task handler for {definition.path!r} must be callable, got {definition.handler!r}")
    if definition.parser is not None and not callable(definition.parser):
        raise TaskRegistrationError(f"parser for {definition.path!r} must be callable, got {definition.parser!r}")
    key = definition.idempotency_key
    if key is not None and not (callable(key) or (isinstance(key, str) and key)):
        raise TaskRegistrationError(
            f"idempotency_key for {definition.path!r} must be a JMESPath into the JSON body or a callable, got {key!r}"
        )
    if key is not None and not definition.idempotent:
        raise TaskRegistrationError(f"idempotency_key for {definition.path!r} needs idempotent=True")
    if definition.idempotent:
        _check_idempotent_path(definition.path)
    for option in ("heartbeat", "container"):
        if not isinstance(getattr(definition, option), bool):
            raise TaskRegistrationError(f"{option} for {definition.path!r} must be true or false, got {getattr(definition, option)!r}")
    _check_flow(definition)
    expiry = definition.idempotency_expiry
    if isinstance(expiry, bool) or not isinstance(expiry, int) or expiry < 1:
        raise TaskRegistrationError(
            f"idempotency_expiry for {definition.path!r} must be a positive number of seconds, got {expiry!r}"
        )


def _check_flow(definition: TaskDefinition) -> None:
    """TaskRegistrationError for a bad rate limit, concurrency or key, each naming the value, the rule and the fix."""
    path = definition.path
    if definition.rate_limit is not None:
        definition.rate  # noqa: B018 - parses it: TaskRegistrationError names the value and the form
    elif definition.rate_burst != 1:
        raise TaskRegistrationError(f"rate_burst for {path!r} needs rate_limit (such as rate_limit='100/s')")
    limit = definition.concurrency
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= _max_concurrency()):
        raise TaskRegistrationError(
            f"concurrency for {path!r} must be a whole number from 1 to {_max_concurrency()} (messages run at once per key), got {limit!r}"
        )
    for option, needs in (("rate_key", "rate_limit"), ("concurrency_key", "concurrency")):
        key = getattr(definition, option)
        if key is None:
            continue
        if not (callable(key) or (isinstance(key, str) and key)):
            raise TaskRegistrationError(
                f"{option} for {path!r} must be a JMESPath into the JSON body or a callable of the Task, got {key!r}"
            )
        if getattr(definition, needs) is None:
            raise TaskRegistrationError(f"{option} for {path!r} needs {needs}: a key groups messages under a limit")
        if isinstance(key, str):
            _check_jmespath(key, option, path)


def _max_concurrency() -> int:
    """flow.limiter's MAX_CONCURRENCY, imported only for a task with a concurrency (kept off the cold start)."""
    from worker_tier.flow.limiter import MAX_CONCURRENCY

    return MAX_CONCURRENCY


def _check_jmespath(expression: str, option: str, path: str) -> None:
    import jmespath
    from jmespath.exceptions import JMESPathError

    try:
        jmespath.compile(expression)
    except JMESPathError as error:
        raise TaskRegistrationError(
            f"{option} {expression!r} for {path!r} is not a JMESPath expression ({' '.join(str(error).split())[:120]}): "
            "write a path into the JSON body such as 'customer.id', or pass a callable of the Task"
        ) from None


def _task_middleware(path: str, given: Any) -> tuple[Middleware, ...]:
    """``@task(middleware=[...])`` as a tuple of Middleware (a subclass is built with no arguments); TaskRegistrationError otherwise."""
    if isinstance(given, (str, bytes, Middleware)) or not isinstance(given, (list, tuple)):
        raise TaskRegistrationError(
            f"middleware for {path!r} must be a list of Middleware subclasses or instances, got {type(given).__name__} {given!r:.60}"
        )
    try:
        return tuple(checked(item, f"middleware {index} for {path!r}") for index, item in enumerate(given))
    except MiddlewareError as error:
        raise TaskRegistrationError(str(error)) from None


def _check_idempotent_path(path: str) -> None:
    """TaskRegistrationError when an idempotent task's path would make its record key longer than DynamoDB allows."""
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > MAX_IDEMPOTENT_PATH_BYTES:
        raise TaskRegistrationError(
            f"idempotent task path {path[:40]!r}... is {size} bytes of UTF-8; its state-table key "
            f"({IDEMPOTENCY_KEY_PREFIX}<path>#<32-hex hash>) must fit DynamoDB's {limits.DYNAMODB_MAX_PARTITION_KEY_BYTES}-byte "
            f"partition key, so an idempotent path may be at most {MAX_IDEMPOTENT_PATH_BYTES} bytes: shorten the path"
        )


def _qualified_name(handler: Callable[..., Any]) -> str:
    """module.qualname of a handler, for messages and duplicate checks."""
    return f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', repr(handler))}"


DEFAULT_REGISTRY = Registry()


def task(path: str, **options: Any) -> Callable[[HandlerT], HandlerT]:
    """Register a task handler for a path in the default registry.

    Parameters
    ----------
    path:
        The route, matched against the ``beanstalk.sqsd.path`` attribute (or the
        ``http_path`` setting when a message has none).
    parser:
        Optional callable turning the body into ``Task.payload``; when it raises,
        the message goes to the dead-letter queue at once as a malformed body.
    idempotent:
        Run at most once per key (Powertools idempotency on the state table).
    idempotency_key:
        JMESPath into the JSON body, or a callable of the Task; default: message id.
    idempotency_expiry:
        Seconds a completed key is remembered (default one hour).
    heartbeat:
        Keep the message invisible while the task runs (see ``worker_tier.worker.heartbeat``).
    container:
        A long task (over Lambda's 15 minutes): the Lambda worker forwards its messages to the
        container worker's queue (``Resources.container_queue_url`` in ``worker_tier.core.contract``), where it runs.
    rate_limit, rate_burst, rate_key:
        Run at most ``rate_limit`` messages (``"100/s"``, ``"5/m"``; at most 1,000 a second per key) across every worker, in bursts of at most
        ``rate_burst``; with ``rate_key`` (JMESPath or callable), per key (``docs/flow-control.md``).
    concurrency, concurrency_key:
        Run at most ``concurrency`` messages at once across every worker; with ``concurrency_key``, per key.
    middleware:
        The task's own middleware (``worker_tier.pipeline.middleware.Middleware`` subclasses or instances),
        run for its messages after the worker's, innermost but for idempotency (``docs/middleware.md``).

    Examples
    --------
    >>> @task("/resize", parser=__import__("json").loads)
    ... def resize(t):
    ...     width = t.payload["width"]
    """
    return DEFAULT_REGISTRY.task(path, **options)
