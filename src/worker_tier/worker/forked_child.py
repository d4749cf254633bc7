"""A task's forked child (``os.fork``) that comes back to the worker ends there and then, as Python would end it.

It must not decide its message's fate nor run the rest of the batch: ``handler_call`` is the innermost link
of a task's chain and ends such a child where it comes back from the handler, before any middleware sees it.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import TYPE_CHECKING, Callable, NoReturn

from worker_tier.core import contract
from worker_tier.worker import fates
from worker_tier.worker.fates import (
    _Invocation,
)
from worker_tier.core.task import Task
from worker_tier.pipeline.middleware import CallNext, Middleware, Pipeline
from worker_tier.worker.builtin_middleware import Idempotency

if TYPE_CHECKING:
    from worker_tier.worker.registry import TaskDefinition
    from worker_tier.worker.tracking import JobTracker

_JOB = contract.JOB_ATTRIBUTE


def handler_call(handler: Callable[[Task], object], tracker: Callable[[_Invocation], JobTracker]) -> Callable[[_Invocation, Task], None]:
    """The innermost link of a task's chain: its handler, ending a forked child of it right where the child comes back
    from it, before any middleware (the idempotency layer, which would delete the parent's INPROGRESS record with the
    inherited client) sees its end. It times the handler (``TaskDuration``), and runs a tracked message's through ``tracker``."""

    def call(invocation: _Invocation, task: Task) -> None:
        started = time.perf_counter()
        try:
            attributes = task.record.get("messageAttributes")
            if attributes and _JOB in attributes:  # a tracked message (worker_tier.worker.tracking)
                tracker(invocation).run(invocation, task, handler)
            else:
                handler(task)
        except BaseException as error:
            if fates.ThisProcess.pid != invocation.pid:
                end_forked_child(error)
            raise
        finally:
            invocation.metrics.task_duration((time.perf_counter() - started) * 1000)
        if fates.ThisProcess.pid != invocation.pid:
            end_forked_child(None)

    return call


def end_forked_child(error: BaseException | None) -> NoReturn:
    """End a task's forked child that came back to the worker (it returned, or raised: ``sys.exit`` too) as Python
    would end it, there and then: it must not decide its message's fate, nor run the rest of the batch.

    ``sys.exit(code)`` gives ``code`` (None: 0; any other object is printed and gives 1), as does a SystemExit an app's
    failure carries; any other exception is printed with its traceback and gives 1; returning gives 0.
    """
    cause = error.__cause__ if error is not None and not isinstance(error, SystemExit) else None
    if isinstance(cause, SystemExit):
        error = cause
    status = 0
    if isinstance(error, SystemExit):
        if isinstance(error.code, int):
            status = error.code
        elif error.code is not None:
            print(error.code, file=sys.stderr)
            status = 1
    elif error is not None:
        traceback.print_exception(error)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


def innermost_call(definition: TaskDefinition, pipeline: Pipeline, idempotency: Idempotency,
                   tracker: Callable[[_Invocation], JobTracker]) -> CallNext:
    """A task's handler as the innermost link of its chain.

    Guarded against a forked child coming back (``forked_child.handler_call``) when a middleware that could act on
    the child's return wraps it: idempotency, or the user's own. Otherwise ``_run`` ends such a child as it
    always did, and the common chain pays no check of its own. A tracked message's handler runs through ``tracker``
    (``worker_tier.worker.tracking``: running, then its return value kept); an untracked one pays one dict lookup.
    """
    wrapped = idempotency.wraps(definition) or any(
        type(m).around_task is not Middleware.around_task and m.wraps(definition) for m in pipeline.middleware
    )
    if wrapped:
        return handler_call(definition.handler, tracker)
    handler = definition.handler
    clock = time.perf_counter

    def call(invocation: _Invocation, task: Task) -> None:
        started = clock()
        try:
            attributes = task.record.get("messageAttributes")
            if attributes and _JOB in attributes:  # a tracked message (worker_tier.worker.tracking)
                tracker(invocation).run(invocation, task, handler)
            else:
                handler(task)
        finally:  # the task's own time, for TaskDuration (BatchMetricsPublisher publishes it); ``task_duration``, inlined
            invocation.metrics.durations_ms.append((clock() - started) * 1000)

    return call
