"""The delay-path benchmark, run once with tiny N so it cannot rot (its figures are not held to the goals here)."""

from __future__ import annotations

from bench import scheduler_bench


def test_the_scheduler_bench_runs_and_measures_every_figure_with_a_goal():
    # GIVEN tiny N  WHEN the bench measures
    figures = scheduler_bench.measure(messages=1_000, one_run_messages=500, moto_messages=200, every_minute_from=2_000,
                                      fanout_per_minute=40_000, fanout_minutes=2)
    # THEN every figure with a goal is there; nothing went early, nothing twice
    assert set(scheduler_bench.GOALS) <= set(figures)
    assert figures["early_count"] == 0 and figures["duplicates"] == 0
    # and threads beat one thread on the model, which agrees with moto within a factor of two
    assert figures["dispatch_msgs_per_s_one_run"] > figures["dispatch_msgs_per_s_one_run_one_thread"] > 0
    assert figures["largest_on_time_minute_every_minute"] > 0
    assert figures["moto_sent"] == 200 and 0.5 < figures["moto_measured_over_model"] < 2.0
    # and fanned out: the smallest G found puts the small goal minute on time, none early; 2 groups on moto send each
    # message once
    assert figures["largest_on_time_minute_fanned_out"] == 40_000 and figures["fanout_groups_for_goal_minute"] >= 1
    assert figures["fanout_early_count"] == 0
    assert figures["moto_groups2_sent"] == figures["moto_groups2_in_queue"] == 200


def test_the_first_run_is_on_a_clean_table_and_sends_nothing():
    # GIVEN a world of two loaded minutes  WHEN it is made (its first run included)
    first = 30_000_030
    world = scheduler_bench.ScaleWorld(200, 2, 256, 16, scheduler_bench.SUSTAINED_HORIZON_SECONDS, first)
    # THEN that run sent nothing: every message goes out in a run timed like the others
    assert world.sqs.sent == []
    world.run_at((first + 1) * 60 + scheduler_bench.RUN_JITTER_SECONDS)
    assert len(world.sqs.sent) == 400


def test_lateness_is_from_due_to_visible_per_minute():
    # GIVEN a loaded minute dispatched on the CPU model (one GIL at a share of a vCPU)
    first = 30_000_030
    world = scheduler_bench.ScaleWorld(2_000, 1, 256, 16, scheduler_bench.SUSTAINED_HORIZON_SECONDS, first)
    world.run_at((first - 1) * 60 + scheduler_bench.RUN_JITTER_SECONDS)
    # WHEN lateness is measured
    by_minute, early = world.lateness()
    # THEN it is each message's visible time less its due time, none early; rounding alone would keep it under 1 s,
    # and the time from the clock read to SQS receiving the call shows on top
    visible = sorted(entry["visible_at"] - scheduler_bench._epoch(entry["MessageAttributes"]["worker_tier.due_at"]["StringValue"])
                     for entry in world.sqs.sent)
    assert early == 0 and by_minute == {first: visible}
    assert visible[-1] > 1.0


def test_the_window_is_long_enough_for_a_slowly_growing_backlog_to_show():
    # GIVEN the window judged  THEN it covers 20 minutes, so a backlog growing by 5% of the horizon's one-minute slack
    # a minute uses it up within the window
    assert scheduler_bench.SUSTAINED_MINUTES >= 20
    assert scheduler_bench.SUSTAINED_HORIZON_SECONDS - scheduler_bench.BUCKET_SECONDS <= 60


def test_a_fanned_out_minute_is_judged_over_every_group():
    # GIVEN 3,200 messages a minute over 4 groups (200 per shard)  WHEN fanned out for two minutes
    result = scheduler_bench.fanout(3_200, 4, minutes=2)
    # THEN every message went out, none early, no run short of time, each group's four shards judged together
    assert result["unsent"] == 0 and result["early"] == 0 and result["runs_out_of_time"] == 0
    assert result["messages"] == 6_400 and scheduler_bench.fanout_on_time(result)
    assert 0 < result["within_one_second"] <= 1 and result["cost_usd"] > 0


def test_a_sample_of_groups_takes_the_largest_and_the_smallest():
    # GIVEN 16 groups, 2 simulated; 3 groups, 2 simulated; all of 4  THEN the first and last are among them
    assert scheduler_bench._spread(16, 2) == [0, 15] and scheduler_bench._spread(3, 2) == [0, 2]
    assert scheduler_bench._spread(4, 9) == [0, 1, 2, 3] and scheduler_bench._spread(16, 4) == [0, 5, 10, 15]
