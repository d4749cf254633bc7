"""The dashboard's security model (worker_tier_cli.ui.guard): token, Host, CSRF, origin, no action on GET, escaping,
headers, and the bind rule."""

from __future__ import annotations

import pytest

from tests.cli.dashboard import ORIGIN, PORT, TOKEN
from worker_tier_cli.ui.guard import CSRF_FIELD, GuardError, check_token


def test_a_browser_without_the_token_gets_401_on_every_page_and_action(dashboard):
    stranger = dashboard.stranger()
    for url in ("/", "/dlq", "/delayed", "/periodic", "/outcomes", "/outcomes.json", "/static/dashboard.css"):
        assert stranger.get(url).status_code == 401, url
    assert stranger.post("/dlq/redrive", data={"scope": "all", CSRF_FIELD: dashboard.csrf_token},
                         headers={"Origin": ORIGIN}).status_code == 401


def test_a_wrong_token_in_the_url_is_refused_and_sets_no_cookie(dashboard):
    answer = dashboard.stranger().get("/?token=not-the-token-at-all", follow_redirects=False)
    assert answer.status_code == 401 and "set-cookie" not in answer.headers


def test_the_token_in_the_url_becomes_an_httponly_strict_cookie_and_leaves_the_address(dashboard):
    answer = dashboard.stranger().get(f"/dlq?limit=5&token={TOKEN}", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/dlq?limit=5"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"worker_tier_ui_{PORT}={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie


def test_the_token_redirect_stays_on_this_server_whatever_the_path(dashboard):
    answer = dashboard.stranger().get(f"{ORIGIN}//evil.example/x?token={TOKEN}", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/evil.example/x"


def test_a_request_naming_another_host_is_refused_even_with_the_token(dashboard):
    # GIVEN a page of another site whose name resolves to 127.0.0.1 (DNS rebinding)  THEN it is refused
    answer = dashboard.browser.get("/", headers={"Host": f"evil.example:{PORT}"})
    assert answer.status_code == 403 and "is not this dashboard&#39;s address" not in answer.text
    assert "not this dashboard's address" in answer.text


def test_localhost_names_the_same_loopback_server(dashboard):
    assert dashboard.browser.get("/", headers={"Host": f"localhost:{PORT}"}).status_code == 200


def test_a_post_without_or_with_a_wrong_csrf_token_is_refused_and_moves_nothing(dashboard):
    deployment = dashboard.deployment
    deployment.dead_letter("/resize", ValueError("bad"), "r1")
    without = dashboard.browser.post("/dlq/redrive", data={"scope": "all"}, headers={"Origin": ORIGIN})
    wrong = dashboard.post("/dlq/redrive", {"scope": "all", CSRF_FIELD: "x" * 43})
    assert without.status_code == 403 and wrong.status_code == 403
    assert "missing or wrong csrf_token" in wrong.text
    assert dashboard.runs.runs == {} and deployment.depth(deployment.dlq_url) == 1


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"}, {"Origin": "null"},
                                     {"Referer": "http://evil.example/page"}, {}],
                         ids=["cross-site origin", "null origin", "cross-site referer", "neither"])
def test_a_post_from_another_origin_is_refused_even_with_the_right_csrf_token(dashboard, headers):
    deployment = dashboard.deployment
    deployment.dead_letter("/resize", ValueError("bad"), "r1")
    answer = dashboard.browser.post("/dlq/redrive", data={"scope": "all", CSRF_FIELD: dashboard.csrf_token},
                                    headers=headers)
    assert answer.status_code == 403 and "cross-origin request refused" in answer.text
    assert dashboard.runs.runs == {}


def test_a_post_with_a_same_origin_referer_and_no_origin_is_accepted(dashboard):
    dashboard.deployment.dead_letter("/resize", ValueError("bad"), "r1")
    answer = dashboard.browser.post("/dlq/redrive", data={"scope": "all", CSRF_FIELD: dashboard.csrf_token},
                                    headers={"Referer": f"{ORIGIN}/dlq/redrive?scope=all"}, follow_redirects=False)
    assert answer.status_code == 303
    run = next(iter(dashboard.runs.runs.values()))
    assert dashboard.runs.wait(run, timeout=30)


def test_no_get_changes_anything_not_even_the_confirmation_pages(dashboard):
    # GIVEN a dead letter
    deployment = dashboard.deployment
    deployment.dead_letter("/resize", ValueError("bad"), "r1")
    # WHEN every page is loaded, the confirmation pages included, and an action's URL is fetched with GET
    for url in ("/", "/dlq", "/dlq/redrive?scope=all", "/outcomes", "/outcomes.json", "/periodic"):
        assert dashboard.browser.get(url).status_code == 200, url
    # THEN nothing moved and no redrive started
    assert dashboard.runs.runs == {}
    assert deployment.depth(deployment.dlq_url) == 1 and deployment.depth(deployment.queue_url) == 0


def test_a_body_and_a_reason_holding_markup_are_shown_as_text(dashboard):
    # GIVEN a dead letter whose body and reason are attacker-written HTML
    dashboard.deployment.dead_letter("/x<script>", ValueError("<img src=x onerror=alert(2)>"), "<script>alert(1)</script>")
    html = dashboard.browser.get("/dlq").text
    # THEN they are escaped wherever they appear
    assert "<script>alert(1)</script>" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "/x&lt;script&gt;" in html


def test_every_answer_carries_the_security_headers(dashboard):
    for answer in (dashboard.browser.get("/"), dashboard.stranger().get("/")):
        headers = answer.headers
        assert "script-src 'self'" in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert "unsafe-inline" not in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"
        assert headers["cache-control"] == "no-store"
        assert headers["referrer-policy"] == "same-origin"
        assert headers["x-content-type-options"] == "nosniff"


def test_binding_another_address_without_a_token_is_refused_naming_the_fix():
    with pytest.raises(GuardError, match=r"^--host 0\.0\.0\.0 without a token: any machine that reaches 0\.0\.0\.0 could "
                                         r"act on the queues; drop --no-token"):
        check_token("0.0.0.0", None)
    check_token("127.0.0.1", None)  # loopback may go without, when asked for
    check_token("::1", None)


def test_the_command_refuses_no_token_off_loopback_and_a_short_token_in_one_line(deployment):
    # GIVEN the ui command against the deployment WHEN it is asked to bind 0.0.0.0 without a token
    result = deployment.run("ui", "--host", "0.0.0.0", "--no-token", "--port", "0")
    # THEN it stops before serving, in one line naming the rule and the fix
    assert result.exit_code == 2
    assert "Error: --host 0.0.0.0 without a token" in result.output
    short = deployment.run("ui", "--token", "short", "--port", "0")
    assert short.exit_code == 2 and "--token must be at least 16 characters, got 5" in short.output


def test_open_hands_the_browser_a_private_page_not_the_url_with_the_token():
    from worker_tier_cli.ui.command import _launch_page

    # GIVEN the dashboard's URL WHEN --open makes its launch page
    page = _launch_page(f"{ORIGIN}/?token={TOKEN}&x=<y>")
    # THEN only this user can read it, and it sends the browser to the URL (escaped)
    assert page.stat().st_mode & 0o077 == 0 and page.parent.stat().st_mode & 0o077 == 0
    assert f'content="0;url={ORIGIN}/?token={TOKEN}&amp;x=&lt;y&gt;"' in page.read_text()


def test_a_page_of_another_local_port_cannot_make_the_dashboard_read_the_dlq(dashboard):
    # GIVEN a dead letter
    deployment = dashboard.deployment
    deployment.dead_letter("/resize", ValueError("bad"), "r1")
    # WHEN a page served on another port of 127.0.0.1 frames the DLQ page (Chromium sends the cookie, as seen)
    answer = dashboard.browser.get("/dlq?limit=10000", headers={"Sec-Fetch-Site": "same-site", "Sec-Fetch-Dest": "iframe",
                                                                "Sec-Fetch-Mode": "navigate"})
    # THEN it is refused before anything runs, and the dead letter was never received
    letter = deployment.sqs.receive_message(QueueUrl=deployment.dlq_url, AttributeNames=["ApproximateReceiveCount"])
    assert answer.status_code == 403
    assert letter["Messages"][0]["Attributes"]["ApproximateReceiveCount"] == "1"
