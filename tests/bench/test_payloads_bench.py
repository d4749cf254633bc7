"""The large payloads benchmark, run once at a tiny size so it cannot rot."""

from __future__ import annotations

from bench import payloads_bench


def test_the_payloads_bench_prices_both_ways_and_times_ours_against_aws_extended_client():
    # GIVEN one 2 MiB body for the cost part and two 1.1 MB bodies for the throughput part  WHEN the bench measures
    figures = payloads_bench.measure(sizes={"2MiB": 2 * 1024 * 1024}, bodies={"1100KB": (1_100_000, 2)}, runs=1)
    # THEN ours makes one call of each kind (put, send, receive, get, delete the message, delete the object), costs
    # less than the same bytes in SQS chunks, and both ways moved every message (ratios are measured, not judged here)
    assert figures["offload_calls_2MiB"] == {"put_object": 1, "send_message_batch": 1, "receive_message": 1,
                                             "get_object": 1, "delete_message_batch": 1, "delete_object": 1}
    assert figures["offload_cost_ratio_vs_chunks_2MiB"] < 1
    assert figures["throughput_ratio_vs_extended_client_1100KB"]["worst"] > 0
    assert figures["offload_pays_above_bytes"] == 458752
