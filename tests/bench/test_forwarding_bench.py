"""The forwarding benchmark runs once at its tiny size against real gunicorn and uvicorn, so it cannot rot (its
figures are not asserted against goals); its in-memory SQS queue keeps SQS's rules for the calls it answers."""

from __future__ import annotations

import threading
import time

import pytest
from botocore.exceptions import ClientError

from bench import forwarding_bench
from bench.memory_sqs import FastQueue

ALL = {"MessageSystemAttributeNames": ["All"], "MessageAttributeNames": ["All"]}


def test_the_forwarding_benchmark_measures_ours_and_direct_on_both_app_servers_at_tiny_size():
    # GIVEN the forwarding benchmark at its tiny size (gunicorn and uvicorn are installed with the dev extras)
    # WHEN it measures
    try:
        figures = forwarding_bench.measure(forwarding_bench.TINY, keep_going=False)
    except forwarding_bench.ServerUnavailableError as error:
        pytest.skip(f"an app server could not start here: {error}")
    # THEN the goal has its figure, over ours' runs on both servers: one run each, the worst the lowest
    overall = figures["forwarding_msgs_per_s"]
    assert len(overall["runs"]) == 2 and overall["worst"] == min(overall["runs"]) > 0
    assert set(forwarding_bench.GOALS) <= set(figures)
    for server in forwarding_bench.SERVERS:
        # AND each server has ours and direct side by side, with the worker's CPU per message and their ratio
        ours, direct = figures[f"{server}_msgs_per_s"], figures[f"{server}_direct_msgs_per_s"]
        assert ours["runs"] == [ours["worst"]] and ours["worst"] > 0 and direct["worst"] > 0
        assert figures[f"{server}_ratio_vs_direct"]["worst"] == pytest.approx(ours["worst"] / direct["worst"], rel=1e-3)
        assert figures[f"{server}_worker_cpu_us_per_msg"]["worst"] > 0
        assert figures[f"{server}_direct_client_cpu_us_per_msg"]["worst"] > 0
        # AND the worker received up to 10 messages a call (one receive per free thread would be 1 a message)
        assert 0 < figures[f"{server}_receives_per_msg"]["worst"] <= 1
    assert figures["concurrency"] == 50  # http_connections' default: the container worker's threads with app_port


def test_a_server_that_cannot_start_is_recorded_as_failed_and_never_passes_for_a_met_goal(monkeypatch):
    # GIVEN an app server whose command exits at once
    monkeypatch.setitem(forwarding_bench.SERVERS, "broken", ["-c", "raise SystemExit(3)"])
    # WHEN the benchmark measures it alone
    figures = forwarding_bench.measure(forwarding_bench.TINY, servers=("broken",))
    # THEN its failure is in the figures, with its reason, and the goal's figure is 0
    assert figures["broken_failed"].startswith("ServerUnavailableError: broken exited")
    assert figures["forwarding_msgs_per_s"] == {"worst": 0.0, "median": 0.0, "runs": []}


def test_a_throughput_figure_keeps_its_lowest_run_as_worst_and_a_cost_its_highest():
    # GIVEN three runs
    runs = [900.0, 1200.0, 1000.0]
    # WHEN spread as a throughput (higher is better) and as a cost
    # THEN the worst is the lowest, then the highest, beside the median and every run
    assert forwarding_bench.spread(runs, higher_is_better=True) == {"worst": 900.0, "median": 1000.0, "runs": runs}
    assert forwarding_bench.spread(runs, higher_is_better=False)["worst"] == 1200.0


def test_the_benchmark_queue_hides_a_received_message_until_it_is_deleted_or_its_visibility_lapses():
    # GIVEN a queue on a clock the test moves, with two messages
    now = [1000.0]
    queue = FastQueue(clock=lambda: now[0])
    queue.fill(["a", "b"])
    # WHEN one is received for 30 s
    first = queue.receive_message(QueueUrl=queue.url, MaxNumberOfMessages=1, VisibilityTimeout=30, **ALL)["Messages"][0]
    # THEN it carries SQS's attributes, and only the other is visible meanwhile
    assert first["Body"] == "a" and first["Attributes"]["ApproximateReceiveCount"] == "1"
    assert {"SentTimestamp", "ApproximateFirstReceiveTimestamp", "SenderId"} <= set(first["Attributes"])
    second = queue.receive_message(QueueUrl=queue.url, MaxNumberOfMessages=10, VisibilityTimeout=30)["Messages"]
    assert [m["Body"] for m in second] == ["b"] and "Attributes" not in second[0]  # attributes only when asked for
    assert queue.receive_message(QueueUrl=queue.url, MaxNumberOfMessages=10) == {}
    # AND once its visibility lapses it comes back with a new handle; the earlier handle then deletes nothing
    now[0] += 31
    again = queue.receive_message(QueueUrl=queue.url, MaxNumberOfMessages=1, VisibilityTimeout=30, **ALL)["Messages"][0]
    assert again["MessageId"] == first["MessageId"] and again["ReceiptHandle"] != first["ReceiptHandle"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    stale = queue.delete_message_batch(QueueUrl=queue.url, Entries=[{"Id": "0", "ReceiptHandle": first["ReceiptHandle"]}])
    assert stale == {"Successful": [{"Id": "0"}], "Failed": []} and len(queue) == 2
    # AND a handle SQS never gave is a Failed entry; the current handles delete, and the queue is drained
    answer = queue.delete_message_batch(QueueUrl=queue.url, Entries=[
        {"Id": "0", "ReceiptHandle": again["ReceiptHandle"]}, {"Id": "1", "ReceiptHandle": "made-up"},
        {"Id": "2", "ReceiptHandle": second[0]["ReceiptHandle"]}])
    assert answer["Successful"] == [{"Id": "0"}, {"Id": "2"}]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in answer["Failed"]] == [("1", "ReceiptHandleIsInvalid", True)]
    assert queue.drained.is_set() and len(queue) == 0


def test_the_benchmark_queue_releases_a_message_at_visibility_zero_and_refuses_what_sqs_refuses():
    # GIVEN a received message
    queue = FastQueue()
    queue.fill(["a"])
    message = queue.receive_message(QueueUrl=queue.url, VisibilityTimeout=30)["Messages"][0]
    # WHEN its visibility is set to 0 (a release), it is received again at once
    changed = queue.change_message_visibility_batch(
        QueueUrl=queue.url, Entries=[{"Id": "0", "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": 0}])
    assert changed == {"Successful": [{"Id": "0"}], "Failed": []}
    assert queue.receive_message(QueueUrl=queue.url)["Messages"][0]["MessageId"] == message["MessageId"]
    # THEN an earlier handle no longer changes it, and SQS's limits are refused with SQS's codes
    stale = queue.change_message_visibility_batch(
        QueueUrl=queue.url, Entries=[{"Id": "0", "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": 5}])
    assert stale["Failed"][0]["Code"] == "ReceiptHandleIsInvalid"
    refusals = [
        lambda: queue.receive_message(QueueUrl=queue.url, MaxNumberOfMessages=11),
        lambda: queue.receive_message(QueueUrl=queue.url, WaitTimeSeconds=21),
        lambda: queue.delete_message_batch(QueueUrl=queue.url, Entries=[]),
        lambda: queue.delete_message_batch(QueueUrl=queue.url, Entries=[{"Id": str(i), "ReceiptHandle": "x"} for i in range(11)]),
        lambda: queue.delete_message_batch(QueueUrl=queue.url, Entries=[{"Id": "1", "ReceiptHandle": "x"}] * 2),
        lambda: queue.receive_message(QueueUrl=queue.url + "-other"),
    ]
    codes = []
    for refused in refusals:
        with pytest.raises(ClientError) as error:
            refused()
        codes.append(error.value.response["Error"]["Code"])
    assert codes == ["InvalidParameterValue", "InvalidParameterValue", "AWS.SimpleQueueService.EmptyBatchRequest",
                     "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
                     "AWS.SimpleQueueService.NonExistentQueue"]


def test_a_long_poll_on_the_benchmark_queue_answers_as_soon_as_a_message_arrives():
    # GIVEN an empty queue and a receive waiting up to 20 s
    queue = FastQueue()
    answers = []
    poll = threading.Thread(target=lambda: answers.append(queue.receive_message(QueueUrl=queue.url, WaitTimeSeconds=20)))
    started = time.monotonic()
    poll.start()
    time.sleep(0.1)
    # WHEN a message is put in
    queue.fill(["a"])
    poll.join(5)
    # THEN the poll answers with it at once, not after its wait
    assert [m["Body"] for m in answers[0]["Messages"]] == ["a"]
    assert time.monotonic() - started < 5
