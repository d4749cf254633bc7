"""The delay-path benchmark, run once with tiny N so it cannot rot (its figures are not held to the goals here)."""

from __future__ import annotations

from bench import scheduler_bench


def test_the_scheduler_bench_runs_and_measures_every_figure_with_a_goal():
    # GIVEN tiny N  WHEN the bench measures
    figures = scheduler_bench.measure(messages=1_000, one_run_messages=500, moto_messages=60, every_minute_from=2_000)
    # THEN every figure with a goal is there; nothing went early, nothing twice
    assert set(scheduler_bench.GOALS) <= set(figures)
    assert figures["early_count"] == 0 and figures["duplicates"] == 0
    # and threads beat one thread on the model, which agrees with moto within a factor of two
    assert figures["dispatch_msgs_per_s_one_run"] > figures["dispatch_msgs_per_s_one_run_one_thread"] > 0
    assert figures["largest_on_time_minute_every_minute"] > 0
    assert figures["moto_sent"] == 60 and 0.5 < figures["moto_measured_over_model"] < 2.0
