"""EB worker apps run unchanged through the local environment: moto, the event source, the real handlers, the app.

The apps are the public examples (examples/): Flask, Django (WSGI) and FastAPI (ASGI), written as EB worker
apps are written, each sent examples/messages.json and ticked by examples/cron.yaml.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from werkzeug.test import Client as WsgiClient

from examples.jobs import PARTNER_RETRY_AFTER_SECONDS
from worker_tier.core.settings import Settings
from worker_tier.worker.fates import OUTCOME_DEAD_LETTERED, OUTCOME_RETRYING, OUTCOME_SUCCEEDED, Outcome
from worker_tier_local import LocalEnvironment
from worker_tier_local import messages as example_messages

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FLASK_APP = "examples.flask_app:app"
APPS = {"flask": FLASK_APP, "django": "examples.django_worker.wsgi:application", "fastapi": "examples.fastapi_app:app"}
# Two receives: the 500 and the 429 are retried once and then answer 200; the exception is dead-lettered on the second.
SETTINGS = Settings(error_visibility_timeout=1, max_retries=2)
UNKNOWN_TASK = {"task": "resize_avatar", "arguments": {}}
OWN_PROCESS_VARIABLE = "EXAMPLES_TEST_OWN_PROCESS"
OWN_PROCESS_APPS = ("django", "fastapi")


@pytest.fixture(params=list(APPS), ids=list(APPS))
def app(request) -> str | None:
    """The example app's reference; None when the case ran, and passed, in a pytest process of its own instead.

    Django holds one project's settings per process, and tests/apps has another Django project; an ASGI
    app keeps a2wsgi's event-loop thread for the life of the process. So those cases run in a fresh
    process each (the variable names the case there), and leave nothing behind in this one.
    """
    reference = APPS[request.param]
    if request.param not in OWN_PROCESS_APPS or os.environ.get(OWN_PROCESS_VARIABLE) == request.node.nodeid:
        return reference
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", request.node.nodeid],
        capture_output=True, text=True, timeout=300, cwd=REPO, check=False,
        env={**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}", OWN_PROCESS_VARIABLE: request.node.nodeid},
    )
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-4000:] + result.stderr[-2000:]
    return None


def _fates(outcomes: list[Outcome], sent: dict[str, str]) -> dict[str, list[str]]:
    """Each sent message's outcomes in order, by the task its body names."""
    fates: dict[str, list[str]] = {name: [] for name in sent.values()}
    for outcome in outcomes:
        if outcome.message_id in sent:
            fates[sent[outcome.message_id]].append(outcome.status)
    return fates


def _sent_id(sent: dict[str, str], task: str) -> str:
    """The message id of the message sent for ``task``."""
    return next(message_id for message_id, name in sent.items() if name == task)


def test_app_messages_meet_sqsd_fates_with_reasons(app, outcomes):
    if app is None:  # passed in its own process
        return
    # GIVEN the local environment running the example app, and its example messages plus an unknown task
    import dataclasses

    examples = example_messages.load(EXAMPLES / example_messages.APP_MESSAGES_FILE, SETTINGS.http_path)
    with LocalEnvironment(dataclasses.replace(SETTINGS, app=app)) as env:
        # WHEN they are sent as an EB producer sends them (a JSON task body) and the worker drains the queue
        sent = {env.client.send(example.path, example.text): example.body["task"] for example in examples}
        sent[env.client.send("/", json.dumps(UNKNOWN_TASK))] = UNKNOWN_TASK["task"]
        assert env.poll_until(lambda: env.queue_depth() == 0, timeout_seconds=60)
        dead = {json.loads(letter["body"])["task"]: letter for letter in env.dead_letters()}
    # THEN 200 deleted at once; a 500 was retried and then answered 200; a 429 with Retry-After came back
    # after its Retry-After; the exception and the 400 went to the DLQ after max_retries receives
    fates = _fates(outcomes, sent)
    assert fates["send_welcome_email"] == [OUTCOME_SUCCEEDED]
    assert fates["build_report"] == [OUTCOME_RETRYING, OUTCOME_SUCCEEDED]
    assert fates["sync_inventory"] == [OUTCOME_RETRYING, OUTCOME_SUCCEEDED]
    [rate_limited] = [o for o in outcomes if o.message_id == _sent_id(sent, "sync_inventory") and o.receive_count == 1]
    assert rate_limited.visibility_seconds == PARTNER_RETRY_AFTER_SECONDS and "429" in rate_limited.detail
    assert fates["charge_card"] == [OUTCOME_RETRYING, OUTCOME_DEAD_LETTERED]
    assert fates[UNKNOWN_TASK["task"]] == [OUTCOME_RETRYING, OUTCOME_DEAD_LETTERED]
    assert set(dead) == {"charge_card", UNKNOWN_TASK["task"]}
    # AND the exception's reason holds its traceback; the 400's holds the status and the app's answer
    raised = json.dumps(dead["charge_card"]["failure"])
    assert "LookupError" in raised and "order 42 has no card on file" in raised and "jobs.py" in raised, raised
    refused = json.dumps(dead[UNKNOWN_TASK["task"]]["failure"])
    assert "400" in refused and "unknown task" in refused, refused


def test_cron_yaml_ticks_reach_pattern_and_trailing_slash_routes(app, outcomes, capsys):
    if app is None:  # passed in its own process
        return
    # GIVEN the examples' cron.yaml (urls "/update/often/" for the route "/update/<frequency>", and
    # "/purge-sessions" for "/purge-sessions/"), and a clock 30 s before a minute boundary
    import dataclasses

    from worker_tier.periodic.cron_config import load

    entries = load(EXAMPLES / "cron.yaml", fifo=False, missing_ok=False)
    now = [1_800_000_030.0]  # 2027-01-15 08:00:30 UTC
    ticks: list[dict] = []
    with LocalEnvironment(dataclasses.replace(SETTINGS, app=app), cron_entries=entries, on_tick=ticks.append,
                          cron_clock=lambda: now[0]) as env:
        # WHEN the minute comes and the worker drains the queue
        now[0] += 30
        env.poll_once()
        assert env.poll_until(lambda: env.queue_depth() == 0, timeout_seconds=20)
        dead = env.dead_letters()
    # THEN each every-minute entry ticked once, and the app answered 200 to each empty-body POST
    assert sorted(t["tick"] for t in ticks) == ["cron#purge-sessions#2027-01-15 08:01:00 UTC",
                                                "cron#update-often#2027-01-15 08:01:00 UTC"]
    assert sorted((o.path, o.status) for o in outcomes) == [("/purge-sessions", OUTCOME_SUCCEEDED),
                                                            ("/update/often/", OUTCOME_SUCCEEDED)]
    assert dead == []
    # AND the pattern route saw the tick's name and time in sqsd's headers
    assert "often update update-often for 2027-01-15T08:01:00Z" in capsys.readouterr().out


def test_the_examples_refuse_a_post_that_is_not_from_sqsd(app):
    if app is None:  # passed in its own process
        return
    # GIVEN the example app, as its own framework serves it (the ASGI one through a2wsgi, as the adapter does)
    from a2wsgi import ASGIMiddleware

    from worker_tier.app.app_adapter import is_asgi, load_app

    loaded = load_app(app)
    client = WsgiClient(ASGIMiddleware(loaded) if is_asgi(loaded) else loaded)
    body = json.dumps({"task": "send_welcome_email", "arguments": {"email": "ada@example.com"}})
    # WHEN a POST comes without aws-sqsd in its User-Agent, then with it
    plain = client.post("/", data=body, headers={"User-Agent": "curl/8.5", "X-Aws-Sqsd-Receive-Count": "1"})
    sqsd = client.post("/", data=body, headers={"User-Agent": "aws-sqsd/2.4", "X-Aws-Sqsd-Receive-Count": "1"})
    # THEN the check is real: 400 without it, 200 with it (so the 200s above prove the adapter sends it)
    assert (plain.status_code, sqsd.status_code) == (400, 200)


def test_make_run_with_an_app_prints_each_outcome(tmp_path):
    # GIVEN settings with a quick backoff and two receives, as a cdk.json
    worker_tier = {"error_visibility_timeout": 1, "max_retries": 2}
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {"worker_tier": worker_tier}}))
    environment = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    # WHEN `make run ARGS="--app examples.flask_app:app --duration 90"` runs (its command, from the repository)
    # until every example message has its last outcome, and then a person presses Ctrl-C
    process = subprocess.Popen(
        [sys.executable, "-m", "worker_tier_local", "--app", FLASK_APP, "--duration", "90", "--port", "0",
         "--settings", str(tmp_path / "cdk.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment, cwd=REPO,
    )
    try:
        read = _read_until(process, lambda text: text.count(" ok   / ") >= 3 and " DLQ  / " in text)
        process.send_signal(signal.SIGINT)
        rest, errors = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    # THEN a person sees the app, its cron.yaml, each message sent, and each outcome with its reason
    assert process.returncode == 0, errors
    out = read + rest
    lines = out.splitlines()
    assert f"app   {FLASK_APP} gets every message no @task path claims" in out, out
    assert "cron  update-often: * * * * * UTC -> /update/often/" in out, out
    assert any(line.endswith('{"task": "charge_card", "arguments": {"order_id": 42}}') and " sent  / " in line
               for line in lines), out
    assert any(" ok   / " in line and "receive 1" in line for line in lines), out
    assert any(" retry / " in line and "500" in line and "report store warming up" in line for line in lines), out
    assert any(" retry / " in line and "429" in line and f"retry in {PARTNER_RETRY_AFTER_SECONDS}s" in line
               for line in lines), out
    assert [line for line in lines if " ok   / " in line and "receive 2" in line] != [], out
    assert any(" DLQ  / " in line and "LookupError" in line and "examples/jobs.py" in line for line in lines), out
    assert any(line.endswith("stopping (Ctrl-C)") for line in lines), out
    assert any("in DLQ:" in line and "order 42 has no card on file" in line for line in lines), out
    # AND the cron.yaml fired is the app's (beside its module), not the repository's ./cron.yaml
    assert "minutely-report" not in out, out


def _read_until(process: subprocess.Popen, done, seconds: float = 60) -> str:
    """The process's stdout until ``done(text so far)`` holds; fails naming what was read if it never does."""
    read, deadline = "", time.monotonic() + seconds
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not done(read):
            left = deadline - time.monotonic()
            assert left > 0 and process.poll() is None, f"the outcomes never all appeared; stdout so far: {read!r}"
            if selector.select(timeout=min(left, 1.0)):
                read += process.stdout.readline()
    return read


def test_make_run_finds_a_django_projects_cron_yaml_above_its_wsgi_module():
    # GIVEN the Django example, whose app is examples/django_worker/wsgi.py and whose cron.yaml is in examples/
    environment = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    # WHEN `make run` starts with it and stops at once
    result = subprocess.run(
        [sys.executable, "-m", "worker_tier_local", "--app", APPS["django"], "--duration", "0", "--port", "0"],
        capture_output=True, text=True, timeout=60, env=environment, cwd=REPO, check=False,
    )
    # THEN it fires the nearest cron.yaml going up from the module, and sends the messages.json beside that
    assert result.returncode == 0, result.stderr
    assert "cron  purge-sessions: * * * * * UTC -> /purge-sessions" in result.stdout, result.stdout
    assert '{"task": "charge_card", "arguments": {"order_id": 42}}' in result.stdout, result.stdout


def test_make_run_names_an_app_or_task_module_it_cannot_find_and_an_app_that_is_no_reference(tmp_path):
    # GIVEN default settings, and settings naming a task module that is nowhere, as cdk.json files
    from worker_tier_local.__main__ import main

    (tmp_path / "cdk.json").write_text(json.dumps({"context": {"worker_tier": {}}}))
    (tmp_path / "other.json").write_text(json.dumps({"context": {"worker_tier": {"task_modules": "billing_tasks"}}}))
    settings = ["--settings", str(tmp_path / "cdk.json"), "--port", "0"]
    # WHEN `make run` is given an app whose module is nowhere, one that is no module:attribute, and an app
    # with a task module that is nowhere
    with pytest.raises(SystemExit) as missing:
        main(["--app", "billing.worker:app", *settings])
    with pytest.raises(SystemExit) as malformed:
        main(["--app", "billing/worker.py", *settings])
    with pytest.raises(SystemExit) as no_tasks:
        main(["--app", FLASK_APP, "--settings", str(tmp_path / "other.json"), "--port", "0"])
    # THEN each says what is wrong with the value, before anything starts
    assert str(no_tasks.value) == (f"worker-tier-local: task_modules 'billing_tasks': no module 'billing_tasks' "
                                   f"importable from {os.getcwd()}; set task_modules in cdk.json to the modules of "
                                   "your @task functions (with only an app, its module: 'examples.flask_app')")
    assert str(missing.value).startswith("worker-tier-local: app 'billing.worker:app': no module 'billing.worker' "
                                         "importable from ")
    assert str(malformed.value) == ("worker-tier-local: --app: app must be empty or 'package.module:attribute' "
                                    "(a WSGI or ASGI app), got 'billing/worker.py'")


def test_a_messages_file_item_that_is_wrong_is_named_with_the_rule(tmp_path):
    # GIVEN a messages file whose second item has a path without its leading slash, and one with an unknown key
    wrong_path = tmp_path / "messages.json"
    wrong_path.write_text(json.dumps([{"body": "ok"}, {"body": "x", "path": "update"}]))
    unknown_key = tmp_path / "unknown.json"
    unknown_key.write_text(json.dumps([{"body": "x", "queue": "other"}]))
    # WHEN each is loaded
    with pytest.raises(SystemExit) as path_error:
        example_messages.load(wrong_path, "/")
    with pytest.raises(SystemExit) as key_error:
        example_messages.load(unknown_key, "/")
    # THEN the error names the file, the item and the rule
    assert str(path_error.value) == f"worker-tier-local: {wrong_path} item 1: path must start with '/', got 'update'"
    assert str(key_error.value) == (f"worker-tier-local: {unknown_key} item 0 must be an object with a body and "
                                    "optionally path, delay, attributes; got {'body': 'x', 'queue': 'other'}")
