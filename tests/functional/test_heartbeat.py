"""Heartbeats against moto, with short timings: live work keeps its message, dead work gives it back."""

from __future__ import annotations

import threading
import time

from tests.support.fakes import FakeSQS
from tests.support.aws_world import AwsWorld
from worker_tier import Client, Task
from worker_tier.worker.heartbeat import Heartbeat
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.worker.batch import Worker

INTERVAL = 1.0
MARGIN = 1.0
VISIBILITY = 2


def receive_one(aws: AwsWorld, visibility: int = VISIBILITY) -> dict | None:
    got = aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=1, VisibilityTimeout=visibility).get("Messages")
    return got[0] if got else None


def test_live_task_running_three_visibility_timeouts_is_never_received_twice(aws):
    # GIVEN a message received with a 2 s visibility, held by a 1 s heartbeat
    Client(aws.queue_url, sqs=aws.sqs).send("/long", "{}")
    first = receive_one(aws)
    # WHEN the work runs for 3x the visibility timeout while a second consumer keeps polling
    seen_by_second = []
    with Heartbeat(aws.sqs, aws.queue_url, interval_seconds=INTERVAL, margin_seconds=MARGIN) as heartbeat:
        heartbeat.hold(first["MessageId"], first["ReceiptHandle"])
        deadline = time.monotonic() + 3 * VISIBILITY
        while time.monotonic() < deadline:
            message = receive_one(aws)
            if message:
                seen_by_second.append(message)
            time.sleep(0.25)
    # THEN the second consumer never got it
    assert seen_by_second == []


def test_killed_worker_gives_the_message_back_within_about_one_interval(aws):
    # GIVEN a held message whose worker then dies without any cleanup (the heartbeat thread just stops)
    Client(aws.queue_url, sqs=aws.sqs).send("/long", "{}")
    first = receive_one(aws)
    heartbeat = Heartbeat(aws.sqs, aws.queue_url, interval_seconds=INTERVAL, margin_seconds=MARGIN)
    heartbeat.hold(first["MessageId"], first["ReceiptHandle"])
    heartbeat.start()
    time.sleep(2.5 * INTERVAL)
    heartbeat._stopped.set()  # the process is gone: no more beats, no release
    killed_at = time.monotonic()
    # WHEN another consumer polls
    while (message := receive_one(aws)) is None:
        assert time.monotonic() - killed_at < INTERVAL + MARGIN + 2, "not returned within about one interval"
        time.sleep(0.1)
    # THEN it gets the message, within interval + margin of the last beat
    assert message["MessageId"] == first["MessageId"]
    assert time.monotonic() - killed_at <= INTERVAL + MARGIN + 1.5


def test_beats_are_batched_ten_per_call():
    sqs = FakeSQS()
    heartbeat = Heartbeat(sqs, "q", interval_seconds=30)
    for n in range(25):
        heartbeat.hold(f"m{n}", f"r{n}")
    heartbeat.beat()
    assert sqs.count("ChangeMessageVisibilityBatch") == 3
    assert {e["VisibilityTimeout"] for _, params in sqs.calls for e in params["Entries"]} == {40}


def test_near_the_twelve_hour_cap_the_message_is_released_and_the_task_told():
    # GIVEN a message received almost 12 hours ago
    now = [50_000.0]
    sqs = FakeSQS()
    heartbeat = Heartbeat(sqs, "q", interval_seconds=30, clock=lambda: now[0])
    old = heartbeat.hold("old", "r-old", received_at=now[0] - 12 * 3600 + 60)
    heartbeat.hold("young", "r-young")
    task = Task(message_id="old", path="/long", body="{}", lease=old.expired)
    # WHEN the heartbeat beats
    heartbeat.beat()
    # THEN the old one is released for retry (visibility 0) and its task can see it; the young one is extended
    entries = {e["ReceiptHandle"]: e["VisibilityTimeout"] for _, params in sqs.calls for e in params["Entries"]}
    assert entries == {"r-old": 0, "r-young": 40}
    assert task.lease_expired() is True
    assert heartbeat.held() == ["young"]


def test_worker_holds_pending_and_succeeded_messages_but_not_failed_ones(aws):
    # GIVEN a batch: one fails at once, one succeeds at once, one runs for 2.5 heartbeats
    tasks = Registry()
    tasks.task("/fail")(lambda t: (_ for _ in ()).throw(RuntimeError("no")))
    tasks.task("/quick")(lambda t: None)
    leases = []

    @tasks.task("/slow", heartbeat=True)
    def slow(task: Task) -> None:
        leases.append(task.lease_expired())
        time.sleep(2.5)

    client = Client(aws.queue_url, sqs=aws.sqs)
    for path in ("/fail", "/quick", "/slow"):
        client.send(path, "{}")
    event = aws.receive_event(visibility=15)
    ids = {r["messageAttributes"]["beanstalk.sqsd.path"]["stringValue"]: r["receiptHandle"] for r in event["Records"]}
    worker = Worker(Settings(heartbeat_interval=1, visibility_timeout=300), queue_url=aws.queue_url,
                    dead_letter_queue_url=aws.dead_letter_queue_url, registry=tasks, sqs=aws.sqs, random=lambda: 0.999)
    # WHEN handled
    before = set(threading.enumerate())
    response = worker.handle(event, None)
    # THEN beats extended the succeeded and the running message, never the failed one, whose backoff came last
    beats = list(aws.params("ChangeMessageVisibilityBatch"))
    extended = [{e["ReceiptHandle"] for e in params["Entries"] if e["VisibilityTimeout"] == 11} for params in beats[:-1]]
    assert len(extended) >= 2 and all(handles == {ids["/quick"], ids["/slow"]} for handles in extended)
    assert [(e["ReceiptHandle"], e["VisibilityTimeout"]) for e in beats[-1]["Entries"]] == [(ids["/fail"], 2)]
    assert len(response["batchItemFailures"]) == 1 and leases == [False]
    started = [t.name for t in threading.enumerate() if t not in before]
    assert "worker-tier-heartbeat" not in started  # the batch's heartbeat thread is gone (others' threads don't count)
