"""``cron.yaml``: Elastic Beanstalk's periodic-task file, read and validated at synth.

The EB format (https://docs.aws.amazon.com/elasticbeanstalk/latest/dg/using-features-managing-env-tiers.html#worker-periodictasks)::

    version: 1
    cron:
     - name: "backup-job"        # unique
       url: "/backup"            # the path the task is posted to
       schedule: "0 */12 * * *"  # standard 5-field cron, UTC

Worker Tier's extensions, all optional: ``timezone`` (an IANA name; the schedule
runs in that zone's local time, DST handled by EventBridge Scheduler), ``body``
(default EB's ``elasticbeanstalk scheduled job``) and ``enabled`` (default true).
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import infra  # noqa: F401  (puts lambdas/ on the path)
from infra.cron_expression import CronExpressionError, to_eventbridge
from worker_tier.message import SCHEDULED_JOB_BODY

CRON_VERSION = 1
UTC = "UTC"
_REQUIRED = ("name", "url", "schedule")
_OPTIONAL = ("timezone", "body", "enabled")


class CronConfigError(ValueError):
    """cron.yaml is malformed; the message names the line, the entry and the problem."""


@dataclass(frozen=True)
class CronEntry:
    """One periodic task, validated, with its EventBridge expressions."""

    name: str
    url: str
    schedule: str
    expressions: tuple[str, ...]
    timezone: str = UTC
    body: str = SCHEDULED_JOB_BODY
    enabled: bool = True
    line: int = 0


def load(path: str | Path) -> list[CronEntry]:
    """Entries of a cron.yaml file; an empty list when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return []
    return parse(path.read_text(), source=path.name)


def parse(text: str, source: str = "cron.yaml") -> list[CronEntry]:
    """Parse and validate cron.yaml text; CronConfigError names the line, the entry and the problem."""
    try:
        document = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        raise CronConfigError(f"{source}: not valid YAML: {error}") from None
    if not isinstance(document, dict):
        raise CronConfigError(f"{source}: must be a mapping with 'version: 1' and a 'cron' list")
    if document.get("version") != CRON_VERSION:
        raise CronConfigError(f"{source}: 'version' must be 1, got {document.get('version')!r}")
    entries = document.get("cron")
    if not isinstance(entries, list):
        raise CronConfigError(f"{source}: 'cron' must be a list of entries, got {type(entries).__name__}")
    parsed = [_entry(raw, index, source) for index, raw in enumerate(entries)]
    _check_unique(parsed, source)
    return parsed


def _entry(raw: Any, index: int, source: str) -> CronEntry:
    """One validated entry."""
    if not isinstance(raw, dict):
        raise CronConfigError(f"{source}: entry {index + 1} must be a mapping with name, url and schedule")
    line = raw.pop("__line__", 0)
    where = f"{source} line {line}, entry {raw.get('name', index + 1)!r}"
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise CronConfigError(f"{where}: unknown key {unknown[0]!r}; keys are {', '.join(_REQUIRED + _OPTIONAL)}")
    for key in _REQUIRED:
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise CronConfigError(f"{where}: '{key}' is required and must be a non-empty string")
    if not raw["url"].startswith("/"):
        raise CronConfigError(f"{where}: url must be a path starting with '/', got {raw['url']!r}")
    try:
        expressions = tuple(to_eventbridge(raw["schedule"]))
    except CronExpressionError as error:
        raise CronConfigError(f"{where}: schedule {raw['schedule']!r}: {error}") from None
    return CronEntry(
        name=raw["name"],
        url=raw["url"],
        schedule=raw["schedule"],
        expressions=expressions,
        timezone=_timezone(raw.get("timezone", UTC), where),
        body=_string(raw, "body", SCHEDULED_JOB_BODY, where),
        enabled=_boolean(raw, "enabled", where),
        line=line,
    )


def _timezone(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise CronConfigError(f"{where}: timezone must be an IANA name like 'Europe/Berlin', got {value!r}")
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise CronConfigError(f"{where}: unknown timezone {value!r}; use an IANA name like 'Europe/Berlin'") from None
    return value


def _string(raw: dict, key: str, default: str, where: str) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value:
        raise CronConfigError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def _boolean(raw: dict, key: str, where: str) -> bool:
    value = raw.get(key, True)
    if not isinstance(value, bool):
        raise CronConfigError(f"{where}: {key} must be true or false, got {value!r}")
    return value


def _check_unique(entries: list[CronEntry], source: str) -> None:
    seen: dict[str, int] = {}
    for entry in entries:
        if entry.name in seen:
            raise CronConfigError(
                f"{source} line {entry.line}, entry {entry.name!r}: duplicate name (first at line {seen[entry.name]})"
            )
        seen[entry.name] = entry.line


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that records each mapping's line as ``__line__`` (1-based)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        mapping = super().construct_mapping(node, deep=deep)
        mapping["__line__"] = node.start_mark.line + 1
        return mapping
