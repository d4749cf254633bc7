"""The command line against the local environment (moto's server over HTTP), as an on-call person runs it."""

from __future__ import annotations

import json

from click.testing import CliRunner

from worker_tier.settings import Settings
from worker_tier_cli import cli
from worker_tier_cli.commands import MOVE_TASK_FALLBACK_NOTE
from worker_tier_cli.session import Runtime
from worker_tier_local import LocalEnvironment
from worker_tier_local.environment import LOCAL_REGION


def test_status_dlq_list_and_redrive_against_the_local_environment():
    # GIVEN the local environment, where the worker dead-lettered /poison with its reason
    with LocalEnvironment(Settings()) as env:
        env.client.send("/poison", json.dumps({"order_id": 42}))
        assert env.poll_until(lambda: env.queue_depth() == 0, timeout_seconds=30)
        given = ["--endpoint-url", env.endpoint_url, "--region", LOCAL_REGION, "--queue-url", env.queue_url,
                 "--dlq-url", env.dead_letter_queue_url, "--state-table", env.state_table]
        runtime = Runtime(interactive=lambda: False, wait_seconds=0)

        def run(*command: str):
            result = CliRunner().invoke(cli, [*given, *command], obj=runtime)
            assert result.exit_code == 0, result.output
            return result

        # WHEN status, dlq list and redrive run
        status = json.loads(run("status", "--json").stdout)
        listed = run("dlq", "list")
        moved = run("redrive", "--json")
        # THEN status counts the dead letter, the list names its reason, and the redrive moves it (batches: moto)
        assert status["queues"]["DLQ"]["visible"] == 1 and status["queues"]["work queue"]["visible"] == 0
        assert listed.stdout.splitlines()[1].split()[:3] == ["/poison", "NonRetryableError", "1"]
        assert "order 42 references a deleted customer" in listed.stdout
        assert MOVE_TASK_FALLBACK_NOTE in moved.stderr
        assert json.loads(moved.stdout)["moved"] == 1
        assert env.queue_depth() == 1 and env.queue_depth(env.dead_letter_queue_url) == 0
