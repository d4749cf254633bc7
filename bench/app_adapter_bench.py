"""App adapter benchmark: per-message CPU of an EB worker app run through the worker, against Flask's own test client.

Run with `make bench` (all benchmarks) or `python -m bench app_adapter`.

Ours: a minimal Flask route (it reads the JSON body and answers 200) behind ``Worker.handle``, which builds
sqsd's request of each record, calls the app in-process (``worker_tier.app.app_adapter``) and judges its answer,
on an in-memory SQS (the success path makes no call); also the same route in FastAPI, through a2wsgi, with no
baseline (FastAPI's test client needs httpx, which this project does not install). The baseline: the same route called with
``app.test_client().post(...)``, once per message, with the same body: the cheapest way Flask itself
offers to call a route without a server. Both are timed in process CPU, interleaved round by round, over
``Sizes.runs`` runs; the goal counts as met only when the worst run meets it.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import results
from bench.worker_bench import _interleaved_cpu, spread  # one way to time and report, shared

GOALS = {"app_adapter_overhead_ratio": ("<=", 1.5)}
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:work"


@dataclass(frozen=True)
class Sizes:
    """How much each run measures: ``make bench`` uses the defaults, the test suite ``TINY``."""

    runs: int = 5
    rounds: int = 30  # events through ours and the baseline, interleaved, per run
    records_per_event: int = 100


TINY = Sizes(runs=1, rounds=2, records_per_event=10)


def minimal_app() -> Any:
    """The route both sides call: it reads the JSON body, as an EB worker's route does, and answers 200."""
    from flask import Flask, request

    app = Flask("bench")

    @app.post("/")
    def work() -> str:
        request.get_json()
        return "ok"

    return app


def minimal_asgi_app() -> Any:
    """The same route in FastAPI, which reaches the worker through a2wsgi's bridge."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/")
    async def work(job: dict) -> str:  # FastAPI reads and parses the JSON body for it
        return "ok"

    return app


def _event(count: int) -> dict[str, Any]:
    """A Lambda SQS event of ``count`` JSON task bodies, with no route: each goes to the app's http_path."""
    from worker_tier.core.envelope import lambda_record

    sent_ms = str(int(time.time() * 1000))
    received = [
        {
            "MessageId": f"m-{i}",
            "ReceiptHandle": f"r-{i}",
            "Body": json.dumps({"task": "noop", "arguments": {"n": i}}),
            "Attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": sent_ms, "ApproximateFirstReceiveTimestamp": sent_ms},
            "MessageAttributes": {},
        }
        for i in range(count)
    ]
    return {"Records": [lambda_record(m, QUEUE_ARN, "us-east-1") for m in received]}


def overhead_ratio(rounds: int, records: int) -> dict[str, float]:
    """One run: CPU per message of the app through Worker.handle ÷ through Flask's test client."""
    from tests.support.fakes import FakeSQS
    from worker_tier.app.app_adapter import InProcessTarget
    from worker_tier.worker.registry import Registry
    from worker_tier.core.settings import Settings
    from worker_tier.worker.batch import Worker

    app = minimal_app()
    worker = Worker(
        Settings(), queue_url="https://sqs.example/work", dead_letter_queue_url="https://sqs.example/dlq",
        registry=Registry(), sqs=FakeSQS(), app_target=InProcessTarget(app, reference="bench:minimal_app"),
    )
    event = _event(records)
    client = app.test_client()
    bodies = [record["body"] for record in event["Records"]]

    def ours() -> None:
        assert worker.handle(event, None) == {"batchItemFailures": []}

    def baseline() -> None:
        for body in bodies:
            assert client.post("/", data=body, headers={"Content-Type": "application/json"}).status_code == 200

    def bare() -> None:
        for body in bodies:
            _call_bare(app, body.encode())

    asgi_worker = Worker(
        Settings(), queue_url="https://sqs.example/work", dead_letter_queue_url="https://sqs.example/dlq",
        registry=Registry(), sqs=FakeSQS(), app_target=InProcessTarget(minimal_asgi_app(), reference="bench:minimal_asgi_app"),
    )

    def asgi() -> None:
        assert asgi_worker.handle(event, None) == {"batchItemFailures": []}

    ours_s, baseline_s = _interleaved_cpu(ours, baseline, rounds)
    ours_again_s, bare_s = _interleaved_cpu(ours, bare, rounds)
    asgi_s, _ = _interleaved_cpu(asgi, bare, rounds)
    return {
        "app_adapter_overhead_ratio": ours_s / baseline_s,
        "app_adapter_per_message_cpu_us": ours_s / records * 1e6,
        "flask_test_client_per_message_cpu_us": baseline_s / records * 1e6,
        # No goal: the whole worker (batch, sqsd's request, outcome, metrics) over the app alone, called bare.
        "app_adapter_vs_bare_wsgi_ratio": ours_again_s / bare_s,
        "bare_wsgi_per_message_cpu_us": bare_s / records * 1e6,
        # No goal: the same route in FastAPI through the worker and a2wsgi (process CPU: the bridge's loop thread too).
        "asgi_app_per_message_cpu_us": asgi_s / records * 1e6,
    }


_BARE_ENVIRON = {
    "REQUEST_METHOD": "POST", "SCRIPT_NAME": "", "PATH_INFO": "/", "QUERY_STRING": "", "SERVER_NAME": "localhost",
    "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1", "CONTENT_TYPE": "application/json", "wsgi.version": (1, 0),
    "wsgi.url_scheme": "http", "wsgi.multithread": False, "wsgi.multiprocess": False, "wsgi.run_once": False,
}


def _call_bare(app: Any, body: bytes) -> None:
    """The app called as a WSGI server would at the least: a minimal environ, its answer read and closed."""
    environ = {**_BARE_ENVIRON, "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body), "wsgi.errors": io.StringIO()}
    answer = app(environ, lambda status, headers, exc_info=None: None)
    b"".join(answer)
    answer.close()


def measure(sizes: Sizes = Sizes()) -> dict[str, Any]:
    """Every figure, as ``spread`` over ``sizes.runs`` runs."""
    runs: dict[str, list[float]] = {}
    for _ in range(sizes.runs):
        for key, figure in overhead_ratio(sizes.rounds, sizes.records_per_event).items():
            runs.setdefault(key, []).append(figure)
    return {key: spread(values) for key, values in runs.items()}


def run() -> Path:
    """Measure and write bench/results/app_adapter.json."""
    return results.write("app_adapter", measure(), GOALS, "make bench")
