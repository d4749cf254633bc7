"""Printing: tables for people (rich), JSON for scripts, and progress bars on a terminal only."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Callable

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

MAX_CELL_CHARS = 60  # a longer cell (a sample reason) is cut with "..."; --json has it whole
# Wide enough that no table wraps when piped (a terminal uses its own width).
PIPED_TABLE_WIDTH_CHARS = 400

# advance(done so far, total once known, description=None): moves the bar (and renames it, given a description).
Advance = Callable[..., None]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], terminal: bool = False) -> str:
    """Rows under upper-case headers, columns two spaces apart; bold headers on a terminal."""
    shown = Table(box=None, pad_edge=False, show_edge=False, header_style="bold" if terminal else "")
    for header in headers:
        shown.add_column(header.upper(), no_wrap=True, overflow="ellipsis")
    for row in rows:
        shown.add_row(*(Text(_cell(value)) for value in row))
    console = Console(width=None if terminal else PIPED_TABLE_WIDTH_CHARS, force_terminal=terminal,
                      color_system="auto" if terminal else None)
    with console.capture() as captured:
        console.print(shown)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


# C0 and C1 control characters and DEL (ESC starts a terminal's escape sequences, BEL ends some): shown escaped.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with its control characters (but newline and tab) shown as ``\\x1b``-style escapes: a message's
    body, reason or error text is anyone's input, and must not drive the operator's terminal."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def _cell(value: Any) -> str:
    text = "-" if value is None else printable(" ".join(str(value).split()))
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 3] + "..."


def emit_json(value: Any) -> None:
    """One JSON document on stdout."""
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


@contextmanager
def progress_bar(shown: bool, description: str, total: int | None = None) -> Iterator[Advance]:
    """A rich progress bar on stderr when ``shown`` (a terminal, no --json); else a no-op ``advance``.

    ``advance(done, total, description)`` sets the count done so far (and the total, once known).
    """
    if not shown:
        yield lambda done, total=None, description=None: None
        return
    console = Console(file=sys.stderr, force_terminal=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(description, total=total)

        def advance(done: int, new_total: int | None = None, description: str | None = None) -> None:
            bar.update(task, completed=done, total=new_total if new_total is not None else bar.tasks[0].total,
                       description=description)

        yield advance
