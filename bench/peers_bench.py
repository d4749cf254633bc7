"""The container worker against Celery and Dramatiq on SQS, side by side on one moto server.

Run with `make bench` (all benchmarks) or `python -m bench peers`; writes bench/results/peers.json.

Setup. One moto server (``bench.peers.server``, its own process) serves two ports: the
workers use the counted one, the bench's producer the other. For each scenario each framework
gets a fresh queue and one worker process of its own with concurrency 4 and its recommended SQS
settings (``bench.peers.frameworks``), which drains ``messages`` no-op tasks, sent through the
framework's own client in chunks of ``SEND_CHUNK`` while fewer than ``DEPTH_LOW`` are visible.
Each task appends its id to a file (``bench.peers.runs``).

Rounds. The machine is shared, so everything is measured ``rounds`` times (at least 3 for
``make bench``), interleaved: in each round, each scenario, ours then Celery then Dramatiq.
Each figure is reported as ``{"worst", "median", "runs"}`` (``spread``), where worst is the
run least favourable to us: for ours the highest requests, CPU and wall time; for a peer the
lowest. Each ratio is computed within a round (ours and the peer measured minutes apart at
most) and its worst round is kept: the highest for an upper-bound goal, the lowest for
``drain_throughput_ratio_vs_dramatiq``. A goal is met only when that worst round meets it.

A peer that fails (its worker exits, or no task runs for ``stall_seconds``, or the drain
outlasts ``DRAIN_TIMEOUT_SECONDS``) is recorded as ``{"failed": reason}`` for that round and
scenario, its worker is stopped, and the run goes on. A ratio that needs a failed run has
no value for that round; if any round lacks it, the ratio's figure is ``None`` (with the
rounds that were measured, and the failures, beside it) and its goal is not met, the reason
written under "not_met" in the JSON. Ours failing fails every ratio.

Measures, from the first message sent to the queue being empty with every run recorded:
- SQS requests per message, counted at the server by action (start-up calls excluded: the
  window opens once the worker has polled and settled);
- CPU seconds per 1,000 messages of the worker's process tree (psutil: user + system of
  every live process in it, plus what its reaped children used);
- wall seconds to drain, and messages per second (``drain_throughput_ratio_vs_dramatiq``:
  ours ÷ Dramatiq's, the same work at the same concurrency on the same server);
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
from dataclasses import dataclass
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
STALL_SECONDS = 60.0  # no task run recorded for this long: the worker has stalled
ROUNDS = 3  # interleaved rounds of every framework in every scenario: each figure's worst is kept
STOP_TIMEOUT_SECONDS = 2.0
POLL_SECONDS = 0.1  # the bench's own checks of depth and runs: each is a request the one moto process must serve
SCENARIOS = {"plain": 0, "retry": FAIL_EVERY}
FIGURE_KEYS = ("api_calls_per_message", "cpu_seconds_per_1000_messages", "wall_seconds_to_drain", "messages_per_second",
               "lost", "duplicated")
METHOD = {
    "api_calls": "requests on the moto server's counted port by SQS action (X-Amz-Target or Action), from the "
                 "first message sent to the drain; the producer uses another port; start-up calls excluded",
    "cpu": "user + system seconds of the worker's process tree (psutil: every live process, plus reaped children)",
    "lost_duplicated": "tasks append their id to a file; a task planned once (twice if it fails once) that ran "
                       "fewer times is lost, more times duplicated",
    "moto": "actions other than ReceiveMessage are serialized: moto's delete_message is not thread-safe",
    "concurrency": 4,
    "rounds": "each round runs every scenario, ours then Celery then Dramatiq, each worker on a fresh queue; a figure's "
              "worst is its round least favourable to us (ours: highest; a peer: lowest; messages per second the "
              "other way round); a ratio is computed within each round and its worst round kept",
    "failures": "a worker that exits, runs no task for 60 s, or does not drain in 900 s is recorded as failed for "
                "that round and scenario; ratios needing it are None and their goals not met (\"not_met\")",
}
GOALS = {
    "api_calls_ratio_vs_celery": ("<=", 0.3),
    "api_calls_ratio_vs_dramatiq": ("<=", 0.5),
    "cpu_per_message_ratio_vs_fastest_peer": ("<=", 1.0),
    "drain_throughput_ratio_vs_dramatiq": (">=", 1.0),
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


class PeerFailedError(Exception):
    """A worker under test exited, stalled or outlasted the drain limit: its run is recorded as failed."""


@dataclass(frozen=True)
class Limits:
    """How long a worker may take before its run is recorded as failed."""

    stall_seconds: float = STALL_SECONDS  # no new task run recorded for this long: stalled
    drain_seconds: float = DRAIN_TIMEOUT_SECONDS
    ready_seconds: float = READY_TIMEOUT_SECONDS


def measure(server: MotoServer, framework: Framework, scenario: str, messages: int, settle_seconds: float, workdir: Path,
            limits: Limits = Limits()) -> dict[str, Any]:
    """One worker process of ``framework`` drains one scenario's tasks from a fresh queue: its figures, or
    ``{"failed": reason}`` if it exited, stalled or outlasted the limits (the worker is stopped either way)."""
    queue = f"{framework.name}-{scenario}-{uuid.uuid4().hex[:8]}"
    runs_dir = workdir / queue
    runs_dir.mkdir()
    try:
        feed = framework.feed(server.endpoints, queue)
    except Exception as error:  # the framework's client could not even create its queue
        return {"failed": f"setting up its queue failed: {error!r}"}
    variables = {**feed.environment, runs.RUNS_DIR_VARIABLE: str(runs_dir)}
    with open(runs_dir / "worker.log", "wb") as log:
        worker = subprocess.Popen(feed.command, cwd=REPO, env=_environment(variables), stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            _wait_polling(server, worker, limits.ready_seconds)
            return _measure_scenario(server, worker, feed, runs_dir, messages, SCENARIOS[scenario], settle_seconds, limits)
        except PeerFailedError as error:
            return {"failed": f"{error}; its log: {_log_tail(runs_dir / 'worker.log')}"}
        finally:
            _stop(worker)


def _log_tail(path: Path, characters: int = 400) -> str:
    """The end of a worker's log, on one line, for a failure's reason."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(unreadable)"
    return " ".join(text[-characters:].split()) or "(empty)"


def _measure_scenario(server: MotoServer, worker: subprocess.Popen, feed: Feed, runs_dir: Path, messages: int,
                      fail_every: int, settle_seconds: float, limits: Limits) -> dict[str, Any]:
    """Feed the worker one scenario's tasks; time, count and check the drain."""
    calls_before, cpu_before, started = server.counts(), _tree_cpu_seconds(worker.pid), time.monotonic()
    planned = {task: 1 + runs.fails_once(task) for task in (runs.task_id(fail_every, n) for n in range(messages))}
    sqs = server.endpoints.sqs()
    watch = _Watch(worker, runs_dir, fail_every, sum(planned.values()), limits)
    _feed(feed, sqs, list(planned), watch)
    _wait_drained(feed, sqs, watch)
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
        "messages_per_second": messages / wall_seconds,
        "lost": sum(1 for task, times in planned.items() if ran[task] < times),
        "duplicated": sum(1 for task, times in planned.items() if ran[task] > times)
        + sum(1 for task in ran if task not in planned),
        "runs": sum(ran.values()),
    }


class _Watch:
    """Raises PeerFailedError once the worker has exited, made no progress for ``stall_seconds``, or outlasted the drain."""

    def __init__(self, worker: subprocess.Popen, runs_dir: Path, fail_every: int, planned_runs: int, limits: Limits) -> None:
        self._worker, self._runs_dir, self._fail_every, self.planned_runs = worker, runs_dir, fail_every, planned_runs
        self._limits = limits
        self._started = self._progressed_at = time.monotonic()
        self.recorded = 0

    def check(self) -> int:
        """The runs recorded so far; raises if the worker failed."""
        now = time.monotonic()
        recorded = sum(_runs(self._runs_dir, self._fail_every).values())
        if recorded > self.recorded:
            self.recorded, self._progressed_at = recorded, now
        progress = f"{self.recorded} of {self.planned_runs} runs recorded"
        if self._worker.poll() is not None:
            raise PeerFailedError(f"the worker exited with code {self._worker.poll()}: {progress}")
        if now - self._progressed_at > self._limits.stall_seconds:
            raise PeerFailedError(f"stalled: no task ran for {self._limits.stall_seconds} s: {progress}")
        if now - self._started > self._limits.drain_seconds:
            raise PeerFailedError(f"not drained within {self._limits.drain_seconds} s: {progress}")
        return self.recorded


def _runs(runs_dir: Path, fail_every: int) -> Counter[str]:
    """How many times each task of the scenario (its ids start with ``<fail_every>-``) has run so far."""
    try:
        lines = (runs_dir / runs.RUNS_FILE).read_text().split()
    except FileNotFoundError:
        return Counter()
    return Counter(line for line in lines if line.startswith(f"{fail_every}-"))


def _wait_polling(server: MotoServer, worker: subprocess.Popen, ready_seconds: float) -> None:
    """Until the worker's first ReceiveMessage reaches the server, then a moment for its start-up to settle."""
    before = server.counts()["ReceiveMessage"]
    deadline = time.monotonic() + ready_seconds
    while server.counts()["ReceiveMessage"] == before:
        if worker.poll() is not None:
            raise PeerFailedError(f"the worker exited with code {worker.poll()} before its first poll")
        if time.monotonic() > deadline:
            raise PeerFailedError(f"the worker never polled within {ready_seconds} s")
        time.sleep(0.1)
    time.sleep(READY_SETTLE_SECONDS)


def _depth(sqs: Any, queue_url: str, names: list[str]) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[name]) for name in names)


def _feed(feed: Feed, sqs: Any, task_ids: list[str], watch: _Watch) -> None:
    """Send the task ids a chunk at a time, while fewer than DEPTH_LOW messages are visible."""
    for start in range(0, len(task_ids), SEND_CHUNK):
        while _depth(sqs, feed.queue_url, ["ApproximateNumberOfMessages"]) >= DEPTH_LOW:
            watch.check()
            time.sleep(POLL_SECONDS)
        feed.send(task_ids[start : start + SEND_CHUNK])


def _wait_drained(feed: Feed, sqs: Any, watch: _Watch) -> None:
    """Until every planned run is recorded and the queue holds nothing, visible, in flight or delayed."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"]
    while True:
        if watch.check() >= watch.planned_runs and _depth(sqs, feed.queue_url, names) == 0:  # the depth only then: moto is busy
            return
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


def compare(messages: int = MESSAGES, settle_seconds: float = SETTLE_SECONDS, rounds: int = ROUNDS,
            frameworks: tuple[Framework, ...] = FRAMEWORKS, limits: Limits = Limits()) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run every framework in every scenario on one server, ``rounds`` times interleaved; return the flat figures
    (worst of the rounds) and the per-framework details (each round's measures, or its failure)."""
    for name, value in CREDENTIALS.items():  # the producers' clients in this process (Dramatiq's takes no keys)
        os.environ.setdefault(name, value)
    details: dict[str, Any] = {
        f.name: {"settings": f.settings, "docs": f.docs, "retry": f.retry, "rounds": {s: [] for s in SCENARIOS}}
        for f in frameworks
    }
    with MotoServer() as server, tempfile.TemporaryDirectory(prefix="peers-bench-") as workdir:
        for _ in range(rounds):
            for scenario in SCENARIOS:
                for framework in frameworks:
                    measured = measure(server, framework, scenario, messages, settle_seconds, Path(workdir), limits)
                    details[framework.name]["rounds"][scenario].append(measured)
    figures = _figures({name: framework["rounds"] for name, framework in details.items()})
    return figures, details


def spread(values: list[float], higher_is_worse: bool = True) -> dict[str, Any]:
    """A figure over its rounds: the worst (least favourable to us), the median, and each round's value."""
    worst = max(values) if higher_is_worse else min(values)
    return {"worst": round(worst, 4), "median": round(results.median(values), 4), "runs": [round(v, 4) for v in values]}


def _failed(rounds: list[dict[str, Any]]) -> list[str]:
    """The reasons of a framework's failed rounds in one scenario."""
    return [measured["failed"] for measured in rounds if "failed" in measured]


def _figures(rounds: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """The flat figures from each framework's rounds by scenario: each measure's spread, each ratio's spread over the
    rounds (None, with why, when a round lacks it), lost and duplicated in total, and every failure."""
    figures: dict[str, Any] = {}
    failures: list[str] = []
    for scenario in SCENARIOS:
        for name, by_scenario in rounds.items():
            measured = [m for m in by_scenario[scenario] if "failed" not in m]
            failures += [f"{scenario} {name}: {reason}" for reason in _failed(by_scenario[scenario])]
            ours = name == OURS.name
            for key in FIGURE_KEYS:
                values = [m[key] for m in measured]
                higher_is_worse = ours == (key not in LOWER_IS_WORSE_FOR_OURS)
                figures[f"{scenario}_{name}_{key}"] = spread(values, higher_is_worse) if values else None
        figures.update(_ratios({name: by_scenario[scenario] for name, by_scenario in rounds.items()},
                               "" if scenario == "plain" else f"{scenario}_"))
    every_run = [m for by_scenario in rounds.values() for scenario_rounds in by_scenario.values() for m in scenario_rounds]
    figures["lost_total"] = sum(m["lost"] for m in every_run if "failed" not in m)
    figures["duplicated_total"] = sum(m["duplicated"] for m in every_run if "failed" not in m)
    figures["failed_runs"] = failures
    return figures


# Ours per peer: (figure, measure, ratio of ours to the peer's = True or of the peer's to ours = False).
RATIOS = (
    ("api_calls_ratio_vs_celery", CELERY.name, "api_calls_per_message"),
    ("api_calls_ratio_vs_dramatiq", DRAMATIQ.name, "api_calls_per_message"),
    ("drain_throughput_ratio_vs_dramatiq", DRAMATIQ.name, "messages_per_second"),
)
HIGHER_IS_BETTER = frozenset({"drain_throughput_ratio_vs_dramatiq"})
LOWER_IS_WORSE_FOR_OURS = frozenset({"messages_per_second"})


def _ratios(rounds: dict[str, list[dict[str, Any]]], prefix: str) -> dict[str, Any]:
    """Per round: our requests per message ÷ each peer's, our messages per second ÷ Dramatiq's, our CPU per message ÷
    the lower of the peers'; each ratio's spread over the rounds, or None with the reason when a round lacks it."""
    cpu = "cpu_seconds_per_1000_messages"
    per_round: dict[str, list[float | None]] = {}
    ours = rounds.get(OURS.name, [])
    for index, our_round in enumerate(ours):
        for figure, name, key in RATIOS:
            theirs = _measured_round(rounds, name, index)
            usable = theirs is not None and "failed" not in our_round and theirs[key] > 0
            per_round.setdefault(figure, []).append(our_round[key] / theirs[key] if usable and theirs else None)
        peers = [p for p in (_measured_round(rounds, n, index) for n in (CELERY.name, DRAMATIQ.name)) if p is not None]
        usable = len(peers) == 2 and "failed" not in our_round and min(p[cpu] for p in peers) > 0
        per_round.setdefault(CPU_RATIO, []).append(our_round[cpu] / min(p[cpu] for p in peers) if usable else None)
    needs = {figure: (OURS.name, name) for figure, name, _ in RATIOS}
    needs[CPU_RATIO] = (OURS.name, CELERY.name, DRAMATIQ.name)
    figures: dict[str, Any] = {}
    for figure, names in needs.items():
        values = per_round.get(figure, [])
        if values and all(v is not None for v in values):
            figures[prefix + figure] = spread([v for v in values if v is not None], figure not in HIGHER_IS_BETTER)
            continue
        reasons = [f"{name}: {reason}" for name in names for reason in _failed(rounds.get(name, []))]
        figures[prefix + figure] = None
        figures[f"{prefix}{figure}_missing"] = {
            "measured_rounds": [round(v, 4) for v in values if v is not None],
            "because": reasons or ["not measured"],
        }
    return figures


CPU_RATIO = "cpu_per_message_ratio_vs_fastest_peer"


def _measured_round(rounds: dict[str, list[dict[str, Any]]], name: str, index: int) -> dict[str, Any] | None:
    """A framework's measures in one round, or None if it failed (or was not run)."""
    measured = rounds.get(name, [])
    return measured[index] if index < len(measured) and "failed" not in measured[index] else None


def run(messages: int = MESSAGES, rounds: int = ROUNDS) -> Path:
    """Compare the three workers and write bench/results/peers.json, with each one's settings, docs, retry mechanism
    and rounds; a goal whose figure is missing (a failed run) is written as not met, with the reason."""
    figures, details = compare(messages, rounds=rounds)
    measured_goals = {key: goal for key, goal in GOALS.items() if figures.get(key) is not None}
    path = results.write("peers", figures, measured_goals, "make bench")
    document = json.loads(path.read_text())
    not_met = {key: figures[f"{key}_missing"]["because"] for key in GOALS if key not in measured_goals}
    document["goals"] = {key: f"{op} {bound}" for key, (op, bound) in GOALS.items()}
    document["met"] = {key: document["met"].get(key, False) for key in GOALS}
    document["not_met"] = not_met
    document["messages"] = messages
    document["rounds"] = rounds
    document["method"] = METHOD
    document["frameworks"] = details
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path
