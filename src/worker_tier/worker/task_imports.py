"""The task modules imported, and an import that fails said in one line: the module, the missing name, where.

The worker imports them when it is built (``Worker.from_environment``); synth imports them in a subprocess
on the worker's staged code (``worker_tier_cdk.code.check_imports``, which runs ``python -m
worker_tier.worker.task_imports``), and the local environment when it starts, so a missing package is
named before the first message rather than by every message.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from collections.abc import Iterable, Sequence

from worker_tier.core.errors import TaskImportError

# The subprocess's exit code for a module that cannot be imported (its one line on stdout).
IMPORT_FAILED_EXIT_CODE = 3


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
    missing = isinstance(error, ModuleNotFoundError) and error.name is not None and error.name != module
    advice = "add it to requirements.txt or fix the import" if missing else "fix the import"
    return TaskImportError(f"task module {module!r} cannot be imported: {error}{where}; {advice}", file)


def _raising_line(error: ImportError, roots: Sequence[str]) -> tuple[str, int]:
    """(file, line) of the innermost frame outside importlib, the file relative to its root; ("", 0) if none."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith("<")]
    if not frames or frames[-1].filename == __file__:
        return "", 0
    path = os.path.abspath(frames[-1].filename)
    for root in sorted((os.path.abspath(r or os.curdir) for r in roots), key=len, reverse=True):
        if path.startswith(root + os.sep):
            path = os.path.relpath(path, root)
            break
    return path, frames[-1].lineno or 0


def main(argv: list[str]) -> int:
    """``python -m worker_tier.worker.task_imports MODULE,...``: 0, or IMPORT_FAILED_EXIT_CODE with
    ``{"message": ..., "file": ...}`` on stdout."""
    try:
        import_task_modules(",".join(argv).split(","))
    except TaskImportError as error:
        print(json.dumps({"message": str(error), "file": error.file}), flush=True)
        return IMPORT_FAILED_EXIT_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
