"""The dashboard attacked from the same machine, in Chromium: a page of another origin that posts its forms, and a
browser that never got the token."""

from __future__ import annotations

import html
import re

import pytest

from tests.support.dashboard import REBINDING_HOST, AttackerSite, Dashboard
from worker_tier.core import contract

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _redrive_form(page) -> dict:
    """The DLQ page's first redrive form as an attacker who knows the open-source app sees it: action and fields."""
    form = page.locator("form[action*='redrive']").first
    return form.evaluate("""form => ({action: form.action, method: form.method,
        fields: Array.from(new FormData(form).entries())})""")


def _auto_posting_page(form: dict, csrf_token: str | None) -> str:
    """An HTML page that posts ``form`` to the dashboard as soon as it loads, with ``csrf_token`` in place of the
    page's own (None: the real one, as if it leaked)."""
    fields = [(name, value if name != "csrf_token" or csrf_token is None else csrf_token) for name, value in form["fields"]]
    inputs = "".join(f'<input type="hidden" name="{html.escape(n)}" value="{html.escape(v)}">' for n, v in fields)
    return (f'<!doctype html><title>cute cats</title><form method="post" action="{html.escape(form["action"])}">'
            f"{inputs}</form><script>document.forms[0].submit()</script>")


@pytest.mark.parametrize("csrf_token", [None, "guessed"], ids=["with-the-leaked-csrf-token", "without-it"])
def test_a_page_of_another_origin_posting_the_redrive_form_changes_nothing(dashboard_world, page, csrf_token):
    # GIVEN the on-call person's browser, signed in to the dashboard (its cookie), with /poison in the DLQ
    run, ui = dashboard_world.run, dashboard_world.dashboard
    run.output.wait_for(r"DLQ +/poison ")
    page.goto(ui.url)
    page.goto(ui.at("/dlq/redrive?scope=all"))
    form = _redrive_form(page)
    # AND a page on another port of the same machine (same site, another origin) that posts the redrive form on load
    attacker = AttackerSite(_auto_posting_page(form, csrf_token))
    try:
        # WHEN the person visits it in the same browser
        with page.expect_response(lambda response: response.request.method == "POST") as posted:
            page.goto(attacker.url)
        # THEN the dashboard refuses the POST (the browser sent the cookie: only the origin and the token stop it)
        assert posted.value.status == 403, posted.value.text()
        assert posted.value.request.headers.get("origin") == attacker.url.rstrip("/")
    finally:
        attacker.stop()
    # AND nothing moved: no move task ran, and /poison is still the DLQ's one message
    dlq_arn = run.client("sqs").get_queue_attributes(QueueUrl=run.resource(contract.DLQ_URL_VARIABLE),
                                                     AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    assert run.client("sqs").list_message_move_tasks(SourceArn=dlq_arn)["Results"] == []
    assert run.depth(contract.DLQ_URL_VARIABLE) == 1
    assert len(re.findall(r"DLQ +/poison ", run.output.text())) == 1


def test_without_its_token_the_dashboard_shows_no_data(dashboard_world, page):
    # GIVEN the dashboard, with /poison in the DLQ
    run, ui = dashboard_world.run, dashboard_world.dashboard
    run.output.wait_for(r"DLQ +/poison ")
    # WHEN another user's browser (no cookie) opens its pages without the token, or with a wrong one
    for path in ("/", "/dlq", "/delayed", "/periodic", "/outcomes", "/dlq/redrive?scope=all", "/?token=wrong"):
        response = page.goto(ui.at(path))
        # THEN each answers 401 with a page that says how to get in, and no data
        assert response.status == 401, (path, response.status)
        text = page.locator("body").inner_text()
        assert "Token needed" in text, text
        assert "poison" not in text and "order" not in text and "worker-tier-local" not in text, text


def test_a_page_under_another_name_that_resolves_here_reads_nothing_from_a_dashboard_without_a_token(dashboard_world, page):
    # GIVEN a second dashboard started with --no-token (a single-user machine), with /poison in the DLQ
    run = dashboard_world.run
    run.output.wait_for(r"DLQ +/poison ")
    tokenless = Dashboard(run.shell(), "--no-token")
    try:
        page.goto(tokenless.at("/dlq"))
        assert "order 42" in page.locator("body").inner_text()  # its own address shows the data
        # WHEN a site whose name resolves to 127.0.0.1 (DNS rebinding) loads it under its own name
        response = page.goto(tokenless.at("/dlq").replace("127.0.0.1", REBINDING_HOST))
        # THEN the Host check refuses it before anything is read
        assert response.status == 403, response.status
        text = page.locator("body").inner_text()
        assert "is not this dashboard's address" in text and "order 42" not in text, text
    finally:
        tokenless.stop()


def test_a_page_of_another_origin_cannot_frame_the_redrive_confirmation_to_trick_a_click(dashboard_world, page):
    # GIVEN the on-call person's browser, signed in, with /poison in the DLQ
    run, ui = dashboard_world.run, dashboard_world.dashboard
    run.output.wait_for(r"DLQ +/poison ")
    page.goto(ui.url)
    # AND a page of another origin that frames the "Redrive all" confirmation under a decoy (clickjacking)
    framed = ui.at("/dlq/redrive?scope=all")
    attacker = AttackerSite(f'<!doctype html><title>win a prize</title><button>Claim</button>'
                            f'<iframe src="{html.escape(framed)}" style="opacity:0.01" width="800" height="600"></iframe>')
    try:
        # WHEN the person visits it
        with page.expect_response(framed) as answered:
            page.goto(attacker.url)
        # THEN the browser refuses to render the dashboard in the frame: no confirm button to be clicked there
        # refused before any read: a request another site's page made (Sec-Fetch-Site); and framing is forbidden
        assert answered.value.status == 403
        [frame] = [f for f in page.frames if f != page.main_frame]
        page.wait_for_timeout(500)
        assert frame.locator("#confirm").count() == 0
        assert "Move 1 message" not in frame.content()
    finally:
        attacker.stop()
    assert run.depth(contract.DLQ_URL_VARIABLE) == 1
