"""The container worker against Celery and Dramatiq on SQS, side by side on one moto server.

Run with `make bench` (all benchmarks) or `python -m bench peers`; writes bench/results/peers.json.

Setup. One moto server (``bench.peers.server``, its own process) serves two ports: the
workers use the counted one, the bench's producer the other. Each framework gets a fresh
queue and one worker process with concurrency 4 and its recommended SQS settings
(``bench.peers.frameworks``), which drains one scenario after the other: ``messages`` no-op
tasks each, sent through the framework's own client in chunks of ``SEND_CHUNK`` while fewer
than ``DEPTH_LOW`` are visible (moto slows as a queue deepens). Each task appends its id to a
file (``bench.peers.runs``).

Measures, from the first message sent to the queue being empty with every run recorded:
- SQS requests per message, counted at the server by action (start-up calls excluded: the
  window opens once the worker has polled and settled);
- CPU seconds per 1,000 messages of the worker's process tree (psutil: user + system of
  every live process in it, plus what its reaped children used);
- wall seconds to drain;
- lost (fewer runs than planned) and duplicated (more) tasks, read from the runs file after
  ``settle_seconds`` more, so a late redelivery would be seen.

The retry scenario fails every 10th task's first run, so each of those must run exactly twice.
Each framework's retry mechanism on SQS is described in ``bench.peers.frameworks`` and in the
results ("frameworks" → name → "retry").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from bench import results
from bench.peers import runs
from bench.peers.frameworks import CELERY, CREDENTIALS, DRAMATIQ, FRAMEWORKS, OURS, Endpoints, Feed, Framework

REPO = Path(__file__).resolve().parent.parent
MESSAGES = 2000
FAIL_EVERY = 10  # the retry scenario: 10 % of tasks fail their first run
DEPTH_LOW = 100  # send another chunk while fewer than this are visible
SEND_CHUNK = 50
SETTLE_SECONDS = 3.0
READY_SETTLE_SECONDS = 1.0
READY_TIMEOUT_SECONDS = 90.0
DRAIN_TIMEOUT_SECONDS = 900.0
STOP_TIMEOUT_SECONDS = 2.0
POLL_SECONDS = 0.1  # the bench's own checks of depth and runs: each is a request the one moto process must serve
SCENARIOS = {"plain": 0, "retry": FAIL_EVERY}
FIGURE_KEYS = ("api_calls_per_message", "cpu_seconds_per_1000_messages", "wall_seconds_to_drain", "lost", "duplicated")
METHOD = {
    "api_calls": "requests on the moto server's counted port by SQS action (X-Amz-Target or Action), from the "
                 "first message sent to the drain; the producer uses another port; start-up calls excluded",
    "cpu": "user + system seconds of the worker's process tree (psutil: every live process, plus reaped children)",
    "lost_duplicated": "tasks append their id to a file; a task planned once (twice if it fails once) that ran "
                       "fewer times is lost, more times duplicated",
    "moto": "actions other than ReceiveMessage are serialized: moto's delete_message is not thread-safe",
    "concurrency": 4,
}
GOALS = {
    "api_calls_ratio_vs_celery": ("<=", 0.3),
    "api_calls_ratio_vs_dramatiq": ("<=", 0.5),
    "cpu_per_message_ratio_vs_fastest_peer": ("<=", 1.0),
    "lost_total": ("==", 0),
    "duplicated_total": ("==", 0),
}


class MotoServer:
    """``python -m bench.peers.server`` as a child process: its two ports and its request counts."""

    def __enter__(self) -> MotoServer:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.peers.server"], cwd=REPO, env=_environment({}),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        line = self._process.stdout.readline().split()  # type: ignore[union-attr]
        if line[:1] != ["ready"]:
            self._process.kill()
            raise RuntimeError(f"the moto server did not start: it printed {line!r}, not 'ready <port> <port>'")
        host = "127.0.0.1"
        self.endpoints = Endpoints(counted=f"{host}:{line[1]}", producer=f"{host}:{line[2]}")
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._process.kill()
        self._process.wait()

    def counts(self) -> Counter[str]:
        """Requests on the counted port so far, by SQS action."""
        with urllib.request.urlopen(f"http://{self.endpoints.counted}/peers-bench/counts") as response:
            return Counter(json.loads(response.read()))


def measure(server: MotoServer, framework: Framework, messages: int, settle_seconds: float, workdir: Path) -> dict[str, Any]:
    """One framework's worker drains ``messages`` tasks per scenario, one scenario after the other; its figures by scenario."""
    queue = f"{framework.name}-{uuid.uuid4().hex[:8]}"
    feed = framework.feed(server.endpoints, queue)
    runs_dir = workdir / queue
    runs_dir.mkdir()
    variables = {**feed.environment, runs.RUNS_DIR_VARIABLE: str(runs_dir)}
    with open(runs_dir / "worker.log", "wb") as log:
        worker = subprocess.Popen(feed.command, cwd=REPO, env=_environment(variables), stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            _wait_polling(server, worker)
            return {
                scenario: _measure_scenario(server, worker, feed, runs_dir, messages, fail_every, settle_seconds)
                for scenario, fail_every in SCENARIOS.items()
            }
        except Exception as error:
            raise RuntimeError(f"{framework.name} failed; its log is {runs_dir / 'worker.log'}") from error
        finally:
            _stop(worker)


def _measure_scenario(server: MotoServer, worker: subprocess.Popen, feed: Feed, runs_dir: Path, messages: int,
                      fail_every: int, settle_seconds: float) -> dict[str, Any]:
    """Feed the worker one scenario's tasks; time, count and check the drain."""
    calls_before, cpu_before, started = server.counts(), _tree_cpu_seconds(worker.pid), time.monotonic()
    planned = {task: 1 + runs.fails_once(task) for task in (runs.task_id(fail_every, n) for n in range(messages))}
    sqs = server.endpoints.sqs()
    _feed(feed, sqs, list(planned))
    _wait_drained(feed, sqs, runs_dir, fail_every, sum(planned.values()), worker)
    wall_seconds = time.monotonic() - started
    cpu_seconds = _tree_cpu_seconds(worker.pid) - cpu_before
    calls = server.counts() - calls_before
    time.sleep(settle_seconds)
    ran = _runs(runs_dir, fail_every)
    return {
        "api_calls_per_message": sum(calls.values()) / messages,
        "api_calls_by_action": dict(sorted(calls.items())),
        "cpu_seconds_per_1000_messages": cpu_seconds * 1000 / messages,
        "wall_seconds_to_drain": wall_seconds,
        "lost": sum(1 for task, times in planned.items() if ran[task] < times),
        "duplicated": sum(1 for task, times in planned.items() if ran[task] > times)
        + sum(1 for task in ran if task not in planned),
        "runs": sum(ran.values()),
    }


def _runs(runs_dir: Path, fail_every: int) -> Counter[str]:
    """How many times each task of the scenario (its ids start with ``<fail_every>-``) has run so far."""
    try:
        lines = (runs_dir / runs.RUNS_FILE).read_text().split()
    except FileNotFoundError:
        return Counter()
    return Counter(line for line in lines if line.startswith(f"{fail_every}-"))


def _wait_polling(server: MotoServer, worker: subprocess.Popen) -> None:
    """Until the worker's first ReceiveMessage reaches the server, then a moment for its start-up to settle."""
    before = server.counts()["ReceiveMessage"]
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while server.counts()["ReceiveMessage"] == before:
        if worker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the worker never polled within {READY_TIMEOUT_SECONDS} s (exit code {worker.poll()})")
        time.sleep(0.1)
    time.sleep(READY_SETTLE_SECONDS)


def _depth(sqs: Any, queue_url: str, names: list[str]) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[name]) for name in names)


def _feed(feed: Feed, sqs: Any, task_ids: list[str]) -> None:
    """Send the task ids a chunk at a time, while fewer than DEPTH_LOW messages are visible."""
    for start in range(0, len(task_ids), SEND_CHUNK):
        while _depth(sqs, feed.queue_url, ["ApproximateNumberOfMessages"]) >= DEPTH_LOW:
            time.sleep(POLL_SECONDS)
        feed.send(task_ids[start : start + SEND_CHUNK])


def _wait_drained(feed: Feed, sqs: Any, runs_dir: Path, fail_every: int, planned_runs: int, worker: subprocess.Popen) -> None:
    """Until every planned run is recorded and the queue holds nothing, visible, in flight or delayed."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"]
    deadline = time.monotonic() + DRAIN_TIMEOUT_SECONDS
    while True:
        recorded = sum(_runs(runs_dir, fail_every).values())
        if recorded >= planned_runs and _depth(sqs, feed.queue_url, names) == 0:  # the depth only then: moto is busy
            return
        if worker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(
                f"not drained: {recorded} of {planned_runs} runs recorded, worker exit code {worker.poll()}, "
                f"limit {DRAIN_TIMEOUT_SECONDS} s"
            )
        time.sleep(POLL_SECONDS)


def _tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its live descendants, plus what their reaped children used."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def _stop(worker: subprocess.Popen) -> None:
    """End the worker's process group (it and any pool children): SIGTERM, then SIGKILL."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(worker.pid, signum)
        except ProcessLookupError:
            return
        try:
            worker.wait(STOP_TIMEOUT_SECONDS)
            return
        except subprocess.TimeoutExpired:
            continue


def _environment(variables: dict[str, str]) -> dict[str, str]:
    """This process's environment for a child, with the repo's code first and fake credentials."""
    path = os.pathsep.join([str(REPO / "src"), str(REPO)])
    return {**os.environ, **CREDENTIALS, "PYTHONPATH": path, **variables}


def compare(messages: int = MESSAGES, settle_seconds: float = SETTLE_SECONDS) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run every framework in every scenario on one server; return the flat figures and the per-framework details."""
    for name, value in CREDENTIALS.items():  # the producers' clients in this process (Dramatiq's takes no keys)
        os.environ.setdefault(name, value)
    details: dict[str, Any] = {f.name: {"settings": f.settings, "docs": f.docs, "retry": f.retry} for f in FRAMEWORKS}
    with MotoServer() as server, tempfile.TemporaryDirectory(prefix="peers-bench-") as workdir:
        for framework in FRAMEWORKS:
            details[framework.name].update(measure(server, framework, messages, settle_seconds, Path(workdir)))
    return _figures(details), details


def _figures(details: dict[str, Any]) -> dict[str, float]:
    """The flat figures: each framework's measures per scenario, our ratios to the peers, and lost and duplicated in total."""
    figures: dict[str, float] = {}
    for scenario in SCENARIOS:
        measured = {f.name: details[f.name][scenario] for f in FRAMEWORKS}
        for name, measures in measured.items():
            figures.update({f"{scenario}_{name}_{key}": round(value, 4) for key, value in measures.items() if key in FIGURE_KEYS})
        figures.update(_ratios(measured, "" if scenario == "plain" else f"{scenario}_"))
    figures["lost_total"] = sum(details[f.name][s]["lost"] for f in FRAMEWORKS for s in SCENARIOS)
    figures["duplicated_total"] = sum(details[f.name][s]["duplicated"] for f in FRAMEWORKS for s in SCENARIOS)
    return figures


def _ratios(measured: dict[str, dict[str, Any]], prefix: str) -> dict[str, float]:
    """Our SQS requests per message against each peer's, and our CPU per message against the lower of theirs."""
    calls, cpu = "api_calls_per_message", "cpu_seconds_per_1000_messages"
    ours = measured[OURS.name]
    fastest_peer = min(measured[CELERY.name][cpu], measured[DRAMATIQ.name][cpu])
    return {
        f"{prefix}api_calls_ratio_vs_celery": round(ours[calls] / measured[CELERY.name][calls], 4),
        f"{prefix}api_calls_ratio_vs_dramatiq": round(ours[calls] / measured[DRAMATIQ.name][calls], 4),
        f"{prefix}cpu_per_message_ratio_vs_fastest_peer": round(ours[cpu] / fastest_peer, 4),
    }


def run(messages: int = MESSAGES) -> Path:
    """Compare the three workers and write bench/results/peers.json, with each one's settings, docs and retry mechanism."""
    figures, details = compare(messages)
    path = results.write("peers", figures, GOALS, "make bench")
    document = json.loads(path.read_text())
    document["messages"] = messages
    document["method"] = METHOD
    document["frameworks"] = details
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path
