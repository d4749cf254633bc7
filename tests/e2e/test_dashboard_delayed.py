"""The dashboard's delayed messages and periodic tasks in Chromium, against `make run`: cancel a reminder."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.dashboard import follow_nav
from worker_tier.core import contract
from worker_tier.delays import cancellation, dedupe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

REMINDER_KEY = "remind-ada"


def test_a_cancellable_reminder_cancelled_from_the_delayed_page_is_never_delivered(dashboard_world, page, screenshots):
    # GIVEN a cancellable reminder due in 30 minutes (past the 840 s cancel window), beside make run's delayed example
    run, ui = dashboard_world.run, dashboard_world.dashboard
    producer = run.producer()
    message_id = producer.send("/hello", {"name": "Ada"}, delay=timedelta(minutes=30), dedupe_key=REMINDER_KEY,
                               cancellable=True)
    delay_table = run.resource(contract.DELAY_TABLE_VARIABLE)
    assert message_id in str(run.client("dynamodb").scan(TableName=delay_table)["Items"])
    # WHEN the on-call person finds it on the delayed page, by its dedupe key
    page.goto(ui.url)
    follow_nav(page, "Delayed")
    row = page.locator(f"tr.delayed[data-dedupe-key='{REMINDER_KEY}']")
    assert row.get_attribute("data-message-id") == message_id
    assert "/hello" in row.inner_text()
    screenshots.take(page, "delayed", full_page=True)
    # AND cancels it, confirming the step that names it
    row.get_by_role("link", name="Cancel…").click()
    what = page.locator("#what").inner_text()
    assert f"dedupe key {REMINDER_KEY}, path /hello" in what and message_id in what, what
    screenshots.take(page, "cancel-confirm")
    page.locator("#confirm").click()
    # THEN the page says it is cancelled
    assert page.locator("#outcome").get_attribute("data-status") == cancellation.DONE, page.content()
    # AND the delay table no longer holds it, so no dispatcher run can send it; its key's marker says cancelled
    dynamodb = run.client("dynamodb")
    marker = dynamodb.get_item(TableName=delay_table, Key=dedupe.marker_key(REMINDER_KEY), ConsistentRead=True)["Item"]
    assert marker[cancellation.CANCELLED_ATTRIBUTE] == {"BOOL": True}
    items = dynamodb.scan(TableName=delay_table, ConsistentRead=True)["Items"]
    assert [item for item in items if message_id in str(item) and item != marker] == []
    # AND a second cancel finds nothing to cancel (it would say "dispatch started" had it been dispatched)
    assert producer.cancel_outcome(REMINDER_KEY).status == cancellation.NOT_FOUND
    # AND the delayed page no longer lists it (asked for the 31 minutes it was due within)
    page.goto(ui.at("/delayed?within=31"))
    assert page.locator("h1").inner_text() == "Delayed messages"
    assert page.locator(f"tr.delayed[data-dedupe-key='{REMINDER_KEY}']").count() == 0


def test_the_periodic_page_shows_cron_yamls_tasks_with_their_next_ticks(dashboard_world, page, screenshots):
    # GIVEN `make run` with this repository's cron.yaml (an every-minute report, a nightly cleanup in Berlin time)
    ui = dashboard_world.dashboard
    # WHEN the periodic tasks page is opened
    page.goto(ui.url)
    follow_nav(page, "Periodic tasks")
    # THEN each entry shows its path, schedule, time zone and its next ticks
    report = page.locator("tr.periodic[data-name='minutely-report']")
    assert "/report" in report.inner_text() and "* * * * *" in report.inner_text()
    assert report.locator("ul.ticks li").count() >= 2
    cleanup = page.locator("tr.periodic[data-name='nightly-cleanup']")
    assert "Europe/Berlin" in cleanup.inner_text() and "/cleanup" in cleanup.inner_text()
    screenshots.take(page, "periodic", full_page=True)
