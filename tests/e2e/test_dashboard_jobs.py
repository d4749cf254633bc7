"""A tracked job's page in Chromium, against `make run`: is it done, and what did it return?"""

from __future__ import annotations

import json

import pytest

from tests.support.dashboard import follow_nav
from tests.support.dashboard_tasks import CHARGE_PATH, INVOICE_PATH, customer_file
from worker_tier.core import contract

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_a_tracked_jobs_page_shows_it_succeeded_with_its_result_and_its_history(dashboard_world, page, screenshots):
    # GIVEN an invoice sent with track=True, which the worker ran
    run, ui = dashboard_world.run, dashboard_world.dashboard
    producer = run.producer()
    job_id = producer.send(INVOICE_PATH, {"order_id": 7, "items_cents": [1000, 250]}, track=True)
    run.output.wait_for(r"ok +/invoice ")
    assert producer.status(job_id).state == contract.JOB_SUCCEEDED
    # WHEN the job is looked up by its id on the dashboard
    page.goto(ui.url)
    follow_nav(page, "Job")
    page.get_by_label("job id").fill(job_id)
    page.get_by_role("button", name="Look up").click()
    page.wait_for_load_state()
    # THEN its page shows it succeeded, with the task's result and its history from queued to succeeded
    assert page.locator("#job").get_attribute("data-state") == contract.JOB_SUCCEEDED, page.content()
    assert job_id in page.locator("#job").inner_text() and INVOICE_PATH in page.locator("#job").inner_text()
    result = page.locator("#job-result").inner_text()
    assert json.loads(result) == {"invoice": "INV-7", "total_cents": 1250}, result
    states = page.locator("#job-history tbody tr td:nth-child(2)").all_inner_texts()
    assert states == [contract.JOB_QUEUED, contract.JOB_RUNNING, contract.JOB_SUCCEEDED], states
    screenshots.take(page, "job", full_page=True)


def test_a_dead_lettered_jobs_page_gives_its_reason_and_after_a_redrive_from_the_page_its_result(
        dashboard_world, page):
    # GIVEN a tracked charge dead-lettered: its customer is missing
    run, ui = dashboard_world.run, dashboard_world.dashboard
    job_id = run.producer().send(CHARGE_PATH, {"customer": 9}, track=True)
    run.output.wait_for(r"DLQ +/charge ")
    # WHEN its page is opened from its dead letter's row
    page.goto(ui.url)
    follow_nav(page, "Dead letters")
    page.locator(f"section.group[data-path='{CHARGE_PATH}'] tr.letter").get_by_role("link", name="its job").click()
    # THEN it says dead-lettered, and why
    assert page.locator("#job").get_attribute("data-state") == contract.JOB_DEAD_LETTERED, page.content()
    assert job_id in page.locator("#job").inner_text() and "customer 9 not found" in page.locator("#job").inner_text()
    # WHEN the cause is fixed and its DLQ group redriven from the dead letters page, confirming
    customer_file(dashboard_world.customers, 9).write_text("restored")
    follow_nav(page, "Dead letters")
    page.locator(f"section.group[data-path='{CHARGE_PATH}']").get_by_role("link", name="Redrive this group…").click()
    page.locator("#confirm").click()
    page.wait_for_selector("#state[data-done='yes']", timeout=30_000)
    run.output.wait_for(r"ok +/charge ")
    # THEN the same job's page shows it succeeded, with the task's result
    page.goto(ui.at(f"/job?id={job_id}"))
    assert page.locator("#job").get_attribute("data-state") == contract.JOB_SUCCEEDED, page.content()
    assert json.loads(page.locator("#job-result").inner_text()) == {"charged": 9}
    states = page.locator("#job-history tbody tr td:nth-child(2)").all_inner_texts()
    assert states[-1] == contract.JOB_SUCCEEDED and contract.JOB_DEAD_LETTERED in states, states
