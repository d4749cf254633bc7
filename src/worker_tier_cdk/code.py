"""What the functions and the container image run: the installed runtime plus the team's task code.

An asset is staged, not taken from the current directory: ``worker_tier`` is copied
from wherever it is installed (a wheel in site-packages, or this checkout's ``src/``),
and each task directory is copied beside it under its own name, so ``task_modules``
such as ``tasks`` or ``billing.tasks`` import in Lambda as they do on the developer's
machine. The delay dispatcher, the recovery function and the periodic-task function
run only the runtime; the worker function and the container image run the tasks too,
and the app's own requirements when ``TaskCode`` names a requirements file
(``worker_tier_cdk.requirements``).

Staging skips dot-entries (``.git``, ``.env``, ``.venv``), ``node_modules``, ``cdk.out``,
``__pycache__`` and ``*.pyc``; it follows a symlink (a file, or a directory without a loop)
only when it stays inside its task directory, so nothing outside it is deployed by accident. It is keyed on content, not paths (``stage``).
"""

from __future__ import annotations

import hashlib
import keyword
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import worker_tier
from worker_tier.core.errors import ConfigurationError
from worker_tier_cdk import requirements as app_requirements

if TYPE_CHECKING:
    from constructs import Construct

RUNTIME_PACKAGE = "worker_tier"
# Parts of the runtime a deployed function or image never imports: the testing helper (users' tests only).
RUNTIME_LEFT_OUT = ("worker_tier/testing/",)
DOCKER_DIR = Path(__file__).resolve().parent / "docker"
DOCKERFILE = "worker.Dockerfile"
CONTAINER_REQUIREMENTS = "requirements.txt"
# The app's requirements in the image's build context (docker/app-requirements.txt, which lists none, without them).
APP_REQUIREMENTS = "app-requirements.txt"
# Where stagings live: inside the app's outdir, so that they outlive the synth that made them (the CLI deploys
# later, and with --no-staging the assembly points at them), one directory per content fingerprint.
STAGING_DIRECTORY = ".worker-tier-staging"
# Never deployed: dot-entries (.git, .env, .venv), dependencies and build output of other tools, bytecode.
EXCLUDED_NAMES = frozenset({"node_modules", "cdk.out", "__pycache__"})
EXCLUDED_SUFFIXES = (".pyc",)
# The runtime's import names (its dependencies and theirs): a task directory so named would shadow them in
# /var/task or /app, which come first on sys.path.
RUNTIME_IMPORT_NAMES = frozenset({
    "boto3", "botocore", "aws_lambda_powertools", "s3transfer", "jmespath", "dateutil", "urllib3", "six",
    "typing_extensions",
})


class TaskCodeError(ConfigurationError):
    """A task code directory that cannot be deployed; the message names it and the rule."""


@dataclass(frozen=True)
class TaskCode:
    """The team's task code: directories, each deployed under its own name at the asset root.

    ``TaskCode.from_directories("tasks")`` deploys ``./tasks`` as the importable package
    ``tasks``; name it in the ``task_modules`` setting. A directory may be a package or a
    plain folder of modules. Its name must be a Python identifier and must not shadow a module
    the runtime imports: the standard library, the runtime's dependencies (``RUNTIME_IMPORT_NAMES``)
    or ``worker_tier*`` itself.

    ``requirements``: a pip requirements file of the code's own third-party packages (an ``app``'s
    Flask or Django), installed into the worker function's asset at synth and into the container
    image (``worker_tier_cdk.requirements``); None: the code needs only the runtime.
    """

    directories: tuple[Path, ...] = ()
    requirements: Path | None = None

    @classmethod
    def from_directories(cls, *directories: str | os.PathLike[str],
                         requirements: str | os.PathLike[str] | None = None) -> TaskCode:
        """The directories as given (made absolute; a symlinked directory keeps its link's name).

        Examples
        --------
        >>> TaskCode.from_directories("src").directories[0].name
        'src'
        """
        requirements_file = None if requirements is None else Path(os.path.abspath(requirements))
        if requirements_file is not None:
            try:
                app_requirements.check(requirements_file, DOCKER_DIR / CONTAINER_REQUIREMENTS)
            except app_requirements.RequirementsError as error:
                raise TaskCodeError(str(error)) from None
        absolute = tuple(Path(os.path.abspath(d)) for d in directories)
        for directory in absolute:
            _check_directory(directory)
        names = [d.name for d in absolute]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise TaskCodeError(f"task code directories must have distinct names; {duplicates} appear more than once")
        return cls(absolute, requirements_file)

    def check_modules(self, task_modules: str) -> None:
        """TaskCodeError unless every module of the ``task_modules`` setting is a file the directories deploy.

        ``billing.tasks`` must be ``billing/tasks.py`` or ``billing/tasks/__init__.py`` in the
        directory named ``billing``; a bare ``billing`` must be a package (``billing/__init__.py``),
        since importing a plain folder registers no task.
        """
        for module in (m.strip() for m in task_modules.split(",") if m.strip()):
            self._check_module("task_modules", module)

    def check_app(self, app: str) -> None:
        """TaskCodeError unless the module of the ``app`` setting (``package.module:attribute``) is a file deployed.

        The same rule as ``check_modules``; an empty ``app`` (no app) passes.
        """
        if app:
            self._check_module("app", app.partition(":")[0])

    def check_middleware(self, middleware: str) -> None:
        """TaskCodeError unless the module of each ``middleware`` setting entry (``module:attribute``) is deployed:
        a file of the directories, as ``check_modules`` says, or Worker Tier's own (``worker_tier.*``, in the runtime)."""
        for reference in (m.strip() for m in middleware.split(",") if m.strip()):
            module = reference.partition(":")[0]
            if module.split(".")[0] != "worker_tier":
                self._check_module("middleware", module)

    def _check_module(self, setting: str, module: str) -> None:
        """TaskCodeError unless ``module``, named by ``setting``, is a file the directories deploy."""
        by_name = {d.name: d for d in self.directories}
        root, *inner = module.split(".")
        if root not in by_name:
            raise TaskCodeError(
                f"{setting} names {module!r}, but no task code directory is named {root!r} "
                f"(deployed: {sorted(by_name) or 'none'}); pass task_code=TaskCode.from_directories(...) "
                "with the directory that holds it")
        candidates = _module_files(by_name[root], inner)
        if not any(c.is_file() for c in candidates):
            expected = " or ".join(str(c.relative_to(by_name[root].parent)) for c in candidates)
            raise TaskCodeError(
                f"{setting} names {module!r}, but its task code directory {str(by_name[root])!r} "
                f"has no {expected}; name a module that the directory contains")


def _check_directory(directory: Path) -> None:
    """TaskCodeError unless ``directory`` exists and its name imports as itself beside the runtime."""
    if not directory.is_dir():
        raise TaskCodeError(f"task code directory {str(directory)!r} does not exist or is not a directory")
    name = directory.name
    if not name.isidentifier() or keyword.iskeyword(name):
        rule = "must be a Python identifier (letters, digits and underscores, not first a digit, not a keyword)"
    elif name.startswith(RUNTIME_PACKAGE):
        rule = f"must not start with {RUNTIME_PACKAGE!r}, the runtime's own name"
    elif name in sys.stdlib_module_names:
        rule = "must not be a standard-library module's name, which it would shadow"
    elif name in RUNTIME_IMPORT_NAMES:
        rule = f"must not be a package the runtime imports ({', '.join(sorted(RUNTIME_IMPORT_NAMES))})"
    else:
        return
    raise TaskCodeError(f"task code directory {str(directory)!r} is deployed as the package {name!r}, so its name "
                        f"{rule}; rename the directory")


def _module_files(directory: Path, inner: list[str]) -> list[Path]:
    """The files that ``import <directory name>.<inner...>`` could load from ``directory``."""
    path = directory.joinpath(*inner)
    return [path.with_suffix(".py"), path / "__init__.py"] if inner else [path / "__init__.py"]


def runtime_directory() -> Path:
    """The installed ``worker_tier`` package this synth imports."""
    return Path(worker_tier.__file__).resolve().parent


def stage(scope: Construct, task_code: TaskCode = TaskCode(), *, container: bool = False) -> Path:
    """A directory holding ``worker_tier`` and the task directories (and, for the image, its Dockerfile).

    With ``task_code.requirements``, the function's asset holds them installed for Lambda at its root,
    and the image's build context holds the file as ``app-requirements.txt`` for the Dockerfile to install.

    Staged under ``scope``'s app outdir in ``.worker-tier-staging/<fingerprint>``, where the fingerprint
    is of the relative paths and bytes of what it holds, so that an edit makes a new asset, equal content
    is one asset, and the directory outlives this process (``cdk synth --no-staging`` points at it).
    It is staged again when it is missing.
    """
    files = {relative: path for relative, path in _files(runtime_directory(), RUNTIME_PACKAGE)
             if not relative.startswith(RUNTIME_LEFT_OUT)}
    outdir = _outdir(scope)
    for directory in task_code.directories:
        _check_outside(directory, outdir)
        files.update(_files(directory, directory.name))
    if container:
        files.update({name: DOCKER_DIR / name for name in (DOCKERFILE, CONTAINER_REQUIREMENTS)})
        files[APP_REQUIREMENTS] = task_code.requirements or DOCKER_DIR / APP_REQUIREMENTS
    elif task_code.requirements is not None:
        files.update(_installed(task_code.requirements, outdir / STAGING_DIRECTORY, files))
    root = outdir / STAGING_DIRECTORY / _fingerprint(files)
    if not root.is_dir():
        _copy(files, root)
    return root


def _installed(requirements: Path, cache: Path, staged: dict[str, Path]) -> dict[str, Path]:
    """The files of the requirements installed for Lambda, by asset path; TaskCodeError if one would replace staged code."""
    try:
        directory = app_requirements.install(requirements, DOCKER_DIR / CONTAINER_REQUIREMENTS, cache)
    except app_requirements.RequirementsError as error:
        raise TaskCodeError(str(error)) from None
    installed = {relative: path for entry in sorted(os.listdir(directory)) if not _excluded(entry)
                 for relative, path in _entry_files(directory / entry)}
    staged_roots = {relative.split("/")[0] for relative in staged}
    clashes = sorted({relative.split("/")[0] for relative in installed} & staged_roots)
    if clashes:
        raise TaskCodeError(f"requirements file {str(requirements)!r} installs {clashes}, the name of the "
                            "runtime or of a task code directory, which it would replace; rename the directory or "
                            "drop the requirement")
    return installed


def _entry_files(path: Path) -> Iterator[tuple[str, Path]]:
    """(asset path, file) for one top-level entry of an install: a file, or a directory's files."""
    if path.is_dir():
        yield from _files(path, path.name)
    else:
        yield path.name, path


def _outdir(scope: Construct) -> Path:
    """The app's cloud assembly directory (a stable temporary one for a scope outside any app)."""
    from aws_cdk import Stage  # here, so that ``import worker_tier_cdk`` needs no aws_cdk

    stage_ = scope if isinstance(scope, Stage) else Stage.of(scope)  # Stage.of(app) skips the app itself
    if stage_ is None or stage_.outdir is None:
        return Path(tempfile.gettempdir()) / "worker-tier"
    return Path(stage_.outdir).resolve()


def _check_outside(directory: Path, outdir: Path) -> None:
    """TaskCodeError when the app's outdir is inside a task directory: each synth would deploy the last."""
    if outdir.is_relative_to(directory.resolve()):
        raise TaskCodeError(f"task code directory {str(directory)!r} contains the CDK app's output directory "
                            f"{str(outdir)!r}; move the output (cdk.json \"output\", App(outdir=...)) out of it")


def _excluded(name: str) -> bool:
    return name.startswith(".") or name in EXCLUDED_NAMES or name.endswith(EXCLUDED_SUFFIXES)


def _files(directory: Path, name: str) -> Iterator[tuple[str, Path]]:
    """(relative destination, source file) for each deployed file of ``directory``, deployed as ``name``."""
    yield from _walk(directory, name, directory.resolve(), (directory.resolve(),))


def _walk(directory: Path, destination: str, root: Path, ancestors: tuple[Path, ...]) -> Iterator[tuple[str, Path]]:
    """The files below ``directory``, following symlinked directories that stay inside ``root`` without a loop."""
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if _excluded(entry.name):
            continue
        path, target = Path(entry.path), Path(entry.path).resolve()
        if entry.is_dir():
            if entry.is_symlink():
                _check_link(path, target, root, ancestors)
            yield from _walk(path, f"{destination}/{entry.name}", root, (*ancestors, target))
        elif entry.is_file():
            if entry.is_symlink() and not target.is_relative_to(root):
                raise TaskCodeError(f"symlinked file {str(path)!r} in task code points outside its task directory "
                                    f"{str(root)!r}, to {str(target)!r}: it would deploy that file's content; "
                                    "copy what it needs into the directory instead")
            yield f"{destination}/{entry.name}", path
        else:
            raise TaskCodeError(f"{str(path)!r} in task code is a broken symlink or not a regular file; remove it")


def _check_link(link: Path, target: Path, root: Path, ancestors: tuple[Path, ...]) -> None:
    """TaskCodeError for a symlinked directory that leaves its task directory or loops back into its own path."""
    if not target.is_relative_to(root):
        raise TaskCodeError(f"symlinked directory {str(link)!r} in task code points outside its task directory "
                            f"{str(root)!r}, to {str(target)!r}; copy what it needs into the directory instead")
    if target in ancestors:
        raise TaskCodeError(f"symlinked directory {str(link)!r} in task code points to {str(target)!r}, which "
                            "contains it: a loop; remove the link")


def _fingerprint(files: dict[str, Path]) -> str:
    """SHA-256 of each file's relative path and bytes, in path order."""
    digest = hashlib.sha256()
    for relative in sorted(files):
        data = files[relative].read_bytes()
        digest.update(f"{relative}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _copy(files: dict[str, Path], root: Path) -> None:
    """Write the files to a sibling of ``root``, then rename it into place, so ``root`` is never half-written."""
    root.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f"{root.name}.", dir=root.parent))
    partial.chmod(0o755)  # mkdtemp's 0o700 would reach the asset's root directory
    for relative, source in files.items():
        (partial / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, partial / relative)
        shutil.copymode(source, partial / relative)
    try:
        partial.rename(root)
    except OSError:  # another process staged the same content first
        shutil.rmtree(partial, ignore_errors=True)
