"""Example tasks. Replace these with your own; list their modules in the task_modules setting."""

from tasks import examples  # noqa: F401  (registers the example tasks)
