"""Example tasks. Replace these with your own; list their modules in the task_modules setting."""

from tasks import examples  # noqa: F401 - imported to register the example tasks
