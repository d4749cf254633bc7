"""The worker benchmark runs once at its tiny size, so it cannot rot (its figures are not asserted against goals)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench import worker_bench

REPO = Path(__file__).resolve().parents[2]
_MEASURE_TINY = "import json; from bench import worker_bench as b; print(json.dumps(b.measure(b.TINY)))"


def test_the_worker_benchmark_measures_every_figure_at_tiny_size():
    # GIVEN the worker benchmark at its tiny size, in an interpreter of its own (it registers a task and sets variables)
    environment = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    environment.pop("POWERTOOLS_METRICS_DISABLED", None)  # measure the handler as deployed, metrics included
    # WHEN it measures
    finished = subprocess.run(
        [sys.executable, "-c", _MEASURE_TINY], cwd=REPO, env=environment, capture_output=True, text=True, timeout=300,
        check=False,  # its stderr goes in the assertion message
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    figures = json.loads(finished.stdout.strip().splitlines()[-1])
    # THEN every goal has its figure: the timed ones with one run each, their worst the highest run
    for key in ("cold_start_ratio", "cold_import_ratio", "per_message_cpu_ratio"):
        assert figures[key]["runs"] == [figures[key]["worst"]] == [figures[key]["median"]], figures[key]
        assert figures[key]["worst"] > 0
    assert set(worker_bench.GOALS) <= set(figures)
    # AND cold start is the worse scenario's, each a ratio of times a fresh process could take (not 0, not minutes)
    scenarios = [figures[f"cold_start_{s}_ratio"]["worst"] for s in ("success", "failure")]
    assert figures["cold_start_ratio"]["worst"] == max(scenarios)
    for scenario in ("success", "failure"):
        for side in (f"cold_start_{scenario}_ms", f"baseline_cold_start_{scenario}_ms"):
            assert 5 < figures[side]["worst"] < 60_000, (side, figures[side])
    # AND the first batch's AWS calls went to the local endpoint: none when all succeed, one visibility change for the failure
    assert figures["cold_start_aws_calls"] == {
        "success": {"ours": {}, "baseline": {}},
        "failure": {"ours": {"ChangeMessageVisibilityBatch": 1}, "baseline": {"ChangeMessageVisibility": 1}},
    }
    # AND the retry count is exact: 2 failures per 20-record event, one batched call against one call each
    assert figures["retry_api_calls_ratio"] == 0.5
    assert (figures["retry_api_calls_per_1000"], figures["baseline_retry_api_calls_per_1000"]) == (50.0, 100.0)


def test_a_figure_over_runs_keeps_each_run_and_its_worst():
    # GIVEN three runs of a ratio whose goal is an upper bound
    # WHEN spread
    figure = worker_bench.spread([1.2, 1.6, 1.3])
    # THEN the worst is the highest run, beside the median and every run
    assert figure == {"worst": 1.6, "median": 1.3, "runs": [1.2, 1.6, 1.3]}
