"""``cron.yaml``'s YAML, read strictly, for ``worker_tier.periodic.cron_config``.

A safe loader that keeps each node's line, refuses what YAML would otherwise resolve silently (a repeated key,
a second ``<<`` merge key, merge sources defining the same key), bounds alias expansion (``MAX_EXPANDED_NODES``)
and nesting (``MAX_NESTING_DEPTH``), and keeps integers as written so a name like ``0x1F`` can be refused.
Every error is a ``CronConfigError`` naming the file and a line.
"""

from __future__ import annotations

import reprlib
from typing import Any, Iterator

import yaml

from worker_tier.core.errors import CronConfigError


# Far more YAML nodes than any cron.yaml needs, far fewer than an alias bomb ("billion laughs") expands to.
MAX_EXPANDED_NODES = 100_000


# Longer integers are no cron.yaml value; Python's int() refuses past 4,300 digits anyway.
MAX_INTEGER_CHARS = 100


# A cron.yaml nests three levels (file, list, entry); far deeper is refused with its line before the
# recursive composer could hit Python's recursion limit.
MAX_NESTING_DEPTH = 100


_MERGE_TAG = "tag:yaml.org,2002:merge"


def load_document(text: str, source: str) -> tuple[Any, int]:
    """The YAML document and the line it starts on."""
    try:
        _check_depth(text, source)
        loader = _LineLoader(text, source)
    except yaml.YAMLError as error:
        raise CronConfigError(f"{source}{_yaml_error_line(error, text)}: not valid YAML: {_yaml_problem(error)}") from None
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
        raise CronConfigError(f"{source}{_yaml_error_line(error, text)}: not valid YAML: {_yaml_problem(error)}") from None
    finally:
        loader.dispose()


def _check_depth(text: str, source: str) -> None:
    """CronConfigError naming the line where collections nest past MAX_NESTING_DEPTH (PyYAML's parser does not recurse)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_NESTING_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark is not None else 1
                raise CronConfigError(
                    f"{source} line {line}: values are nested more than {MAX_NESTING_DEPTH} deep; "
                    "a cron.yaml needs only a list of flat mappings"
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


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


def _yaml_error_line(error: yaml.YAMLError, text: str) -> str:
    """' line N' where PyYAML marked the problem (or, for a character it refuses, where that character is)."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is not None:
        return f" line {mark.line + 1}"
    if isinstance(error, yaml.reader.ReaderError) and isinstance(error.position, int):
        return f" line {text.count(chr(10), 0, error.position) + 1}"
    return " line 1"


def _yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's own words, without its copy of the text."""
    if isinstance(error, yaml.MarkedYAMLError):
        return ": ".join(part for part in (error.context, error.problem) if part)
    if isinstance(error, yaml.reader.ReaderError):
        return f"character #x{error.character:04X} is not allowed in YAML ({error.reason}); remove it"
    return str(error)


class _Mapping(dict[Any, Any]):
    """A YAML mapping with the line it starts on and each key's line (1-based)."""

    line: int = 0
    key_lines: dict[Any, int]  # set by _construct_mapping; read with getattr(..., {}) before that


class _Sequence(list[Any]):
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
                    f"{self.source} line {line}{_entry_label(node)}: duplicate key {show(key)} (first at line {first[key]}); "
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
                        f"both define {show(key)} (lines {defined[key]} and {line}); YAML would keep the first silently, "
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


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> Iterator[_Mapping]:
    data = _Mapping()
    data.line = node.start_mark.line + 1
    yield data
    loader.check_unique_keys(node)
    data.update(loader.construct_mapping(node))
    data.key_lines = {loader.construct_object(key): key.start_mark.line + 1 for key, _ in node.value}


class Integer(int):
    """A YAML integer that remembers its text (``0x1F`` and ``31`` are one int, but two names as written)."""

    text: str

    def __new__(cls, value: int, text: str) -> Integer:
        integer = super().__new__(cls, value)
        integer.text = text
        return integer


def _construct_integer(loader: _LineLoader, node: yaml.ScalarNode) -> int:
    """A YAML integer, refused with its line when longer than MAX_INTEGER_CHARS (int() would raise a bare error)."""
    if len(node.value) > MAX_INTEGER_CHARS:
        raise CronConfigError(
            f"{loader.source} line {node.start_mark.line + 1}: the number {show(node.value)} has {len(node.value)} "
            f"characters; cron.yaml takes at most {MAX_INTEGER_CHARS} (quote it if it is a name)"
        )
    return Integer(loader.construct_yaml_int(node), node.value)


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> Iterator[_Sequence]:
    data = _Sequence()
    yield data
    data.extend(loader.construct_sequence(node))
    data.item_lines = [item.start_mark.line + 1 for item in node.value]


def _entry_label(node: yaml.MappingNode) -> str:
    """', entry NAME' when the mapping has a scalar name, else nothing."""
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == "name" and isinstance(value_node, yaml.ScalarNode):
            return f", entry {show(value_node.value)}"
    return ""


def kind(value: Any) -> str:
    """What a YAML value is, in YAML's words."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {show(value)}"


class _ShortRepr(reprlib.Repr):
    """reprlib's limits, applied to the loader's own list and dict types too (reprlib dispatches on the type's name)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxdict, self.maxstring, self.maxother = 2, 4, 4, 60, 60

    def repr__Sequence(self, value: list[Any], level: int) -> str:  # noqa: N802 - reprlib dispatches on repr_<type name>
        return self.repr_list(value, level)

    def repr__Mapping(self, value: dict[Any, Any], level: int) -> str:  # noqa: N802 - reprlib dispatches on repr_<type name>
        return self.repr_dict(value, level)


_REPR = _ShortRepr()


def show(value: Any, limit: int = 60) -> str:
    """A value's repr, shortened for an error message; a list or mapping shows only its first items."""
    text = repr(value) if isinstance(value, (str, int, float, bool, type(None))) else _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True

_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)
_LineLoader.add_constructor("tag:yaml.org,2002:int", _construct_integer)
