"""The entry modules of the synthesized stack's functions and containers, and the variables each one's code reads.

"What its code reads" is declared where it is read: each entry module's ``NEEDS`` (``worker_tier.core.contract.Needs``).
"""

from __future__ import annotations

import dataclasses
import importlib

from aws_cdk.assertions import Template

from worker_tier.core.contract import Needs, setting_variable
from worker_tier.core.settings import Settings
from worker_tier_cdk.worker_queue import WORKER_HANDLER

SETTINGS_VARIABLES = frozenset(setting_variable(f.name) for f in dataclasses.fields(Settings))
CONTAINER_ENTRY_MODULE = "worker_tier.__main__"
LAMBDA_WORKER_MODULE = WORKER_HANDLER.rpartition(".")[0]


@dataclasses.dataclass(frozen=True)
class Resource:
    """One function or container definition: where it is, what it runs, and the variables it is given."""

    path: str
    entry_module: str
    environment: dict[str, object]


def needs_of(entry_module: str) -> Needs:
    """What the entry module declares it reads."""
    needs = getattr(importlib.import_module(entry_module), "NEEDS", None)
    assert isinstance(needs, Needs), f"entry module {entry_module} must declare what it reads as NEEDS (a contract.Needs)"
    return needs


def variables_read(entry_module: str) -> set[str]:
    """Every variable the entry module reads: its resources, and every setting if it reads settings."""
    needs = needs_of(entry_module)
    return set(needs.variables()) | (set(SETTINGS_VARIABLES) if needs.settings else set())


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


