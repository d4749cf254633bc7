"""Each package of the wheel imports only the standard library, the packages it may build on, and what pyproject declares.

The wheel test's fresh venv borrows the test venv's third-party packages, so it would not see
an import that pyproject forgot to declare; this test does. A third-party import is declared
when its distribution is a requirement of the package's extras, or one of theirs (botocore
through boto3): whatever installs the declared requirements installs it.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# package: (the extras it needs, the packages of ours it may import). The runtime imports neither the
# constructs nor the local environment: it is what every Lambda function deploys.
PACKAGES = {
    "worker_tier": ((), {"worker_tier"}),
    "worker_tier_cdk": (("cdk",), {"worker_tier", "worker_tier_cdk"}),
    "worker_tier_local": (("cdk", "local"), {"worker_tier", "worker_tier_cdk", "worker_tier_local"}),
    "worker_tier_cli": (("cli",), {"worker_tier", "worker_tier_cli"}),
}
# The lazy edges: `python -m worker_tier <command>` hands any command but `worker` to the CLI. `import-eb` writes
# cdk.json and checks cron.yaml, and `cron next` reuses worker_tier.periodic.cron_preview (croniter and PyYAML, never
# aws-cdk-lib): the CLI imports them only then. The ASGI bridge (the asgi extra) only when the app setting names an ASGI app.
LAZY_IMPORTS = {
    ("worker_tier", "worker_tier_cli"): ("src/worker_tier/__main__.py",),
    ("worker_tier_cli", "worker_tier_cdk"): ("src/worker_tier_cli/import_eb.py", "src/worker_tier_cli/cron.py"),
    ("worker_tier_cli", "yaml"): ("src/worker_tier_cli/import_eb.py",),
    ("worker_tier", "a2wsgi"): ("src/worker_tier/app/app_adapter.py",),
    # cron.yaml's reader and preview: synth, the CLI and the local environment import them, never a deployed function.
    ("worker_tier", "yaml"): ("src/worker_tier/periodic/cron_yaml.py",),
    ("worker_tier", "croniter"): ("src/worker_tier/periodic/cron_preview.py",),
    # The tracing extra: only a worker whose middleware setting names the TracingMiddleware, or a process that traces.
    ("worker_tier", "opentelemetry"): ("src/worker_tier/pipeline/tracing.py", "src/worker_tier/pipeline/trace_header.py"),
    # The testing helper's fixture: pytest loads it (the pytest11 entry point), so pytest is there whenever it runs.
    ("worker_tier", "pytest"): ("src/worker_tier/testing/pytest_plugin.py",),
    # `make run ARGS=--ui`: the dashboard beside the local environment, imported only then (it says to install the ui extra).
    ("worker_tier_local", "worker_tier_cli"): ("src/worker_tier_local/__main__.py",),
}
# Folders whose modules need an extra beyond their package's: the dashboard (worker_tier_cli.ui) needs the ui extra, and
# is imported only by `worker-tier ui` (which names the extra when it is missing) and `make run ARGS=--ui`.
FOLDER_EXTRAS = {"src/worker_tier_cli/ui/": ("ui",)}


def _imported(package: str) -> dict[str, str]:
    """Each top-level module the package's source imports (lazily or not), with one file that does."""
    found: dict[str, str] = {}
    for path in sorted((REPO / "src" / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    return found


def _requirements(extras: tuple[str, ...]) -> set[str]:
    """The distributions pyproject declares for these extras, without our own name."""
    own = canonicalize_name(PROJECT["name"])
    declared = PROJECT["dependencies"] + [r for extra in extras for r in PROJECT["optional-dependencies"][extra]]
    return {canonicalize_name(Requirement(r).name) for r in declared} - {own}


def _with_their_requirements(distributions: set[str]) -> set[str]:
    """``distributions`` and, transitively, what their installed metadata requires (extras' markers aside)."""
    closed, pending = set(), list(distributions)
    while pending:
        name = pending.pop()
        if name in closed:
            continue
        closed.add(name)
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(canonicalize_name(requirement.name))
    return closed


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_third_party_import_is_declared_in_pyproject(package):
    # GIVEN what the package may rely on: the standard library, its own packages, and its declared requirements
    extras, ours = PACKAGES[package]
    installed_by = {module: {canonicalize_name(d) for d in dists} for module, dists in metadata.packages_distributions().items()}
    declared = _with_their_requirements(_requirements(extras))
    # WHEN its source's imports are read  THEN each is one of those
    for module, where in _imported(package).items():
        if module in sys.stdlib_module_names or module in ours or where in LAZY_IMPORTS.get((package, module), ()):
            continue
        assert module not in PACKAGES, f"{where} imports {module}, which {package} may not import"
        more = next((e for folder, e in FOLDER_EXTRAS.items() if where.startswith(folder)), ())
        allowed = _with_their_requirements(_requirements((*extras, *more))) if more else declared
        assert installed_by.get(module, set()) & allowed, (
            f"{where} imports {module} (from {sorted(installed_by.get(module, [])) or 'no installed distribution'}), "
            f"which pyproject does not declare for {package} (extras {list(extras)}); add it to its requirements")
