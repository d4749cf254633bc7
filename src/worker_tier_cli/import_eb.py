"""``worker-tier import-eb PATH``: an Elastic Beanstalk worker environment's options as Worker Tier settings.

PATH is an app directory (its ``.ebextensions/*.config``, YAML or JSON, and the one saved
configuration under ``.elasticbeanstalk/saved_configs/``) or one such file. Every option of
``aws:elasticbeanstalk:sqsd`` with a setting (``Settings``' ``eb_option``, its one home) is
written to the ``worker_tier`` context of a cdk.json, validated by ``Settings`` first; every
other option is reported with the reason it has no setting. A ``cron.yaml`` in PATH is run
through ``cron_config`` to say whether it deploys.

EB applies configuration files in file-name order, later ones winning, and a saved
configuration over them all: https://docs.aws.amazon.com/elasticbeanstalk/latest/dg/command-options.html#configuration-options-precedence
Needs the cdk extra (PyYAML and the cron.yaml reader); the command line imports it only for this command.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import yaml

from worker_tier.core.errors import CronConfigError, SettingsError, WorkerTierError
from worker_tier.core.settings import Settings, eb_option
from worker_tier.periodic import cron_config
from worker_tier_cdk.settings import CONTEXT_KEY

SQSD_NAMESPACE = "aws:elasticbeanstalk:sqsd"
# A list-form option_settings item without a namespace is an environment property (EB's rule).
DEFAULT_LIST_NAMESPACE = "aws:elasticbeanstalk:application:environment"
EBEXTENSIONS_GLOB = ".ebextensions/*.config"
SAVED_CONFIGS_GLOB = ".elasticbeanstalk/saved_configs/*.cfg.yml"
# EB reads a saved configuration's options under OptionSettings, a configuration file's under option_settings.
SAVED_CONFIG_SUFFIX = SAVED_CONFIGS_GLOB.rsplit("*", 1)[1]
SAVED_CONFIG_KEY = "OptionSettings"
CONFIG_FILE_KEY = "option_settings"
CRON_FILE = "cron.yaml"
# EB's worker options without a setting, and why:
# https://docs.aws.amazon.com/elasticbeanstalk/latest/dg/command-options-general.html#command-options-general-elasticbeanstalksqsd
UNMAPPED_SQSD_REASONS = {
    "WorkerQueueURL": (
        "WorkerTierStack creates its own queue and dead-letter queue. To keep this queue, build the WorkerQueue "
        "construct in your CDK app with WorkerQueueProps(queue=sqs.Queue.from_queue_arn(...), dead_letter_queue=...) "
        "(an existing queue needs its existing dead-letter queue)"
    ),
}
NAMESPACE_REASONS = {
    "aws:autoscaling:asg": (
        "EC2 instances: the Lambda worker scales itself up to http_connections invocations at once; the container "
        "worker's counterparts are container_min_tasks and container_max_tasks, set them by hand if you use it"
    ),
    "aws:autoscaling:launchconfiguration": "EC2 instances: the worker is a Lambda function (memory_size) or a Fargate task (container_cpu, container_memory_mb)",
    "aws:ec2:instances": "EC2 instances: the worker is a Lambda function (memory_size) or a Fargate task (container_cpu, container_memory_mb)",
    "aws:elasticbeanstalk:application:environment": "an environment property of the app: Worker Tier settings do not carry app variables; set them on the functions in your CDK app",
    "aws:elasticbeanstalk:container:python": "the Python platform's WSGI server: to run the app in-process, set the app setting to 'module:attribute' (docs/migrating-from-eb.md)",
}
OTHER_NAMESPACE_REASON = "an EB environment option with no Worker Tier counterpart"


class EbImportError(WorkerTierError):
    """A source cannot be read, or its values are not valid settings; the message names the file."""


@dataclass(frozen=True)
class Option:
    """One option as a source sets it."""

    namespace: str
    name: str
    value: Any
    source: str

    def __str__(self) -> str:
        return f"{self.namespace} {self.name} = {self.value!r} ({self.source})"


@dataclass
class Plan:
    """What an import writes, what it cannot map, and what it found about cron.yaml."""

    mapped: dict[str, Option] = field(default_factory=dict)  # setting name -> the option it comes from
    unmapped: list[tuple[Option, str]] = field(default_factory=list)
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def eb_option_settings() -> dict[str, dataclasses.Field[Any]]:
    """EB sqsd option name -> the Settings field that carries it (``eb_option`` in settings.py)."""
    return {option: f for f in dataclasses.fields(Settings) if (option := eb_option(f.name))}


def sources(path: Path) -> list[Path]:
    """The files to read under PATH, in EB's order: configuration files by name, then the saved configuration."""
    if path.is_file():
        return [path]
    saved = sorted(path.glob(SAVED_CONFIGS_GLOB))
    if len(saved) > 1:
        names = ", ".join(str(p.relative_to(path)) for p in saved)
        raise EbImportError(f"{path} has {len(saved)} saved configurations ({names}); pass the one your environment uses")
    found = sorted(path.glob(EBEXTENSIONS_GLOB)) + saved
    if not found:
        raise EbImportError(f"{path} has no {EBEXTENSIONS_GLOB} and no {SAVED_CONFIGS_GLOB}; pass an app directory or one of those files")
    return found


def read_options(files: list[Path], base: Path) -> tuple[list[Option], list[str]]:
    """Every option the files set, in order (a later one wins), and notes on sections that are not options."""
    options: list[Option] = []
    notes: list[str] = []
    for path in files:
        label = str(path.relative_to(base)) if path.is_relative_to(base) and path != base else path.name
        document = _load(path, label)
        key = SAVED_CONFIG_KEY if path.name.endswith(SAVED_CONFIG_SUFFIX) else CONFIG_FILE_KEY
        settings, note = _option_settings(document, label, key)
        options += [Option(ns, name, value, label) for ns, name, value in settings]
        notes += [note] if note else []
    return options, notes


def _load(path: Path, label: str) -> Any:
    """A configuration file as data: JSON when it starts with '{' and parses as JSON, else YAML (EB takes both;
    a YAML flow mapping starts with '{' too)."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise EbImportError(f"{label} line {line}: byte 0x{data[error.start]:02X} is not UTF-8; save the file as UTF-8") from None
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            try:
                return yaml.safe_load(text)
            except yaml.YAMLError:
                raise EbImportError(f"{label} line {error.lineno}: not valid JSON (nor YAML): {error.msg}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise EbImportError(f"{label}{where}: not valid YAML: {getattr(error, 'problem', None) or error}") from None


def _option_settings(document: Any, label: str, key: str) -> tuple[list[tuple[str, str, Any]], str | None]:
    """(namespace, option, value) under ``key``: a configuration file's option_settings or a saved configuration's OptionSettings."""
    if document is None:
        return [], None
    if not isinstance(document, dict):
        raise EbImportError(f"{label}: must be a mapping with {key}, got {type(document).__name__}")
    others = sorted(str(k) for k in document if k != key)
    note = f"{label}: {', '.join(others)} not imported (not options)" if others else None
    settings = document.get(key) or {}
    if isinstance(settings, dict):
        return _mapping_form(settings, label), note
    if isinstance(settings, list):
        return [_list_item(item, label) for item in settings], note
    raise EbImportError(f"{label}: {key} must be a mapping of namespaces or a list of options, got {type(settings).__name__}")


def _mapping_form(settings: dict[Any, Any], label: str) -> list[tuple[str, str, Any]]:
    """``namespace: {Option: value}``."""
    found = []
    for namespace, options in settings.items():
        if not isinstance(options, dict):
            raise EbImportError(f"{label}: namespace {namespace!r} must map option names to values, got {options!r}")
        found += [(str(namespace), str(name), value) for name, value in options.items()]
    return found


def _list_item(item: Any, label: str) -> tuple[str, str, Any]:
    """``- {namespace: ..., option_name: ..., value: ...}``; no namespace is an environment property."""
    if not isinstance(item, dict) or "option_name" not in item:
        raise EbImportError(f"{label}: each option_settings item needs option_name and value, got {item!r}")
    return str(item.get("namespace", DEFAULT_LIST_NAMESPACE)), str(item["option_name"]), item.get("value")


def plan(options: list[Option], existing: dict[str, Any], notes: list[str]) -> Plan:
    """Map the options onto the existing ``worker_tier`` context and validate the result with Settings."""
    homes = eb_option_settings()
    result = Plan(before=dict(existing), notes=list(notes))
    for option in options:
        home = homes.get(option.name) if option.namespace == SQSD_NAMESPACE else None
        if home is None:
            result.unmapped.append((option, _reason(option, homes)))
        elif not isinstance(option.value, (str, int, float)) or isinstance(option.value, bool):
            result.unmapped.append((option, f"its value {option.value!r} is not a literal (a CloudFormation function?)"))
            result.mapped.pop(home.name, None)  # EB uses this value, not an earlier file's: leave the setting out
        else:
            result.mapped[home.name] = option
    values = {name: _converted(option, homes[option.name]) for name, option in result.mapped.items()}
    result.after = {**existing, **values}
    result.notes += _concurrency_note(options, values)
    try:
        Settings.from_mapping(result.after)
    except SettingsError as error:
        involved = [str(o) for n, o in result.mapped.items() if n in str(error)]
        raise EbImportError(f"{error}" + (f"; from {', '.join(involved)}" if involved else "")) from None
    return result


def _concurrency_note(options: list[Option], values: dict[str, Any]) -> list[str]:
    """EB's HttpConnections is per instance; http_connections is the whole worker's concurrency."""
    sizes = [o for o in options if (o.namespace, o.name) == ("aws:autoscaling:asg", "MaxSize")]
    if "http_connections" not in values or not sizes or not str(sizes[-1].value).isdigit():
        return []
    most = int(str(sizes[-1].value)) * values["http_connections"]
    return [
        f"note: EB's HttpConnections is per instance, so up to {sizes[-1].value} x {values['http_connections']} = {most} "
        f"messages ran at once there; http_connections is the whole worker's concurrency: raise it to {most} to keep that"
    ]


def _reason(option: Option, homes: dict[str, dataclasses.Field[Any]]) -> str:
    if option.namespace != SQSD_NAMESPACE:
        return NAMESPACE_REASONS.get(option.namespace, OTHER_NAMESPACE_REASON)
    if option.name in UNMAPPED_SQSD_REASONS:
        return UNMAPPED_SQSD_REASONS[option.name]
    known = ", ".join(sorted([*homes, *UNMAPPED_SQSD_REASONS]))
    return f"not an option of {SQSD_NAMESPACE} (EB's are {known})"


def _converted(option: Option, home: dataclasses.Field[Any]) -> Any:
    """EB writes numbers as text too ('300'); an int setting takes a whole number, a str setting text."""
    if home.type not in (int, "int"):
        return str(option.value)
    text = str(option.value).strip()
    if isinstance(option.value, float) or not text.lstrip("-").isdigit():
        raise EbImportError(f"{home.name} must be a whole number (EB {option.name}), got {option.value!r} from {option.source}")
    return int(text)


def summary(result: Plan, cdk_json: Path) -> list[str]:
    """A diff-like account: '+' added, '~' changed, '=' already so; then what was not mapped and why."""
    lines = [f"{cdk_json} context.{CONTEXT_KEY}:"]
    for name, option in result.mapped.items():
        new, where = result.after[name], f"{option.namespace} {option.name} in {option.source}"
        if name not in result.before:
            lines.append(f"  + {name}: {json.dumps(new)}  ({where})")
        elif result.before[name] != new:
            lines.append(f"  ~ {name}: {json.dumps(result.before[name])} -> {json.dumps(new)}  ({where})")
        else:
            lines.append(f"  = {name}: {json.dumps(new)}  ({where}, unchanged)")
    if not result.mapped:
        lines.append(f"  (no {SQSD_NAMESPACE} option with a setting: nothing to change)")
    if result.unmapped:
        lines.append(f"not mapped ({len(result.unmapped)}):")
        lines += [f"  - {option}: {reason}" for option, reason in result.unmapped]
    return lines + result.notes


def cron_report(directory: Path, fifo: bool) -> tuple[list[str], bool]:
    """Whether the cron.yaml in ``directory`` deploys (and what to pass), and whether it failed."""
    path = directory / CRON_FILE
    if not directory.is_dir() or not path.is_file():
        return [], False
    try:
        entries = cron_config.load(path, fifo=fifo)
    except CronConfigError as error:
        return [f"{path}: does not deploy: {error}"], True
    lines = [f"{path}: deploys {len(entries)} periodic task(s); pass WorkerTierStack(..., cron_file={str(path)!r})"]
    lines += [f"  warning: {entry.where}: {warning}" for entry in entries for warning in entry.warnings]
    return lines, False


def read_cdk_json(path: Path) -> dict[str, Any]:
    """The cdk.json document (empty when absent); EbImportError unless its context.worker_tier is an object."""
    if not path.exists():
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise EbImportError(f"{path} could not be read as JSON: {error}") from None
    context = document.get("context", {}) if isinstance(document, dict) else None
    if not isinstance(context, dict) or not isinstance(context.get(CONTEXT_KEY, {}), dict):
        raise EbImportError(f"{path} must be a JSON object whose context.{CONTEXT_KEY} is an object")
    return dict(document)


def merged_document(document: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The cdk.json document with context.worker_tier replaced, every other key kept in place."""
    context = {**document.get("context", {}), CONTEXT_KEY: settings}
    return {**document, "context": context}


def context_settings(document: dict[str, Any]) -> dict[str, Any]:
    """The current ``worker_tier`` context of a cdk.json document."""
    return dict(document.get("context", {}).get(CONTEXT_KEY) or {})


def run(path: Path, cdk_json: Path, dry_run: bool) -> int:
    """Import PATH into cdk.json (or, with ``dry_run``, print the cdk.json it would write); the exit code.

    The account of the change goes to stdout, or to stderr with ``dry_run`` so that stdout is the JSON alone.
    Exit 1 when a cron.yaml in PATH would not deploy (the settings are written all the same).
    """
    base = path if path.is_dir() else path.parent
    options, notes = read_options(sources(path), base)
    document = read_cdk_json(cdk_json)
    result = plan(options, context_settings(document), notes)
    cron_lines, cron_failed = cron_report(path, fifo=bool(result.after.get("fifo", False)))
    updated = merged_document(document, result.after)
    text = json.dumps(updated, indent=2) + "\n"
    changed = result.after != result.before or not cdk_json.exists()
    if dry_run:
        click.echo(text, nl=False)
    elif changed:
        cdk_json.write_text(text, encoding="utf-8")
    action = "would write" if dry_run else "wrote" if changed else "left unchanged"
    report = [f"{action} {cdk_json}", *summary(result, cdk_json), *cron_lines]
    for line in report:
        click.echo(line, err=dry_run)
    return 1 if cron_failed else 0
