"""The side-by-side benchmark runs end to end at tiny N, so it cannot rot (its ratios are not asserted: they are measured)."""

from __future__ import annotations

import pytest

from bench import peers_bench
from bench.peers.frameworks import FRAMEWORKS

TINY_MESSAGES = 40


@pytest.mark.slow
def test_every_framework_drains_every_scenario_exactly_once():
    # GIVEN our container worker, Celery and Dramatiq on one counting moto server
    # WHEN each drains 40 tasks, once plainly and once with every 10th task failing its first run
    figures, details = peers_bench.compare(messages=TINY_MESSAGES, settle_seconds=0.5)
    # THEN every goal has its figure, and each framework's measures are there for each scenario
    assert set(peers_bench.GOALS) <= set(figures)
    for framework in FRAMEWORKS:
        assert {"settings", "docs", "retry", *peers_bench.SCENARIOS} <= set(details[framework.name])
        for scenario in peers_bench.SCENARIOS:
            measured = details[framework.name][scenario]
            assert measured["api_calls_per_message"] > 0
            assert measured["cpu_seconds_per_1000_messages"] >= 0
            assert measured["api_calls_by_action"]["ReceiveMessage"] > 0
    # AND no task was lost or run too often: once each, twice for the 4 tasks that failed once
    assert (figures["lost_total"], figures["duplicated_total"]) == (0, 0)
    assert [details[f.name]["retry"]["runs"] for f in FRAMEWORKS] == [TINY_MESSAGES + 4] * len(FRAMEWORKS)
