"""The dashboard's live outcomes in Chromium: `make run ARGS=--ui` serves it beside its worker, whose fates it shows."""

from __future__ import annotations

import pytest

from tests.support.dashboard import BANNER_DASHBOARD_URL, LocalRun, eventually, follow_nav
from tests.support.dashboard_tasks import INVOICE_PATH, settings_file
from worker_tier_cli.tail import OUTCOME_MARKS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


MARKS = {mark.strip() for mark in OUTCOME_MARKS.values()}


def _outcomes(lines: list[str], path: str) -> list[str]:
    """The outcome lines (``HH:MM:SS  mark path id ...``) of ``path`` among ``lines``, without their time."""
    return [line[10:] for line in lines if line[10:].split()[:1] and line[10:].split()[0] in MARKS
            and line[10:].split()[1:2] == [path]]


def _printed_outcomes(run: LocalRun, path: str) -> list[str]:
    return _outcomes(list(run.output.lines), path)


def _shown_outcomes(page, path: str) -> list[str]:
    return _outcomes(page.locator("#outcomes").inner_text().splitlines(), path)


def test_the_live_page_shows_each_outcome_as_make_run_prints_it_and_new_ones_as_they_come(tmp_path, page, screenshots):
    # GIVEN `make run ARGS=--ui`, until its examples have met their fates
    run = LocalRun("--ui", "--ui-port", "0", settings=settings_file(tmp_path))
    try:
        url = run.output.wait_for(BANNER_DASHBOARD_URL).group(1)
        run.output.wait_for(r"DLQ +/poison ")
        run.output.wait_for(r"ok +/flaky ")
        # WHEN its dashboard's live outcomes page is opened
        page.goto(url)
        follow_nav(page, "Live outcomes")
        # THEN it shows each fate as make run printed it: /flaky's two retries and success, /poison dead-lettered
        for path in ("/hello", "/flaky", "/poison"):
            assert _shown_outcomes(page, path) == _printed_outcomes(run, path), page.locator("#outcomes").inner_text()
        assert [line.split()[0] for line in _shown_outcomes(page, "/flaky")] == ["retry", "retry", "ok"]
        # AND a message sent while the page is open appears without a reload (its script polls)
        run.producer().send(INVOICE_PATH, {"order_id": 7, "items_cents": [1000, 250]})
        run.output.wait_for(r"ok +/invoice ")
        eventually(lambda: _shown_outcomes(page, INVOICE_PATH) == _printed_outcomes(run, INVOICE_PATH), seconds=10)
        screenshots.take(page, "outcomes", full_page=True)
    finally:
        run.stop()
