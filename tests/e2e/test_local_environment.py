"""Through the local environment: moto server, event-source emulator, the real lambda_handler."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path


from tests.support import stacks
from worker_tier.core import contract
from worker_tier_local import LocalEnvironment
from worker_tier.core.settings import Settings
from worker_tier.worker.fates import OUTCOME_DEAD_LETTERED, OUTCOME_RETRYING, OUTCOME_SUCCEEDED

REPO = Path(__file__).resolve().parents[2]


def test_example_tasks_meet_their_three_fates(outcomes):
    # GIVEN the local environment with the example tasks and a 1 s backoff base
    with LocalEnvironment(Settings(error_visibility_timeout=1)) as env:
        # WHEN the three examples are sent and the event source runs until the queue is empty
        env.client.send("/hello", json.dumps({"name": "Ada"}))
        env.client.send("/flaky", "{}")
        env.client.send("/poison", json.dumps({"order_id": 42}))
        assert env.poll_until(lambda: env.queue_depth() == 0, timeout_seconds=30)
        dead = env.dead_letters()
    # THEN hello succeeded once, flaky failed twice then succeeded, poison was dead-lettered with its reason
    by_path: dict[str, list[str]] = {}
    for outcome in outcomes:
        by_path.setdefault(outcome.path, []).append(outcome.status)
    assert by_path["/hello"] == [OUTCOME_SUCCEEDED]
    assert by_path["/flaky"] == [OUTCOME_RETRYING, OUTCOME_RETRYING, OUTCOME_SUCCEEDED]
    assert by_path["/poison"] == [OUTCOME_DEAD_LETTERED]
    [poison] = dead
    assert poison["body"] == '{"order_id": 42}'
    assert poison["attributes"]["beanstalk.sqsd.path"] == "/poison"
    assert poison["failure"]["error_type"] == "NonRetryableError"
    assert poison["failure"]["error_message"] == "order 42 references a deleted customer"


def test_unprocessed_failures_stay_in_the_queue(outcomes):
    # GIVEN a long backoff base so a failed message stays invisible
    with LocalEnvironment(Settings(error_visibility_timeout=60)) as env:
        env.client.send("/flaky", "{}")
        # WHEN polled once
        env.poll_once()
        # THEN the event source did not delete it: it is in flight, awaiting its retry
        assert env.queue_depth() == 1
    assert [o.status for o in outcomes] == [OUTCOME_RETRYING]
    assert 0 <= outcomes[0].visibility_seconds <= 60


def test_make_run_prints_each_outcome(tmp_path):
    # GIVEN settings with a quick backoff, as a cdk.json
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {"worker_tier": {"error_visibility_timeout": 1}}}))
    environment = {**os.environ, "PYTHONPATH": stacks.subprocess_pythonpath()}
    # WHEN `make run`'s entry point runs for a while
    result = subprocess.run(
        [sys.executable, "-m", "worker_tier_local", "--duration", "12", "--settings", str(tmp_path / "cdk.json")],
        capture_output=True, text=True, timeout=60, env=environment, cwd=REPO, check=False,
    )
    # THEN a person sees each of the three outcomes, and the dead letter's reason
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(" ok   /hello " in line for line in lines), result.stdout
    assert any(" ok   /flaky " in line and "receive 3" in line for line in lines), result.stdout
    assert any(" DLQ  /poison " in line and "NonRetryableError" in line for line in lines), result.stdout
    assert any("in DLQ:" in line and "references a deleted customer" in line for line in lines), result.stdout


def test_make_run_stopped_before_the_delayed_example_names_it_with_its_due_time(tmp_path):
    # GIVEN `make run` with the example tasks, the delayed one due 150 s after it is sent
    environment = {**os.environ, "PYTHONPATH": stacks.subprocess_pythonpath()}
    # WHEN its duration ends long before that
    result = subprocess.run(
        [sys.executable, "-m", "worker_tier_local", "--duration", "2", "--port", "0", "--settings", str(REPO / "cdk.json")],
        capture_output=True, text=True, timeout=60, env=environment, cwd=REPO, check=False,
    )
    # THEN the exit message names the delayed example by path and id, with its due time and how long until then
    assert result.returncode == 0, result.stderr
    [sent] = [line for line in result.stdout.splitlines() if "Grace, 150 s later" in line]
    message_id = sent.split()[3]
    [named] = [line for line in result.stdout.splitlines() if f"/hello   {message_id}  due at " in line]
    assert re.search(r"due at \d\d:\d\d:\d\d \(due in 1[45]\d s\)$", named), result.stdout
    assert "sent by this run and not finished (a longer --duration sees them through):" in result.stdout


def test_cron_entry_tick_reaches_its_task(outcomes):
    # GIVEN an every-minute cron.yaml entry and a clock 30 s before a minute boundary
    from worker_tier.periodic.cron_config import parse

    entries = parse('version: 1\ncron:\n - name: "minutely-report"\n   url: "/report"\n   schedule: "* * * * *"\n')
    now = [1_800_000_030.0]  # 2027-01-15 08:00:30 UTC
    ticks: list[dict] = []
    with LocalEnvironment(Settings(), cron_entries=entries, on_tick=ticks.append, cron_clock=lambda: now[0]) as env:
        env.poll_once()
        assert ticks == []
        # WHEN the minute comes
        now[0] += 30
        env.poll_once()
        assert env.poll_until(lambda: env.queue_depth() == 0, timeout_seconds=10)
    # THEN one message was enqueued and the /report task ran with its name and tick
    assert [t["enqueued"] for t in ticks] == [True]
    assert ticks[0]["tick"] == "cron#minutely-report#2027-01-15 08:01:00 UTC"
    assert [(o.path, o.status) for o in outcomes] == [("/report", OUTCOME_SUCCEEDED)]


def test_delayed_message_goes_through_the_table_and_arrives_with_its_due_time(outcomes):
    # GIVEN a task that records what it receives, and a producer whose clock is 5 minutes behind
    import time
    from datetime import datetime, timezone

    from worker_tier.worker.registry import DEFAULT_REGISTRY

    seen = []
    DEFAULT_REGISTRY.task("/e2e-delayed")(seen.append)
    with LocalEnvironment(Settings()) as env:
        def late_clock() -> float:
            return time.time() - 300

        sent_at = late_clock()
        # WHEN it sends with a delay long enough for the delay table (due 150 s ago, by the real clock)
        env.new_client(clock=late_clock).send("/e2e-delayed", '{"kind": "reminder"}', delay=150)
        stored = env.dynamodb.scan(TableName=env.delay_table)["Items"]
        assert len(stored) == 1 and env.queue_depth() == 0
        # AND the delay dispatcher runs
        report = env.run_dispatcher()
        assert env.poll_until(lambda: len(seen) == 1, timeout_seconds=10)
    # THEN the message arrived once, with its body and when it was due
    assert report["sent"] == 1 and report["max_lateness_s"] > 140
    [task] = seen
    assert task.body == '{"kind": "reminder"}'
    assert abs(task.due_at.timestamp() - (sent_at + 150)) < 0.01
    assert task.due_at.tzinfo == timezone.utc and isinstance(task.due_at, datetime)


def test_container_worker_runs_forwarded_long_tasks_beside_the_lambda_emulator(outcomes):
    # GIVEN the local environment with the container worker, and the example long task
    with LocalEnvironment(Settings(), container=True) as env:
        env.client.send("/render", '{"frames": 1}')
        # WHEN the Lambda emulator polls  THEN it forwards; the container worker runs it
        assert env.poll_until(lambda: len(outcomes) >= 2, timeout_seconds=20)
        assert env.queue_depth(env.container_queue_url) == 0 or env.poll_until(lambda: env.queue_depth(env.container_queue_url) == 0, 10)
    assert [(o.path, o.status, o.detail) for o in outcomes] == [
        ("/render", OUTCOME_SUCCEEDED, "forwarded to the container worker"),
        ("/render", OUTCOME_SUCCEEDED, ""),
    ]


def test_container_worker_process_drains_on_sigterm():
    # GIVEN `python -m worker_tier worker` running against the local environment, busy with a 3 s task
    import signal

    with LocalEnvironment(Settings()) as env:
        env.client.send("/render", '{"frames": 3}')
        environment = {**os.environ, "PYTHONPATH": stacks.subprocess_pythonpath(), contract.setting_variable("container_concurrency"): "1"}
        environment.pop(contract.CONTAINER_QUEUE_URL_VARIABLE, None)
        process = subprocess.Popen([sys.executable, "-m", "worker_tier", "worker", "--grace", "20"], env=environment,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started = _wait_for_line(process, "rendering 3 frames")
        # WHEN ECS sends SIGTERM mid-task (a message received but not yet started would be released instead)
        process.send_signal(signal.SIGTERM)
        output, errors = process.communicate(timeout=30)
        output = started + output
        # THEN the task finished, its message was deleted, and the process exited cleanly
        assert process.returncode == 0, errors
        assert "rendered 3 frames" in output
        assert env.queue_depth() == 0


def test_container_worker_process_exits_after_the_grace_period_without_releasing_a_running_task():
    # GIVEN `python -m worker_tier worker` busy with a 60 s task, beating every second (extensions of 11 s), grace 1 s
    import signal
    import time

    from worker_tier.container.consumer import EXIT_CODE_TASKS_ABANDONED
    from worker_tier.core.settings import HEARTBEAT_MARGIN_SECONDS

    settings = Settings(heartbeat_interval=1)
    with LocalEnvironment(settings) as env:
        env.client.send("/render", '{"frames": 60}')
        environment = {**os.environ, "PYTHONPATH": stacks.subprocess_pythonpath(),
                       contract.setting_variable("container_concurrency"): "1", "POWERTOOLS_LOG_LEVEL": "WARNING"}
        environment.pop(contract.CONTAINER_QUEUE_URL_VARIABLE, None)
        process = subprocess.Popen([sys.executable, "-m", "worker_tier", "worker", "--grace", "1"], env=environment,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for_line(process, "rendering 60 frames")
        # WHEN ECS sends SIGTERM and the task outlives the grace period
        process.send_signal(signal.SIGTERM)
        output, errors = process.communicate(timeout=30)
        exited_at = time.monotonic()
        # THEN the process exits at once (the task dies with it), saying how many it abandoned
        assert process.returncode == EXIT_CODE_TASKS_ABANDONED, errors
        assert "tasks still running after the grace period" in output and '"count":1' in output.replace(" ", "")
        assert "rendered" not in output
        # AND the message was not released: no other worker can take it while its last extension lasts
        assert env.sqs.receive_message(QueueUrl=env.queue_url).get("Messages") is None
        # AND it returns once that extension lapses (interval + margin after the last beat)
        while not (again := env.sqs.receive_message(QueueUrl=env.queue_url).get("Messages")):
            assert time.monotonic() < exited_at + settings.heartbeat_interval + HEARTBEAT_MARGIN_SECONDS + 5, "the message never came back"
            time.sleep(0.5)
        assert [m["Body"] for m in again] == ['{"frames": 60}']


def _wait_for_line(process: subprocess.Popen, expected: str, seconds: float = 30) -> str:
    """Read the process's stdout until a line holds ``expected`` (its task has started); what was read."""
    import selectors
    import time

    read, deadline = "", time.monotonic() + seconds
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while expected not in read:
            left = deadline - time.monotonic()
            assert left > 0 and process.poll() is None, f"{expected!r} never appeared; stdout so far: {read[-500:]!r}"
            if selector.select(timeout=min(left, 1.0)):
                read += process.stdout.readline()
    return read


def test_a_stale_container_queue_variable_from_an_earlier_export_line_does_not_reach_the_worker(outcomes, monkeypatch):
    # GIVEN a shell where an earlier `make run --container`'s export line was pasted, then `make run` started in it
    monkeypatch.setenv(contract.CONTAINER_QUEUE_URL_VARIABLE, "http://127.0.0.1:4577/123456789012/worker-tier-local-container")
    with LocalEnvironment(Settings(task_modules="tasks")) as env:
        # WHEN a container task is sent to this run, which has no container worker
        message_id = env.client.send("/render", {"frames": 1})
        env.poll_until(lambda: any(o.message_id == message_id for o in outcomes), timeout_seconds=30)
    # THEN the Lambda worker ran it itself, as it does with no container queue (not forwarded to the stale queue)
    assert next(o.status for o in outcomes if o.message_id == message_id) == OUTCOME_SUCCEEDED, outcomes
