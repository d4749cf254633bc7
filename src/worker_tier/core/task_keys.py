"""A message's key for an option that groups messages by it: ``idempotency_key``, ``rate_key``, ``concurrency_key``.

The option is a callable of the ``Task`` or a JMESPath into the JSON body. A key that is None or empty would be
one key shared by unrelated messages, so it is refused with ``MalformedBodyError`` (the message is dead-lettered
with a reason naming the task and the rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from worker_tier.core.errors import MalformedBodyError

if TYPE_CHECKING:
    from worker_tier.core.task import Task


def task_key(spec: str | Callable[[Task], Any], task: Task, option: str, path: str,
             shared: str = "held to one limit together") -> str:
    """The key ``spec`` gives ``task``: its callable's answer, or what its JMESPath finds in the JSON body, as a string.

    ``shared``: what a key shared by unrelated messages would do to them, for the error.
    """
    if callable(spec):
        value = spec(task)
        if value is None or str(value) == "":
            raise MalformedBodyError(
                f"{option} function {getattr(spec, '__qualname__', spec)!r} of task {path!r} returned {value!r} "
                f"for message {task.message_id}; a key must be a non-empty string (a None or empty key would be one key shared by "
                f"every such message, and {shared}): return a key for every message"
            )
        return str(value)
    import jmespath

    value = jmespath.search(spec, task.json())
    if value is None or value == "" or value == [] or value == {}:
        found = {"": "an empty string", "[]": "an empty list", "{}": "an empty object"}.get(str(value), "nothing")
        raise MalformedBodyError(
            f"{option} {spec!r} of task {path!r} found {found} "
            f"in the body of message {task.message_id}; a key must be a non-empty value: send the key in every body"
        )
    return str(value)
