"""What the functions and the container image run: the installed runtime plus the team's task code.

An asset is staged, not taken from the current directory: ``worker_tier`` is copied
from wherever it is installed (a wheel in site-packages, or this checkout's ``src/``),
and each task directory is copied beside it under its own name, so ``task_modules``
such as ``tasks`` or ``billing.tasks`` import in Lambda as they do on the developer's
machine. The delay dispatcher, the recovery function and the periodic-task function
run only the runtime; the worker function and the container image run the tasks too.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import worker_tier

RUNTIME_PACKAGE = "worker_tier"
DOCKER_DIR = Path(__file__).resolve().parent / "docker"
DOCKERFILE = "worker.Dockerfile"
CONTAINER_REQUIREMENTS = "requirements.txt"
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache")


class TaskCodeError(ValueError):
    """A task code directory that cannot be deployed; the message names it and the rule."""


@dataclass(frozen=True)
class TaskCode:
    """The team's task code: directories, each deployed under its own name at the asset root.

    ``TaskCode.from_directories("tasks")`` deploys ``./tasks`` as the importable package
    ``tasks``; name it in the ``task_modules`` setting. A directory may be a package or a
    plain folder of modules; it must not be named ``worker_tier``.
    """

    directories: tuple[Path, ...] = ()

    @classmethod
    def from_directories(cls, *directories: str | os.PathLike[str]) -> TaskCode:
        resolved = tuple(Path(d).resolve() for d in directories)
        names = [d.name for d in resolved]
        for directory in resolved:
            if not directory.is_dir():
                raise TaskCodeError(f"task code directory {str(directory)!r} does not exist or is not a directory")
            if directory.name == RUNTIME_PACKAGE:
                raise TaskCodeError(f"task code directory {str(directory)!r} may not be named {RUNTIME_PACKAGE!r}: "
                                    "that name is the installed runtime's")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise TaskCodeError(f"task code directories must have distinct names; {duplicates} appear more than once")
        return cls(resolved)

    def check_modules(self, task_modules: str) -> None:
        """TaskCodeError unless every module of the ``task_modules`` setting is a file the directories deploy.

        ``billing.tasks`` must be ``billing/tasks.py`` or ``billing/tasks/__init__.py`` in the
        directory named ``billing``; a bare ``billing`` must be a package (``billing/__init__.py``),
        since importing a plain folder registers no task.
        """
        by_name = {d.name: d for d in self.directories}
        for module in (m.strip() for m in task_modules.split(",")):
            root, *inner = module.split(".")
            if root not in by_name:
                raise TaskCodeError(
                    f"task_modules names {module!r}, but no task code directory is named {root!r} "
                    f"(deployed: {sorted(by_name) or 'none'}); pass task_code=TaskCode.from_directories(...) "
                    "with the directory that holds it")
            candidates = _module_files(by_name[root], inner)
            if not any(c.is_file() for c in candidates):
                expected = " or ".join(str(c.relative_to(by_name[root].parent)) for c in candidates)
                raise TaskCodeError(
                    f"task_modules names {module!r}, but its task code directory {str(by_name[root])!r} "
                    f"has no {expected}; name a module that the directory contains")


def _module_files(directory: Path, inner: list[str]) -> list[Path]:
    """The files that ``import <directory name>.<inner...>`` could load from ``directory``."""
    path = directory.joinpath(*inner)
    return [path.with_suffix(".py"), path / "__init__.py"] if inner else [path / "__init__.py"]


def runtime_directory() -> Path:
    """The installed ``worker_tier`` package this synth imports."""
    return Path(worker_tier.__file__).resolve().parent


_staged: dict[tuple[object, ...], Path] = {}


def stage(task_code: TaskCode = TaskCode(), *, container: bool = False) -> Path:
    """A directory holding ``worker_tier`` and the task directories (and, for the image, its Dockerfile).

    One directory per distinct content within a process; CDK hashes it, so equal
    stagings become one asset.
    """
    key = (task_code.directories, container)
    if key not in _staged:
        root = Path(tempfile.mkdtemp(prefix="worker-tier-asset-"))
        atexit.register(shutil.rmtree, root, True)
        shutil.copytree(runtime_directory(), root / RUNTIME_PACKAGE, ignore=_IGNORED)
        for directory in task_code.directories:
            shutil.copytree(directory, root / directory.name, ignore=_IGNORED)
        if container:
            for name in (DOCKERFILE, CONTAINER_REQUIREMENTS):
                shutil.copy2(DOCKER_DIR / name, root / name)
        _staged[key] = root
    return _staged[key]
