"""Forwarding benchmark: the container worker POSTing no-op messages to a real app server, against the same app
called directly.

Run with `make bench` (all benchmarks) or `python -m bench forwarding`.

For each app server (gunicorn's default sync worker, ``-w 1``: it answers ``Connection: close``, so each message
costs a new TCP connection; uvicorn, one worker: keep-alive), serving ``bench.forwarding_apps`` (reads the body,
answers 200) as a process of its own:

- **ours**: a fresh process runs the real ``Consumer`` with HTTP forwarding (``Worker`` + ``HttpTarget``, concurrency
  ``http_connections``, the container default) on ``bench.memory_sqs.FastQueue``, an in-memory SQS queue (moto
  cannot serve 1,000 msg/s on this machine and would measure itself). A warm-up drains ``Sizes.warmup`` messages;
  then ``Sizes.messages`` are put in and the clock runs from then until the last one is deleted. Its process CPU
  over that window (every thread of the worker's process; the app server's processes are not in it) divided
  by the messages is ``worker_cpu_us_per_msg``.
- **direct**: a fresh process POSTs the same bodies, with the same headers, from as many threads
  (``http_connections``), each an ``http.client`` keep-alive loop that reconnects when the app closes.

Ours and direct alternate on the same app server process, ``Sizes.runs`` times each; each figure keeps every run
with its worst (``spread``: the lowest msg/s, the highest CPU or ratio... as each figure's direction says).
``forwarding_msgs_per_s`` is every run of ours on both servers: its worst must meet the goal.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from bench import results

REPO = Path(__file__).resolve().parent.parent
GOALS = {"forwarding_msgs_per_s": (">=", 1000.0)}
SERVERS: dict[str, list[str]] = {
    "gunicorn": ["-m", "gunicorn", "--workers", "1", "--log-level", "warning", "--bind", "127.0.0.1:{port}",
                 "bench.forwarding_apps:wsgi"],
    "uvicorn": ["-m", "uvicorn", "--workers", "1", "--host", "127.0.0.1", "--port", "{port}", "--no-access-log",
                "--log-level", "warning", "bench.forwarding_apps:asgi"],
}
STARTUP_SECONDS = 30
CHILD_TIMEOUT_SECONDS = 600
BODY = '{{"task": "noop", "n": {n}}}'
QUEUE_NAME = "bench-forwarding"


@dataclass(frozen=True)
class Sizes:
    """How much each run measures: ``make bench`` uses the defaults, the test suite ``TINY``."""

    runs: int = 5  # runs of ours and of direct, alternating, per server
    messages: int = 5000  # messages per timed run
    warmup: int = 200  # messages drained before the clock starts (connections, code paths)


TINY = Sizes(runs=1, messages=100, warmup=10)


class ServerUnavailableError(RuntimeError):
    """The app server could not be started here (not installed, or it exited)."""


def spread(values: list[float], *, higher_is_better: bool) -> dict[str, Any]:
    """A figure over its runs: the worst (the lowest when higher is better, else the highest), the median, each run."""
    worst = min(values) if higher_is_better else max(values)
    return {"worst": round(worst, 4), "median": round(results.median(values), 4), "runs": [round(v, 4) for v in values]}


# -- the app server ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def _environment() -> dict[str, str]:
    # Logging and metrics as deployed: a succeeded message writes one EMF line and no log line.
    environment = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}", "AWS_DEFAULT_REGION": "us-east-1"}
    environment.pop("POWERTOOLS_METRICS_DISABLED", None)  # the test suite's setting: the metrics are part of the cost
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        environment.setdefault(name, "bench")
    return environment


@contextlib.contextmanager
def app_server(name: str) -> Iterator[tuple[int, int]]:
    """Start the named server on a free port; yield (port, pid); stop it however the run ends."""
    port = free_port()
    command = [sys.executable, *(part.format(port=port) for part in SERVERS[name])]
    try:
        process = subprocess.Popen(command, cwd=REPO, env=_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except OSError as error:
        raise ServerUnavailableError(f"{name} could not start: {error}") from error
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not _listening(port):
            if process.poll() is not None:
                raise ServerUnavailableError(f"{name} exited: {process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            if time.monotonic() > deadline:
                raise ServerUnavailableError(f"{name} did not listen on {port} within {STARTUP_SECONDS} s")
            time.sleep(0.05)
        yield port, process.pid
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its children (gunicorn's arbiter and its worker)."""
    import psutil

    try:
        root = psutil.Process(pid)
        total = 0.0
        for process in [root, *root.children(recursive=True)]:
            times = process.cpu_times()
            total += times.user + times.system
        return total
    except psutil.Error:
        return 0.0


# -- one side's run, in a process of its own ------------------------------------------------------


def _run_side(side: str, port: int, server_pid: int, sizes: Sizes) -> dict[str, float]:
    """Run ``side`` (ours or direct) in a fresh interpreter against the app on ``port``; its figures, plus the app
    server's CPU per message over the same run."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "figures.json"
        command = [sys.executable, "-m", "bench.forwarding_bench", side, str(port), str(sizes.messages), str(sizes.warmup),
                   str(out)]
        server_before = _tree_cpu_seconds(server_pid)
        finished = subprocess.run(command, cwd=REPO, env=_environment(), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, timeout=CHILD_TIMEOUT_SECONDS, check=False)
        server_cpu = _tree_cpu_seconds(server_pid) - server_before
        if finished.returncode != 0 or not out.exists():
            raise RuntimeError(f"the {side} run failed ({finished.returncode}): {finished.stderr.decode()[-3000:]}")
        figures: dict[str, float] = json.loads(out.read_text())
    # The server's CPU over the whole child (warm-up included), per message it answered.
    figures["server_cpu_us_per_msg"] = server_cpu / (sizes.messages + sizes.warmup) * 1e6
    return figures


def _headers(port: int, message_id: str, body: bytes, sent_at: str) -> list[tuple[str, str]]:
    """The headers the worker sends with a no-op message (sqsd's, in its order), for the direct client."""
    return [
        ("Content-Type", "application/json"), ("User-Agent", "aws-sqsd/2.4 worker-tier"), ("X-Aws-Sqsd-Msgid", message_id),
        ("X-Aws-Sqsd-Receive-Count", "1"), ("X-Aws-Sqsd-First-Received-At", sent_at), ("X-Aws-Sqsd-Sent-At", sent_at),
        ("X-Aws-Sqsd-Queue", QUEUE_NAME), ("X-Aws-Sqsd-Sender-Id", "AIDAWORKERTIERBENCH"),
        ("Host", f"localhost:{port}"), ("Content-Length", str(len(body))),
    ]


def direct(port: int, messages: int, warmup: int, concurrency: int) -> dict[str, float]:
    """The baseline: ``concurrency`` threads POST ``messages`` bodies to the app as fast as they can, each over one
    keep-alive ``http.client`` connection, opened again whenever the app closes it; wall seconds and process CPU."""
    import http.client

    sent_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    failures: list[str] = []

    def post_all(count: int) -> None:
        numbers = iter(range(count))
        lock = threading.Lock()

        def loop() -> None:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            while True:
                with lock:
                    n = next(numbers, None)
                if n is None:
                    break
                body = BODY.format(n=n).encode()
                connection.putrequest("POST", "/", skip_host=True, skip_accept_encoding=True)
                for name, value in _headers(port, f"direct-{n}", body, sent_at):
                    connection.putheader(name, value)
                connection.endheaders(body)
                response = connection.getresponse()
                response.read()
                if response.status != 200:
                    failures.append(f"status {response.status}")
                if response.will_close:
                    connection.close()  # http.client opens a new one with the next request
            connection.close()

        threads = [threading.Thread(target=loop) for _ in range(concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    post_all(warmup)
    started, cpu = time.perf_counter(), time.process_time()
    post_all(messages)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    if failures:
        raise RuntimeError(f"the app did not answer 200 to {len(failures)} direct POSTs: {failures[:3]}")
    return {"msgs_per_s": messages / seconds, "cpu_us_per_msg": cpu_seconds / messages * 1e6, "seconds": seconds}


def ours(port: int, messages: int, warmup: int, **settings_given: Any) -> dict[str, float]:
    """The container worker, as ``python -m worker_tier worker`` builds it with ``app_port``, draining ``messages``
    no-op messages from an in-memory queue; wall seconds and process CPU from their arrival until the last delete."""
    from bench.memory_sqs import FastQueue
    from worker_tier.app.forwarding import HttpTarget
    from worker_tier.container.consumer import Consumer, concurrency
    from worker_tier.container.protection import TaskProtection
    from worker_tier.core.settings import Settings
    from worker_tier.worker.batch import Worker
    from worker_tier.worker.registry import Registry

    settings = Settings(container_worker=True, app_port=port, **settings_given)
    queue = FastQueue(QUEUE_NAME, visibility_timeout=settings.visibility_timeout)
    worker = Worker(settings, queue_url=queue.url, dead_letter_queue_url=queue.url.replace(QUEUE_NAME, "no-dlq"),
                    registry=Registry(), sqs=queue, app_target=HttpTarget.from_settings(settings))
    consumer = Consumer(worker, queue, queue.url, concurrency=concurrency(settings), protection=TaskProtection(agent_uri=""),
                        exit_process=lambda code: None)
    timed = queue.stage([BODY.format(n=n) for n in range(messages)])
    queue.fill([BODY.format(n=n) for n in range(warmup)])
    running = threading.Thread(target=consumer.run, daemon=True, name=CONSUMER_THREAD)
    running.start()
    if not queue.drained.wait(CHILD_TIMEOUT_SECONDS):
        raise RuntimeError(f"the warm-up did not drain: {len(queue)} messages left")
    threads_before = _cpu_by_thread()
    started, cpu = time.perf_counter(), time.process_time()
    queue.put(timed)
    if not queue.drained.wait(CHILD_TIMEOUT_SECONDS):
        raise RuntimeError(f"the queue did not drain: {len(queue)} of {messages} messages left")
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    threads = _cpu_by_thread()
    receives = queue.calls["ReceiveMessage"]
    consumer.stopping.set()
    queue.close()
    running.join(30)
    figures = {"msgs_per_s": messages / seconds, "cpu_us_per_msg": cpu_seconds / messages * 1e6, "seconds": seconds,
               "concurrency": float(consumer.concurrency), "receives_per_msg": receives / (messages + warmup)}
    for role, used in threads.items():  # where the worker's CPU went: task threads, the receive loop, the deletes
        figures[f"cpu_us_per_msg_{role}"] = (used - threads_before.get(role, 0.0)) / messages * 1e6
    return figures


CONSUMER_THREAD = "bench-consumer"
_THREAD_ROLES = {"worker-tier-task": "tasks", CONSUMER_THREAD: "receive_loop", "worker-tier-deletes": "deletes"}


def _cpu_by_thread() -> dict[str, float]:
    """CPU seconds of this process's threads (Linux's /proc), by role: the container worker's task threads, its
    receive loop, its delete sender, and the rest (heartbeat, the benchmark's own main thread); empty elsewhere."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return {}
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for entry in tasks.iterdir():
        with contextlib.suppress(OSError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            name = names.get(int(entry.name), "")
            role = next((r for prefix, r in _THREAD_ROLES.items() if name.startswith(prefix)), "other")
            used[role] = used.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return used


def profile(port: int, messages: int, out: Path) -> dict[str, float]:
    """``ours`` under cProfile, each thread timed by its own CPU clock (``time.thread_time``), the threads' profiles
    merged into one pstats file at ``out``. Profiling costs several times the work it measures: read it for where
    the time goes, never for a figure."""
    import cProfile
    import pstats

    profiles: list[cProfile.Profile] = []
    run = threading.Thread.run

    def profiled(thread: threading.Thread) -> None:
        profiler = cProfile.Profile(time.thread_time)
        profiles.append(profiler)
        profiler.runcall(run, thread)

    threading.Thread.run = profiled  # type: ignore[method-assign, assignment]
    main = cProfile.Profile(time.thread_time)
    figures = main.runcall(ours, port, messages, 100)
    merged = pstats.Stats(main)
    for profiler in profiles:
        with contextlib.suppress(TypeError):  # a thread still running has nothing to give yet
            merged.add(profiler)
    merged.dump_stats(str(out))
    return figures


# -- the whole benchmark ----------------------------------------------------------------------------


def measure_server(name: str, sizes: Sizes) -> dict[str, Any]:
    """Ours and direct, alternating ``sizes.runs`` times on one ``name`` server; each figure as a ``spread``."""
    runs: dict[str, list[float]] = {}
    with app_server(name) as (port, pid):
        for _ in range(sizes.runs):
            for side in ("ours", "direct"):
                for key, value in _run_side(side, port, pid, sizes).items():
                    runs.setdefault(f"{side}_{key}", []).append(value)
    ratio = [o / d for o, d in zip(runs["ours_msgs_per_s"], runs["direct_msgs_per_s"], strict=True)]
    return {
        "msgs_per_s": spread(runs["ours_msgs_per_s"], higher_is_better=True),
        "direct_msgs_per_s": spread(runs["direct_msgs_per_s"], higher_is_better=True),
        "ratio_vs_direct": spread(ratio, higher_is_better=True),
        "worker_cpu_us_per_msg": spread(runs["ours_cpu_us_per_msg"], higher_is_better=False),
        "direct_client_cpu_us_per_msg": spread(runs["direct_cpu_us_per_msg"], higher_is_better=False),
        "server_cpu_us_per_msg_with_ours": spread(runs["ours_server_cpu_us_per_msg"], higher_is_better=False),
        "server_cpu_us_per_msg_direct": spread(runs["direct_server_cpu_us_per_msg"], higher_is_better=False),
        "receives_per_msg": spread(runs["ours_receives_per_msg"], higher_is_better=False),
        # The worker's CPU per message by thread, median of the runs (Linux only).
        "worker_cpu_us_per_msg_by_thread": {
            key.removeprefix("ours_cpu_us_per_msg_"): round(results.median(values), 1)
            for key, values in runs.items() if key.startswith("ours_cpu_us_per_msg_")
        },
        "_ours_runs": runs["ours_msgs_per_s"],
    }


def measure(sizes: Sizes = Sizes(), servers: tuple[str, ...] = tuple(SERVERS), *, keep_going: bool = True) -> dict[str, Any]:
    """Every figure: per server (``<server>_<figure>``), and ``forwarding_msgs_per_s`` over ours' runs on all of them.

    A server that cannot start, or a run that fails, is recorded as ``<server>_failed`` (its reason) and the other
    server is measured (``keep_going``; else it is raised). ``forwarding_msgs_per_s`` then covers the servers
    measured, and with none its worst is 0: a failure never passes for a met goal.
    """
    figures: dict[str, Any] = {}
    every_run: list[float] = []
    for name in servers:
        try:
            measured = measure_server(name, sizes)
        except (ServerUnavailableError, RuntimeError, subprocess.TimeoutExpired) as error:
            if not keep_going:
                raise
            figures[f"{name}_failed"] = f"{type(error).__name__}: {str(error)[-1000:]}"
            continue
        every_run += measured.pop("_ours_runs")
        figures.update({f"{name}_{key}": value for key, value in measured.items()})
    overall = spread(every_run, higher_is_better=True) if every_run else {"worst": 0.0, "median": 0.0, "runs": []}
    return {"forwarding_msgs_per_s": overall, **figures, "sizes": asdict(sizes), "concurrency": _default_concurrency()}


def _default_concurrency() -> int:
    from worker_tier.container.consumer import concurrency
    from worker_tier.core.settings import Settings

    return concurrency(Settings(container_worker=True, app_port=8080))


def run() -> Path:
    """Measure and write bench/results/forwarding.json."""
    return results.write("forwarding", measure(), GOALS, "make bench")


def _child(argv: list[str]) -> int:
    """``python -m bench.forwarding_bench {ours|direct} PORT MESSAGES WARMUP OUT``: one side's run, its figures in OUT.

    ``python -m bench.forwarding_bench profile PORT MESSAGES OUT``: ``ours`` profiled against an app already
    listening on PORT; the pstats in OUT (``python -m pstats OUT``), the figures on stderr.
    """
    if argv[0] == "profile":
        print(json.dumps(profile(int(argv[1]), int(argv[2]), Path(argv[3]))), file=sys.stderr)
        return 0
    side, port, messages, warmup, out = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), Path(argv[4])
    figures = ours(port, messages, warmup) if side == "ours" else direct(port, messages, warmup, _default_concurrency())
    out.write_text(json.dumps(figures))
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)  # the consumer's daemon threads (heartbeat, deletes) need no goodbye


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
