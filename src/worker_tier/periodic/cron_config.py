"""``cron.yaml``: Elastic Beanstalk's periodic-task file, read and validated at synth.

The EB format (https://docs.aws.amazon.com/elasticbeanstalk/latest/dg/using-features-managing-env-tiers.html#worker-periodictasks)::

    version: 1
    cron:
     - name: "backup-job"        # unique
       url: "/backup"            # the path the task is posted to
       schedule: "0 */12 * * *"  # standard 5-field cron, UTC

Worker Tier's extensions, all optional: ``timezone`` (an IANA name; the schedule
runs in that zone's local time, DST handled by EventBridge Scheduler), ``body``
(default EB's ``elasticbeanstalk scheduled job``), ``enabled`` (default true) and ``priority`` (the level whose queue
takes the ticks, docs/priorities.md; default normal).

One idea, kept whole: the file's schema and every check an entry passes before it deploys.

What EB's sqsd accepts (``schedule_parser.rb`` with the ``parse-cron`` gem) deploys
with EB's meaning and a synth warning (``CronEntry.warnings``) where the meaning is
not what the file seems to say: an extra entry key is ignored, a ``url`` without a
leading ``/`` is posted to ``/`` + url, and of
entries sharing a name only the last deploys. A plain decimal ``name`` (``name: 42``)
is the name ``'42'``, as on EB, without a warning. Refused, with what EB would have
done: an extra key that looks like a misspelt one of ours, an extra top-level key, a
number written any other way (``0x1F``, ``1_000``, ``1.5``, ``yes``) as a name, a
full URL as ``url``, a number and a string naming two entries alike (EB runs both), and
day fields parse-cron reads otherwise than standard cron (``0 0 *,5 * MON``), and a schedule
in another dialect: EventBridge's ``cron(...)``/``rate(...)``, or 6 fields (Quartz's seconds, a year),
named with the 5-field line it meant (``cron_dialects``; EB's parse-cron ignores a 6th field, which
turns Quartz's daily ``0 0 3 * * *`` into a monthly ``0 0 3 * *``).
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
import zoneinfo
import dataclasses
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from worker_tier.periodic import cron_dialects
from worker_tier.periodic.cron_expression import MACROS, WEEKDAY_NAMES, CronExpressionError, to_eventbridge
from worker_tier.periodic.cron_expression import parse as parse_expression
from worker_tier.core import limits, sqs_rules
from worker_tier.app.sqsd import HEADER_VALUE_FORBIDDEN, REQUEST_PATH
from worker_tier.core.contract import (
    DEFAULT_PRIORITY,
    PATH_ATTRIBUTE,
    PRIORITY_LEVELS,
    SCHEDULED_JOB_BODY,
    TASK_NAME_ATTRIBUTE,
)
from worker_tier.core.envelope import Envelope
from worker_tier.periodic.ticks import Tick
from worker_tier.core.errors import CronConfigError
from worker_tier.periodic.cron_yaml import Integer, load_document, kind, show

CRON_VERSION = 1
UTC = "UTC"
DEFAULT_SOURCE = "cron.yaml"
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-partition-sort-keys
_REQUIRED = ("name", "url", "schedule")
# priority is Worker Tier's extension (EB has none): the level whose queue takes the ticks (worker_tier.core.priority).
_OPTIONAL = ("timezone", "body", "enabled", "priority")
_TOP_LEVEL = ("version", "cron")
# EventBridge Scheduler's Description: at most 512 characters.
# https://docs.aws.amazon.com/scheduler/latest/APIReference/API_CreateSchedule.html
SCHEDULE_DESCRIPTION_MAX_CHARS = 512
# An extra key this close to one of ours (difflib's ratio) is taken for a misspelling, not a note like 'description'.
MISSPELLING_CUTOFF = 0.8
# A YAML integer whose text is this is the same name on EB (Ruby's Integer#to_s) and here (str(int)).
_PLAIN_DECIMAL = re.compile(r"0|-?[1-9][0-9]*")
# Any tick time: the scheduled-time attribute always has the same length and characters.
_SAMPLE_TICK_TIME = datetime(2000, 1, 1, tzinfo=timezone.utc)




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
    priority: str = DEFAULT_PRIORITY
    # Where the entry deploys with EB's meaning though the file seems to say otherwise; synth shows each.
    warnings: tuple[str, ...] = ()

    @property
    def description(self) -> str:
        """Its schedules' description, which ``worker-tier status`` reads back to show the entry."""
        return f"cron.yaml {self.name}: {self.schedule} ({self.timezone}) -> {self.url}"[:SCHEDULE_DESCRIPTION_MAX_CHARS]

    @property
    def where(self) -> str:
        """The entry's place in its file, for error messages."""
        return f"{self.source} line {self.line}, entry {show(self.name)}"


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
    document, line = load_document(text, source)
    entries, item_lines = _entry_list(document, line, source)
    parsed = [_entry(raw, index, item_lines[index], source) for index, raw in enumerate(entries)]
    kept = _last_of_each_name(parsed, [_is_number_name(raw) for raw in entries])
    check_sendable(kept, fifo=fifo)
    return kept


def check_sendable(
    entries: Iterable[CronEntry], *, fifo: bool, maximum_message_size: int = limits.SQS_MAX_MESSAGE_BYTES,
    large_payloads: bool = False,
) -> None:
    """CronConfigError for the first entry whose tick SQS would refuse on this queue.

    ``maximum_message_size``: the queue's MaximumMessageSize in bytes (SQS's largest when not given);
    ``large_payloads``: the periodic-task function has the payload bucket, so a tick too large for the queue goes
    there (``worker_tier.periodic.ticks``) and its size is no reason to refuse it.
    """
    for entry in entries:
        problem = send_problem(entry, fifo=fifo, maximum_message_size=maximum_message_size, large_payloads=large_payloads)
        if problem:
            raise CronConfigError(f"{entry.where}: {problem}")


def send_problem(
    entry: CronEntry, *, fifo: bool, maximum_message_size: int = limits.SQS_MAX_MESSAGE_BYTES, large_payloads: bool = False
) -> str | None:
    """Why every tick of the entry (``worker_tier.periodic.ticks.Tick``) would fail to be claimed or sent, or None."""
    tick = Tick(entry.name, entry.url, _SAMPLE_TICK_TIME, entry.body, entry.priority)
    attributes = tick.message_attributes()
    checks: tuple[tuple[str, Callable[[], str | None]], ...] = (
        ("name", lambda: sqs_rules.attribute_value_problem(TASK_NAME_ATTRIBUTE, attributes[TASK_NAME_ATTRIBUTE])),
        ("url", lambda: sqs_rules.attribute_value_problem(PATH_ATTRIBUTE, attributes[PATH_ATTRIBUTE])),
        ("body", lambda: sqs_rules.body_problem(tick.body)),
        ("name (the MessageGroupId on a FIFO queue)", lambda: sqs_rules.group_id_problem(tick.group_id) if fifo else None),
        ("name", lambda: _key_problem(tick)),
        ("body", lambda: None if large_payloads else _size_problem(tick.body, attributes, maximum_message_size)),
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
        f"path {show(url)} is not a request target: it may hold only visible ASCII (no space); "
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








def _entry_list(document: Any, line: int, source: str) -> tuple[list[Any], list[int]]:
    """The 'cron' list and each entry's line, after the file-level rules."""
    if not isinstance(document, dict):
        raise CronConfigError(
            f"{source} line {line}: must be a mapping with 'version: 1' and a 'cron' list, got {kind(document)}"
        )
    key_lines = getattr(document, "key_lines", {})
    version = document.get("version")
    if "version" not in document:
        raise CronConfigError(f"{source} line {line}: 'version: 1' is missing")
    if isinstance(version, bool) or not isinstance(version, int) or version != CRON_VERSION:
        raise CronConfigError(f"{source} line {key_lines['version']}: 'version' must be 1, got {show(version)}")
    if "cron" not in document:
        raise CronConfigError(f"{source} line {line}: 'cron' is missing; it must be a list of entries")
    unknown = [key for key in document if key not in _TOP_LEVEL]
    if unknown:
        raise CronConfigError(
            f"{source} line {key_lines.get(unknown[0], line)}: unknown top-level key {show(unknown[0])}; "
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
        raise CronConfigError(f"{source} line {key_lines['cron']}: 'cron' must be a list of entries, got {kind(entries)}")
    return entries, getattr(entries, "item_lines", [line] * len(entries))


def _entry(raw: Any, index: int, line: int, source: str) -> CronEntry:
    """One validated entry, with a warning wherever it deploys with EB's meaning rather than its look."""
    if not isinstance(raw, dict):
        raise CronConfigError(
            f"{source} line {line}, entry {index + 1}: must be a mapping with name, url and schedule, got {show(raw)}"
        )
    where = f"{source} line {line}, entry {_name_label(raw.get('name', index + 1))}"
    warnings = _ignored_keys(raw, where)
    name = _name(raw.get("name"), where)
    for key in _REQUIRED[1:]:
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise CronConfigError(f"{where}: '{key}' is required and must be a non-empty string")
    url, url_warning = _url(raw["url"], where)
    schedule = _schedule(raw["schedule"], where)
    try:
        expressions = tuple(to_eventbridge(schedule))
    except CronExpressionError as error:
        raise CronConfigError(f"{where}: schedule {show(raw['schedule'])}: {error}") from None
    problem = _day_fields_problem(schedule)
    if problem:
        raise CronConfigError(f"{where}: schedule {show(raw['schedule'])}: {problem}")
    return CronEntry(
        name=name,
        url=url,
        schedule=schedule,
        expressions=expressions,
        timezone=_timezone(raw.get("timezone", UTC), where),
        body=_string(raw, "body", SCHEDULED_JOB_BODY, where),
        enabled=_boolean(raw, "enabled", where),
        priority=_priority(raw, where),
        line=line,
        source=source,
        warnings=tuple(w for w in (*warnings, url_warning) if w),
    )


def _ignored_keys(raw: dict[str, Any], where: str) -> list[str]:
    """A warning for keys EB ignores (``description``); CronConfigError for one that looks like a misspelt key of ours."""
    known = _REQUIRED + _OPTIONAL
    unknown = sorted(set(raw) - set(known), key=str)
    for key in unknown:
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=MISSPELLING_CUTOFF)
        if close:
            raise CronConfigError(
                f"{where}: unknown key {show(key)}; did you mean {close[0]!r}? EB would ignore {show(key)}, and so "
                f"would Worker Tier, so write {close[0]!r} (keys are {', '.join(known)}), or remove it"
            )
    if not unknown:
        return []
    shown = ", ".join(show(key) for key in unknown)
    return [f"ignored key(s) {shown}, as EB ignores them (Worker Tier reads {', '.join(known)})"]


def _name(value: Any, where: str) -> str:
    """The entry's name: a string, or a plain decimal number read as its digits (as EB names it)."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, Integer) and _PLAIN_DECIMAL.fullmatch(value.text):
        return value.text
    if isinstance(value, (bool, int, float)):
        text = _name_label(value)
        kind = "boolean" if isinstance(value, bool) else "integer" if isinstance(value, int) else "number"
        raise CronConfigError(
            f"{where}: name {text} is read by YAML as the {kind} {show(value)}, not as the text "
            f"written (EB's YAML reader turns it into a value too, and Worker Tier cannot be sure it is the same one); "
            f"quote it: name: \"{text}\""
        )
    raise CronConfigError(f"{where}: 'name' is required and must be a non-empty string")


def _name_label(value: Any) -> str:
    """A name for messages: a YAML integer as written (``0x1F``), anything else as its short repr."""
    return value.text if isinstance(value, Integer) else show(value)


def _url(url: str, where: str) -> tuple[str, str | None]:
    """The tick's path; a relative one gets the leading '/' that EB's HTTP client adds, with a warning."""
    if url.startswith("/") and not url.startswith("//"):
        return url, None
    if "://" in url or url.startswith("//"):
        raise CronConfigError(
            f"{where}: url must be a path starting with '/', got {show(url)}; EB posts every tick to its own "
            "instance, never to another host, so write the path alone, like '/backup'"
        )
    path = "/" + url
    return path, (
        f"url {show(url)} has no leading '/': EB posts it to {show(path)} (its HTTP client adds the '/'), and "
        f"so does Worker Tier, whose ticks carry {show(path)} in beanstalk.sqsd.path (EB's carry {show(url)}); "
        f"write url: {show(path)} to silence this warning"
    )


def _schedule(schedule: str, where: str) -> str:
    """The schedule; CronConfigError naming the 5-field line when it is in another dialect (``cron_dialects``)."""
    mistake = cron_dialects.problem(schedule)
    if mistake is not None:
        raise CronConfigError(f"{where}: schedule {show(schedule)} {mistake}")
    return schedule


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
        raise CronConfigError(f"{where}: timezone must be an IANA name like 'Europe/Berlin', got {show(value)}")
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise CronConfigError(f"{where}: unknown timezone {show(value)}; use an IANA name like 'Europe/Berlin'") from None
    return value


def _string(raw: dict[str, Any], key: str, default: str, where: str) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value:
        raise CronConfigError(f"{where}: {key} must be a non-empty string, got {show(value)}")
    return value


def _boolean(raw: dict[str, Any], key: str, where: str) -> bool:
    value = raw.get(key, True)
    if not isinstance(value, bool):
        raise CronConfigError(f"{where}: {key} must be true or false, got {show(value)}")
    return value


def _priority(raw: dict[str, Any], where: str) -> str:
    """The entry's priority level (Worker Tier's extension); CronConfigError naming the value and the levels."""
    value = raw.get("priority", DEFAULT_PRIORITY)
    if not isinstance(value, str) or value not in PRIORITY_LEVELS:
        raise CronConfigError(f"{where}: priority must be one of {', '.join(PRIORITY_LEVELS)}, got {show(value)}")
    return value


def check_priorities(entries: Iterable[CronEntry], *, priorities: bool) -> None:
    """CronConfigError for the first entry with a priority other than normal while the priorities setting is off."""
    for entry in entries:
        if entry.priority != DEFAULT_PRIORITY and not priorities:
            raise CronConfigError(
                f"{entry.where}: priority {entry.priority!r} needs the priorities setting (its queue exists only with "
                "it): set priorities true in the stack's worker_tier settings, or remove the entry's priority"
            )


def _is_number_name(raw: Any) -> bool:
    """Whether an entry's name was written as a number (EB keys its entries by the YAML value, 42 and '42' apart)."""
    return isinstance(raw, dict) and isinstance(raw.get("name"), Integer)


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


































