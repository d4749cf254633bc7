"""The dashboard over the local environment, served for real (uvicorn): `make run ARGS=--ui` and `worker-tier ui`."""

from __future__ import annotations

import json
import re
import shlex
import time
import urllib.error
import urllib.request

from tests.support.local_processes import python_process, read_until

DASHBOARD_LINE = re.compile(r"dashboard +(http://127\.0\.0\.1:\d+/\?token=\S+)")
EXPORT_LINE = re.compile(r"^  export .*$", re.MULTILINE)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _login(url: str) -> tuple[str, str]:
    """The base URL and the cookie the token's URL sets (answered with a 303 that drops the token)."""
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        opener.open(url, timeout=10)
    except urllib.error.HTTPError as answer:
        assert answer.code == 303, answer.code
        return url.split("?", 1)[0], answer.headers["set-cookie"].split(";", 1)[0]
    raise AssertionError(f"{url} did not redirect")


def _get(base: str, cookie: str, path: str) -> str:
    request = urllib.request.Request(base + path.lstrip("/"), headers={"Cookie": cookie})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read().decode("utf-8")


def test_make_run_with_ui_prints_the_dashboard_in_its_banner_and_shows_the_workers_outcomes_live():
    # GIVEN `make run ARGS=--ui` with the example tasks (one of them poison)
    with python_process("-m", "worker_tier_local", "--ui", "--ui-port", "0", "--port", "0", "--duration", "40") as process:
        base, cookie = _login(DASHBOARD_LINE.search(read_until(process, DASHBOARD_LINE)).group(1))
        # WHEN its live outcomes are polled THEN they show the lines make run prints, the poison message's DLQ line too
        deadline, lines = time.monotonic() + 30, []
        while not any(" DLQ  /poison " in line for line in lines):
            assert time.monotonic() < deadline, lines
            lines = json.loads(_get(base, cookie, "/outcomes.json"))["lines"]
            time.sleep(0.5)
        # AND its DLQ page shows the poison message with its reason
        assert "order 42 references a deleted customer" in _get(base, cookie, "/dlq")


def test_worker_tier_ui_prints_its_url_first_and_serves_the_local_environment():
    # GIVEN a local environment, and a shell with its export line
    with python_process("-m", "worker_tier_local", "--port", "0", "--no-examples", "--duration", "40") as local:
        line = EXPORT_LINE.search(read_until(local, EXPORT_LINE)).group(0)
        exported = dict(word.split("=", 1) for word in shlex.split(line)[1:] if not word.startswith("PATH="))
        # WHEN `worker-tier ui --port 0` runs there
        with python_process("-c", "import sys; from worker_tier.__main__ import main; sys.exit(main(['ui', '--port', '0']))",
                      env=exported) as ui:
            first = ui.stdout.readline()
            # THEN its first line is the URL with the token, and the overview answers through it
            assert first.startswith("Worker Tier dashboard: http://127.0.0.1:"), first
            base, cookie = _login(first.split(": ", 1)[1].strip())
            assert "worker-tier-local-queue" in _get(base, cookie, "/")
