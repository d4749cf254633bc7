"""The dashboard's dead letters in Chromium, against `make run`: why messages died, and sending one path's back."""

from __future__ import annotations

import json

import pytest

from tests.support.dashboard import eventually, follow_nav
from tests.support.dashboard_tasks import CHARGE_PATH, customer_file
from worker_tier.core import contract

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

POISON_REASON = "order 42 references a deleted customer"  # tasks/examples.py's /poison, which `make run` sends


def test_a_poison_message_appears_in_the_dlq_page_with_its_reason(dashboard_world, page, screenshots):
    # GIVEN `make run` with its examples, until /poison (a NonRetryableError) is dead-lettered
    run, ui = dashboard_world.run, dashboard_world.dashboard
    run.output.wait_for(r"DLQ +/poison ")
    # WHEN the on-call person opens the URL `worker-tier ui` printed, then its dead letters
    page.goto(ui.url)
    assert page.locator("#dlq-summary").inner_text().startswith("DLQ: 1 dead letter"), page.content()
    screenshots.take(page, "overview", full_page=True)
    follow_nav(page, "Dead letters")
    # THEN the /poison group shows the error type, the reason and the body
    group = page.locator("section.group[data-path='/poison']")
    assert "NonRetryableError" in group.locator("h2").inner_text()
    letter = group.locator("tr.letter")
    assert letter.count() == 1
    assert letter.locator(".reason").inner_text().startswith(POISON_REASON)
    assert json.loads(letter.locator("pre.body").inner_text()) == {"order_id": 42}
    # AND its own redrive step names that one message before anything moves
    message_id = letter.get_attribute("data-message-id")
    letter.get_by_role("link", name="Redrive…").click()
    assert page.locator(".sample").inner_text() == f"{message_id} /poison · NonRetryableError"
    screenshots.take(page, "dlq-message")
    # AND reading did not consume it: it is still in the DLQ
    assert run.depth(contract.DLQ_URL_VARIABLE) == 1


CHARGES = 12  # more than one ReceiveMessage's 10: the page reads the DLQ in several batches


def test_redrive_of_one_group_from_the_page_sends_only_its_messages_back_to_the_work_queue(
        dashboard_world, page, screenshots):
    # GIVEN 12 /charge messages dead-lettered (their customer missing) beside make run's /poison
    run, ui = dashboard_world.run, dashboard_world.dashboard
    producer = run.producer()
    for order in range(CHARGES):
        producer.send(CHARGE_PATH, {"customer": 7, "order": order})
    run.output.wait_for(r"DLQ +/poison ")
    eventually(lambda: run.output.text().count(f"DLQ  {CHARGE_PATH} ") == CHARGES)
    # AND the cause fixed
    customer_file(dashboard_world.customers, 7).write_text("restored")
    # WHEN the on-call person finds them grouped by path and error, and redrives that group, confirming
    page.goto(ui.url)
    follow_nav(page, "Dead letters")
    group = page.locator(f"section.group[data-path='{CHARGE_PATH}']")
    assert group.locator("h2 .count").inner_text() == str(CHARGES)
    assert group.locator("tr.letter .reason").first.inner_text().startswith("customer 7 not found")
    screenshots.take(page, "dlq", full_page=True)
    group.get_by_role("link", name="Redrive this group…").click()
    what = page.locator("#what").inner_text()
    assert f"moves {CHARGES} dead letter(s) of path /charge failing with NonRetryableError" in what, what
    screenshots.take(page, "redrive-confirm")
    lines_before = len(run.output.lines)
    page.locator("#confirm").click()
    # THEN the run's page follows the move to its end (it refreshes itself), with the command line's counts
    page.wait_for_selector("#state[data-done='yes']", timeout=30_000)
    assert page.locator("#counts").inner_text() == f"moved {CHARGES}, skipped 1, failed 0"  # /poison: another group
    screenshots.take(page, "redrive-run")
    # AND the worker received each from the work queue and, its cause fixed, each succeeded
    eventually(lambda: "\n".join(run.output.lines[lines_before:]).count(f"ok   {CHARGE_PATH} ") == CHARGES)
    # AND the DLQ holds only /poison, which was not part of the group; the work queue is empty
    assert eventually(lambda: [json.loads(m["body"]) for m in run.dead_letters()] == [{"order_id": 42}])
    assert run.depth(contract.DLQ_URL_VARIABLE) == 1
    assert eventually(lambda: run.depth(contract.QUEUE_URL_VARIABLE) == 0)


def test_redrive_all_from_the_page_sends_the_poison_message_through_the_work_queue_again(dashboard_world, page):
    # GIVEN make run's /poison dead-lettered once
    run, ui = dashboard_world.run, dashboard_world.dashboard
    run.output.wait_for(r"DLQ +/poison ")
    # WHEN the on-call person redrives everything from the DLQ page, confirming
    page.goto(ui.url)
    follow_nav(page, "Dead letters")
    page.get_by_role("link", name="Redrive all…").click()
    assert "moves 1 dead letter(s)" in page.locator("#what").inner_text()
    lines_before = len(run.output.lines)
    page.locator("#confirm").click()
    # THEN the run's page follows it to its end
    page.wait_for_selector("#state[data-done='yes']", timeout=30_000)
    # (a copy dead-lettered again while the run went on is named, and left for the next run, as the CLI does)
    assert page.locator("#counts").inner_text().startswith("moved 1, skipped 0, failed 0"), page.content()
    # AND the worker received it again from the work queue: still refused, it is dead-lettered again, once
    run.output.wait_for(r"DLQ +/poison +\S+ +receive 1 +NonRetryableError", after=lines_before)
    assert eventually(lambda: run.depth(contract.DLQ_URL_VARIABLE) == 1)
