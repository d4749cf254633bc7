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

Stricter than EB where EB would silently do something else: a repeated key, a
second ``<<`` merge key and merge sources that define the same key are errors
(YAML would keep one silently), so is an unknown key at any level, a file that is
not UTF-8, aliases that expand past ``MAX_EXPANDED_NODES``, and a schedule that
never fires; an entry whose tick SQS would refuse (see ``send_problem``) fails here
rather than at every tick.
"""

from __future__ import annotations

import reprlib
import zoneinfo
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import yaml

from worker_tier_cdk.cron_expression import CronExpressionError, to_eventbridge
from worker_tier import limits, sqs_rules
from worker_tier.contract import PATH_ATTRIBUTE, SCHEDULED_JOB_BODY, TASK_NAME_ATTRIBUTE
from worker_tier.message import message_bytes
from worker_tier.periodic import Tick

CRON_VERSION = 1
UTC = "UTC"
DEFAULT_SOURCE = "cron.yaml"
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-partition-sort-keys
_REQUIRED = ("name", "url", "schedule")
_OPTIONAL = ("timezone", "body", "enabled")
_TOP_LEVEL = ("version", "cron")
# Far more YAML nodes than any cron.yaml needs, far fewer than an alias bomb ("billion laughs") expands to.
MAX_EXPANDED_NODES = 100_000
# Longer integers are no cron.yaml value; Python's int() refuses past 4,300 digits anyway.
MAX_INTEGER_CHARS = 100
_MERGE_TAG = "tag:yaml.org,2002:merge"
# Any tick time: the scheduled-time attribute always has the same length and characters.
_SAMPLE_TICK_TIME = datetime(2000, 1, 1, tzinfo=timezone.utc)


class CronConfigError(ValueError):
    """cron.yaml is malformed; the message names the file, the line, the entry and the rule."""


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
    source: str = DEFAULT_SOURCE

    @property
    def where(self) -> str:
        """The entry's place in its file, for error messages."""
        return f"{self.source} line {self.line}, entry {_shown(self.name)}"


def load(path: str | Path, *, fifo: bool = False, missing_ok: bool = False) -> list[CronEntry]:
    """Entries of a cron.yaml file (UTF-8, with or without a BOM).

    ``fifo``: the ticks go to a FIFO queue, where each entry's name is the MessageGroupId.
    ``missing_ok``: an absent file has no entries (the local environment's default cron.yaml);
    otherwise CronConfigError names the path it resolved to, since a typo would deploy no periodic task.
    """
    path = Path(path)
    if not path.is_file():
        if missing_ok and not path.exists():
            return []
        raise CronConfigError(f"cron file {str(path)!r} (resolved to {str(path.resolve())!r}) does not exist or is "
                              "not a file; pass the path of your cron.yaml, absolute or relative to the current directory")
    return parse(_decoded(path.read_bytes(), path.name), source=path.name, fifo=fifo)


def _decoded(data: bytes, source: str) -> str:
    """The file's text; CronConfigError naming the line and the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise CronConfigError(
            f"{source} line {line}: byte 0x{data[error.start]:02X} at column {column} (offset {error.start}) is not "
            "UTF-8; save the file as UTF-8"
        ) from None


def parse(text: str, source: str = DEFAULT_SOURCE, *, fifo: bool = False) -> list[CronEntry]:
    """Parse and validate cron.yaml text; CronConfigError names the line, the entry and the rule.

    Examples
    --------
    >>> [e.expressions for e in parse('version: 1\\ncron:\\n - {name: a, url: /a, schedule: "0 9 * * *"}\\n')]
    [('cron(0 9 * * ? *)',)]
    """
    document, line = _document(text, source)
    entries, item_lines = _entry_list(document, line, source)
    parsed = [_entry(raw, index, item_lines[index], source) for index, raw in enumerate(entries)]
    _check_unique(parsed)
    check_sendable(parsed, fifo=fifo)
    return parsed


def check_sendable(
    entries: Iterable[CronEntry], *, fifo: bool, maximum_message_size: int = limits.SQS_MAX_MESSAGE_BYTES
) -> None:
    """CronConfigError for the first entry whose tick SQS would refuse on this queue.

    ``maximum_message_size``: the queue's MaximumMessageSize in bytes (SQS's largest when not given).
    """
    for entry in entries:
        problem = send_problem(entry, fifo=fifo, maximum_message_size=maximum_message_size)
        if problem:
            raise CronConfigError(f"{entry.where}: {problem}")


def send_problem(
    entry: CronEntry, *, fifo: bool, maximum_message_size: int = limits.SQS_MAX_MESSAGE_BYTES
) -> str | None:
    """Why every tick of the entry (``worker_tier.periodic.Tick``) would fail to be claimed or sent, or None."""
    tick = Tick(entry.name, entry.url, _SAMPLE_TICK_TIME, entry.body)
    attributes = tick.message_attributes()
    checks = (
        ("name", lambda: sqs_rules.attribute_value_problem(TASK_NAME_ATTRIBUTE, attributes[TASK_NAME_ATTRIBUTE])),
        ("url", lambda: sqs_rules.attribute_value_problem(PATH_ATTRIBUTE, attributes[PATH_ATTRIBUTE])),
        ("body", lambda: sqs_rules.body_problem(tick.body)),
        ("name (the MessageGroupId on a FIFO queue)", lambda: sqs_rules.group_id_problem(tick.group_id) if fifo else None),
        ("name", lambda: _key_problem(tick)),
        ("body", lambda: _size_problem(tick.body, attributes, maximum_message_size)),
    )
    for field, check in checks:
        problem = check()
        if problem:
            return f"{field} would fail every tick: {problem}"
    return None


def _key_problem(tick: Tick) -> str | None:
    """The tick's state-table key must fit DynamoDB's partition key."""
    size = len(tick.key.encode("utf-8"))
    if size <= limits.DYNAMODB_MAX_PARTITION_KEY_BYTES:
        return None
    return f"the tick's state-table key is {size} bytes; DynamoDB allows {limits.DYNAMODB_MAX_PARTITION_KEY_BYTES}"


def _size_problem(body: str, attributes: dict, maximum_message_size: int) -> str | None:
    """The tick message (body and attributes) must fit the queue's MaximumMessageSize."""
    size = message_bytes(body, attributes)
    if size <= maximum_message_size:
        return None
    return (
        f"the tick message is {size} bytes with its attributes; the queue's MaximumMessageSize is "
        f"{maximum_message_size} bytes"
    )


def _document(text: str, source: str) -> tuple[Any, int]:
    """The YAML document and the line it starts on."""
    loader = _LineLoader(text, source)
    try:
        node = loader.get_single_node()
        if node is None:
            raise CronConfigError(
                f"{source} line 1: the file has no content (empty, or every line a comment); "
                "it must be a mapping with 'version: 1' and a 'cron' list"
            )
        _check_expansion(node, source)
        return loader.construct_document(node), node.start_mark.line + 1
    except yaml.YAMLError as error:
        raise CronConfigError(f"{source}{_yaml_error_line(error)}: not valid YAML: {_yaml_problem(error)}") from None
    except RecursionError:
        raise CronConfigError(
            f"{source}: values are nested too deeply for the YAML loader (Python's recursion limit); "
            "a cron.yaml needs only a list of flat mappings"
        ) from None
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node, source: str) -> None:
    """CronConfigError when aliases expand the document past MAX_EXPANDED_NODES, or refer to themselves."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        """Nodes under ``node``, each alias counted as a full copy (computed once per node)."""
        if id(node) in sizes:
            return sizes[id(node)]
        line = node.start_mark.line + 1
        if id(node) in open_nodes:
            raise CronConfigError(f"{source} line {line}: an alias refers to a node that contains it; cron.yaml values must be finite")
        open_nodes.add(id(node))
        children = node.value if isinstance(node, yaml.SequenceNode) else []
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        total = 1 + sum(size(child) for child in children)
        open_nodes.discard(id(node))
        if total > MAX_EXPANDED_NODES:
            raise CronConfigError(
                f"{source} line {line}: with its aliases expanded this value has more than {MAX_EXPANDED_NODES} "
                "YAML nodes; a cron.yaml needs far fewer, so use fewer or smaller aliases"
            )
        sizes[id(node)] = total
        return total

    size(root)


def _entry_list(document: Any, line: int, source: str) -> tuple[list, list[int]]:
    """The 'cron' list and each entry's line, after the file-level rules."""
    if not isinstance(document, dict):
        raise CronConfigError(
            f"{source} line {line}: must be a mapping with 'version: 1' and a 'cron' list, got {_kind(document)}"
        )
    key_lines = getattr(document, "key_lines", {})
    version = document.get("version")
    if "version" not in document:
        raise CronConfigError(f"{source} line {line}: 'version: 1' is missing")
    if type(version) is not int or version != CRON_VERSION:
        raise CronConfigError(f"{source} line {key_lines['version']}: 'version' must be 1, got {_shown(version)}")
    if "cron" not in document:
        raise CronConfigError(f"{source} line {line}: 'cron' is missing; it must be a list of entries")
    unknown = [key for key in document if key not in _TOP_LEVEL]
    if unknown:
        raise CronConfigError(
            f"{source} line {key_lines.get(unknown[0], line)}: unknown top-level key {_shown(unknown[0])}; "
            f"a cron.yaml has only {' and '.join(map(repr, _TOP_LEVEL))}"
        )
    entries = document["cron"]
    if entries is None:
        raise CronConfigError(
            f"{source} line {key_lines['cron']}: 'cron' has no entries (are they all commented out?); "
            "list at least one entry, or write 'cron: []' for none"
        )
    if not isinstance(entries, list):
        raise CronConfigError(f"{source} line {key_lines['cron']}: 'cron' must be a list of entries, got {_kind(entries)}")
    return entries, getattr(entries, "item_lines", [line] * len(entries))


def _entry(raw: Any, index: int, line: int, source: str) -> CronEntry:
    """One validated entry."""
    if not isinstance(raw, dict):
        raise CronConfigError(
            f"{source} line {line}, entry {index + 1}: must be a mapping with name, url and schedule, got {_shown(raw)}"
        )
    where = f"{source} line {line}, entry {_shown(raw.get('name', index + 1))}"
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL), key=str)
    if unknown:
        raise CronConfigError(f"{where}: unknown key {_shown(unknown[0])}; keys are {', '.join(_REQUIRED + _OPTIONAL)}")
    for key in _REQUIRED:
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise CronConfigError(f"{where}: '{key}' is required and must be a non-empty string")
    if not raw["url"].startswith("/"):
        raise CronConfigError(f"{where}: url must be a path starting with '/', got {_shown(raw['url'])}")
    try:
        expressions = tuple(to_eventbridge(raw["schedule"]))
    except CronExpressionError as error:
        raise CronConfigError(f"{where}: schedule {_shown(raw['schedule'])}: {error}") from None
    return CronEntry(
        name=raw["name"],
        url=raw["url"],
        schedule=raw["schedule"],
        expressions=expressions,
        timezone=_timezone(raw.get("timezone", UTC), where),
        body=_string(raw, "body", SCHEDULED_JOB_BODY, where),
        enabled=_boolean(raw, "enabled", where),
        line=line,
        source=source,
    )


def _timezone(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise CronConfigError(f"{where}: timezone must be an IANA name like 'Europe/Berlin', got {_shown(value)}")
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise CronConfigError(f"{where}: unknown timezone {_shown(value)}; use an IANA name like 'Europe/Berlin'") from None
    return value


def _string(raw: dict, key: str, default: str, where: str) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value:
        raise CronConfigError(f"{where}: {key} must be a non-empty string, got {_shown(value)}")
    return value


def _boolean(raw: dict, key: str, where: str) -> bool:
    value = raw.get(key, True)
    if not isinstance(value, bool):
        raise CronConfigError(f"{where}: {key} must be true or false, got {_shown(value)}")
    return value


def _check_unique(entries: list[CronEntry]) -> None:
    seen: dict[str, int] = {}
    for entry in entries:
        if entry.name in seen:
            raise CronConfigError(f"{entry.where}: duplicate name (first at line {seen[entry.name]})")
        seen[entry.name] = entry.line


def _yaml_error_line(error: yaml.YAMLError) -> str:
    """' line N' where PyYAML marked the problem, else nothing."""
    mark = getattr(error, "problem_mark", None)
    return f" line {mark.line + 1}" if mark is not None else ""


def _yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's own words, without its copy of the text."""
    if isinstance(error, yaml.MarkedYAMLError):
        return ": ".join(part for part in (error.context, error.problem) if part)
    return str(error)


class _Mapping(dict):
    """A YAML mapping with the line it starts on and each key's line (1-based)."""

    line: int = 0
    key_lines: dict[Any, int]  # set by _construct_mapping; read with getattr(..., {}) before that


class _Sequence(list):
    """A YAML sequence with the line of each item (1-based)."""

    item_lines: list[int]  # set by _construct_sequence; read with getattr(..., [...]) before that


class _LineLoader(yaml.SafeLoader):
    """SafeLoader whose mappings and sequences keep their lines, and which refuses a repeated key."""

    def __init__(self, text: str, source: str) -> None:
        super().__init__(text)
        self.source = source

    def check_unique_keys(self, node: yaml.MappingNode) -> None:
        """CronConfigError naming both lines when a key or a ``<<`` merge key repeats (YAML would keep one silently)."""
        first: dict[Any, int] = {}
        merge_line = 0
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                line = key_node.start_mark.line + 1
                if merge_line:
                    raise CronConfigError(
                        f"{self.source} line {line}{_entry_label(node)}: a second '<<' merge key (first at line "
                        f"{merge_line}); YAML would let this one's keys replace the first's silently, so merge "
                        "them in one: '<<: [*first, *second]'"
                    )
                merge_line = line
                self.check_merge_sources(node, value_node)
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if _hashable(key) and key in first:
                raise CronConfigError(
                    f"{self.source} line {line}{_entry_label(node)}: duplicate key {_shown(key)} (first at line {first[key]}); "
                    "YAML would keep only the last one, so remove or rename one"
                )
            if _hashable(key):
                first[key] = line


    def check_merge_sources(self, node: yaml.MappingNode, value_node: yaml.Node) -> None:
        """CronConfigError naming both lines when two mappings merged by one '<<' define the same key."""
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        defined: dict[str, int] = {}
        for source in sources:
            for key, line in _merged_keys(source, set()).items():
                if key in defined:
                    raise CronConfigError(
                        f"{self.source} line {value_node.start_mark.line + 1}{_entry_label(node)}: the merged mappings "
                        f"both define {_shown(key)} (lines {defined[key]} and {line}); YAML would keep the first silently, "
                        "so define it in one of them"
                    )
                defined[key] = line


def _merged_keys(node: yaml.Node, seen: set[int]) -> dict[str, int]:
    """The scalar keys a mapping contributes to a merge (its own, and those it merges in), with their lines."""
    if not isinstance(node, yaml.MappingNode) or id(node) in seen:
        return {}
    seen.add(id(node))
    keys: dict[str, int] = {}
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:
            nested = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in nested:
                keys = {**_merged_keys(source, seen), **keys}
        elif isinstance(key_node, yaml.ScalarNode):
            keys[key_node.value] = key_node.start_mark.line + 1
    return keys


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode):
    data = _Mapping()
    data.line = node.start_mark.line + 1
    yield data
    loader.check_unique_keys(node)
    data.update(loader.construct_mapping(node))
    data.key_lines = {loader.construct_object(key): key.start_mark.line + 1 for key, _ in node.value}


def _construct_integer(loader: _LineLoader, node: yaml.ScalarNode) -> int:
    """A YAML integer, refused with its line when longer than MAX_INTEGER_CHARS (int() would raise a bare error)."""
    if len(node.value) > MAX_INTEGER_CHARS:
        raise CronConfigError(
            f"{loader.source} line {node.start_mark.line + 1}: the number {_shown(node.value)} has {len(node.value)} "
            f"characters; cron.yaml takes at most {MAX_INTEGER_CHARS} (quote it if it is a name)"
        )
    return loader.construct_yaml_int(node)


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode):
    data = _Sequence()
    yield data
    data.extend(loader.construct_sequence(node))
    data.item_lines = [item.start_mark.line + 1 for item in node.value]


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)
_LineLoader.add_constructor("tag:yaml.org,2002:int", _construct_integer)


def _entry_label(node: yaml.MappingNode) -> str:
    """', entry NAME' when the mapping has a scalar name, else nothing."""
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == "name" and isinstance(value_node, yaml.ScalarNode):
            return f", entry {_shown(value_node.value)}"
    return ""


def _kind(value: Any) -> str:
    """What a YAML value is, in YAML's words."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {_shown(value)}"


class _ShortRepr(reprlib.Repr):
    """reprlib's limits, applied to the loader's own list and dict types too (reprlib dispatches on the type's name)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxdict, self.maxstring, self.maxother = 2, 4, 4, 60, 60

    def repr__Sequence(self, value: list, level: int) -> str:  # noqa: N802 - reprlib dispatches on repr_<type name>
        return self.repr_list(value, level)

    def repr__Mapping(self, value: dict, level: int) -> str:  # noqa: N802 - reprlib dispatches on repr_<type name>
        return self.repr_dict(value, level)


_REPR = _ShortRepr()


def _shown(value: Any, limit: int = 60) -> str:
    """A value's repr, shortened for an error message; a list or mapping shows only its first items."""
    text = repr(value) if isinstance(value, (str, int, float, bool, type(None))) else _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
