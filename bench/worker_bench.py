"""Worker benchmarks: cold import, CPU per message, and SQS calls for retries, each against its baseline.

Run with `make bench` (all benchmarks) or `python -m bench worker`.

The machine is shared, so each timed figure is measured in ``Sizes.runs`` runs, each of which interleaves
ours with the baseline (CPU time of the hot path; wall time of a fresh interpreter's import), and is
reported as ``{"worst": ..., "median": ..., "runs": [...]}``. A goal counts as met only when its worst
run meets it. The retry figure counts SQS calls, which do not vary: it is measured once.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench import results
from worker_tier.core import contract

REPO = Path(__file__).resolve().parent.parent
FAILURE_EVERY = 10  # 10 % of messages fail
GOALS = {
    "cold_import_ratio": ("<=", 0.3),
    "per_message_cpu_ratio": ("<=", 1.5),
    "retry_api_calls_ratio": ("<=", 0.15),
}

_IMPORT_PROBE = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
_OURS_MODULE = "worker_tier.handlers.worker"
_BASELINE_MODULE = "bench.baseline_handler"


@dataclass(frozen=True)
class Sizes:
    """How much each figure measures: ``make bench`` uses the defaults, the test suite ``TINY``."""

    runs: int = 5  # timed runs per figure: the JSON keeps each one
    import_pairs: int = 9  # fresh-interpreter imports of ours and of the baseline, interleaved, per run
    cpu_rounds: int = 30  # events handled by ours and by the baseline, interleaved, per run
    records_per_event: int = 100  # Lambda's largest standard-queue batch with a batching window
    retry_messages: int = 1000


TINY = Sizes(runs=1, import_pairs=1, cpu_rounds=2, records_per_event=20, retry_messages=40)


def cold_import_seconds(module: str) -> float:
    """Import time of ``module`` in a fresh interpreter (interpreter start-up excluded).

    Both handlers load compiled ``.pyc`` files, as installed packages do, whatever the caller's
    PYTHONDONTWRITEBYTECODE: the first import of each compiles them.
    """
    environment = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}", "AWS_DEFAULT_REGION": "us-east-1"}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    output = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE.format(module=module)],
        capture_output=True, text=True, check=True, env=environment,
    ).stdout
    return float(output.strip().splitlines()[-1])


def cold_import_ratio(pairs: int) -> dict[str, float]:
    """One run: median import time of our handler ÷ the baseline handler's, over interleaved imports."""
    ours: list[float] = []
    baseline: list[float] = []
    for _ in range(pairs):
        ours.append(cold_import_seconds(_OURS_MODULE))
        baseline.append(cold_import_seconds(_BASELINE_MODULE))
    return {
        "cold_import_ratio": results.median(ours) / results.median(baseline),
        "cold_import_ms": results.median(ours) * 1000,
        "baseline_cold_import_ms": results.median(baseline) * 1000,
    }


def _event(count: int) -> dict[str, Any]:
    """A Lambda SQS event of ``count`` records for the /noop task."""
    from worker_tier.core.envelope import lambda_record

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


_HANDLER_ENVIRONMENT = {
    contract.setting_variable("task_modules"): "bench.noop_tasks",
    contract.QUEUE_URL_VARIABLE: "https://sqs.us-east-1.amazonaws.com/123456789012/work",
    contract.DLQ_URL_VARIABLE: "https://sqs.us-east-1.amazonaws.com/123456789012/dlq",
}


def per_message_cpu_ratio(rounds: int, records: int) -> dict[str, float]:
    """One run: CPU per message of our real lambda_handler on a no-op task ÷ Powertools BatchProcessor + json.loads."""
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

    from worker_tier.handlers import worker as handler
    from worker_tier_local.context import LocalContext

    os.environ.update(_HANDLER_ENVIRONMENT)
    handler.worker.reset()
    processor = BatchProcessor(event_type=EventType.SQS)
    event = _event(records)
    context = LocalContext("bench", 300, 256, "us-east-1", "123456789012")

    def ours() -> None:
        assert handler.lambda_handler(event, context) == {"batchItemFailures": []}

    def baseline() -> None:
        process_partial_response(event=event, record_handler=lambda record: json.loads(record.body), processor=processor)

    ours_s, baseline_s = _interleaved_cpu(ours, baseline, rounds)
    return {
        "per_message_cpu_ratio": ours_s / baseline_s,
        "per_message_cpu_us": ours_s / records * 1e6,
        "baseline_per_message_cpu_us": baseline_s / records * 1e6,
    }


def _interleaved_cpu(ours: Callable[[], None], baseline: Callable[[], None], rounds: int) -> tuple[float, float]:
    """Median process-CPU seconds per call of each, alternating so both see the same machine."""
    ours_times: list[float] = []
    baseline_times: list[float] = []
    with contextlib.redirect_stdout(io.StringIO()):  # EMF metrics go to stdout
        ours()
        baseline()
        for _ in range(rounds):
            for function, times in ((ours, ours_times), (baseline, baseline_times)):
                started = time.process_time()
                function()
                times.append(time.process_time() - started)
    return results.median(ours_times), results.median(baseline_times)


def retry_api_calls_ratio(messages: int, per_event: int) -> dict[str, float]:
    """SQS calls per 1,000 messages at 10 % failure: ours ÷ ChangeMessageVisibility per failure."""
    from moto import mock_aws

    with mock_aws():
        ours = _count_retry_calls(_ours_factory, messages, per_event)
        naive = _count_retry_calls(_naive_factory, messages, per_event)
    return {
        "retry_api_calls_ratio": ours / naive,
        "retry_api_calls_per_1000": ours * 1000 / messages,
        "baseline_retry_api_calls_per_1000": naive * 1000 / messages,
    }


def _count_retry_calls(handler_factory: Callable[[Any, str, int], Callable[[dict], Any]], messages: int, per_event: int) -> int:
    """Send, receive and handle ``messages`` in events of ``per_event``; return the SQS calls the handler made."""
    import boto3

    from worker_tier.core.envelope import lambda_record

    sqs = boto3.client("sqs", region_name="us-east-1")
    url = sqs.create_queue(QueueName=f"bench-{handler_factory.__name__}")["QueueUrl"]
    handle = handler_factory(sqs, url, per_event)
    for first in range(0, messages, per_event):
        for start in range(first, first + per_event, 10):
            entries = [{"Id": str(i), "MessageBody": "fail" if (start + i) % FAILURE_EVERY == 0 else "ok"} for i in range(10)]
            sqs.send_message_batch(QueueUrl=url, Entries=entries)
        received: list[dict] = []
        while len(received) < per_event:
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


def _ours_factory(sqs: Any, url: str, per_event: int) -> Callable[[dict], Any]:
    """Our Worker: failures' visibility changes batched per event."""
    from worker_tier.worker.registry import Registry
    from worker_tier.core.settings import Settings
    from worker_tier.worker.batch import Worker

    registry = Registry()

    @registry.task("/")
    def maybe_fail(task: Any) -> None:
        if task.body == "fail":
            raise RuntimeError("fails 10 % of the time")

    worker = Worker(
        Settings(batch_size=per_event, max_batching_window=1),
        queue_url=url, dead_letter_queue_url=url, registry=registry, sqs=_counting(sqs, "_ours_factory"),
    )
    return lambda event: worker.handle(event, None)


def _naive_factory(sqs: Any, url: str, per_event: int) -> Callable[[dict], Any]:
    """The baseline: one ChangeMessageVisibility call per failed message."""
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

    counted = _counting(sqs, "_naive_factory")
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

    def record_handler(record: Any) -> None:
        if record.body == "fail":
            counted.change_message_visibility(QueueUrl=url, ReceiptHandle=record.receipt_handle, VisibilityTimeout=2)
            raise RuntimeError("fails 10 % of the time")

    return lambda event: process_partial_response(event=event, record_handler=record_handler, processor=processor)


def spread(values: list[float]) -> dict[str, Any]:
    """A timed figure over its runs: the worst (highest: every goal here is an upper bound), the median, and each run."""
    return {"worst": round(max(values), 4), "median": round(results.median(values), 4), "runs": [round(v, 4) for v in values]}


def measure(sizes: Sizes = Sizes()) -> dict[str, Any]:
    """Every worker figure: the timed ones as ``spread`` over ``sizes.runs`` runs, the retry count once.

    Sets the handler's ``WORKER_TIER_*`` variables and registers the /noop task in this process:
    run it in a process of its own (``make bench``, or a subprocess in the test suite).
    """
    for name, value in {"POWERTOOLS_LOG_LEVEL": "CRITICAL", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(name, value)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "bench")
    cold_import_seconds(_OURS_MODULE)  # compile each side's .pyc before timing either
    cold_import_seconds(_BASELINE_MODULE)
    runs: dict[str, list[float]] = {}
    for _ in range(sizes.runs):
        timed = {**cold_import_ratio(sizes.import_pairs), **per_message_cpu_ratio(sizes.cpu_rounds, sizes.records_per_event)}
        for key, figure in timed.items():
            runs.setdefault(key, []).append(figure)
    figures: dict[str, Any] = {key: spread(values) for key, values in runs.items()}
    retry = retry_api_calls_ratio(sizes.retry_messages, sizes.records_per_event)
    figures.update({key: round(value, 4) for key, value in retry.items()})
    return figures


def run() -> Path:
    """Measure every worker figure and write bench/results/worker.json."""
    return results.write("worker", measure(), GOALS, "make bench")
