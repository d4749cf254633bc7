"""``make docs``: write docs/settings.md from ``Settings``, or with ``--check`` fail when it is stale.

Every fact on the page comes from ``worker_tier.core.settings``: a heading and the
docstring of each section of ``Settings``, then the default and the description of each field, its range (or allowed values), its EB option name, and
the environment variable ``Settings.to_environment()`` sets. From a checkout it
writes the checkout's docs/settings.md, wherever it is run from::

    python -m worker_tier_cdk.settings_doc            # rewrite docs/settings.md
    python -m worker_tier_cdk.settings_doc --check    # exit 1 when docs/settings.md is stale
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from worker_tier.core import settings as settings_module
from worker_tier.core.settings import SECTIONS, Settings, eb_option

# From a checkout (src/worker_tier_cdk/ under a directory with pyproject.toml and docs/), the checkout's page
# wherever it is run from; from an installed package, docs/settings.md under the current directory.
_CHECKOUT = Path(__file__).resolve().parents[2]
DEFAULT_OUTPUT = (
    _CHECKOUT / "docs" / "settings.md"
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "docs").is_dir()
    else Path("docs") / "settings.md"
)
GENERATOR = "python -m worker_tier_cdk.settings_doc"
EXIT_STALE = 1

_HEADER = f"""# Settings

<!-- Generated from worker_tier/core/settings.py by `make docs` ({GENERATOR}); do not edit by hand. -->

Worker Tier's settings are one frozen dataclass, `worker_tier.core.settings.Settings`, made of three sections
below: runtime, deployment and app (`RuntimeSettings`, `DeploymentSettings`, `AppSettings`). A section
only groups them: every setting is `settings.<name>` and one key of one flat object. In this repository
they live in `cdk.json` under `context.worker_tier`; in your own CDK app pass
`settings=Settings(...)` to `WorkerTierStack` or a construct's props. They are validated at synth: an
error names the setting, the value and the allowed range (and the EB option, where there is one).
The stack passes every setting to the functions and the container as the environment variable below
(`Settings.to_environment()`), and the runtime reads them back with `Settings.from_environment()`.

The EB option column names the Elastic Beanstalk worker option a setting replaces; its default is EB's.
The resource variables the stack sets beside these (queue URLs, table names) are in
[design.md](design.md#environment-variables).
"""

_TABLE_HEAD = """| setting | default | allowed | EB option | environment variable | what it does |
|---|---|---|---|---|---|
"""


def render() -> str:
    """The whole of docs/settings.md, from ``Settings``: one heading and table per section."""
    variables = list(Settings().to_environment())
    fields = dataclasses.fields(Settings)
    if len(variables) != len(fields):
        raise RuntimeError(f"Settings.to_environment() gave {len(variables)} variables for {len(fields)} settings")
    variable_of = {field.name: variable for field, variable in zip(fields, variables, strict=True)}
    sectioned = [field.name for section in SECTIONS for field in dataclasses.fields(section)]
    if sorted(sectioned) != sorted(variable_of):
        stray = sorted(set(variable_of) - set(sectioned)) or sorted(set(sectioned) - set(variable_of))
        raise RuntimeError(f"settings {stray} are not in exactly one of {[s.__name__ for s in SECTIONS]}: declare each "
                           "field in one section of settings.py, not in Settings itself")
    return _HEADER + "".join(_section(section, variable_of) for section in SECTIONS)


def _section(section: type[Any], variable_of: dict[str, str]) -> str:
    """A section's heading, its docstring's description and its table."""
    rows = [_row(field, variable_of[field.name]) for field in dataclasses.fields(section)]
    return f"\n## {_title(section)}\n\n{_description(section)}\n\n" + _TABLE_HEAD + "\n".join(rows) + "\n"


def _title(section: type[Any]) -> str:
    """``RuntimeSettings`` -> ``Runtime settings (`RuntimeSettings`)``."""
    words = re.findall(r"[A-Z][a-z]*", section.__name__)
    return " ".join([words[0], *(word.lower() for word in words[1:])]) + f" (`{section.__name__}`)"


def _description(section: type[Any]) -> str:
    """The section's docstring, its reST literals as Markdown ones; raises when it has none."""
    if not section.__doc__:
        raise RuntimeError(f"settings section {section.__name__} has no docstring: say what it governs and who reads it")
    return inspect.cleandoc(section.__doc__).replace("``", "`")


def _row(field: dataclasses.Field[Any], variable: str) -> str:
    """One table row; raises when a field has no description."""
    doc = field.metadata.get("doc")
    if not doc:
        raise RuntimeError(f"setting {field.name!r} has no description: give it one with _setting(..., doc) in settings.py")
    cells = [f"`{field.name}`", f"`{json.dumps(field.default)}`", _allowed(field), eb_option(field.name), f"`{variable}`", doc]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _allowed(field: dataclasses.Field[Any]) -> str:
    """The range from the settings' rules, or the field's own description of what it takes."""
    rule = settings_module._RANGES.get(field.name)
    if rule is not None:
        return f"{rule.low}..{rule.high}"
    if field.type in (bool, "bool"):
        return "`true` or `false`"
    return str(field.metadata.get("allowed", ""))


def main(argv: Sequence[str] | None = None) -> int:
    """Write the page, or with ``--check`` report whether it is current; returns the exit code."""
    parser = argparse.ArgumentParser(prog=GENERATOR, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1, changing nothing, when the page is stale")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"the page (default {DEFAULT_OUTPUT})")
    args = parser.parse_args(argv)
    page = render()
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current == page:
            return 0
        print(f"{args.output} is stale: run `make docs` and commit it", file=sys.stderr)
        return EXIT_STALE
    if current != page:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(page, encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
