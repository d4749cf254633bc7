"""worker_tier.testing: the real worker, delay dispatcher and ticks in-process, on the world's clock, as a user runs them."""

from __future__ import annotations

import importlib.metadata
import itertools
import os
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import boto3
import pytest

from worker_tier import Client, NonRetryableError, RetryLater, Task
from worker_tier.periodic.cron_config import parse
from worker_tier.testing import TaskWorld, lambda_record
from worker_tier.testing.tables import UnsupportedCallError
from worker_tier.worker.registry import Registry

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tasks():
    registry = Registry()

    @registry.task("/ok")
    def ok(task: Task) -> None:
        pass

    @registry.task("/later")
    def later(task: Task) -> None:
        if task.receive_count == 1:
            raise RetryLater(30, "upstream not ready")

    @registry.task("/poison")
    def poison(task: Task) -> None:
        raise NonRetryableError(f"order {task.json()['order_id']} references a deleted customer")

    @registry.task("/signup")
    def signup(task: Task) -> None:
        Client.from_env().send("/ok", {"welcome": task.json()["user"]})

    return registry


@pytest.fixture
def world(tasks):
    with TaskWorld((), registry=tasks) as world:
        yield world


def test_a_message_that_succeeds(world):
    # GIVEN a message for a task that returns
    message_id = world.client.send("/ok", {})
    # WHEN the world runs what is due
    result = world.run()
    # THEN the worker reported it done and the queue is empty
    assert result.outcome(message_id).status == "succeeded"
    assert world.fate(message_id) == "succeeded"
    assert world.pending() == 0


def test_a_tracked_job_reads_retrying_then_succeeded_in_the_world(world):
    # GIVEN a tracked message for a task that asks for a retry on its first receive
    job_id = world.client.send("/later", {}, track=True)
    # WHEN it runs, and runs again 30 s later
    world.run()
    retrying = world.client.status(job_id)
    world.advance(seconds=30)
    # THEN its job recorded the retry, then its success, on the world's clock
    assert (retrying.state, retrying.next_try_at) == ("retrying", retrying.updated_at + 30_000)
    status = world.client.status(job_id)
    assert status.state == "succeeded" and [e["state"] for e in status.history] == [
        "queued", "running", "retrying", "running", "succeeded"]


def test_a_retried_message_waits_its_delay_then_succeeds(world):
    # GIVEN a task that asks for a retry in 30 s on its first receive
    message_id = world.client.send("/later", {})
    # WHEN it runs
    retried = world.run().outcome(message_id)
    # THEN it is retried with that delay, and nothing runs before the delay is over
    assert (retried.status, retried.visibility_seconds, retried.detail) == ("retrying", 30, "RetryLater: upstream not ready")
    assert world.advance(seconds=29).outcomes == []
    # WHEN the clock reaches the delay THEN its second receive succeeds
    assert world.advance(seconds=1).outcome(message_id).status == "succeeded"
    assert [outcome.receive_count for outcome in world.history(message_id)] == [1, 2]


def test_a_failing_message_backs_off_with_the_ceiling_of_its_backoff(tasks):
    # GIVEN a task that raises, and the world's default jitter (each backoff's ceiling)
    tasks.task("/flaky")(lambda task: (_ for _ in ()).throw(ConnectionError("upstream down")))
    with TaskWorld((), registry=tasks) as world:
        message_id = world.client.send("/flaky", {})
        # WHEN it runs THEN it is retried after the first backoff's ceiling (error_visibility_timeout)
        outcome = world.run().outcome(message_id)
    assert (outcome.status, outcome.visibility_seconds) == ("retrying", world.settings.error_visibility_timeout)


def test_a_refused_message_is_dead_lettered_with_its_reason(world):
    # GIVEN a task that refuses its input
    message_id = world.client.send("/poison", {"order_id": 42})
    # WHEN it runs
    world.run()
    # THEN it is in the DLQ with the worker's reason, and no longer in the queue
    assert world.fate(message_id) == "dead_lettered"
    [dead] = world.dead_letters
    assert (dead.path, dead.body) == ("/poison", '{"order_id":42}')
    assert dead.reason is not None
    assert (dead.reason["error_type"], dead.reason["error_message"]) == ("NonRetryableError", "order 42 references a deleted customer")
    assert world.pending() == 0


def test_a_three_day_delay_goes_through_the_delay_table_and_runs_when_due(world):
    # GIVEN a message sent three days ahead (past SQS's 15 minutes: the delay table)
    message_id = world.client.send("/ok", {}, delay=timedelta(days=3))
    assert world.tables.tables["worker-tier-testing-delays"]
    # WHEN the clock moves two days THEN nothing ran
    assert world.advance(days=2).outcomes == []
    # WHEN it moves to the due time THEN the delay dispatcher sent it and the worker ran it, by the id send returned
    assert world.advance(days=1).statuses() == ["succeeded"]
    assert world.fate(message_id) == "succeeded"


def test_a_cron_yaml_entry_ticks_at_its_times(tasks):
    # GIVEN an hourly periodic task
    seen = []
    tasks.task("/report")(lambda task: seen.append((task.task_name, task.scheduled_at)))
    entries = parse('version: 1\ncron:\n - name: "hourly-report"\n   url: "/report"\n   schedule: "0 * * * *"\n')
    with TaskWorld((), registry=tasks, cron=entries) as world:
        # WHEN three hours pass
        result = world.advance(hours=3)
    # THEN it ran once per hour, with its name and tick
    assert result.statuses() == ["succeeded"] * 3
    assert [name for name, _ in seen] == ["hourly-report"] * 3
    assert [at.hour for _, at in seen] == [1, 2, 3]


def test_a_tasks_follow_up_send_through_client_from_env_is_caught(world):
    # GIVEN a task that sends a follow-up with Client.from_env(), as in a deployed worker
    world.client.send("/signup", {"user": "ada"})
    # WHEN the world runs
    result = world.run()
    # THEN the follow-up reached the world's queue and ran too
    assert [(outcome.path, outcome.status) for outcome in result.outcomes] == [("/signup", "succeeded"), ("/ok", "succeeded")]


def test_closing_the_world_restores_the_environment(tasks):
    # GIVEN no queue in the environment
    before = os.environ.get("WORKER_TIER_QUEUE_URL")
    # WHEN a world opens and closes THEN the variable was set while it lived, and is as before after
    with TaskWorld((), registry=tasks) as world:
        assert os.environ["WORKER_TIER_QUEUE_URL"] == world.queue_url
    assert os.environ.get("WORKER_TIER_QUEUE_URL") == before


def test_lambda_record_is_the_public_path_to_an_event_record(world):
    # GIVEN a received message
    world.client.send("/ok", "hi")
    [received] = world.queues.receive_message(world.queue_url, AttributeNames=["All"], MessageAttributeNames=["All"])["Messages"]
    # WHEN it is shaped as Lambda's record THEN it carries the id, body and path
    record = lambda_record(received, world.queue_arn, "us-east-1")
    assert (record["messageId"], record["body"]) == (received["MessageId"], "hi")
    assert record["messageAttributes"]["beanstalk.sqsd.path"]["stringValue"] == "/ok"


def test_a_user_project_uses_the_fixture_from_pytest(tmp_path):
    # GIVEN a project outside this repository with its own tasks package and a test using the fixture
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text(textwrap.dedent("""
        from worker_tier import NonRetryableError, Task, task

        @task("/charge")
        def charge(t: Task) -> None:
            if t.json()["cents"] < 0:
                raise NonRetryableError("a negative charge")
    """))
    (tmp_path / "test_shop.py").write_text(textwrap.dedent("""
        def test_charges(worker_tier_world):
            world = worker_tier_world(task_modules="shop")
            good = world.client.send("/charge", {"cents": 100})
            bad = world.client.send("/charge", {"cents": -1})
            world.run()
            assert world.fate(good) == "succeeded"
            assert world.fate(bad) == "dead_lettered"
            assert world.dead_letters[0].reason["error_message"] == "a negative charge"
    """))
    # WHEN pytest runs there, with the plugin the pytest11 entry point names (named with -p only where the installed
    # metadata predates the entry point: pytest refuses a plugin registered twice)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(tmp_path)])}
    plugin = "worker_tier.testing.pytest_plugin"
    installed = any(point.value == plugin for point in importlib.metadata.entry_points(group="pytest11"))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *([] if installed else ["-p", plugin]), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    # THEN the test passes
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def test_a_tasks_follow_up_with_a_three_day_delay_waits_three_world_days(tasks):
    # GIVEN a task whose follow-up is sent three days ahead with Client.from_env(), as a deployed task does
    tasks.task("/remind-later")(lambda task: Client.from_env().send("/ok", {"remind": 1}, delay=timedelta(days=3)))
    with TaskWorld((), registry=tasks) as world:
        world.client.send("/remind-later", {})
        assert world.run().statuses() == ["succeeded"]
        # WHEN one world day passes THEN the follow-up has not run: it is due in three days of the world's clock
        early = world.advance(days=1)
        assert [(o.path, o.status) for o in early.outcomes] == [], "follow-up ran days early (real clock, not the world's)"
        # WHEN the third day passes THEN it ran
        assert [(o.path, o.status) for o in world.advance(days=2, minutes=1).outcomes] == [("/ok", "succeeded")]


def test_a_second_world_does_not_see_the_first_worlds_outcomes(tasks):
    # GIVEN two worlds open at once (the fixture makes as many as a test asks for)
    with TaskWorld((), registry=tasks) as first, TaskWorld((), registry=tasks) as second:
        # WHEN a message runs in the second
        second.client.send("/ok", {})
        second.run()
        # THEN the first world heard nothing
        assert first.outcomes == []


def test_a_task_module_making_its_client_at_import_is_routed_to_the_world(tmp_path, monkeypatch):
    # GIVEN a task module that makes its producer at import time (a common pattern: one client per process)
    (tmp_path / "importtime_tasks.py").write_text(textwrap.dedent("""
        from worker_tier import Client, Task, task
        CLIENT = Client.from_env()

        @task("/chain")
        def chain(t: Task) -> None:
            CLIENT.send("/end", {})

        @task("/end")
        def end(t: Task) -> None:
            pass
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("WORKER_TIER_QUEUE_URL", raising=False)
    # WHEN a world imports it THEN it imports (the world's variables are set before its task modules import)
    # (the module's @task fills the default registry, so the world runs with it: an empty Registry() would hear no path)
    with TaskWorld("importtime_tasks") as world:
        world.client.send("/chain", {})
        assert [o.path for o in world.run().outcomes] == ["/chain", "/end"]


def test_a_world_needs_no_aws_profile(tasks, monkeypatch):
    # GIVEN a developer shell whose AWS_PROFILE names a profile this machine does not have (CI, another account)
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile-worker-tier-audit")
    # WHEN a world opens THEN it works: it needs no AWS account or configuration
    with TaskWorld((), registry=tasks) as world:
        world.client.send("/ok", {})
        assert world.run().statuses() == ["succeeded"]


def test_worlds_closed_out_of_order_hand_the_process_back_as_it_was(tasks):
    # GIVEN the process's queue variable, default boto3 session and wall clock before any world
    import boto3

    from worker_tier.core import wall_clock

    queue_before, session_before = os.environ.get("WORKER_TIER_QUEUE_URL"), boto3.DEFAULT_SESSION
    first = TaskWorld((), registry=tasks)
    second = TaskWorld((), registry=tasks, start=first.now + timedelta(days=1))
    # WHEN the first world closes while the second is open
    first.close()
    # THEN the second still holds the process: its variables, its routing and its clock
    assert os.environ["WORKER_TIER_QUEUE_URL"] == second.queue_url
    message_id = Client.from_env().send("/ok", {})
    assert second.run().outcome(message_id).status == "succeeded"
    assert wall_clock.now() == second.clock()
    # WHEN the second closes too (and the first again) THEN all is as before the first opened
    second.close()
    first.close()
    assert os.environ.get("WORKER_TIER_QUEUE_URL") == queue_before
    assert boto3.DEFAULT_SESSION is session_before
    assert abs(wall_clock.now() - time.time()) < 60


def test_a_client_with_its_default_clock_reads_the_worlds_clock(tasks):
    # GIVEN a Client built by the app under test, not by the world, with its default clock (the wall clock)
    with TaskWorld((), registry=tasks) as world:
        client = Client(world.queue_url, "worker-tier-testing-delays", state_table="worker-tier-testing-state")
        # WHEN it sends three days ahead THEN the message runs after three world days, not before
        client.send("/ok", {}, delay=timedelta(days=3))
        assert world.advance(days=2).outcomes == []
        assert world.advance(days=1, minutes=1).statuses() == ["succeeded"]


def test_a_delayed_message_stored_in_a_minute_already_passed_still_runs(tasks):
    # GIVEN a world whose dispatcher has run, and a producer on a clock an hour behind the world's
    with TaskWorld((), registry=tasks) as world:
        world.advance(hours=2)
        behind = Client(world.queue_url, "worker-tier-testing-delays", clock=lambda: world.clock() - 3600,
                        state_table="worker-tier-testing-state")
        # WHEN it sends 20 minutes ahead by its clock: due 40 minutes ago by the world's
        behind.send("/ok", {"late": True}, delay=timedelta(minutes=20))
        # THEN the world's safety net sends it, and it runs now rather than never
        assert world.run().statuses() == ["succeeded"]


def test_a_call_the_world_does_not_model_is_refused_naming_it_and_what_to_do():
    # GIVEN a world, and a test's own AWS call beyond what Worker Tier makes (SQS's ListQueueTags)
    with TaskWorld(task_modules="tasks") as world:
        sqs = boto3.client("sqs")
        # WHEN it is made  THEN it is refused in one line (never answered wrongly), saying where such a test runs
        with pytest.raises(UnsupportedCallError) as error:
            sqs.list_queue_tags(QueueUrl=world.queue_url)
    assert str(error.value) == ("sqs's ListQueueTags is not modelled by worker_tier.testing; every call Worker Tier "
                                "itself makes is modelled; run a test that needs this one against moto (moto's "
                                "mock_aws) rather than a TaskWorld")


def test_a_world_has_a_payload_bucket_its_tasks_reach_through_boto3_and_refuses_other_s3_calls(tasks):
    # GIVEN a world (large_payloads on, the default)
    with TaskWorld((), registry=tasks) as world:
        bucket = os.environ["WORKER_TIER_PAYLOAD_BUCKET"]
        s3 = boto3.client("s3")
        # WHEN code under test puts a 2 MB object in the bucket its variable names, and reads it back
        s3.put_object(Bucket=bucket, Key="payloads/a", Body=b"x" * 2_000_000)
        read = s3.get_object(Bucket=bucket, Key="payloads/a")["Body"].read()
        # THEN it is the world's in-memory bucket
        assert bucket == world.payload_bucket == "worker-tier-testing-payloads"
        assert read == world.objects.buckets[bucket]["payloads/a"] == b"x" * 2_000_000
        # AND an S3 call Worker Tier does not make is refused, naming it
        with pytest.raises(UnsupportedCallError) as error:
            s3.head_object(Bucket=bucket, Key="payloads/a")
    assert str(error.value).startswith("s3's HeadObject is not modelled by worker_tier.testing")
    assert "WORKER_TIER_PAYLOAD_BUCKET" not in os.environ or os.environ["WORKER_TIER_PAYLOAD_BUCKET"] != bucket


TWO_MB = "x" * (2 * 1024 * 1024)


def _tasks(seen: list[int]) -> Registry:
    registry = Registry()
    registry.task("/big")(lambda task: seen.append(len(task.body)))
    return registry


def test_from_env_in_the_world_offloads_a_2_mb_body():
    # GIVEN a world and a task  WHEN a producer's Client sends it a 2 MB body  THEN the task gets it whole
    seen: list[int] = []
    with TaskWorld(task_modules=[], registry=_tasks(seen)) as world:
        message_id = Client.from_env().send("/big", TWO_MB)
        assert world.run().outcome(message_id).status == "succeeded"
    assert seen == [len(TWO_MB)]


def test_the_worlds_own_client_offloads_a_2_mb_body():
    # GIVEN a world and a task  WHEN the world's own client sends it a 2 MB body  THEN the task gets it whole
    seen: list[int] = []
    with TaskWorld(task_modules=[], registry=_tasks(seen)) as world:
        message_id = world.client.send("/big", TWO_MB)
        assert world.run().outcome(message_id).status == "succeeded"
    assert seen == [len(TWO_MB)]


def test_a_dead_lettered_offloaded_message_in_a_task_world_keeps_its_object_without_a_warning(caplog):
    # GIVEN a world whose task fails for good
    import logging

    from worker_tier import NonRetryableError

    tasks = Registry()
    tasks.task("/bad")(lambda task: (_ for _ in ()).throw(NonRetryableError("bad input")))
    with TaskWorld((), registry=tasks) as world, caplog.at_level(logging.WARNING):
        # WHEN a 2 MB body (offloaded) is sent to it
        message_id = world.client.send("/bad", "x" * 2_000_000)
        assert world.run().outcome(message_id).status == "dead_lettered"
        # THEN its object is kept (its clock restarted by a copy onto itself, which the in-memory S3 makes too)
        assert len(world.objects.buckets[world.payload_bucket]) == 1
    assert [r.getMessage() for r in caplog.records if "lifecycle clock" in r.getMessage()] == []


def test_a_rate_limited_task_runs_at_its_rate_on_the_worlds_clock():
    # GIVEN a task limited to 2 a second, and five messages for it
    tasks, started = Registry(), []
    with TaskWorld((), registry=tasks) as world:
        tasks.task("/email", rate_limit="2/s")(lambda task: started.append(world.clock()))
        ids = [world.client.send("/email", {"n": n}) for n in range(5)]
        # WHEN the world runs them, and then time passes for those throttled
        world.run()
        world.advance(minutes=5)
        # THEN each ran once, at least half a second after the one before (a reserved turn's sleep is the world's time),
        # and no wait counted as an attempt
        assert [world.fate(message_id) for message_id in ids] == ["succeeded"] * 5
        assert all(later - earlier >= 0.5 - 1e-6 for earlier, later in itertools.pairwise(started)) and len(started) == 5
        assert {outcome.receive_count for outcome in world.outcomes if outcome.status == "succeeded"} == {1}


def test_a_concurrency_limited_task_waits_for_the_slot_of_its_key():
    # GIVEN a task run one at a time per tenant, whose body sends a second message for its own tenant while it runs
    tasks, running, most = Registry(), {}, {}
    with TaskWorld((), registry=tasks) as world:
        @tasks.task("/sync", concurrency=1, concurrency_key="tenant")
        def sync(task: Task) -> None:
            tenant = task.json()["tenant"]
            running[tenant] = running.get(tenant, 0) + 1
            most[tenant] = max(most.get(tenant, 0), running[tenant])
            # While this one holds its tenant's slot, the world's worker runs another invocation on what is visible.
            if task.json().get("first"):
                world.client.send("/sync", {"tenant": tenant})
                world.run()
            running[tenant] -= 1

        first = world.client.send("/sync", {"tenant": "a", "first": True})
        # WHEN it runs, and then time passes
        outcomes = world.run()
        world.advance(minutes=5)
        # THEN the second, sent while the first held the slot, waited (throttled, not an attempt) and then ran
        assert world.fate(first) == "succeeded" and most == {"a": 1}
        assert [outcome.status for outcome in outcomes.outcomes] == ["throttled", "succeeded"]
        assert world.outcomes[-1].status == "succeeded" and world.outcomes[-1].receive_count == 1
        assert world.pending() == 0 and world.dead_letters == []
