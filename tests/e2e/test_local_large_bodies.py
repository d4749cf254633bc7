"""A 5 MB body through the local environment, end to end: every path a body travels, and its object's life.

The body goes to S3 and the queue carries the Extended Client's pointer (docs/large-payloads.md). These tests
follow one such body through ``send``, a 3-day cancellable delay (cancelled, then sent again and rescheduled),
the delay dispatcher, the worker, the DLQ with its reason, ``worker-tier dlq show``, ``worker-tier redrive``, the
task's success and its follow-up send, checking after each step which objects the bucket holds: an object is
deleted exactly when its message succeeds (or its delayed message is cancelled), never before.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import boto3
from click.testing import CliRunner

from worker_tier import Client, NonRetryableError
from worker_tier.core import contract
from worker_tier.core.settings import Settings
from worker_tier.worker.fates import OUTCOME_DEAD_LETTERED, OUTCOME_SUCCEEDED
from worker_tier.worker.registry import DEFAULT_REGISTRY
from worker_tier_cli import cli
from worker_tier_cli.session import Runtime
from worker_tier_local import LocalEnvironment

BODY = json.dumps({"report": "quarterly", "rows": "r" * (5 * 1024 * 1024)})
FOLLOW_UP = json.dumps({"summary": "s" * (5 * 1024 * 1024)})
THREE_DAYS = timedelta(days=3)


def _keys(s3, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents") or [])


def test_a_5_mb_body_goes_through_every_path_and_its_object_is_deleted_exactly_when_its_message_succeeds(outcomes, tmp_path):
    # GIVEN a report task that fails for good until it is fixed, then succeeds and sends a 5 MB follow-up
    fixed, seen = [False], []

    def report(task):
        seen.append(("report", len(task.body), task.body == BODY))
        if not fixed[0]:
            raise NonRetryableError("the report's customer is suspended")
        Client.from_env().send("/e2e-large-summary", FOLLOW_UP)

    DEFAULT_REGISTRY.task("/e2e-large-report")(report)
    DEFAULT_REGISTRY.task("/e2e-large-summary")(lambda task: seen.append(("summary", len(task.body), task.body == FOLLOW_UP)))
    with LocalEnvironment(Settings(error_visibility_timeout=1)) as env:
        s3 = boto3.client("s3")
        bucket = env.payload_bucket
        shell = env.shell_environment()
        assert shell[contract.PAYLOAD_BUCKET_VARIABLE] == bucket

        def run(*command: str):
            runtime = Runtime(interactive=lambda: False, wait_seconds=0, state_dir=tmp_path / "state", environ=shell)
            return CliRunner().invoke(cli, list(command), obj=runtime)

        # A producer whose clock is 3 days behind: its 3-day delays are due about now by the real clock.
        late = env.new_client(clock=lambda: time.time() - THREE_DAYS.total_seconds())
        # WHEN it sends the body with a cancellable 3-day delay, and cancels it
        late.send("/e2e-large-report", BODY, delay=THREE_DAYS, dedupe_key="report-1", cancellable=True)
        [delayed_key] = _keys(s3, bucket)
        assert delayed_key.startswith(contract.DELAYED_PAYLOAD_KEY_PREFIX)
        [item] = env.dynamodb.scan(TableName=env.delay_table, FilterExpression="begins_with(pk, :b)",
                                   ExpressionAttributeValues={":b": {"S": "b#"}})["Items"]
        assert delayed_key in json.dumps(item) and len(json.dumps(item)) < 4096  # the item holds the pointer only
        assert late.cancel("report-1") is True
        # THEN the cancelled message's object is gone
        assert _keys(s3, bucket) == []

        # WHEN it is sent again, rescheduled to 60 s earlier, and the delay dispatcher runs
        late.send("/e2e-large-report", BODY, delay=THREE_DAYS, dedupe_key="report-2", cancellable=True)
        [delayed_key] = _keys(s3, bucket)
        assert late.reschedule("report-2", delay=THREE_DAYS - timedelta(seconds=60)) is True
        assert _keys(s3, bucket) == [delayed_key]
        assert env.run_dispatcher()["sent"] == 1
        # AND the worker runs it: the task gets the whole body, fails for good, and the message is dead-lettered
        assert env.poll_until(lambda: any(o.status == OUTCOME_DEAD_LETTERED for o in outcomes), timeout_seconds=30)
        assert seen == [("report", len(BODY), True)]
        [letter] = env.dead_letters()
        assert letter["failure"]["error_message"] == "the report's customer is suspended"
        assert letter["attributes"][contract.PAYLOAD_SIZE_ATTRIBUTE] == str(len(BODY.encode()))
        # THEN the dead-lettered message keeps its object
        assert _keys(s3, bucket) == [delayed_key]

        # WHEN an operator looks at it
        listed = json.loads(run("dlq", "list", "--json").stdout)
        [group] = listed["groups"] if isinstance(listed, dict) else listed
        [message_id] = group["message_ids"]
        shown = run("dlq", "show", message_id)
        # THEN they see the reason and the real body, said to come from S3
        assert shown.exit_code == 0, shown.output
        assert "the report's customer is suspended" in shown.output
        assert f"s3://{bucket}/{delayed_key}" in shown.output and '{"report": "quarterly"' in shown.output

        # WHEN the task is fixed and the DLQ redriven
        fixed[0] = True
        moved = run("redrive", "--yes")
        assert moved.exit_code == 0, moved.output
        # THEN the pointer moved and the object stayed, until the message succeeds
        assert _keys(s3, bucket) == [delayed_key]
        assert env.poll_until(lambda: len(seen) == 3, timeout_seconds=60)
        assert env.poll_until(lambda: env.queue_depth() == 0, timeout_seconds=30)
        # AND the report ran with its body, its follow-up ran with its own 5 MB body, and both objects are gone
        assert seen[1:] == [("report", len(BODY), True), ("summary", len(FOLLOW_UP), True)]
        assert [o.status for o in outcomes if o.path == "/e2e-large-summary"] == [OUTCOME_SUCCEEDED]
        assert _keys(s3, bucket) == []
        assert env.dead_letters() == []
