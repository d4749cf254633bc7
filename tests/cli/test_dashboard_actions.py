"""The dashboard's actions end to end against moto: redrive (all, a group, one) through its confirmation and its
run's report, cancel and reschedule of a delayed message."""

from __future__ import annotations

import dataclasses
import re
import threading


from tests.cli.dashboard import dashboard_over, delay_table
from tests.cli.deployment import NOW
from worker_tier import Client
from worker_tier.core.message import format_due_at
from worker_tier_cli import dead_letters

HOUR = 3600


def _run_page(dashboard, answer):
    """The redrive run's page once it has ended (the POST's redirect names it)."""
    assert answer.status_code == 303, answer.text
    run_id = answer.headers["location"].rsplit("/", 1)[-1]
    assert dashboard.runs.wait(dashboard.runs.runs[run_id], timeout=30)
    return dashboard.browser.get(answer.headers["location"])


def test_redriving_a_group_asks_first_naming_the_count_then_moves_only_that_group(dashboard):
    # GIVEN two dead letters of /resize ValueError and one of /email
    deployment = dashboard.deployment
    deployment.dead_letter("/resize", ValueError("bad 1"), "r1")
    deployment.dead_letter("/resize", ValueError("bad 2"), "r2")
    deployment.dead_letter("/email", KeyError("to"), "e1")
    # WHEN the group's redrive is asked for
    confirm = dashboard.browser.get("/dlq/redrive?scope=group&path=/resize&error=ValueError")
    # THEN the confirmation names how many, which, and from where to where, and nothing has moved yet
    assert re.search(r'This moves <strong class="count">2</strong> dead letter\(s\) of path <code>/resize</code> '
                     r"failing with <code>ValueError</code>", confirm.text)
    assert deployment.depth(deployment.dlq_url) == 3
    # WHEN it is confirmed
    page = _run_page(dashboard, dashboard.post("/dlq/redrive", {"scope": "group", "path": "/resize", "error": "ValueError"}))
    # THEN the run's page shows the CLI's report, and only that group is back in the work queue
    assert "<strong>moved 2, skipped 1, failed 0</strong>" in page.text
    assert 'data-done="yes"' in page.text
    assert sorted(m["Body"] for m in deployment.drain(deployment.queue_url)) == ["r1", "r2"]
    assert deployment.depth(deployment.dlq_url) == 1


def test_redriving_one_dead_letter_moves_only_it(dashboard):
    deployment = dashboard.deployment
    one = deployment.dead_letter("/resize", ValueError("bad 1"), "r1")
    deployment.dead_letter("/resize", ValueError("bad 2"), "r2")
    assert 'This moves <strong class="count">1</strong>' in dashboard.browser.get(f"/dlq/redrive?scope=one&message_id={one}").text
    page = _run_page(dashboard, dashboard.post("/dlq/redrive", {"scope": "one", "message_id": one}))
    assert "moved 1, skipped 1, failed 0" in page.text
    assert [m["Body"] for m in deployment.drain(deployment.queue_url)] == ["r1"]


def test_redriving_all_moves_every_dead_letter_without_its_reason(dashboard):
    deployment = dashboard.deployment
    for n in range(3):
        deployment.dead_letter(f"/p{n}", ValueError("bad"), f"b{n}")
    page = _run_page(dashboard, dashboard.post("/dlq/redrive", {"scope": "all"}))
    assert "moved 3, skipped 0, failed 0" in page.text
    moved = deployment.drain(deployment.queue_url)
    assert sorted(m["Body"] for m in moved) == ["b0", "b1", "b2"]
    assert all("worker_tier.failure" not in m.get("MessageAttributes", {}) for m in moved)


def test_a_second_redrive_while_one_runs_is_refused_naming_the_first(deployment):
    # GIVEN a redrive whose thread is held at its start (its clock waits for the gate)
    gate = threading.Event()

    def clock() -> float:
        if threading.current_thread().name.startswith("redrive-"):
            gate.wait(30)
        return NOW.timestamp()

    deployment.runtime = dataclasses.replace(deployment.runtime, clock=clock)
    dashboard = dashboard_over(deployment)
    deployment.dead_letter("/resize", ValueError("bad"), "r1")
    first = dashboard.post("/dlq/redrive", {"scope": "all"})
    # WHEN a second is asked for while it runs
    second = dashboard.post("/dlq/redrive", {"scope": "all"})
    gate.set()
    # THEN it is refused with a link to the first, which goes on to the end
    assert second.status_code == 409 and first.headers["location"] in second.text
    assert "moved 1, skipped 0, failed 0" in _run_page(dashboard, first).text


def test_a_redrive_form_without_its_scope_fields_is_refused_naming_the_field(dashboard):
    answer = dashboard.post("/dlq/redrive", {"scope": "group", "path": "/resize"})
    assert answer.status_code == 400 and "error is required" in answer.text


def _delayed(deployment):
    dashboard = dashboard_over(deployment, delay_table=delay_table(deployment))
    client = Client(deployment.queue_url, "delay", sqs=deployment.sqs, dynamodb=deployment.dynamodb,
                    clock=NOW.timestamp, state_table="state")
    return dashboard, client


def test_cancel_asks_first_naming_the_message_then_cancels_it_for_good(deployment):
    # GIVEN a cancellable reminder due in an hour
    dashboard, client = _delayed(deployment)
    client.send("/remind", "1", delay=HOUR, dedupe_key="remind-1", cancellable=True)
    # WHEN its cancel is asked for THEN the confirmation names its key, path and due time, and it is still there
    confirm = dashboard.browser.get("/delayed/cancel?key=remind-1").text
    assert "dedupe key <code>remind-1</code>, path <code>/remind</code>, due 2026-11-22T13:00:00.000Z" in confirm
    assert "remind-1" in dashboard.browser.get("/delayed").text
    # WHEN it is confirmed
    done = dashboard.post("/delayed/cancel", {"key": "remind-1"})
    # THEN the outcome says it will never be delivered, and the delayed page no longer lists it
    assert done.status_code == 200 and 'data-status="done"' in done.text and "never be delivered" in done.text
    assert "remind-1" not in dashboard.browser.get("/delayed").text
    # AND a second cancel says there is nothing to cancel
    assert 'data-status="not found"' in dashboard.post("/delayed/cancel", {"key": "remind-1"}).text


def test_reschedule_asks_first_naming_both_times_then_moves_the_message(deployment):
    dashboard, client = _delayed(deployment)
    client.send("/remind", "1", delay=HOUR, dedupe_key="remind-1", cancellable=True)
    later = format_due_at(int((NOW.timestamp() + 3 * HOUR) * 1000))
    confirm = dashboard.browser.get(f"/delayed/reschedule?key=remind-1&at={later}").text
    assert f"from 2026-11-22T13:00:00.000Z to <strong>{later}</strong>" in confirm
    done = dashboard.post("/delayed/reschedule", {"key": "remind-1", "at": later})
    assert 'data-status="done"' in done.text
    listing = dashboard.browser.get("/delayed?within=600").text
    assert "2026-11-22T15:00:00.000Z" in listing and "2026-11-22T13:00:00.000Z" not in listing


def test_a_reschedule_too_soon_is_refused_with_the_rule(deployment):
    dashboard, client = _delayed(deployment)
    client.send("/remind", "1", delay=HOUR, dedupe_key="remind-1", cancellable=True)
    soon = format_due_at(int((NOW.timestamp() + 60) * 1000))
    answer = dashboard.post("/delayed/reschedule", {"key": "remind-1", "at": soon})
    assert answer.status_code == 400 and "a cancellable message must be due more than 840 s ahead, got 60 s" in answer.text


def test_the_cancel_confirmation_of_an_unknown_key_says_so_and_offers_no_form(deployment):
    dashboard, _ = _delayed(deployment)
    page = dashboard.browser.get("/delayed/cancel?key=nope").text
    assert "no delayed message has dedupe_key &#39;nope&#39;" in page and "<form" not in page


def test_a_redrive_while_another_tab_reads_the_dlq_moves_its_whole_group_or_names_what_it_left(dashboard):
    # GIVEN six dead letters of /resize ValueError, and another tab's DLQ page reading them (its peek, not yet released)
    deployment = dashboard.deployment
    for n in range(6):
        deployment.dead_letter("/resize", ValueError(f"bad {n}"), f"r{n}")
    with dead_letters.peek(deployment.sqs, deployment.dlq_url, 1000, 0):
        # WHEN the group's redrive runs to its end
        page = _run_page(dashboard, dashboard.post("/dlq/redrive", {"scope": "group", "path": "/resize",
                                                                   "error": "ValueError"}))
    # THEN either every letter of the group moved, or the report names the ones it left and why
    moved = len(deployment.drain(deployment.queue_url))
    assert moved == 6 or "left" in page.text.split('id="counts"')[1], page.text


def test_the_reschedule_confirmation_of_a_time_in_the_past_names_the_rule_and_offers_no_form(deployment):
    # GIVEN a cancellable reminder due in an hour
    dashboard, client = _delayed(deployment)
    client.send("/remind", "1", delay=HOUR, dedupe_key="remind-1", cancellable=True)
    # WHEN its reschedule to a time already past is asked for
    page = dashboard.browser.get("/delayed/reschedule?key=remind-1&at=2020-01-01T00:00:00Z").text
    # THEN the confirmation says it cannot be done and why, and offers nothing to confirm
    assert "840 s" in page and "<form" not in page.split("</nav>")[1], page


def test_a_reschedule_lands_at_exactly_the_time_its_confirmation_named(deployment):
    # GIVEN a cancellable reminder due in an hour, and a clock that moves on between two reads, as a real one does
    ticks = iter(range(10**6))
    deployment.runtime = dataclasses.replace(deployment.runtime, clock=lambda: NOW.timestamp() + next(ticks) * 0.0004)
    dashboard, client = _delayed(deployment)
    client.send("/remind", "1", delay=HOUR, dedupe_key="remind-1", cancellable=True)
    later = format_due_at(int((NOW.timestamp() + 3 * HOUR) * 1000))
    assert f"to <strong>{later}</strong>" in dashboard.browser.get(f"/delayed/reschedule?key=remind-1&at={later}").text
    # WHEN it is confirmed THEN the message is due at the time named, to the millisecond
    done = dashboard.post("/delayed/reschedule", {"key": "remind-1", "at": later})
    assert f"to {later}" in done.text, done.text
