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

What EB's sqsd accepts (``schedule_parser.rb`` with the ``parse-cron`` gem) deploys
with EB's meaning and a synth warning (``CronEntry.warnings``) where the meaning is
not what the file seems to say: an extra entry key is ignored, a ``url`` without a
leading ``/`` is posted to ``/`` + url, a 6th schedule field is ignored, and of
entries sharing a name only the last deploys. A plain decimal ``name`` (``name: 42``)
is the name ``'42'``, as on EB, without a warning. Refused, with what EB would have
done: an extra key that looks like a misspelt one of ours, an extra top-level key, a
number written any other way (``0x1F``, ``1_000``, ``1.5``, ``yes``) as a name, a
full URL as ``url``, a number and a string naming two entries alike (EB runs both), and
day fields parse-cron reads otherwise than standard cron (``0 0 *,5 * MON``).
docs/periodic-tasks.md has the table, with the reasons.

Stricter than EB where EB would silently do something else: a repeated key, a
second ``<<`` merge key and merge sources that define the same key are errors
(YAML would keep one silently), so is a file that is not UTF-8, aliases that expand
past ``MAX_EXPANDED_NODES``, nesting past ``MAX_NESTING_DEPTH``, and a schedule that
never fires; an entry whose tick SQS would refuse (see ``send_problem``) fails here
rather than at every tick. Every error names the file and a line.
"""

from __future__ import annotations

import difflib
import re
import reprlib
import zoneinfo
import dataclasses
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import yaml

from worker_tier.periodic.cron_expression import MACROS, WEEKDAY_NAMES, CronExpressionError, to_eventbridge
from worker_tier.periodic.cron_expression import parse as parse_expression
from worker_tier.core import limits, sqs_rules
from worker_tier.app.sqsd import HEADER_VALUE_FORBIDDEN, REQUEST_PATH
from worker_tier.core.contract import PATH_ATTRIBUTE, SCHEDULED_JOB_BODY, TASK_NAME_ATTRIBUTE
from worker_tier.core.envelope import Envelope
from worker_tier.periodic.ticks import Tick
from worker_tier.core.errors import ConfigurationError

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
# A cron.yaml nests three levels (file, list, entry); far deeper is refused with its line before the
# recursive composer could hit Python's recursion limit.
MAX_NESTING_DEPTH = 100
# parse-cron takes 5 or 6 fields and reads only the first 5 (its validate_source and time_specs).
EB_MAX_SCHEDULE_FIELDS = 6
# An extra key this close to one of ours (difflib's ratio) is taken for a misspelling, not a note like 'description'.
MISSPELLING_CUTOFF = 0.8
# A YAML integer whose text is this is the same name on EB (Ruby's Integer#to_s) and here (str(int)).
_PLAIN_DECIMAL = re.compile(r"0|-?[1-9][0-9]*")
_MERGE_TAG = "tag:yaml.org,2002:merge"
# Any tick time: the scheduled-time attribute always has the same length and characters.
_SAMPLE_TICK_TIME = datetime(2000, 1, 1, tzinfo=timezone.utc)


class CronConfigError(ConfigurationError):
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
    # Where the entry deploys with EB's meaning though the file seems to say otherwise; synth shows each.
    warnings: tuple[str, ...] = ()

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
    kept = _last_of_each_name(parsed, [_is_number_name(raw) for raw in entries])
    check_sendable(kept, fifo=fifo)
    return kept


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
    """Why every tick of the entry (``worker_tier.periodic.ticks.Tick``) would fail to be claimed or sent, or None."""
    tick = Tick(entry.name, entry.url, _SAMPLE_TICK_TIME, entry.body)
    attributes = tick.message_attributes()
    checks: tuple[tuple[str, Callable[[], str | None]], ...] = (
        ("name", lambda: sqs_rules.attribute_value_problem(TASK_NAME_ATTRIBUTE, attributes[TASK_NAME_ATTRIBUTE])),
        ("url", lambda: sqs_rules.attribute_value_problem(PATH_ATTRIBUTE, attributes[PATH_ATTRIBUTE])),
        ("body", lambda: sqs_rules.body_problem(tick.body)),
        ("name (the MessageGroupId on a FIFO queue)", lambda: sqs_rules.group_id_problem(tick.group_id) if fifo else None),
        ("name", lambda: _key_problem(tick)),
        ("body", lambda: _size_problem(tick.body, attributes, maximum_message_size)),
        ("url", lambda: _request_path_problem(entry.url)),
        ("name", lambda: _header_value_problem(entry.name)),
    )
    for field, check in checks:
        problem = check()
        if problem:
            return f"{field} would fail every tick: {problem}"
    return None


def _request_path_problem(url: str) -> str | None:
    """Every tick is POSTed to its url (sqsd.request_for's rule): it must be a plain ASCII request path."""
    if REQUEST_PATH.fullmatch(url):
        return None
    return (
        f"path {_shown(url)} is not a request target: it may hold only visible ASCII (no space); "
        "percent-encode the rest, like '/my%20report'"
    )


def _header_value_problem(name: str) -> str | None:
    """Every tick carries its name in the X-Aws-Sqsd-Taskname header (sqsd.request_for's rule): no control character."""
    bad = HEADER_VALUE_FORBIDDEN.search(name)
    if bad is None:
        return None
    return f"it goes in the X-Aws-Sqsd-Taskname header, which may hold no control character but tab, got {bad.group()!r}"


def _key_problem(tick: Tick) -> str | None:
    """The tick's state-table key must fit DynamoDB's partition key."""
    size = len(tick.key.encode("utf-8"))
    if size <= limits.DYNAMODB_MAX_PARTITION_KEY_BYTES:
        return None
    return f"the tick's state-table key is {size} bytes; DynamoDB allows {limits.DYNAMODB_MAX_PARTITION_KEY_BYTES}"


def _size_problem(body: str, attributes: dict[str, Any], maximum_message_size: int) -> str | None:
    """The tick message (body and attributes) must fit the queue's MaximumMessageSize."""
    size = Envelope(body, attributes).size()
    if size <= maximum_message_size:
        return None
    return (
        f"the tick message is {size} bytes with its attributes; the queue's MaximumMessageSize is "
        f"{maximum_message_size} bytes"
    )


def _document(text: str, source: str) -> tuple[Any, int]:
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


def _entry_list(document: Any, line: int, source: str) -> tuple[list[Any], list[int]]:
    """The 'cron' list and each entry's line, after the file-level rules."""
    if not isinstance(document, dict):
        raise CronConfigError(
            f"{source} line {line}: must be a mapping with 'version: 1' and a 'cron' list, got {_kind(document)}"
        )
    key_lines = getattr(document, "key_lines", {})
    version = document.get("version")
    if "version" not in document:
        raise CronConfigError(f"{source} line {line}: 'version: 1' is missing")
    if isinstance(version, bool) or not isinstance(version, int) or version != CRON_VERSION:
        raise CronConfigError(f"{source} line {key_lines['version']}: 'version' must be 1, got {_shown(version)}")
    if "cron" not in document:
        raise CronConfigError(f"{source} line {line}: 'cron' is missing; it must be a list of entries")
    unknown = [key for key in document if key not in _TOP_LEVEL]
    if unknown:
        raise CronConfigError(
            f"{source} line {key_lines.get(unknown[0], line)}: unknown top-level key {_shown(unknown[0])}; "
            f"a cron.yaml has only {' and '.join(map(repr, _TOP_LEVEL))}. EB would ignore it; Worker Tier refuses it "
            "so that entries listed outside 'cron' are not dropped: move them under 'cron', or remove the key"
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
    """One validated entry, with a warning wherever it deploys with EB's meaning rather than its look."""
    if not isinstance(raw, dict):
        raise CronConfigError(
            f"{source} line {line}, entry {index + 1}: must be a mapping with name, url and schedule, got {_shown(raw)}"
        )
    where = f"{source} line {line}, entry {_name_label(raw.get('name', index + 1))}"
    warnings = _ignored_keys(raw, where)
    name = _name(raw.get("name"), where)
    for key in _REQUIRED[1:]:
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise CronConfigError(f"{where}: '{key}' is required and must be a non-empty string")
    url, url_warning = _url(raw["url"], where)
    schedule, schedule_warning = _schedule(raw["schedule"])
    try:
        expressions = tuple(to_eventbridge(schedule))
    except CronExpressionError as error:
        raise CronConfigError(f"{where}: schedule {_shown(raw['schedule'])}: {error}") from None
    problem = _day_fields_problem(schedule)
    if problem:
        raise CronConfigError(f"{where}: schedule {_shown(raw['schedule'])}: {problem}")
    return CronEntry(
        name=name,
        url=url,
        schedule=schedule,
        expressions=expressions,
        timezone=_timezone(raw.get("timezone", UTC), where),
        body=_string(raw, "body", SCHEDULED_JOB_BODY, where),
        enabled=_boolean(raw, "enabled", where),
        line=line,
        source=source,
        warnings=tuple(w for w in (*warnings, url_warning, schedule_warning) if w),
    )


def _ignored_keys(raw: dict[str, Any], where: str) -> list[str]:
    """A warning for keys EB ignores (``description``); CronConfigError for one that looks like a misspelt key of ours."""
    known = _REQUIRED + _OPTIONAL
    unknown = sorted(set(raw) - set(known), key=str)
    for key in unknown:
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=MISSPELLING_CUTOFF)
        if close:
            raise CronConfigError(
                f"{where}: unknown key {_shown(key)}; did you mean {close[0]!r}? EB would ignore {_shown(key)}, and so "
                f"would Worker Tier, so write {close[0]!r} (keys are {', '.join(known)}), or remove it"
            )
    if not unknown:
        return []
    shown = ", ".join(_shown(key) for key in unknown)
    return [f"ignored key(s) {shown}, as EB ignores them (Worker Tier reads {', '.join(known)})"]


def _name(value: Any, where: str) -> str:
    """The entry's name: a string, or a plain decimal number read as its digits (as EB names it)."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, _Integer) and _PLAIN_DECIMAL.fullmatch(value.text):
        return value.text
    if isinstance(value, (bool, int, float)):
        text = _name_label(value)
        kind = "boolean" if isinstance(value, bool) else "integer" if isinstance(value, int) else "number"
        raise CronConfigError(
            f"{where}: name {text} is read by YAML as the {kind} {_shown(value)}, not as the text "
            f"written (EB's YAML reader turns it into a value too, and Worker Tier cannot be sure it is the same one); "
            f"quote it: name: \"{text}\""
        )
    raise CronConfigError(f"{where}: 'name' is required and must be a non-empty string")


def _name_label(value: Any) -> str:
    """A name for messages: a YAML integer as written (``0x1F``), anything else as its short repr."""
    return value.text if isinstance(value, _Integer) else _shown(value)


def _url(url: str, where: str) -> tuple[str, str | None]:
    """The tick's path; a relative one gets the leading '/' that EB's HTTP client adds, with a warning."""
    if url.startswith("/") and not url.startswith("//"):
        return url, None
    if "://" in url or url.startswith("//"):
        raise CronConfigError(
            f"{where}: url must be a path starting with '/', got {_shown(url)}; EB posts every tick to its own "
            "instance, never to another host, so write the path alone, like '/backup'"
        )
    path = "/" + url
    return path, (
        f"url {_shown(url)} has no leading '/': EB posts it to {_shown(path)} (its HTTP client adds the '/'), and "
        f"so does Worker Tier, whose ticks carry {_shown(path)} in beanstalk.sqsd.path (EB's carry {_shown(url)}); "
        f"write url: {_shown(path)} to silence this warning"
    )


def _schedule(schedule: str) -> tuple[str, str | None]:
    """The schedule that deploys: a 6th field is dropped as parse-cron ignores it, with a warning."""
    fields = schedule.split()
    if len(fields) != EB_MAX_SCHEDULE_FIELDS or schedule.strip().startswith("@"):
        return schedule, None
    deployed = " ".join(fields[:5])
    return deployed, (
        f"schedule {_shown(schedule)} has a 6th field {_shown(fields[5])}, which EB's parse-cron ignores (it is "
        f"no year and no seconds field there); so does Worker Tier, which deploys {_shown(deployed)}: write that "
        "to silence this warning"
    )


def _day_fields_problem(schedule: str) -> str | None:
    """Why EB's parse-cron would run the schedule on other days than Worker Tier does, or None.

    parse-cron takes a day field for "any day" only when its text is a bare ``*``, and otherwise runs on
    a day matching either field; Worker Tier follows croniter, where ``*,5`` or a full range beside a
    ``*`` does not restrict the day (cron_expression's docstring).
    """
    parsed = parse_expression(schedule)
    fields = MACROS.get(schedule.strip().lower(), schedule).split()
    ours = _run_days(parsed.days_of_month if parsed.dom_restricted else None, parsed.weekdays if parsed.dow_restricted else None)
    eb = _run_days(None if fields[2] == "*" else parsed.days_of_month, None if fields[4] == "*" else parsed.weekdays)
    if ours == eb:
        return None
    return (
        f"EB's parse-cron reads its day fields differently: it runs on {_described(eb)}, Worker Tier (standard cron) "
        f"on {_described(ours)}; write a bare '*' in a day field that should not restrict the day, and no '*' in one that should"
    )


def _run_days(days: frozenset[int] | None, weekdays: frozenset[int] | None) -> tuple[frozenset[int], frozenset[int]] | None:
    """The days a schedule runs on as (days of month, weekdays) whose union they are; None for every day."""
    if (days is None and weekdays is None) or len(days or ()) == 31 or len(weekdays or ()) == len(WEEKDAY_NAMES):
        return None
    return frozenset(days or ()), frozenset(weekdays or ())


def _described(run_days: tuple[frozenset[int], frozenset[int]] | None) -> str:
    if run_days is None:
        return "every day"
    days, weekdays = run_days
    parts = [f"days {','.join(map(str, sorted(days)))} of the month"] if days else []
    parts += [",".join(WEEKDAY_NAMES[day] for day in sorted(weekdays))] if weekdays else []
    return " or ".join(parts)


def _timezone(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise CronConfigError(f"{where}: timezone must be an IANA name like 'Europe/Berlin', got {_shown(value)}")
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise CronConfigError(f"{where}: unknown timezone {_shown(value)}; use an IANA name like 'Europe/Berlin'") from None
    return value


def _string(raw: dict[str, Any], key: str, default: str, where: str) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value:
        raise CronConfigError(f"{where}: {key} must be a non-empty string, got {_shown(value)}")
    return value


def _boolean(raw: dict[str, Any], key: str, where: str) -> bool:
    value = raw.get(key, True)
    if not isinstance(value, bool):
        raise CronConfigError(f"{where}: {key} must be true or false, got {_shown(value)}")
    return value


def _is_number_name(raw: Any) -> bool:
    """Whether an entry's name was written as a number (EB keys its entries by the YAML value, 42 and '42' apart)."""
    return isinstance(raw, dict) and isinstance(raw.get("name"), _Integer)


def _last_of_each_name(entries: list[CronEntry], number_names: list[bool]) -> list[CronEntry]:
    """EB's rule for a repeated name: the last entry replaces the earlier ones, told here by a warning.

    CronConfigError when one is named by a number and another by the same digits as a string: EB
    keeps both (its keys differ), while here they would share one tick claim.
    """
    last: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if entry.name in last and number_names[last[entry.name]] != number_names[index]:
            first = entries[last[entry.name]]
            raise CronConfigError(
                f"{entry.where}: named like the entry at line {first.line}, one as a number and one as a string; EB "
                "would run both (42 and '42' are two names there), Worker Tier cannot (a tick is claimed by name): "
                "rename one"
            )
        last[entry.name] = index
    return [_replacing(entry, entries[:index]) for index, entry in enumerate(entries) if last[entry.name] == index]


def _replacing(entry: CronEntry, earlier: list[CronEntry]) -> CronEntry:
    """The entry, with a warning naming the lines of the earlier entries of its name that it replaces."""
    replaced = [e.line for e in earlier if e.name == entry.name]
    if not replaced:
        return entry
    return dataclasses.replace(entry, warnings=(*entry.warnings, (
        f"replaces the entry(ies) of the same name at line(s) {', '.join(map(str, replaced))}: EB keeps only the last "
        "entry of a name, and so does Worker Tier, so those do not deploy; remove or rename them to silence this warning"
    )))


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


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> Iterator[_Mapping]:
    data = _Mapping()
    data.line = node.start_mark.line + 1
    yield data
    loader.check_unique_keys(node)
    data.update(loader.construct_mapping(node))
    data.key_lines = {loader.construct_object(key): key.start_mark.line + 1 for key, _ in node.value}


class _Integer(int):
    """A YAML integer that remembers its text (``0x1F`` and ``31`` are one int, but two names as written)."""

    text: str

    def __new__(cls, value: int, text: str) -> _Integer:
        integer = super().__new__(cls, value)
        integer.text = text
        return integer


def _construct_integer(loader: _LineLoader, node: yaml.ScalarNode) -> int:
    """A YAML integer, refused with its line when longer than MAX_INTEGER_CHARS (int() would raise a bare error)."""
    if len(node.value) > MAX_INTEGER_CHARS:
        raise CronConfigError(
            f"{loader.source} line {node.start_mark.line + 1}: the number {_shown(node.value)} has {len(node.value)} "
            f"characters; cron.yaml takes at most {MAX_INTEGER_CHARS} (quote it if it is a name)"
        )
    return _Integer(loader.construct_yaml_int(node), node.value)


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> Iterator[_Sequence]:
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

    def repr__Sequence(self, value: list[Any], level: int) -> str:  # noqa: N802 - reprlib dispatches on repr_<type name>
        return self.repr_list(value, level)

    def repr__Mapping(self, value: dict[Any, Any], level: int) -> str:  # noqa: N802 - reprlib dispatches on repr_<type name>
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
