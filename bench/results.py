"""Writing benchmark results: one JSON file per benchmark under bench/results/."""

from __future__ import annotations

import json
import platform
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def write(name: str, figures: dict[str, Any], goals: dict[str, tuple[str, float]], command: str) -> Path:
    """Write figures with their goals and whether each was met; return the file."""
    met = {key: _meets(figures[key], op, bound) for key, (op, bound) in goals.items()}
    document = {
        "benchmark": name,
        "command": command,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "machine": platform.machine(), "processor_count": _cpus()},
        "figures": figures,
        "goals": {key: f"{op} {bound}" for key, (op, bound) in goals.items()},
        "met": met,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


def median(values: list[float]) -> float:
    return statistics.median(values)


def _meets(value: Any, op: str, bound: float) -> bool:
    if isinstance(value, dict):  # a figure over several runs: its worst run must meet the goal
        value = value["worst"]
    return value <= bound if op == "<=" else value >= bound if op == ">=" else value == bound


def _cpus() -> int:
    import os

    return os.cpu_count() or 0
