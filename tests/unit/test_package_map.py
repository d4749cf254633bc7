"""The package map: docs/design.md names every module, the runtime's packages depend one way, and no module
is large unless it says it is one idea."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
RUNTIME = SRC / "worker_tier"
PACKAGES = ("worker_tier", "worker_tier_cdk", "worker_tier_cli", "worker_tier_local")

# What each of the runtime's packages may import, besides itself: the arrows of docs/design.md's map.
ALLOWED = {
    "core": set(),
    "app": {"core"},
    "delays": {"core"},
    "pipeline": {"core"},
    "producer": {"core", "delays", "pipeline"},
    "flow": {"core", "pipeline"},
    "worker": {"core", "app", "delays", "pipeline", "producer", "flow"},
    "container": {"core", "worker"},
    "periodic": {"core", "app"},
    "handlers": {"core", "worker", "delays", "periodic"},
    "testing": {"core", "worker", "delays", "periodic", "producer"},
}
MAX_LINES = 500


def package_map() -> str:
    design = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    start = design.index("```\nsrc/worker_tier/")
    return design[start:design.index("```\n", start + 4)]


def modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (SRC / package).rglob("*.py") if path.name != "__init__.py")


def imported_modules(path: Path) -> set[str]:
    """Every ``worker_tier...`` module ``path`` imports when it runs, at the top or inside a function.

    ``from package import submodule`` imports the submodule (its package's ``__init__`` is not the dependency);
    imports under ``if TYPE_CHECKING:`` never run.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = {id(node) for block in ast.walk(tree) if _is_type_checking(block) for node in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & _existing(node.module)
            found.update(submodules or {node.module})
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("worker_tier.") and _module_path(name)}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _existing(package: str) -> set[str]:
    folder = SRC.joinpath(*package.split("."))
    return {f"{package}.{path.stem}" for path in folder.glob("*.py")} if folder.is_dir() else set()


def _module_path(name: str) -> Path | None:
    base = SRC.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def runtime_package(path: Path) -> str | None:
    parts = path.relative_to(RUNTIME).parts
    return parts[0] if len(parts) > 1 else None


@pytest.mark.parametrize("path", modules(), ids=lambda path: str(path.relative_to(SRC)))
def test_the_package_map_names_every_module(path):
    # GIVEN a module of one of the four packages WHEN docs/design.md's map is read THEN it names the file
    assert re.search(rf"(?<![\w.]){re.escape(path.name)}(?![\w])", package_map()), (
        f"{path.relative_to(REPO)} is missing from docs/design.md's package map: add a line saying what it is"
    )


def test_the_package_map_names_no_module_that_is_gone():
    # GIVEN the .py names the map mentions WHEN each is looked for in the packages THEN it exists
    present = {path.name for path in modules()}
    assert set(re.findall(r"\b(\w+\.py)\b", package_map())) - present - {"app.py"} == set()  # app.py: the repo's CDK app


def test_each_runtime_package_imports_only_what_the_map_allows():
    # GIVEN every import between the runtime's packages
    crossing = {}
    for path in RUNTIME.rglob("*.py"):
        package = runtime_package(path)
        if package is None:
            continue
        for name in imported_modules(path):
            target = runtime_package(_module_path(name))
            if target and target != package and target not in ALLOWED[package]:
                crossing.setdefault(f"{package} -> {target}", set()).add(f"{path.relative_to(RUNTIME)} imports {name}")
    # THEN none goes against the arrows
    assert crossing == {}


def test_every_runtime_package_is_in_the_map_of_allowed_imports():
    packages = {path.name for path in RUNTIME.iterdir() if (path / "__init__.py").is_file()}
    assert packages == set(ALLOWED)


def test_no_two_runtime_modules_import_each_other_even_through_others():
    # GIVEN the graph of module imports (lazy ones too), a package's __init__ standing for the package
    graph = {}
    for path in RUNTIME.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        graph[name] = {target for target in imported_modules(path) if target != name}
    # WHEN its strongly connected components are found THEN each is one module
    assert [component for component in _components(graph) if len(component) > 1] == []


def test_every_runtime_package_says_what_it_is_in_its_init():
    for init in RUNTIME.glob("*/__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert docstring, f"{init.relative_to(REPO)} has no docstring saying what the package is"


@pytest.mark.parametrize("path", sorted(RUNTIME.rglob("*.py")), ids=lambda path: str(path.relative_to(SRC)))
def test_a_runtime_module_over_500_lines_says_it_is_one_idea(path):
    text = path.read_text(encoding="utf-8")
    if text.count("\n") <= MAX_LINES:
        return
    docstring = ast.get_docstring(ast.parse(text)) or ""
    assert "one idea" in docstring.lower(), (
        f"{path.relative_to(REPO)} has {text.count(chr(10))} lines: split it where it divides, or say in its "
        "docstring the one idea it keeps whole"
    )


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            found.append(component)

    for node in list(graph):
        if node not in index:
            visit(node)
    return found
