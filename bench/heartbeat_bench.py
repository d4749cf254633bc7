"""Heartbeat benchmark: SQS calls per in-flight message per minute, batched heartbeat vs a per-message watchdog.

Both keep the same messages invisible with the same timings (30 s beats) over the same
simulated ten minutes; calls are counted on an in-memory SQS.
"""

from __future__ import annotations

from bench import results
from tests.support.fakes import FakeSQS
from worker_tier.worker.heartbeat import Heartbeat

IN_FLIGHT = (1, 10, 100)  # a single task, a Lambda batch of 10, a container running 100
MINUTES = 10
INTERVAL_SECONDS = 30


def batched_calls(in_flight: int) -> int:
    sqs = FakeSQS()
    heartbeat = Heartbeat(sqs, "q", interval_seconds=INTERVAL_SECONDS)
    for n in range(in_flight):
        heartbeat.hold(f"m{n}", f"r{n}")
    for _ in range(MINUTES * 60 // INTERVAL_SECONDS):
        heartbeat.beat()
    return len(sqs.calls)


def watchdog_calls(in_flight: int) -> int:
    """The baseline: each message's own watchdog calls ChangeMessageVisibility every beat."""
    sqs = FakeSQS()
    for _ in range(MINUTES * 60 // INTERVAL_SECONDS):
        for n in range(in_flight):
            sqs.change_message_visibility(QueueUrl="q", ReceiptHandle=f"r{n}", VisibilityTimeout=INTERVAL_SECONDS + 10)
    return len(sqs.calls)


def run():
    figures: dict[str, float] = {}
    for in_flight in IN_FLIGHT:
        ours = batched_calls(in_flight) / in_flight / MINUTES
        base = watchdog_calls(in_flight) / in_flight / MINUTES
        figures[f"calls_per_message_minute_{in_flight}_in_flight"] = ours
        figures[f"baseline_calls_per_message_minute_{in_flight}_in_flight"] = base
        figures[f"heartbeat_calls_ratio_{in_flight}_in_flight"] = ours / base
    figures["heartbeat_calls_ratio"] = figures["heartbeat_calls_ratio_10_in_flight"]
    return results.write("heartbeat", {k: round(v, 4) for k, v in figures.items()}, {"heartbeat_calls_ratio": ("<=", 0.15)}, "make bench")
