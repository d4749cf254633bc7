"""Every function and container gets every WORKER_TIER_* variable its code reads (issue #8, item 13).

"What its code reads" is derived from the code, never listed by hand:

- the entry module is the template's own: a function's ``Handler`` module, or the
  module a container's ``EntryPoint`` runs with ``python -m``;
- from there, every module under ``lambdas/`` named in an import statement, transitively
  (``from package import name`` counts the package's ``__init__`` unless ``name`` is a
  module); the parent packages Python runs on the way are not followed, as importing
  them is not reading their variables;
- each module contributes its ``WORKER_TIER_*`` string literals, and a call of
  ``Settings.from_environment`` contributes every setting's variable plus, since the
  worker imports them then, the modules of the resource's ``task_modules`` setting.

When the variable names move into one contract module, only ``variables_read`` changes.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from functools import lru_cache
from pathlib import Path

import pytest
from aws_cdk.assertions import Template

from pathlib import Path as _Path

from worker_tier_cdk.worker_queue import WORKER_HANDLER
from tests.infra.conftest import synth
from worker_tier.settings import ENVIRONMENT_PREFIX, Settings

LAMBDAS_DIR = _Path(__file__).resolve().parents[2] / "src"

VARIABLE = re.compile(r"WORKER_TIER_[A-Z0-9_]+")
SETTINGS_VARIABLES = frozenset(ENVIRONMENT_PREFIX + f.name.upper() for f in dataclasses.fields(Settings))
TASK_MODULES_VARIABLE = ENVIRONMENT_PREFIX + "TASK_MODULES"
LONG_QUEUE_URL = "WORKER_TIER_LONG_QUEUE_URL"
# Read by the code but absent from every deployed resource on purpose.
LOCAL_ONLY = frozenset({"WORKER_TIER_DELAY_HORIZON"})  # only the local environment lowers the dispatch horizon
CONTAINER_ENTRY_MODULE = "worker_tier.__main__"
SEND_QUEUE_URL = "WORKER_TIER_SEND_QUEUE_URL"  # only where the consumed queue is not the work queue (the container)
# A FIFO queue has no per-message delay, so a FIFO stack has no delay table to produce into.
DELAY_TABLE_VARIABLES = frozenset({"WORKER_TIER_DELAY_TABLE", "WORKER_TIER_DELAY_SHARDS"})

STACKS = {
    "default": Settings(),
    "container": Settings(container_worker=True),
    "fifo-container": Settings(fifo=True, container_worker=True),
}


@dataclasses.dataclass(frozen=True)
class Resource:
    """One function or container definition: where it is, what it runs, and the variables it is given."""

    path: str
    entry_module: str
    environment: dict[str, object]


def _module_file(module: str) -> Path | None:
    """The source of a module under lambdas/, or None when it lives elsewhere (stdlib, site-packages)."""
    base = LAMBDAS_DIR.joinpath(*module.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=None)
def _tree(module: str) -> ast.Module:
    return ast.parse(_module_file(module).read_text())


def _imports(module: str) -> set[str]:
    """Modules under lambdas/ that ``module``'s import statements name."""
    package = module if _module_file(module).name == "__init__.py" else module.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            named |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module or "", node.level, package)
            named |= {f"{base}.{a.name}" if _module_file(f"{base}.{a.name}") else base for a in node.names}
    return {name for name in named if _module_file(name) is not None}


def _absolute(module: str, level: int, package: str) -> str:
    """Resolve a relative import against the importing module's package."""
    if not level:
        return module
    parts = package.split(".")[: len(package.split(".")) - level + 1]
    return ".".join(parts + ([module] if module else []))


def _reads_settings(module: str) -> bool:
    """Whether the module calls ``Settings.from_environment``."""
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "from_environment"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "Settings"
        for node in ast.walk(_tree(module))
    )


def variables_read(module: str) -> set[str]:
    """The WORKER_TIER_* variables one module names (as whole string literals)."""
    return {
        node.value
        for node in ast.walk(_tree(module))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and VARIABLE.fullmatch(node.value)
    }


def required_variables(entry_module: str, task_modules: str) -> set[str]:
    """Every variable the entry module and what it imports read; see the module docstring."""
    seen: set[str] = set()
    pending = [entry_module]
    required: set[str] = set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        required |= variables_read(module)
        if _reads_settings(module):
            required |= SETTINGS_VARIABLES
            pending += [name for name in task_modules.split(",") if _module_file(name) is not None]
        pending += sorted(_imports(module))
    return required


def absent_by_design(settings: Settings, entry_module: str) -> set[str]:
    """Variables a resource's code reads that it is rightly not given."""
    absent = set(LOCAL_ONLY)
    is_lambda_worker = entry_module == WORKER_HANDLER.rpartition(".")[0]
    if not (is_lambda_worker and settings.container_worker):
        absent.add(LONG_QUEUE_URL)  # only the Lambda worker forwards, and only to a container worker
    if settings.fifo:
        absent |= DELAY_TABLE_VARIABLES
    if entry_module != CONTAINER_ENTRY_MODULE:
        absent.add(SEND_QUEUE_URL)  # WORKER_TIER_QUEUE_URL is already the work queue there
    return absent


def resources(template: Template) -> list[Resource]:
    """Every Lambda function and every ECS container definition in the template."""
    found = []
    for logical_id, function in template.find_resources("AWS::Lambda::Function").items():
        properties = function["Properties"]
        module = properties["Handler"].rpartition(".")[0]
        found.append(Resource(logical_id, module, properties.get("Environment", {}).get("Variables", {})))
    for logical_id, definition in template.find_resources("AWS::ECS::TaskDefinition").items():
        for container in definition["Properties"]["ContainerDefinitions"]:
            found.append(Resource(f"{logical_id}/{container['Name']}", _python_m_module(container),
                                  {v["Name"]: v["Value"] for v in container.get("Environment", [])}))
    return found


def _python_m_module(container: dict) -> str:
    """The module ``python -m <package>`` runs: the package's ``__main__``."""
    entry_point = container.get("EntryPoint", [])
    assert entry_point[:2] == ["python", "-m"], f"{container['Name']} must name its module: EntryPoint {entry_point}"
    return f"{entry_point[2]}.__main__"


@pytest.fixture(scope="module", params=sorted(STACKS))
def stack_template(request, tmp_path_factory) -> tuple[Settings, Template]:
    settings = STACKS[request.param]
    stack, _ = synth(settings=settings, outdir=str(tmp_path_factory.mktemp(request.param)))
    return settings, Template.from_stack(stack)


def test_every_resource_has_every_variable_its_code_reads(stack_template):
    # GIVEN a synthesized stack (default, with the container worker, FIFO with the container worker)
    settings, template = stack_template
    # WHEN each function's and container's variables are compared with what its code reads
    missing = {
        resource.path: sorted(
            required_variables(resource.entry_module, settings.task_modules)
            - absent_by_design(settings, resource.entry_module)
            - set(resource.environment)
        )
        for resource in resources(template)
    }
    # THEN none is missing
    assert {path: names for path, names in missing.items() if names} == {}


def test_the_container_worker_is_not_told_to_forward_to_itself(stack_template):
    # GIVEN a stack with the container worker  THEN its container has no long-task queue to forward to
    settings, template = stack_template
    containers = [r for r in resources(template) if r.entry_module == CONTAINER_ENTRY_MODULE]
    assert len(containers) == (1 if settings.container_worker else 0)
    assert all(LONG_QUEUE_URL not in c.environment for c in containers)


def test_the_container_workers_tasks_send_follow_ups_to_the_work_queue(stack_template):
    # GIVEN a stack with the container worker, which consumes its long-task queue
    _, template = stack_template
    queues = {r.entry_module: r.environment.get("WORKER_TIER_QUEUE_URL") for r in resources(template)}
    for container in [r for r in resources(template) if r.entry_module == CONTAINER_ENTRY_MODULE]:
        # THEN Client.from_env in its tasks sends to the queue the Lambda worker consumes, not its own
        assert container.environment[SEND_QUEUE_URL] == queues[WORKER_HANDLER.rpartition(".")[0]]
        assert container.environment["WORKER_TIER_QUEUE_URL"] != container.environment[SEND_QUEUE_URL]


def test_code_derivation_finds_what_the_worker_reads():
    # GIVEN the Lambda worker's handler module  WHEN its variables are derived from the code
    required = required_variables(WORKER_HANDLER.rpartition(".")[0], Settings().task_modules)
    # THEN they include its resources, every setting, and what its task modules' Client reads
    assert {"WORKER_TIER_QUEUE_URL", "WORKER_TIER_DLQ_URL", "WORKER_TIER_STATE_TABLE", LONG_QUEUE_URL} <= required
    assert required >= SETTINGS_VARIABLES
    assert "WORKER_TIER_DELAY_TABLE" in required


def test_code_derivation_does_not_follow_parent_packages():
    # GIVEN the cron handler, which imports no Client  WHEN derived  THEN the delay table is not required of it
    required = required_variables("worker_tier.handlers.periodic", Settings().task_modules)
    assert {"WORKER_TIER_QUEUE_URL", "WORKER_TIER_STATE_TABLE"} <= required
    assert not required & (DELAY_TABLE_VARIABLES | SETTINGS_VARIABLES)
