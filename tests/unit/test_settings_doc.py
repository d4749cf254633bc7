"""docs/settings.md is generated from Settings, and stale when they differ."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from worker_tier.core.settings import SECTIONS, Settings
from worker_tier_cdk import settings_doc

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "settings.md"


def test_committed_page_is_current():
    # GIVEN the committed docs/settings.md
    # WHEN the generator checks it against Settings
    code = settings_doc.main(["--check", "--output", str(PAGE)])
    # THEN it is current (else: run `make docs` and commit the page)
    assert code == 0, "docs/settings.md is stale: run `make docs`"


def test_check_fails_on_a_stale_page_and_leaves_it_alone(tmp_path, capsys):
    # GIVEN a page that lacks the last setting's row
    stale = "".join(settings_doc.render().splitlines(keepends=True)[:-1])
    page = tmp_path / "settings.md"
    page.write_text(stale, encoding="utf-8")
    # WHEN it is checked
    code = settings_doc.main(["--check", "--output", str(page)])
    # THEN the check fails, names the page, and changes nothing
    assert code == settings_doc.EXIT_STALE
    assert f"{page} is stale: run `make docs`" in capsys.readouterr().err
    assert page.read_text(encoding="utf-8") == stale


def test_check_fails_when_the_page_is_missing(tmp_path):
    # GIVEN no page at all
    # WHEN it is checked
    code = settings_doc.main(["--check", "--output", str(tmp_path / "settings.md")])
    # THEN the check fails
    assert code == settings_doc.EXIT_STALE


def test_writing_makes_the_page_current(tmp_path):
    # GIVEN no page
    page = tmp_path / "docs" / "settings.md"
    # WHEN the generator writes it
    settings_doc.main(["--output", str(page)])
    # THEN the check passes
    assert settings_doc.main(["--check", "--output", str(page)]) == 0


def test_every_setting_has_a_row_with_its_default_variable_and_description():
    # GIVEN the rendered page
    rows = {line.split(" | ")[0].strip("| `"): line for line in settings_doc.render().splitlines() if line.startswith("| `")}
    # WHEN each field of Settings is looked up
    # THEN each has a row with its environment variable and its own description
    for field in dataclasses.fields(Settings):
        assert f"`WORKER_TIER_{field.name.upper()}`" in rows[field.name]
        assert field.metadata["doc"] in rows[field.name]
    assert set(rows) == {field.name for field in dataclasses.fields(Settings)}


def test_ranges_and_eb_options_come_from_the_rules():
    # GIVEN the rendered page
    page = settings_doc.render()
    # THEN a ranged setting shows its range and EB option, and a string one its EB option and allowed values
    assert "| `max_retries` | `10` | 1..100 | MaxRetries | `WORKER_TIER_MAX_RETRIES` |" in page
    assert "| `http_path` | `\"/\"` | a path starting with `/` | HttpPath | `WORKER_TIER_HTTP_PATH` |" in page
    assert "| `fifo` | `false` | `true` or `false` |  | `WORKER_TIER_FIFO` |" in page


def test_each_section_has_a_heading_its_description_and_the_rows_of_its_own_settings():
    # GIVEN the rendered page, cut at its section headings
    _, *parts = settings_doc.render().split("\n## ")
    # WHEN each part is matched with its section
    # THEN the headings follow SECTIONS, each part opens with its docstring's first line and lists only its own settings
    assert [part.splitlines()[0] for part in parts] == [
        "Runtime settings (`RuntimeSettings`)", "Deployment settings (`DeploymentSettings`)", "App settings (`AppSettings`)"
    ]
    for section, part in zip(SECTIONS, parts, strict=True):
        first_line = section.__doc__.strip().splitlines()[0].replace("``", "`")
        assert part.splitlines()[2] == first_line
        rows = [line.split(" | ")[0].strip("| `") for line in part.splitlines() if line.startswith("| `")]
        assert rows == [field.name for field in dataclasses.fields(section)]
