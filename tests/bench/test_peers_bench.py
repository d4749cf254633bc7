"""The side-by-side benchmark runs end to end at tiny N, so it cannot rot (its ratios are not asserted: they are measured);
and a peer that crashes or stalls is recorded as failed while the others are still measured."""

from __future__ import annotations

import dataclasses
import sys
from typing import Callable

import pytest

from bench import peers_bench
from bench.peers.frameworks import CELERY, DRAMATIQ, FRAMEWORKS, OURS, Endpoints, Feed

TINY_MESSAGES = 40


@pytest.mark.slow
def test_every_framework_drains_every_scenario_exactly_once():
    # GIVEN our container worker, Celery and Dramatiq on one counting moto server
    # WHEN each drains 40 tasks, once plainly and once with every 10th task failing its first run
    figures, details = peers_bench.compare(messages=TINY_MESSAGES, settle_seconds=0.5, rounds=1)
    # THEN every goal has its figure, and each framework's measures are there for each scenario
    assert all(figures[goal] is not None for goal in peers_bench.GOALS), figures["failed_runs"]
    assert figures["failed_runs"] == []
    assert figures["drain_throughput_ratio_vs_dramatiq"]["worst"] > 0
    for framework in FRAMEWORKS:
        assert {"settings", "docs", "retry", "rounds"} <= set(details[framework.name])
        for scenario in peers_bench.SCENARIOS:
            [measured] = details[framework.name]["rounds"][scenario]
            assert measured["api_calls_per_message"] > 0
            assert measured["cpu_seconds_per_1000_messages"] >= 0
            assert measured["api_calls_by_action"]["ReceiveMessage"] > 0
    # AND no task was lost or run too often: once each, twice for the 4 tasks that failed once
    assert (figures["lost_total"], figures["duplicated_total"]) == (0, 0)
    assert [details[f.name]["rounds"]["retry"][0]["runs"] for f in FRAMEWORKS] == [TINY_MESSAGES + 4] * len(FRAMEWORKS)


def _fake_feed(code: str) -> Callable[[Endpoints, str], Feed]:
    """A framework's feed whose worker process runs ``code`` (with the queue in FAKE_QUEUE_URL), fed by plain batches."""

    def feed(endpoints: Endpoints, queue: str) -> Feed:
        sqs = endpoints.sqs()
        url = sqs.create_queue(QueueName=queue)["QueueUrl"]

        def send(task_ids: list[str]) -> None:
            for start in range(0, len(task_ids), 10):
                chunk = task_ids[start : start + 10]
                sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": t} for i, t in enumerate(chunk)])

        variables = {"FAKE_QUEUE_URL": url.replace(endpoints.producer, endpoints.counted),
                     "AWS_ENDPOINT_URL": f"http://{endpoints.counted}"}
        return Feed(url, send, [sys.executable, "-c", code], variables)

    return feed


CRASHES_AT_ONCE = "import sys; sys.exit(3)"
POLLS_THEN_STALLS = (
    "import os, time, boto3\n"
    "boto3.client('sqs', region_name='us-east-1').receive_message(QueueUrl=os.environ['FAKE_QUEUE_URL'], WaitTimeSeconds=1)\n"
    "time.sleep(600)\n"
)


@pytest.mark.slow
def test_a_crashed_or_stalled_peer_is_recorded_as_failed_and_the_others_are_still_measured():
    # GIVEN a "celery" whose worker exits at once and a "dramatiq" whose worker polls once and then runs nothing
    crashing = dataclasses.replace(CELERY, feed=_fake_feed(CRASHES_AT_ONCE))
    stalling = dataclasses.replace(DRAMATIQ, feed=_fake_feed(POLLS_THEN_STALLS))
    # WHEN two rounds are run with them beside our real worker, a stall being 3 s without a task run
    figures, details = peers_bench.compare(
        messages=20, settle_seconds=0.2, rounds=2, frameworks=(OURS, crashing, stalling),
        limits=peers_bench.Limits(stall_seconds=3.0, ready_seconds=30.0),
    )
    # THEN each peer's every round is recorded as failed, with the reason
    for scenario in peers_bench.SCENARIOS:
        celery_rounds = details[CELERY.name]["rounds"][scenario]
        dramatiq_rounds = details[DRAMATIQ.name]["rounds"][scenario]
        assert [("exited with code 3" in r.get("failed", "")) for r in celery_rounds] == [True, True]
        assert [("stalled" in r.get("failed", "")) for r in dramatiq_rounds] == [True, True]
        # AND ours was still measured in both rounds, nothing lost
        ours = details[OURS.name]["rounds"][scenario]
        assert [("failed" in r, r["lost"], r["duplicated"]) for r in ours] == [(False, 0, 0)] * 2
        assert len(figures[f"{scenario}_{OURS.name}_wall_seconds_to_drain"]["runs"]) == 2
        assert figures[f"{scenario}_{CELERY.name}_wall_seconds_to_drain"] is None
    # AND the ratios needing a failed peer are missing, with the peer's failure as the reason
    for ratio in ("api_calls_ratio_vs_celery", "drain_throughput_ratio_vs_dramatiq", "cpu_per_message_ratio_vs_fastest_peer"):
        assert figures[ratio] is None
        assert figures[f"{ratio}_missing"]["because"]
    assert any("exited with code 3" in why for why in figures["api_calls_ratio_vs_celery_missing"]["because"])
    assert any("stalled" in why for why in figures["drain_throughput_ratio_vs_dramatiq_missing"]["because"])
    assert len(figures["failed_runs"]) == 8
