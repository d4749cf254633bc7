"""The app adapter benchmark runs once at its tiny size, so it cannot rot (its figures are not asserted against goals)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench import app_adapter_bench

REPO = Path(__file__).resolve().parents[2]
_MEASURE_TINY = "import json; from bench import app_adapter_bench as b; print(json.dumps(b.measure(b.TINY)))"


def test_the_app_adapter_benchmark_measures_every_figure_at_tiny_size():
    # GIVEN the app adapter benchmark at its tiny size, in an interpreter of its own (it loads a Flask app)
    environment = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    # WHEN it measures
    finished = subprocess.run(
        [sys.executable, "-c", _MEASURE_TINY], cwd=REPO, env=environment, capture_output=True, text=True, timeout=120,
        check=False,  # its stderr goes in the assertion message
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    figures = json.loads(finished.stdout.strip().splitlines()[-1])
    # THEN every goal has its figure, over one run, and both sides were timed
    assert set(app_adapter_bench.GOALS) <= set(figures)
    for key in ("app_adapter_overhead_ratio", "app_adapter_per_message_cpu_us", "flask_test_client_per_message_cpu_us",
                "app_adapter_vs_bare_wsgi_ratio", "bare_wsgi_per_message_cpu_us", "asgi_app_per_message_cpu_us"):
        assert figures[key]["runs"] == [figures[key]["worst"]] and figures[key]["worst"] > 0, figures[key]


def test_both_sides_call_the_same_route_and_get_200():
    # GIVEN the benchmark's app and one event
    app = app_adapter_bench.minimal_app()
    event = app_adapter_bench._event(3)
    # WHEN the route is called with Flask's own test client, with each message's body
    statuses = [app.test_client().post("/", data=r["body"], headers={"Content-Type": "application/json"}).status_code
                for r in event["Records"]]
    # THEN it answers 200: the baseline measures the route, not an error page
    assert statuses == [200, 200, 200]
