"""Worker benchmarks: cold import, CPU per message, and SQS calls for retries, each against its baseline.

Run with `make bench` (all benchmarks) or `python -m bench worker`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from bench import results
from worker_tier import contract

REPO = Path(__file__).resolve().parent.parent
IMPORT_RUNS = 15
CPU_ROUNDS = 30
RECORDS_PER_EVENT = 100
RETRY_MESSAGES = 1000
FAILURE_EVERY = 10  # 10 % of messages fail

_IMPORT_PROBE = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"


def cold_import_seconds(module: str) -> float:
    """Import time of ``module`` in a fresh interpreter (interpreter start-up excluded)."""
    environment = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}", "AWS_DEFAULT_REGION": "us-east-1"}
    output = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE.format(module=module)],
        capture_output=True, text=True, check=True, env=environment,
    ).stdout
    return float(output.strip().splitlines()[-1])


def cold_import_ratio() -> dict[str, float]:
    """Median import time of our handler ÷ the baseline handler's, interleaved runs."""
    ours, baseline = [], []
    cold_import_seconds("worker_tier.handlers.worker")  # compile .pyc once for both
    cold_import_seconds("bench.baseline_handler")
    for _ in range(IMPORT_RUNS):
        ours.append(cold_import_seconds("worker_tier.handlers.worker"))
        baseline.append(cold_import_seconds("bench.baseline_handler"))
    return {
        "cold_import_ratio": results.median(ours) / results.median(baseline),
        "cold_import_ms": results.median(ours) * 1000,
        "baseline_cold_import_ms": results.median(baseline) * 1000,
    }


def _event(count: int) -> dict[str, Any]:
    """A Lambda SQS event of ``count`` records for the /noop task."""
    from worker_tier.message import lambda_record

    received = [
        {
            "MessageId": f"m-{i}",
            "ReceiptHandle": f"r-{i}",
            "Body": json.dumps({"n": i}),
            "Attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": str(int(time.time() * 1000))},
            "MessageAttributes": {"beanstalk.sqsd.path": {"DataType": "String", "StringValue": "/noop"}},
        }
        for i in range(count)
    ]
    return {"Records": [lambda_record(m, "arn:aws:sqs:us-east-1:123456789012:work", "us-east-1") for m in received]}


def per_message_cpu_ratio() -> dict[str, float]:
    """CPU per message: our real lambda_handler on a no-op task ÷ Powertools BatchProcessor + json.loads."""
    os.environ.update(
        {
            contract.setting_variable("task_modules"): "bench.noop_tasks",
            contract.QUEUE_URL_VARIABLE: "https://sqs.us-east-1.amazonaws.com/123456789012/work",
            contract.DLQ_URL_VARIABLE: "https://sqs.us-east-1.amazonaws.com/123456789012/dlq",
        }
    )
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

    from worker_tier.handlers import worker as handler
    from worker_tier_local.context import LocalContext

    handler.worker.reset()
    processor = BatchProcessor(event_type=EventType.SQS)
    event = _event(RECORDS_PER_EVENT)

    def ours() -> None:
        assert handler.lambda_handler(event, LocalContext("bench", 300, 256, "us-east-1", "123456789012")) == {"batchItemFailures": []}

    def baseline() -> None:
        process_partial_response(event=event, record_handler=lambda record: json.loads(record.body), processor=processor)

    ours_s, baseline_s = _interleaved_cpu(ours, baseline)
    return {
        "per_message_cpu_ratio": ours_s / baseline_s,
        "per_message_cpu_us": ours_s / RECORDS_PER_EVENT * 1e6,
        "baseline_per_message_cpu_us": baseline_s / RECORDS_PER_EVENT * 1e6,
    }


def _interleaved_cpu(ours: Callable[[], None], baseline: Callable[[], None]) -> tuple[float, float]:
    """Median process-CPU seconds per call of each, alternating so both see the same machine."""
    ours_times, baseline_times = [], []
    with contextlib.redirect_stdout(io.StringIO()):  # EMF metrics go to stdout
        ours()
        baseline()
        for _ in range(CPU_ROUNDS):
            for function, times in ((ours, ours_times), (baseline, baseline_times)):
                started = time.process_time()
                function()
                times.append(time.process_time() - started)
    return results.median(ours_times), results.median(baseline_times)


def retry_api_calls_ratio() -> dict[str, float]:
    """SQS calls per 1,000 messages at 10 % failure in 100-record events: ours ÷ ChangeMessageVisibility per failure."""
    from moto import mock_aws

    with mock_aws():
        ours = _count_retry_calls(_ours_factory)
        naive = _count_retry_calls(_naive_factory)
    return {
        "retry_api_calls_ratio": ours / naive,
        "retry_api_calls_per_1000": ours * 1000 / RETRY_MESSAGES,
        "baseline_retry_api_calls_per_1000": naive * 1000 / RETRY_MESSAGES,
    }


def _count_retry_calls(handler_factory: Callable[[Any, str], Callable[[dict], Any]]) -> int:
    """Send, receive and handle RETRY_MESSAGES in events of 100; return the SQS calls the handler made."""
    import boto3

    from worker_tier.message import lambda_record

    sqs = boto3.client("sqs", region_name="us-east-1")
    url = sqs.create_queue(QueueName=f"bench-{handler_factory.__name__}")["QueueUrl"]
    handle = handler_factory(sqs, url)
    for first in range(0, RETRY_MESSAGES, RECORDS_PER_EVENT):
        for start in range(first, first + RECORDS_PER_EVENT, 10):
            entries = [{"Id": str(i), "MessageBody": "fail" if (start + i) % FAILURE_EVERY == 0 else "ok"} for i in range(10)]
            sqs.send_message_batch(QueueUrl=url, Entries=entries)
        received: list[dict] = []
        while len(received) < RECORDS_PER_EVENT:
            received += sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
            ).get("Messages", [])
        handle({"Records": [lambda_record(m, "arn:aws:sqs:us-east-1:123456789012:bench", "us-east-1") for m in received]})
        for start in range(0, len(received), 10):  # keep moto's queue shallow: it slows as a queue deepens
            chunk = received[start : start + 10]
            sqs.delete_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)]
            )
    return _handler_calls[handler_factory.__name__]


_handler_calls: dict[str, int] = {}


def _counting(sqs: Any, name: str) -> Any:
    """A view of ``sqs`` that counts the calls made through it under ``name``."""
    _handler_calls[name] = 0

    class Counting:
        def __getattr__(self, attribute: str) -> Any:
            method = getattr(sqs, attribute)

            def call(*args: Any, **kwargs: Any) -> Any:
                _handler_calls[name] += 1
                return method(*args, **kwargs)

            return call

    return Counting()


def _ours_factory(sqs: Any, url: str) -> Callable[[dict], Any]:
    """Our Worker: failures' visibility changes batched per event."""
    from worker_tier.registry import Registry
    from worker_tier.settings import Settings
    from worker_tier.worker import Worker

    registry = Registry()

    @registry.task("/")
    def maybe_fail(task: Any) -> None:
        if task.body == "fail":
            raise RuntimeError("fails 10 % of the time")

    worker = Worker(
        Settings(batch_size=RECORDS_PER_EVENT, max_batching_window=1),
        queue_url=url, dead_letter_queue_url=url, registry=registry, sqs=_counting(sqs, "_ours_factory"),
    )
    return lambda event: worker.handle(event, None)


def _naive_factory(sqs: Any, url: str) -> Callable[[dict], Any]:
    """The baseline: one ChangeMessageVisibility call per failed message."""
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

    counted = _counting(sqs, "_naive_factory")
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

    def record_handler(record: Any) -> None:
        if record.body == "fail":
            counted.change_message_visibility(QueueUrl=url, ReceiptHandle=record.receipt_handle, VisibilityTimeout=2)
            raise RuntimeError("fails 10 % of the time")

    return lambda event: process_partial_response(event=event, record_handler=record_handler, processor=processor)


def run() -> Path:
    """Measure all three worker figures and write bench/results/worker.json."""
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "CRITICAL")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "bench")
    figures: dict[str, float] = {}
    figures.update(cold_import_ratio())
    figures.update(per_message_cpu_ratio())
    figures.update(retry_api_calls_ratio())
    goals = {
        "cold_import_ratio": ("<=", 0.4),
        "per_message_cpu_ratio": ("<=", 2.0),
        "retry_api_calls_ratio": ("<=", 0.15),
    }
    return results.write("worker", {k: round(v, 4) for k, v in figures.items()}, goals, "make bench")
