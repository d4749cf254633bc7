"""The flow benchmark at a small size: its counting is right, and it catches a limit that is not held."""

from __future__ import annotations

import pytest

from bench import flow_bench
from bench.flow_bench import Scenario

WORKERS = 20


def test_the_steady_rate_drops_a_tenth_at_each_end_and_counts_intervals_over_the_span():
    # GIVEN 100 admissions 20 ms apart (50/s), with a slow start of 4 before and a burst of 4 after, inside the trimmed tenths
    steady = [1.0 + 0.02 * n for n in range(100)]
    times = [0.0, 0.5, 0.9, 0.95, *steady, *[3.0 + 0.001 * n for n in range(4)]]
    # WHEN the error against 50/s and against 40/s is computed
    # THEN only the middle counts: exactly 50/s, an error of 0 against 50/s and 0.25 against 40/s
    assert flow_bench.steady_rate(times) == pytest.approx(50.0)
    assert flow_bench.rate_limit_error(times, 50) == pytest.approx(0.0, abs=1e-9)
    assert flow_bench.rate_limit_error(times, 40) == pytest.approx(0.25)


def test_the_peak_counts_the_most_admissions_in_any_one_second_window():
    # GIVEN 10 a second, and then 15 inside half a second  WHEN the peak is taken  THEN it is 15 plus the 5 just before
    times = [0.1 * n for n in range(10)] + [1.0 + 0.03 * n for n in range(15)]
    assert flow_bench.peak_per_second(times) == 15 + 5


def test_an_items_billed_size_counts_names_and_values():
    # GIVEN a rate item: a 42-character key, a 16-digit number  WHEN sized  THEN names plus UTF-8 strings plus ~digits/2 + 1
    item = {"pk": {"S": "flow#rate#" + "a" * 32}, "tat": {"N": "1800000000123456"}}
    assert flow_bench.item_bytes(item) == 2 + 42 + 3 + 9


@pytest.mark.slow  # real time: a few seconds
def test_the_global_rate_runs_every_message_exactly_once_and_counts_its_writes():
    # GIVEN 200 messages at 50/s on 20 workers
    scenario = Scenario("global", 200, {"rate_limit": "50/s"}, 50, "rate")
    # WHEN run
    report = flow_bench.run_scenario(scenario, WORKERS)
    # THEN each ran once, none lost or dead-lettered, and every admission cost at least one UpdateItem (1 write unit)
    assert (report["ran_once"], report["duplicated"], report["lost"], report["throttled_dead_lettered"]) == (200, 0, 0, 0)
    assert report["dynamodb_units_per_message"]["write"] >= 1.0
    assert report["dynamodb_calls"]["update_item"] == pytest.approx(report["dynamodb_units_per_message"]["write"] * 200)
    assert report["largest_item_bytes"] < 1024  # the units assume items under 1 KB
    # AND the turns the limiter gave are 20 ms apart: at most 51 in any second (50 intervals), however late a start ran
    assert report["peak_per_second_by_turn"] <= 51 and report["start_after_turn_ms"]["p50"] >= 0


@pytest.mark.slow  # real time: a few seconds
def test_the_bench_catches_a_concurrency_that_is_not_held():
    # GIVEN a task keyed by tenant whose concurrency option was left out, checked against a limit of 1
    sabotaged = Scenario("concurrency", 200, {}, 1, "concurrency", keys=2, key_field="tenant", task_seconds=(0.02, 0.06))
    # WHEN run on 20 workers
    report = flow_bench.run_scenario(sabotaged, WORKERS)
    # THEN it saw tenants running more than one at once, and said so
    assert report["concurrency_limit_exceeded"] > 0
    assert max(report["most_running_by_key"].values()) > 1
    assert report["ran_once"] == 200 and report["dynamodb_calls"] == {}


@pytest.mark.slow  # real time: a few seconds
def test_each_run_of_a_concurrency_limited_task_takes_and_gives_back_a_slot():
    # GIVEN concurrency 3 per tenant over 10 tenants, tasks of 20-60 ms, and 3 batches (a throttled one waits 30 s or more)
    scenario = Scenario("concurrency", 30, {"concurrency": 3, "concurrency_key": "tenant"}, 3, "concurrency", keys=10,
                        key_field="tenant", task_seconds=(0.02, 0.06))
    # WHEN run on 20 workers
    report = flow_bench.run_scenario(scenario, WORKERS)
    # THEN no tenant ran more than 3, and each run took a slot and gave it back: 2 writes, 2 write units
    assert report["concurrency_limit_exceeded"] == 0 and max(report["most_running_by_key"].values()) <= 3
    assert report["ran_once"] == 30 and report["dynamodb_units_per_message"]["write"] >= 2.0


def test_the_dead_letter_queue_counts_what_the_redrive_policy_moves():
    # GIVEN a queue whose redrive policy moves a message on its 3rd receive, and one message received twice, never deleted
    from bench.memory_sqs import FastQueue

    dlq = FastQueue("dlq")
    queue = FastQueue("work", dead_letter_queue=dlq, max_receive_count=2)
    queue.fill(["m"])
    for _ in range(2):
        [received] = queue.receive_message(QueueUrl=queue.url, VisibilityTimeout=0)["Messages"]
    # WHEN it is received once more
    answer = queue.receive_message(QueueUrl=queue.url)
    # THEN it is not delivered: it is in the dead-letter queue, counted
    assert answer == {} and (len(queue), len(dlq), queue.redriven) == (0, 1, 1)
    assert dlq.receive_message(QueueUrl=dlq.url)["Messages"][0]["Body"] == received["Body"] == "m"
