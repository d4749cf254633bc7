"""The README is a front door that works, and the docs/ pages link only to what exists."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
# The limit: the README is the front door; design and reference go in docs/.
README_MAX_BYTES = 10_000
README_SECTIONS = (
    "Two commands",
    "Writing, testing and sending tasks",
    "What happens to a message",
    "cron.yaml",
    "Deploying",
    "Documentation",
)
_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`[^`]*`")


def prose_lines(page: Path) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def code_blocks(page: Path, language: str) -> list[str]:
    """The contents of the page's fenced blocks in ``language``."""
    pattern = re.compile(rf"^```{language}\n(.*?)^```", re.MULTILINE | re.DOTALL)
    return pattern.findall(page.read_text(encoding="utf-8"))


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces to hyphens."""
    seen: dict[str, int] = {}
    for line in prose_lines(page):
        match = re.match(r"^#{1,6}\s+(.*)$", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            seen[slug] = seen.get(slug, -1) + 1
            if seen[slug]:
                seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def relative_links(page: Path) -> list[str]:
    """Every link target on the page that is not a URL."""
    targets = []
    for line in prose_lines(page):
        for target in _LINK.findall(_CODE_SPAN.sub("", line)):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                targets.append(target)
    return targets


def test_readme_is_at_most_10_kb():
    # GIVEN the README
    # WHEN it is measured in bytes
    size = len(README.read_bytes())
    # THEN it fits the front door's limit
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; keep it <= {README_MAX_BYTES}, move detail to docs/"


def test_readme_sections_come_in_order():
    # GIVEN the README's second-level headings
    headings = [line[3:].strip() for line in prose_lines(README) if line.startswith("## ")]
    # THEN they are the front door's sections, in order
    assert headings == list(README_SECTIONS)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_resolves(page):
    # GIVEN the relative links of a page
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        # WHEN each is followed
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved}")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            broken.append(f"{target}: no heading with anchor #{anchor} in {resolved.name}")
    # THEN each names an existing file, and an existing heading where it names one
    assert broken == []


def test_link_checker_sees_a_broken_link(tmp_path):
    # GIVEN a page linking a missing file and a missing heading, and a link inside code
    page = tmp_path / "page.md"
    page.write_text("# Title\n[a](missing.md) [b](#nowhere) [c](#title) `[d](code.md)`\n```\n[e](fenced.md)\n```\n")
    # WHEN its links and anchors are read
    # THEN the code is skipped and the anchor is known
    assert relative_links(page) == ["missing.md", "#nowhere", "#title"]
    assert anchors(page) == {"title"}


def test_readme_task_test_passes(tmp_path):
    # GIVEN the README's example test of a task, as a test file of its own
    [example] = [block for block in code_blocks(README, "python") if "def test_" in block]
    # WHEN pytest runs it, from a clean process, with this repository's tasks importable
    run = run_as_test_file(example, tmp_path)
    # THEN every test in it passes
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout


def test_every_entry_point_in_design_imports():
    # GIVEN the Lambda entry points docs/design.md names
    names = set(re.findall(r"`(worker_tier\.handlers\.\w+)\.lambda_handler`", (DOCS / "design.md").read_text(encoding="utf-8")))
    assert {"worker_tier.handlers.worker", "worker_tier.handlers.scheduler", "worker_tier.handlers.cron"} <= names
    # WHEN each is imported
    handlers = {name: importlib.import_module(name).lambda_handler for name in sorted(names)}
    # THEN each is a handler, and each old name is the new one
    assert all(callable(handler) for handler in handlers.values())
    assert handlers["worker_tier.handlers.scheduler"] is handlers["worker_tier.handlers.dispatcher"]
    assert handlers["worker_tier.handlers.cron"] is handlers["worker_tier.handlers.periodic"]


def test_design_states_the_python_versions_the_code_uses():
    # GIVEN the versions in pyproject.toml, the Lambda runtime, the Dockerfile and the settings' base image
    from worker_tier.core.settings import DEFAULT_CONTAINER_BASE_IMAGE
    from worker_tier_cdk.code import DOCKER_DIR, DOCKERFILE
    from worker_tier_cdk.runtime import PYTHON_VERSION

    requires = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    dockerfile = (DOCKER_DIR / DOCKERFILE).read_text(encoding="utf-8")
    design = (DOCS / "design.md").read_text(encoding="utf-8")
    # THEN the image runs what the Lambda runs, and design.md says so and says what the runtime supports
    assert f"python:{PYTHON_VERSION}-slim" in DEFAULT_CONTAINER_BASE_IMAGE
    assert f"ARG BASE_IMAGE={DEFAULT_CONTAINER_BASE_IMAGE}\n" in dockerfile
    assert f"The runtime supports Python {requires.removeprefix('>=')} and later" in design
    assert f"The Lambda functions run Python {PYTHON_VERSION}" in design
    assert f"The container image runs Python {PYTHON_VERSION} too" in design


def test_the_middleware_pages_example_passes(tmp_path):
    # GIVEN docs/middleware.md's example, as a test file of its own
    [example] = [block for block in code_blocks(DOCS / "middleware.md", "python") if "def test_" in block]
    # WHEN pytest runs it, from a clean process
    run = run_as_test_file(example, tmp_path)
    # THEN it passes
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def run_as_test_file(example: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """pytest over ``example`` saved as a test file, in a clean process with this repository importable."""
    (tmp_path / "test_example.py").write_text(example, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    path = os.pathsep.join([str(REPO), str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=120, check=False,
    )
