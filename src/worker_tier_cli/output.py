"""Printing: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

TABLE_GAP = "  "
MAX_CELL_CHARS = 60  # a longer cell (a sample reason) is cut with "..."; --json has it whole


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows under upper-case headers, each column as wide as its widest cell."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = [TABLE_GAP.join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += [TABLE_GAP.join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def _cell(value: Any) -> str:
    text = "-" if value is None else " ".join(str(value).split())
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 3] + "..."


def emit_json(value: Any) -> None:
    """One JSON document on stdout."""
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))
