"""What a newcomer reads first: the make targets and how long each takes, installing, the changelog, upgrade notes."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MAKEFILE = REPO / "Makefile"
CHANGELOG = REPO / "CHANGELOG.md"
UPGRADING = REPO / "docs" / "upgrading.md"
_TABLE_ROW = re.compile(r"^\| (.+?) \| (.+?) \|$", re.MULTILINE)


def _commands_block() -> str:
    """The README's first shell block: the commands under "Two commands"."""
    return re.findall(r"^```sh\n(.*?)^```", README.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)[0]


def test_the_readme_gives_each_test_target_and_how_long_it_takes():
    # GIVEN the Makefile's test targets and the README's commands
    targets = re.findall(r"^(test[\w-]*):", MAKEFILE.read_text(encoding="utf-8"), re.MULTILINE)
    commands = {line.split("#")[0].split()[1]: line.split("#", 1)[1] for line in _commands_block().splitlines()}
    # WHEN each test target is looked up  THEN the README names it with its duration in minutes
    assert sorted(targets) == ["test", "test-fast"]
    assert all(re.search(r"\d+ min\b", commands[target]) for target in targets), commands


def test_make_test_fast_leaves_out_the_slow_marker_and_the_slow_directories():
    # GIVEN the Makefile's test-fast recipe
    recipe = re.search(r"^test-fast:.*\n\t(.*)$", MAKEFILE.read_text(encoding="utf-8"), re.MULTILINE)
    # THEN it runs the unit and functional tests without the slow ones, and names the slowest at the end
    assert recipe is not None
    assert '-m "not slow"' in recipe.group(1) and "tests/unit tests/functional" in recipe.group(1)
    assert "--durations=" in recipe.group(1)


def test_the_readme_duration_that_stops_after_the_delayed_example_outlasts_it():
    # GIVEN the README's `make run ARGS="--duration N"` that "stops after the delayed example"
    from worker_tier_local.messages import DELAYED_TASK_EXAMPLE

    text = " ".join(README.read_text(encoding="utf-8").split())
    [seconds] = re.findall(r'`make run ARGS="--duration (\d+)"` stops after the delayed example \(due at (\d+) s\)', text)
    # THEN N is longer than the delayed example's delay, and the README says that delay
    assert DELAYED_TASK_EXAMPLE.delay is not None
    assert int(seconds[1]) == DELAYED_TASK_EXAMPLE.delay < int(seconds[0])


def test_the_changelog_has_an_unreleased_section_in_keep_a_changelog_form():
    # GIVEN CHANGELOG.md
    text = CHANGELOG.read_text(encoding="utf-8")
    # THEN it says its format, starts with Unreleased, and groups changes under Keep a Changelog's headings
    assert "[Keep a Changelog](https://keepachangelog.com/en/1.1.0/)" in text
    assert re.findall(r"^## (.*)$", text, re.MULTILINE)[0] == "[Unreleased]"
    assert set(re.findall(r"^### (.*)$", text, re.MULTILINE)) <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def _paths(cell: str) -> list[str]:
    """The dotted paths in a table cell; ``.name`` is a sibling of the cell's first path."""
    found = re.findall(r"`([\w.<> ]+)`", cell)
    first = found[0] if found else ""
    return [f"{first.rsplit('.', 1)[0]}{path}" if path.startswith(".") else path for path in found]


def _resolves(path: str) -> bool:
    """Whether ``path`` is an importable module or an attribute of one."""
    try:
        importlib.import_module(path)
        return True
    except ImportError:
        module, _, name = path.rpartition(".")
        try:
            return hasattr(importlib.import_module(module), name)
        except ImportError:
            return False


def test_every_new_path_in_the_upgrade_notes_imports():
    # GIVEN the upgrade notes' table of module moves (was | is now)
    section = UPGRADING.read_text(encoding="utf-8").split("## Module moves", 1)[1].split("\n## ", 1)[0]
    rows = [(was, now) for was, now in _TABLE_ROW.findall(section) if was != "was" and not set(was) <= {"-", "|"}]
    assert len(rows) > 10
    # WHEN each new path is imported ("<same name>" standing for each old path's last name)
    missing = []
    for was, now in rows:
        names = [path.rsplit(".", 1)[-1] for path in _paths(was) if path.startswith("worker_tier")]
        for path in _paths(now):
            for expanded in [path.replace("<same name>", name) for name in names] if "<same name>" in path else [path]:
                if expanded.startswith("worker_tier") and not _resolves(expanded):
                    missing.append(expanded)
    # THEN every one is there
    assert missing == []
