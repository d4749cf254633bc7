"""``App``: a CDK app that synthesizes the same settings under ``python app.py`` as under the CDK CLI, and says
Worker Tier's configuration errors in one line.

The CDK CLI runs the app named by cdk.json's ``app`` and passes cdk.json's context to it (``CDK_CONTEXT_JSON``);
``python app.py`` passes none, so a plain ``cdk.App()`` would synthesize the default settings there. ``App``
reads ``./cdk.json``'s context itself when the CLI did not pass it.

A ``WorkerTierError`` that reaches the top of the app (a setting out of range, a cron.yaml entry, task code
that cannot be deployed or imported) is printed as its one line on stderr, and the app exits with 1, instead
of the last line of a long traceback; any other exception keeps Python's traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, Callable

import aws_cdk as cdk

from worker_tier.core.errors import WorkerTierError
from worker_tier_cdk.settings import app_context

DEFAULT_CDK_JSON = "cdk.json"
ERROR_EXIT_CODE = 1  # Python's own for an uncaught exception, which the hook keeps

ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]


class App(cdk.App):
    """A ``cdk.App`` with ``cdk_json``'s context when the CDK CLI passes none, and one-line Worker Tier errors.

    ``context`` entries win over cdk.json's, as ``--context`` wins under the CLI. A ``cdk_json`` that does not
    exist adds nothing (the default settings).

    Examples
    --------
    >>> app = App()  # doctest: +SKIP
    >>> WorkerTierStack(app, "Jobs", task_code=TaskCode.from_directories("tasks"), cron_file="cron.yaml")  # doctest: +SKIP
    >>> app.synth()  # doctest: +SKIP
    """

    def __init__(self, *, cdk_json: str | os.PathLike[str] = DEFAULT_CDK_JSON, context: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        install_error_line()
        from_file = app_context(cdk_json) if Path(cdk_json).is_file() else {}
        super().__init__(context={**from_file, **(context or {})}, **kwargs)


def install_error_line() -> None:
    """Make an uncaught ``WorkerTierError`` one line on stderr (``Name: message``); exit code 1 as before."""
    if not getattr(sys.excepthook, "worker_tier", False):
        sys.excepthook = _error_line(sys.excepthook)


def _error_line(previous: ExceptHook) -> ExceptHook:
    def hook(kind: type[BaseException], error: BaseException, traceback: TracebackType | None) -> None:
        if isinstance(error, WorkerTierError):
            print(f"{kind.__name__}: {error}", file=sys.stderr, flush=True)
        else:
            previous(kind, error, traceback)

    hook.worker_tier = True  # type: ignore[attr-defined]
    return hook
