"""The redrive benchmark, run once with tiny N so it cannot rot."""

from __future__ import annotations

from bench import redrive_bench


def test_the_redrive_bench_counts_both_moves_and_ours_makes_fewer_calls():
    # GIVEN 30 dead letters (and a mixed run of 20 plus 5 skipped)  WHEN the bench measures
    figures = redrive_bench.measure(messages=30, mixed_messages=20)
    # THEN naive is receive + send + delete per message and a last empty receive; ours a tenth of the receives
    assert figures["naive_redrive_api_calls_per_1000"] == round((3 * 30 + 1) * 1000 / 30, 1)
    assert set(redrive_bench.GOALS) <= set(figures)
    assert figures["redrive_api_calls_ratio"] <= redrive_bench.GOALS["redrive_api_calls_ratio"][1]
    assert figures["redrive_api_calls_per_1000_with_25pct_skipped"] < figures["naive_redrive_api_calls_per_1000_with_25pct_skipped"]
