"""The example messages `make run` sends: the example tasks', or those of a JSON file (an app's ``messages.json``).

A messages file is a JSON list; each item an object with a ``body`` (a string is sent as it is, anything
else as JSON) and, optionally, a ``path`` (``beanstalk.sqsd.path``; default the ``http_path`` setting, where
sqsd posts an ordinary message), a ``delay`` in seconds, and String ``attributes``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A name beside the app's module, as cron.yaml is beside an EB app's: `make run --app` sends these.
APP_MESSAGES_FILE = "messages.json"
_KEYS = {"body", "path", "delay", "attributes"}


@dataclass(frozen=True)
class ExampleMessage:
    """One message to send: where to (``beanstalk.sqsd.path``), its body, a delay in seconds, its attributes."""

    path: str
    body: Any
    delay: float | None = None
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The body as sent."""
        return self.body if isinstance(self.body, str) else json.dumps(self.body)


TASK_EXAMPLES = (
    ExampleMessage("/hello", {"name": "Ada"}),
    ExampleMessage("/flaky", {"report": "monthly"}),
    ExampleMessage("/poison", {"order_id": 42}),
)
DELAYED_TASK_EXAMPLE = ExampleMessage("/hello", {"name": "Grace, 150 s later"}, delay=150)
CONTAINER_TASK_EXAMPLE = ExampleMessage("/render", {"frames": 3})
# This repository's example tasks' messages: sent only to a path whose handler is in EXAMPLE_TASKS_FILE.
BUILT_IN_EXAMPLES = (*TASK_EXAMPLES, DELAYED_TASK_EXAMPLE, CONTAINER_TASK_EXAMPLE)
# The file of the tasks they are written for: this checkout's tasks/examples.py (src/worker_tier_local/../../), found
# by file, not by module name, because another project's `tasks` module (the default task_modules) may have a /hello.
EXAMPLE_TASKS_FILE = Path(__file__).resolve().parents[2] / "tasks" / "examples.py"


def load(path: Path, default_path: str) -> list[ExampleMessage]:
    """The messages of a messages file; SystemExit naming the file, the item and the rule when one is wrong.

    Examples
    --------
    >>> import tempfile
    >>> file = Path(tempfile.mkdtemp()) / "messages.json"
    >>> _ = file.write_text('[{"body": {"task": "ping"}}]')
    >>> load(file, "/")
    [ExampleMessage(path='/', body={'task': 'ping'}, delay=None, attributes={})]
    """
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SystemExit(f"worker-tier-local: messages file {str(path)!r} must be a readable JSON list: {error}") from None
    if not isinstance(items, list):
        raise SystemExit(f"worker-tier-local: messages file {str(path)!r} must hold a JSON list, got {type(items).__name__}")
    return [_message(path, index, item, default_path) for index, item in enumerate(items)]


def _message(path: Path, index: int, item: Any, default_path: str) -> ExampleMessage:
    """Item ``index`` of the file as an ExampleMessage, or SystemExit saying what is wrong with it."""
    where = f"worker-tier-local: {path} item {index}"
    if not isinstance(item, dict) or "body" not in item or set(item) - _KEYS:
        raise SystemExit(f"{where} must be an object with a body and optionally path, delay, attributes; got {item!r}")
    target = item.get("path", default_path)
    if not isinstance(target, str) or not target.startswith("/"):
        raise SystemExit(f"{where}: path must start with '/', got {target!r}")
    delay = item.get("delay")
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0):
        raise SystemExit(f"{where}: delay must be seconds >= 0, got {delay!r}")
    attributes = item.get("attributes", {})
    if not isinstance(attributes, dict) or not all(isinstance(v, str) for v in attributes.values()):
        raise SystemExit(f"{where}: attributes must map names to strings, got {attributes!r}")
    return ExampleMessage(target, item["body"], delay, attributes)
