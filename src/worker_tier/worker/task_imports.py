"""The task modules imported, and an import that fails said in one line: the module, the missing name, where.

The worker imports them when it is built (``Worker.from_environment``); synth imports them in a subprocess
on the worker's staged code (``worker_tier_cdk.task_imports.check_imports``, which runs ``main``), and the local environment when it starts, so a missing package is
named before the first message rather than by every message.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from collections.abc import Iterable, Sequence
from typing import TextIO

from worker_tier.core.errors import TaskImportError


# A package a task module imports is not installed: deployed, only what the task code's requirements file installs is.
MISSING_PACKAGE_ADVICE = ("add it to the requirements file the task code installs "
                          "(TaskCode.from_directories(..., requirements='requirements.txt')) or fix the import")
# The task module itself is not found: the project directory is not on sys.path (plain `pytest` does not add it).
NOT_ON_PATH_ADVICE = ("run from the project directory that holds it (python -m pytest adds it to sys.path; plain "
                      "pytest needs pythonpath = . in its configuration), or correct the task_modules setting")


def import_task_modules(modules: Iterable[str], roots: Sequence[str] | None = None) -> None:
    """Import each module; TaskImportError in one line for the first that raises ImportError.

    ``roots``: the directories a file is shown relative to (default ``sys.path``).

    Examples
    --------
    >>> import_task_modules(["json"])
    >>> import_task_modules(["tasks_that_do_not_exist"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    worker_tier.core.errors.TaskImportError: task module 'tasks_that_do_not_exist' cannot be imported: No module named ...
    """
    for module in (name.strip() for name in modules):
        if not module:
            continue
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise import_failure(module, error, sys.path if roots is None else roots) from error


def import_failure(module: str, error: ImportError, roots: Sequence[str]) -> TaskImportError:
    """The one line for ``module``'s failed import: its message, the line that raised it, what to do."""
    file, line = _raising_line(error, roots)
    where = f" ({file} line {line})" if file else ""
    missing = isinstance(error, ModuleNotFoundError) and error.name is not None
    if missing and module.split(".")[0] == str(error.name).split(".")[0] and not file:  # the task module itself is not found
        advice = NOT_ON_PATH_ADVICE
    elif missing and error.name != module:
        advice = MISSING_PACKAGE_ADVICE
    else:
        advice = "fix the import"
    return TaskImportError(f"task module {module!r} cannot be imported: {error}{where}; {advice}", file)


def _raising_line(error: BaseException, roots: Sequence[str]) -> tuple[str, int]:
    """(file, line) of the innermost frame outside importlib, the file relative to its root; ("", 0) if none."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith("<") and f"{os.sep}importlib{os.sep}" not in f.filename]
    if not frames or frames[-1].filename == __file__:
        return "", 0
    path = os.path.abspath(frames[-1].filename)
    for root in sorted((os.path.abspath(r or os.curdir) for r in roots), key=len, reverse=True):
        if path.startswith(root + os.sep):
            path = os.path.relpath(path, root)
            break
    return path, frames[-1].lineno or 0


def main(argv: list[str]) -> int:
    """``python -m worker_tier.worker.task_imports RESULT_FILE MODULE,...``: import each module, saying each step as a
    JSON line in RESULT_FILE, not on stdout, which the modules may write to.

    ``{"importing": module}`` before each import, then the last line: ``{"ok": true, "flow_controlled": [path, ...]}``
    (the tasks with a rate or concurrency limit), ``{"failed": message,
    "file": file}`` (ImportError), ``{"exited": "sys.exit(3)", "file": ..., "line": ...}`` (SystemExit) or
    ``{"raised": ...}`` (any other exception). No last line: the process ended inside an import (os._exit, a crash).
    """
    result_file, modules = argv[0], [m.strip() for m in ",".join(argv[1:]).split(",") if m.strip()]
    with open(result_file, "a", encoding="utf-8") as result:
        for module in modules:
            _report(result, importing=module)
            try:
                import_task_modules([module])
            except TaskImportError as error:
                return _report(result, failed=str(error), file=error.file)
            except SystemExit as exit_:
                file, line = _raising_line(exit_, sys.path)
                code = "" if exit_.code is None else repr(exit_.code)
                return _report(result, exited=f"sys.exit({code})", file=file, line=line)
            except Exception as error:  # any other exception at import is Lambda's to judge
                return _report(result, raised=f"{type(error).__name__}: {error}")
        # The registry the modules' @task filled (imported by them; not here, which would make an import cycle).
        registry = getattr(sys.modules.get("worker_tier.worker.registry"), "DEFAULT_REGISTRY", None)
        flow = [path for path in registry.paths() if registry.any_flow_control(path)] if registry is not None else []
        return _report(result, ok=True, flow_controlled=flow)


def _report(result: TextIO, **step: object) -> int:
    """Write one step as a JSON line, flushed at once (the process may end in the next import); 0."""
    result.write(json.dumps(step) + "\n")
    result.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
