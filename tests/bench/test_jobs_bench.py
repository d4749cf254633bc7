"""The tracked jobs benchmark, run once with tiny N so it cannot rot."""

from __future__ import annotations

from bench import jobs_bench


def test_the_jobs_bench_counts_a_tracked_jobs_writes_and_no_call_for_an_untracked_message():
    # GIVEN 5 messages per scenario  WHEN the bench measures
    figures = jobs_bench.measure(messages=5)
    # THEN a tracked success is its first record (one BatchWriteItem for the 5) and two updates, a retry two more,
    # and an untracked message no DynamoDB call at all
    assert set(jobs_bench.GOALS) <= set(figures)
    assert (figures["success_write_units_per_job"], figures["retry_write_units_per_job"]) == (3.0, 5.0)
    assert figures["success_write_calls_per_job"] == 2.2 and figures["untracked_dynamodb_calls"] == 0
