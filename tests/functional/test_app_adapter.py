"""EB worker apps (Flask, Django over WSGI and ASGI, FastAPI) run unchanged in the worker, through Worker.handle on moto.

Each app (tests/apps) is written as public EB workers are; the worker delivers sqsd's POST to it in-process
and decides each message's fate by sqsd's status rules, with our backoff, max_retries and DLQ reasons.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from typing import Any

import pytest
from fastapi import BackgroundTasks, FastAPI

from tests.apps import CRASH_MESSAGE, FLAKY_BODY, RETRY_AFTER_SECONDS
from tests.support.aws_world import AwsWorld
from tests.support.container import depth, run_until
from worker_tier.core import contract
from worker_tier.app.app_adapter import InProcessTarget, load_app, wsgi_environ
from worker_tier.app import target_from_settings
from worker_tier.app.app_target import SqsdRequest
from worker_tier.container.consumer import Consumer
from worker_tier.core.errors import AppLoadError
from worker_tier.worker.fates import OUTCOME_RETRYING, OUTCOME_SUCCEEDED
from worker_tier.container.protection import TaskProtection
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.app.sqsd import USER_AGENT
from worker_tier.worker.batch import Worker

APPS = {
    "flask": "tests.apps.flask_worker:app",
    "django-wsgi": "tests.apps.django_worker:application",
    "django-asgi": "tests.apps.django_worker:asgi_application",
    "fastapi": "tests.apps.fastapi_worker:app",
}


@pytest.fixture(params=list(APPS.values()), ids=list(APPS))
def app(request) -> str:
    """An app reference, its ``received`` list cleared."""
    received(request.param).clear()
    return request.param  # type: ignore[no-any-return]


def received(reference: str) -> list[dict[str, Any]]:
    """What the app recorded of each request it got."""
    return importlib.import_module(reference.partition(":")[0]).received  # type: ignore[no-any-return]


def worker_for(aws: AwsWorld, reference: str, registry: Registry | None = None, **settings: Any) -> Worker:
    """A Worker for the app, as Worker.from_environment builds one with the app setting."""
    configured = Settings(app=reference, **settings)
    return Worker(
        configured, queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url, registry=registry or Registry(),
        sqs=aws.sqs, random=lambda: 0.5, app_target=target_from_settings(configured),
    )


def send_job(aws: AwsWorld, task: str, arguments: Any = None, **attributes: str) -> None:
    body = json.dumps({"task": task, "arguments": arguments or {}})
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=body, MessageAttributes={
        name: {"DataType": "String", "StringValue": value} for name, value in attributes.items()
    })


def send_tick(aws: AwsWorld, path: str, name: str = "hourly-update") -> None:
    """A tick as EB's leader and Worker Tier's periodic tasks enqueue it."""
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=contract.SCHEDULED_JOB_BODY, MessageAttributes={
        contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": path},
        contract.TASK_NAME_ATTRIBUTE: {"DataType": "String", "StringValue": name},
        contract.SCHEDULED_TIME_ATTRIBUTE: {"DataType": "String", "StringValue": "2026-11-22 23:00:00 UTC"},
    })


def failed(response: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


def reason_of(dead: dict[str, Any]) -> dict[str, Any]:
    return json.loads(dead["MessageAttributes"][contract.FAILURE_ATTRIBUTE]["StringValue"])  # type: ignore[no-any-return]


def visibility_set(aws: AwsWorld) -> list[int]:
    return [entry["VisibilityTimeout"] for params in aws.params("ChangeMessageVisibilityBatch") for entry in params["Entries"]]


def test_a_json_task_reaches_the_app_as_sqsds_post_and_200_succeeds(aws, app, outcomes):
    # GIVEN a JSON task body, as EB producers send them
    send_job(aws, "send_email", {"to": "ops@example.com"})
    # WHEN the worker handles it
    response = worker_for(aws, app).handle(aws.receive_event(), None)
    # THEN the app answered 200 (its User-Agent check passed) and the message succeeded
    assert failed(response) == []
    assert [o.status for o in outcomes] == [OUTCOME_SUCCEEDED]
    [request] = received(app)
    headers = {name.lower(): value for name, value in request["headers"].items()}
    assert (request["path"], json.loads(request["body"])) == ("/", {"task": "send_email", "arguments": {"to": "ops@example.com"}})
    assert headers["user-agent"] == USER_AGENT
    assert headers["x-aws-sqsd-queue"] == "work"
    assert headers["x-aws-sqsd-receive-count"] == "1"
    assert headers["content-type"] == "application/json"


@pytest.mark.parametrize("path", ["/update/hourly", "/cleanup/"])
def test_a_tick_reaches_its_cron_route_with_an_empty_body_and_its_headers(aws, app, path):
    # GIVEN a tick for a cron.yaml url: a pattern route, and a route with its trailing slash
    send_tick(aws, path)
    # WHEN the worker handles it
    response = worker_for(aws, app).handle(aws.receive_event(), None)
    # THEN the app's route answered 200, given an empty body and the tick's headers
    assert failed(response) == []
    [request] = received(app)
    headers = {name.lower(): value for name, value in request["headers"].items()}
    assert (request["path"], request["body"]) == (path, "")
    assert (headers["x-aws-sqsd-taskname"], headers["x-aws-sqsd-scheduled-at"]) == ("hourly-update", "2026-11-22T23:00:00Z")
    assert headers["x-aws-sqsd-path"] == path


def test_a_cron_url_missing_the_routes_trailing_slash_fails_as_it_would_on_eb(aws, app):
    # GIVEN a tick for /cleanup, where the app's route is /cleanup/ (sqsd follows no redirect either)
    send_tick(aws, "/cleanup")
    # WHEN the worker handles it on its last receive
    response = worker_for(aws, app, max_retries=1).handle(aws.receive_event(), None)
    # THEN the app's answer (a redirect or a 404, by framework) is a failure, dead-lettered with its status
    assert failed(response) == []
    [dead] = aws.dead_letters()
    reason = reason_of(dead)
    assert reason["error_type"] == "AppStatusError"
    assert reason["app_status"] in (301, 307, 308, 404)
    assert reason["error_message"].startswith(f"the app answered {reason['app_status']} to POST /cleanup; only 200 deletes")


def test_a_500_retries_with_backoff_and_the_next_200_succeeds(aws, app, outcomes):
    # GIVEN a task the app fails once (500), then completes
    send_job(aws, "flaky")
    worker = worker_for(aws, app, error_visibility_timeout=40)
    event = aws.receive_event()
    # WHEN the worker handles its first receive
    first = worker.handle(event, None)
    # THEN it is reported failed and backs off (uniform 0..40 s at random 0.5: 20 s)
    assert failed(first) == [event["Records"][0]["messageId"]]
    assert visibility_set(aws) == [20]
    assert outcomes[-1].status == OUTCOME_RETRYING and outcomes[-1].detail.startswith("AppStatusError: the app answered 500")
    # AND WHEN its second receive comes  THEN the app answers 200 and it succeeds
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = "2"
    assert failed(worker.handle(event, None)) == []
    assert outcomes[-1].status == OUTCOME_SUCCEEDED


def test_a_500_on_the_last_receive_is_dead_lettered_with_its_status_and_body(aws, app):
    # GIVEN a task the app fails (500) on what is its last receive
    send_job(aws, "flaky")
    # WHEN the worker handles it
    response = worker_for(aws, app, max_retries=1).handle(aws.receive_event(), None)
    # THEN it is in the DLQ with the status and the app's body in its reason, and its body as it came
    assert failed(response) == []
    [dead] = aws.dead_letters()
    reason = reason_of(dead)
    assert (reason["error_type"], reason["app_status"], reason["app_response"]) == ("AppStatusError", 500, FLAKY_BODY)
    assert json.loads(dead["Body"]) == {"task": "flaky", "arguments": {}}


def test_a_429_with_retry_after_retries_when_the_app_asked(aws, app, outcomes):
    # GIVEN a task the app throttles: 429 with Retry-After
    send_job(aws, "throttled")
    # WHEN the worker handles it
    response = worker_for(aws, app).handle(aws.receive_event(), None)
    # THEN it comes back after the app's Retry-After, not the backoff
    assert len(failed(response)) == 1
    assert visibility_set(aws) == [RETRY_AFTER_SECONDS]
    assert outcomes[-1].detail == f"RetryLater: the app answered 429 to POST / with Retry-After {RETRY_AFTER_SECONDS} s"


def test_an_app_exception_is_dead_lettered_with_its_traceback(aws, app):
    # GIVEN a task whose code raises inside the app, on its last receive
    send_job(aws, "crash")
    # WHEN the worker handles it
    response = worker_for(aws, app, max_retries=1).handle(aws.receive_event(), None)
    # THEN it is in the DLQ; the reason names the exception, where it was raised and how it got there
    assert failed(response) == []
    [dead] = aws.dead_letters()
    reason = reason_of(dead)
    assert reason["error_type"] == "AppExceptionError"
    message = reason["error_message"]
    assert message.startswith(f"the app raised RuntimeError: {CRASH_MESSAGE} handling POST / (it answered 500); traceback")
    assert "_worker.py:" in message and "in run_task" in message


def test_the_apps_user_agent_check_refuses_a_request_sqsd_did_not_send(app):
    # GIVEN the app, and a POST without aws-sqsd in its User-Agent
    request = SqsdRequest("/", (("User-Agent", "curl/8.0"), ("Content-Type", "application/json")), b'{"task": "send_email"}')
    # WHEN delivered  THEN the app refuses it: the worker's own requests pass a real check
    assert InProcessTarget.load(app).deliver(request).status == 400


def test_a_registered_task_path_wins_and_the_app_gets_the_rest(aws, app):
    # GIVEN an @task for one cron url, beside the app
    registry = Registry()
    ran: list[str] = []
    registry.task("/update/daily")(lambda task: ran.append(task.path))
    send_tick(aws, "/update/daily", "daily")
    send_tick(aws, "/update/hourly")
    # WHEN the worker handles both ticks
    response = worker_for(aws, app, registry).handle(aws.receive_event(), None)
    # THEN the task ran its own, and the app got the other
    assert failed(response) == []
    assert ran == ["/update/daily"]
    assert [request["path"] for request in received(app)] == ["/update/hourly"]


def test_via_sns_gives_the_app_the_published_message_and_the_dlq_the_envelope(aws, app):
    # GIVEN an SNS-wrapped job (a subscription without raw delivery) that crashes on its last receive
    job = json.dumps({"task": "crash", "arguments": {}})
    envelope = json.dumps({"Type": "Notification", "MessageId": "n-1", "TopicArn": "arn:aws:sns:us-east-1:123456789012:jobs",
                           "Message": job})
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=envelope)
    # WHEN the worker handles it with via_sns
    worker_for(aws, app, via_sns=True, max_retries=1).handle(aws.receive_event(), None)
    # THEN the app got the published message, and the DLQ copy is the message as it came
    assert [request["body"] for request in received(app)] == [job]
    [dead] = aws.dead_letters()
    assert dead["Body"] == envelope


def test_a_message_past_retention_period_is_dead_lettered_not_delivered(aws, app):
    # GIVEN a message first received longer ago than the retention period
    send_job(aws, "send_email", {"to": "ops@example.com"})
    event = aws.receive_event()
    record = event["Records"][0]
    first_ms = int(record["attributes"]["ApproximateFirstReceiveTimestamp"]) - 3_600_000
    record["attributes"]["ApproximateFirstReceiveTimestamp"] = str(first_ms)
    # WHEN the worker handles it
    response = worker_for(aws, app, retention_period=600).handle(event, None)
    # THEN the app never saw it, and the DLQ has it with its age and the rule (sqsd would drop it silently)
    assert failed(response) == []
    assert received(app) == []
    [dead] = aws.dead_letters()
    reason = reason_of(dead)
    assert reason["error_type"] == "RetentionExpiredError"
    assert "more than retention_period 600 s (EB RetentionPeriod): not delivered to the app" in reason["error_message"]


def test_without_an_app_an_unregistered_path_is_still_unknown(aws):
    # GIVEN a worker without an app, and a message for a path no task has
    send_job(aws, "send_email")
    worker = Worker(Settings(max_retries=1), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                    registry=Registry(), sqs=aws.sqs)
    # WHEN handled  THEN it is dead-lettered as an unknown path, as before apps
    worker.handle(aws.receive_event(), None)
    [dead] = aws.dead_letters()
    assert reason_of(dead)["error_type"] == "UnknownPathError"


def test_worker_from_environment_builds_the_app_target_once_per_process():
    # GIVEN the app setting in a worker's environment
    environ = {contract.setting_variable("app"): APPS["flask"], contract.setting_variable("task_modules"): "tests.apps"}
    # WHEN two workers are built from it
    first, second = Worker.from_environment(environ, registry=Registry()), Worker.from_environment(environ, registry=Registry())
    # THEN each has the in-process target, loaded once
    assert isinstance(first.app_target, InProcessTarget) and first.app_target is second.app_target
    assert first.app_target.asgi is False


@pytest.mark.parametrize(("reference", "message"), [
    ("tests.apps.no_such_module:app", "app 'tests.apps.no_such_module:app' (WORKER_TIER_APP) could not be imported: "
     "importing 'tests.apps.no_such_module' raised ModuleNotFoundError: No module named 'tests.apps.no_such_module'; "
     "deploy the module with the task code"),
    ("tests.apps.flask_worker:application", "app 'tests.apps.flask_worker:application' (WORKER_TIER_APP): "
     "'tests.apps.flask_worker' has no attribute 'application'"),
    ("tests.apps:RETRY_AFTER_SECONDS", "app 'tests.apps:RETRY_AFTER_SECONDS' (WORKER_TIER_APP) must name a WSGI or "
     "ASGI app (a callable), got int"),
])
def test_an_app_that_cannot_be_loaded_fails_naming_the_setting_and_its_value(reference, message):
    # GIVEN an app setting that does not name an app  WHEN loaded  THEN the error says which and why
    with pytest.raises(AppLoadError) as raised:
        load_app(reference)
    assert str(raised.value) == message


@pytest.mark.parametrize(("reference", "asgi"), [(reference, "asgi" in name or name == "fastapi") for name, reference in APPS.items()])
def test_wsgi_and_asgi_apps_are_told_apart(reference, asgi):
    # GIVEN each app  WHEN loaded  THEN ASGI ones (an async __call__) go through the bridge, WSGI ones not
    assert InProcessTarget.load(reference).asgi is asgi


# -- one core, one behaviour: the Lambda path and the container worker ---------------------------------------------


def run_lambda(aws: AwsWorld, worker: Worker) -> None:
    event = aws.receive_event()
    failures = set(failed(worker.handle(event, None)))
    for record in event["Records"]:
        if record["messageId"] not in failures:
            aws.sqs.delete_message(QueueUrl=aws.queue_url, ReceiptHandle=record["receiptHandle"])


def run_container(aws: AwsWorld, worker: Worker) -> None:
    consumer = Consumer(worker, aws.sqs, aws.queue_url, poll_wait_seconds=1, heartbeat_interval=1,
                        protection=TaskProtection(agent_uri=""))
    thread = run_until(consumer, lambda: depth(aws) == 0)
    consumer.stopping.set()
    thread.join(10)


@pytest.mark.parametrize("run", [run_lambda, run_container], ids=["lambda", "container"])
def test_every_app_fate_is_the_same_on_both_paths(aws, app, run):
    # GIVEN a job the app completes, one it fails, one it crashes on, and a tick, each on its last receive
    for job in ("send_email", "flaky", "crash"):
        send_job(aws, job, {"to": "ops@example.com"})
    send_tick(aws, "/update/hourly")
    # WHEN processed
    run(aws, worker_for(aws, app, max_retries=1))
    # THEN the queue is empty, the app saw all four, and the DLQ holds the two failures with their reasons
    assert depth(aws) == 0
    assert sorted(request["path"] for request in received(app)) == ["/", "/", "/", "/update/hourly"]
    reasons = {}
    for _ in range(3):
        for dead in aws.dead_letters():
            reasons[json.loads(dead["Body"])["task"]] = reason_of(dead)
    assert {task: reason["error_type"] for task, reason in reasons.items()} == {
        "flaky": "AppStatusError", "crash": "AppExceptionError",
    }
    assert reasons["flaky"]["app_status"] == 500


# -- the environ and the ASGI lifespan --------------------------------------------------------------------------------


def test_the_environ_is_what_a_wsgi_server_builds_for_the_post():
    # GIVEN a tick for a cron.yaml url with a query string and an escaped character, and a non-ASCII attribute header
    request = SqsdRequest("/report%20daily?kind=full", (("Content-Type", "text/plain"), ("X-Aws-Sqsd-Attr-who", "Zoë")), b"")
    # WHEN its environ is built
    environ = wsgi_environ(request)
    # THEN the path is decoded, the query kept, and header values read back as latin-1, as PEP 3333 asks of a server
    assert (environ["REQUEST_METHOD"], environ["PATH_INFO"], environ["QUERY_STRING"]) == ("POST", "/report daily", "kind=full")
    assert (environ["CONTENT_TYPE"], environ["CONTENT_LENGTH"], environ["HTTP_HOST"]) == ("text/plain", "0", "localhost")
    assert environ["HTTP_X_AWS_SQSD_ATTR_WHO"].encode("latin-1").decode("utf-8") == "Zoë"
    assert environ["wsgi.input"].read() == b""


def _app_failing_its_startup(reason: str) -> Any:
    async def app(scope: dict, receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        await receive()
        await send({"type": "lifespan.startup.failed", "message": reason})

    return app


def test_an_asgi_app_whose_startup_fails_fails_the_load_with_its_message():
    # GIVEN an ASGI app whose lifespan startup fails  WHEN loaded  THEN the load fails, saying why
    with pytest.raises(AppLoadError) as raised:
        InProcessTarget(_app_failing_its_startup("no database"), reference="tests:broken")
    assert str(raised.value) == "app 'tests:broken' (WORKER_TIER_APP) failed to start: no database"


def test_an_asgi_apps_lifespan_state_reaches_each_request():
    # GIVEN the FastAPI app, whose lifespan yields its mailer, and a job that answers with it
    target = InProcessTarget.load(APPS["fastapi"])
    headers = (("User-Agent", USER_AGENT), ("Content-Type", "application/json"), ("X-Aws-Sqsd-Receive-Count", "1"))
    request = SqsdRequest("/", headers, b'{"task": "send_email", "arguments": {"to": "ops@example.com"}}')
    # WHEN delivered  THEN the route read the state its lifespan set up
    assert json.loads(target.deliver(request).body) == {"sent_to": "ops@example.com", "via": "smtp://localhost"}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the loop thread's end, on purpose
def test_an_asgi_app_whose_loop_stopped_is_served_on_a_new_one():
    # GIVEN an ASGI app that answers, then stops its event loop from a callback (a SystemExit escaping to the loop)
    import asyncio
    import threading
    import time

    def escape() -> None:
        raise SystemExit("a callback of the app's")

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == "/stop":
            asyncio.get_running_loop().call_later(0.05, escape)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["path"].encode()})

    target = InProcessTarget(app)
    assert target.deliver(SqsdRequest("/stop", (), b"", timeout_seconds=5)).status == 200
    time.sleep(0.5)  # the callback has run: the loop thread ended
    # WHEN the next message is delivered  THEN a new loop serves it
    answers: list[bytes] = []
    delivery = threading.Thread(target=lambda: answers.append(target.deliver(SqsdRequest("/next", (), b"", timeout_seconds=5)).body), daemon=True)
    delivery.start()
    delivery.join(5)
    assert answers == [b"/next"]


class _LambdaContext:
    """A Lambda context whose remaining time stays at ``remaining_ms`` (as Lambda's ``get_remaining_time_in_millis``)."""

    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def _fastapi_with_background_work(work: Any) -> Any:
    """A FastAPI app answering 200 at once and running ``work`` after the answer (``BackgroundTasks``)."""
    api = FastAPI()

    @api.post("/")
    async def run_task(background: BackgroundTasks) -> dict[str, str]:
        background.add_task(work)
        return {"accepted": "yes"}

    return api


def _app_worker(aws, app) -> Worker:
    return Worker(Settings(), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url, registry=Registry(),
                  sqs=aws.sqs, random=lambda: 0.5, app_target=InProcessTarget(app))


def test_background_work_cut_by_the_delivery_deadline_fails_the_message_with_why(aws, outcomes):
    # GIVEN a FastAPI app that answers 200 at once, then runs a background task longer than the delivery may take
    started: list[str] = []

    async def report() -> None:
        started.append("report")
        await asyncio.sleep(60)
        started.append("report finished")

    api = _fastapi_with_background_work(report)
    w = _app_worker(aws, api)
    send_job(aws, "report")
    # WHEN the worker delivers it with 1 s left for the app (the invocation's remaining time less timeout_margin)
    response = w.handle(aws.receive_event(), _LambdaContext(w.settings.timeout_margin * 1000 + 1000))
    # THEN the background task was cancelled, and the message is not counted a success: it retries, saying why
    assert started == ["report"]
    assert len(failed(response)) == 1
    [outcome] = outcomes
    assert outcome.status == OUTCOME_RETRYING
    assert ("the app answered 200, but its work after the answer (a background task) did not finish within 1.0 s "
            "(inactivity_timeout) and was cancelled handling POST /") in outcome.detail


def test_background_work_cut_by_the_deadline_has_its_cancellation_awaited_before_the_message_fails(aws, outcomes):
    # GIVEN a FastAPI app whose background task, cancelled, cleans up for a moment before it ends
    cleaned: list[str] = []

    async def report() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.3)
            cleaned.append("cleaned up")
            raise

    w = _app_worker(aws, _fastapi_with_background_work(report))
    send_job(aws, "report")
    # WHEN the worker delivers it with 1 s left for the app
    response = w.handle(aws.receive_event(), _LambdaContext(w.settings.timeout_margin * 1000 + 1000))
    # THEN the message failed only once the cancelled work had ended
    assert len(failed(response)) == 1
    assert cleaned == ["cleaned up"]


@pytest.mark.parametrize("kind", ["async def", "def"])
def test_background_work_that_raises_after_a_200_fails_the_message_naming_the_exception(aws, outcomes, kind):
    # GIVEN a FastAPI app that answers 200 at once, then runs a background task (on its loop, or in a thread) that raises
    async def report_async() -> None:
        raise RuntimeError("the report's disk is full")

    def report_sync() -> None:
        raise RuntimeError("the report's disk is full")

    w = _app_worker(aws, _fastapi_with_background_work(report_async if kind == "async def" else report_sync))
    send_job(aws, "report")
    # WHEN the worker delivers it
    response = w.handle(aws.receive_event(), None)
    # THEN the message is not a success: it retries, its reason naming the background task's exception
    assert len(failed(response)) == 1
    [outcome] = outcomes
    assert outcome.status == OUTCOME_RETRYING
    assert ("the app answered 200, but its work after the answer (a background task) raised RuntimeError: "
            "the report's disk is full handling POST /") in outcome.detail


def test_background_work_that_finishes_in_time_is_done_before_the_message_succeeds(aws, outcomes):
    # GIVEN a FastAPI app whose background task, run after its 200, takes a moment
    done: list[str] = []

    async def report() -> None:
        await asyncio.sleep(0.05)
        done.append("report")

    api = _fastapi_with_background_work(report)
    w = _app_worker(aws, api)
    send_job(aws, "report")
    # WHEN the worker delivers it
    response = w.handle(aws.receive_event(), None)
    # THEN the background task had finished when the message succeeded
    assert failed(response) == []
    assert [o.status for o in outcomes] == [OUTCOME_SUCCEEDED]
    assert done == ["report"]
