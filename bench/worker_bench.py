"""Worker benchmarks: cold start, CPU per message, and SQS calls for retries, each against its baseline.

Run with `make bench` (all benchmarks) or `python -m bench worker`.

The machine is shared, so each timed figure is measured in ``Sizes.runs`` runs, each of which interleaves
ours with the baseline (CPU time of the hot path; wall time of fresh interpreters), and is reported as
``{"worst": ..., "median": ..., "runs": [...]}``. A goal counts as met only when its worst run meets it.
The retry figure counts SQS calls, which do not vary: it is measured once.

Cold start (``cold_start_ratio``) is what a user waits for on a new execution environment: a fresh process
imports the handler and runs its first 10-record batch, whose AWS calls a local moto server answers
(``bench.local_aws_server``, the same for both). Two scenarios: every record succeeds, or one fails (ours then
sets its visibility: boto3 is imported and its client made in this first batch; the baseline, whose client
exists from its import, makes the same call). The figure is the worse scenario's. ``cold_import_ratio`` (the
import alone) is kept as a detail, without a goal: our handler defers boto3 to the first call that needs it.
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
    "cold_start_ratio": ("<=", 0.9),
    "per_message_cpu_ratio": ("<=", 1.2),
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
    cold_start_pairs: int = 9  # fresh processes per handler and scenario (import + first batch), interleaved, per run
    cpu_rounds: int = 200  # events handled by ours and by the baseline, interleaved, per run
    records_per_event: int = 100  # Lambda's largest standard-queue batch with a batching window
    retry_messages: int = 1000


TINY = Sizes(runs=1, import_pairs=1, cold_start_pairs=1, cpu_rounds=2, records_per_event=20, retry_messages=40)


def cold_import_seconds(module: str) -> float:
    """Import time of ``module`` in a fresh interpreter (interpreter start-up excluded).

    Both handlers load compiled ``.pyc`` files, as installed packages do, whatever the caller's
    PYTHONDONTWRITEBYTECODE: the first import of each compiles them.
    """
    output = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE.format(module=module)],
        capture_output=True, text=True, check=True, env=_bench_environment(),
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


# The probe: json is imported before the clock starts, as Lambda's runtime has it (it parses the event with it).
_COLD_START_PROBE = """\
import json, sys, time
with open(sys.argv[1]) as file:
    event = json.load(file)
class Context:
    function_name, function_version, memory_limit_in_mb = "cold-start", "$LATEST", "256"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:cold-start"
    aws_request_id, log_group_name, log_stream_name = "cold-start-1", "/aws/lambda/cold-start", "cold-start"
    def get_remaining_time_in_millis(self):
        return 300_000
started, cpu_started = time.perf_counter(), time.process_time()
import {module} as handler
response = handler.lambda_handler(event, Context())
elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
print("cold-start", elapsed, cpu, json.dumps(response))
"""
_COLD_START_SCENARIOS = {"success": 0, "failure": 1}  # scenario → records of the 10 that fail
_COLD_START_RECORDS = 10
_COLD_START_QUEUE = "cold-start"


@dataclass
class LocalAws:
    """The moto server both handlers' cold starts call (``bench.local_aws_server``), and the bench's client of it."""

    endpoint: str
    process: subprocess.Popen[str]
    sqs: Any = None
    queue_url: str = ""

    def calls(self) -> dict[str, int]:
        """AWS calls answered so far, by action."""
        import urllib.request

        from bench.local_aws_server import CALLS_PATH

        with urllib.request.urlopen(self.endpoint + CALLS_PATH, timeout=10) as answer:
            return dict(json.loads(answer.read()))


@contextlib.contextmanager
def local_aws() -> Any:
    """Start the moto server, make the cold-start queue on it; stop the server after."""
    import boto3

    process = subprocess.Popen(
        [sys.executable, "-m", "bench.local_aws_server"], stdout=subprocess.PIPE, text=True, cwd=REPO, env=_bench_environment(),
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline().split()
        if ready[:1] != ["ready"]:
            raise RuntimeError(f"the local AWS server did not start: {ready}")
        server = LocalAws(f"http://127.0.0.1:{ready[1]}", process)
        server.sqs = boto3.client("sqs", endpoint_url=server.endpoint, region_name="us-east-1",
                                  aws_access_key_id="bench", aws_secret_access_key="bench")
        server.queue_url = server.sqs.create_queue(QueueName=_COLD_START_QUEUE)["QueueUrl"]
        yield server
    finally:
        process.terminate()
        process.wait(timeout=10)


def _bench_environment() -> dict[str, str]:
    """The caller's environment, with this repo's code first and compiled ``.pyc`` files allowed (as installed)."""
    environment = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}", "AWS_DEFAULT_REGION": "us-east-1"}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    return environment


def _cold_start_event(server: LocalAws, failing: int, path: Path) -> list[str]:
    """Send and receive 10 messages for the parse-or-fail task (``failing`` of them fail), write their Lambda event
    to ``path``; return their receipt handles."""
    from worker_tier.core.envelope import lambda_record

    sqs, url = server.sqs, server.queue_url
    route = {contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/parse-or-fail"}}
    bodies = [json.dumps("fail") if i < failing else json.dumps({"n": i}) for i in range(_COLD_START_RECORDS)]
    sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": str(i), "MessageBody": body, "MessageAttributes": route} for i, body in enumerate(bodies)
    ])
    received: list[dict[str, Any]] = []
    while len(received) < _COLD_START_RECORDS:
        received += sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=300, MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
    arn = f"arn:aws:sqs:us-east-1:123456789012:{_COLD_START_QUEUE}"
    path.write_text(json.dumps({"Records": [lambda_record(m, arn, "us-east-1") for m in received]}))
    return [m["ReceiptHandle"] for m in received]


@dataclass(frozen=True)
class ColdStart:
    """One fresh process's cold start: wall and CPU seconds from before the import to the first batch's return."""

    seconds: float
    cpu_seconds: float
    calls: dict[str, int]  # the AWS calls it made, by action


def cold_start(module: str, server: LocalAws, failing: int, workdir: Path) -> ColdStart:
    """One fresh process: import ``module`` and run its first batch of 10 (``failing`` fail); its times from before
    the import to the batch's return (interpreter start-up excluded), and the AWS calls it made.

    Raises when the batch's answer is not the one expected: each failure, and only those, reported.
    """
    event_file = workdir / "event.json"
    handles = _cold_start_event(server, failing, event_file)
    environment = {
        **_bench_environment(), **_HANDLER_ENVIRONMENT,
        contract.QUEUE_URL_VARIABLE: server.queue_url, contract.DLQ_URL_VARIABLE: server.queue_url,
        "QUEUE_URL": server.queue_url,  # the baseline's
        "AWS_ENDPOINT_URL": server.endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
        "POWERTOOLS_LOG_LEVEL": "INFO",  # as deployed: ours writes its failure's warning line, as it would on Lambda
    }
    environment.pop("AWS_PROFILE", None)
    before = server.calls()
    finished = subprocess.run(
        [sys.executable, "-c", _COLD_START_PROBE.format(module=module), str(event_file)],
        capture_output=True, text=True, env=environment, check=False, timeout=120,
    )
    calls = server.calls()
    made = {action: count - before.get(action, 0) for action, count in calls.items() if count > before.get(action, 0)}
    server.sqs.delete_message_batch(QueueUrl=server.queue_url, Entries=[
        {"Id": str(i), "ReceiptHandle": handle} for i, handle in enumerate(handles)
    ])
    lines = [line for line in finished.stdout.splitlines() if line.startswith("cold-start ")]
    if finished.returncode != 0 or not lines:
        raise RuntimeError(f"the cold-start probe of {module} failed: {finished.stderr[-2000:]}")
    _, elapsed, cpu, response = lines[-1].split(" ", 3)
    reported = len(json.loads(response)["batchItemFailures"])
    if reported != failing:
        raise RuntimeError(f"{module}'s first batch reported {reported} failures, not {failing}: {response}")
    return ColdStart(float(elapsed), float(cpu), made)


def cold_start_ratio(server: LocalAws, pairs: int, workdir: Path) -> tuple[dict[str, float], dict[str, Any]]:
    """One run: per scenario, the median cold start of ours ÷ the baseline's over interleaved fresh processes
    (which goes first alternates); ``cold_start_ratio`` is the worse scenario's. Also the AWS calls each made."""
    figures: dict[str, float] = {}
    calls: dict[str, Any] = {}
    for scenario, failing in _COLD_START_SCENARIOS.items():
        starts: dict[str, list[ColdStart]] = {_OURS_MODULE: [], _BASELINE_MODULE: []}
        for pair in range(pairs):
            order = (_OURS_MODULE, _BASELINE_MODULE) if pair % 2 == 0 else (_BASELINE_MODULE, _OURS_MODULE)
            for module in order:
                starts[module].append(start := cold_start(module, server, failing, workdir))
                calls.setdefault(scenario, {})["ours" if module == _OURS_MODULE else "baseline"] = start.calls
        ours = results.median([s.seconds for s in starts[_OURS_MODULE]])
        baseline = results.median([s.seconds for s in starts[_BASELINE_MODULE]])
        figures[f"cold_start_{scenario}_ratio"] = ours / baseline
        figures[f"cold_start_{scenario}_ms"] = ours * 1000
        figures[f"baseline_cold_start_{scenario}_ms"] = baseline * 1000
        cpu = [results.median([s.cpu_seconds for s in starts[m]]) for m in (_OURS_MODULE, _BASELINE_MODULE)]
        figures[f"cold_start_{scenario}_cpu_ratio"] = cpu[0] / cpu[1]
    figures["cold_start_ratio"] = max(figures[f"cold_start_{s}_ratio"] for s in _COLD_START_SCENARIOS)
    return figures, calls


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
    import tempfile

    for name, value in {"POWERTOOLS_LOG_LEVEL": "CRITICAL", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(name, value)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "bench")
    cold_import_seconds(_OURS_MODULE)  # compile each side's .pyc before timing either
    cold_import_seconds(_BASELINE_MODULE)
    runs: dict[str, list[float]] = {}
    calls: dict[str, Any] = {}
    with local_aws() as server, tempfile.TemporaryDirectory() as workdir:
        for failing in _COLD_START_SCENARIOS.values():  # a first probe of each, untimed: moto's first answers are slow
            for module in (_OURS_MODULE, _BASELINE_MODULE):
                cold_start(module, server, failing, Path(workdir))
        for _ in range(sizes.runs):
            cold, calls = cold_start_ratio(server, sizes.cold_start_pairs, Path(workdir))
            timed = {**cold, **cold_import_ratio(sizes.import_pairs),
                     **per_message_cpu_ratio(sizes.cpu_rounds, sizes.records_per_event)}
            for key, figure in timed.items():
                runs.setdefault(key, []).append(figure)
    figures: dict[str, Any] = {key: spread(values) for key, values in sorted(runs.items(), key=_figure_order)}
    figures["cold_start_aws_calls"] = calls
    retry = retry_api_calls_ratio(sizes.retry_messages, sizes.records_per_event)
    figures.update({key: round(value, 4) for key, value in retry.items()})
    return figures


def _figure_order(item: tuple[str, Any]) -> tuple[int, str]:
    """Goal figures first, in the order of GOALS; then the details by name."""
    goals = list(GOALS)
    return (goals.index(item[0]), "") if item[0] in goals else (len(goals), item[0])


def run() -> Path:
    """Measure every worker figure and write bench/results/worker.json."""
    return results.write("worker", measure(), GOALS, "make bench")
