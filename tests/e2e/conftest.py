"""Every role's call in the local environment is authorized against the stack's synthesized policy (tests/support/iam.py).

The local environment's own setup (queues, tables) and the test's calls are not a role's and are not checked; the
worker, dispatcher, periodic and container calls it runs are, including those of a ``python -m worker_tier worker``
subprocess started with ``stacks.subprocess_pythonpath()``.

The dashboard's browser tests (test_dashboard_*.py) add Debian's Chromium (``chromium``, once per session; they skip
without it), a fresh ``page`` per test, and ``dashboard_world``: `make run` and `worker-tier ui` as subprocesses
(tests/support/dashboard.py), the dashboard an operator's, not a role's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import iam, stacks
from worker_tier_local.environment import LOCAL_PAYLOAD_BUCKET, LOCAL_PREFIX

iam.install()  # before any client is made: clients copy botocore's handlers when made


def _local(name: str) -> tuple[str, str]:
    return (f"{LOCAL_PREFIX}-{name}", f"{LOCAL_PREFIX}-{name}.fifo")


@pytest.fixture(autouse=True)
def iam_enforced(tmp_path: Path, monkeypatch):
    """The container shape's roles over the local environment's resources; a denial fails the test."""
    # A container worker started without a container queue reads the work queue, as it does with an app or forwarding.
    queues = {"WorkerQueue": _local("queue"), "WorkerDeadLetterQueue": _local("dlq"),
              "LongTasksLongTaskQueue": (*_local("container"), *_local("queue"))}
    stacks.enforce("container", queues=queues, tables={"StateTable": f"{LOCAL_PREFIX}-state", "DelaysDelayTable": f"{LOCAL_PREFIX}-delays"},
                   buckets={stacks.PAYLOAD_BUCKET: LOCAL_PAYLOAD_BUCKET})
    shared = stacks.share_with_subprocesses(tmp_path)
    for name, value in shared.items():
        monkeypatch.setenv(name, value)
    yield
    denials = [str(denial) for denial in iam.ENFORCEMENT.check()]
    denials += Path(shared[iam.DENIALS_VARIABLE]).read_text().splitlines() if os.path.exists(shared[iam.DENIALS_VARIABLE]) else []
    if denials:
        pytest.fail("\n".join(dict.fromkeys(denials)), pytrace=False)


@pytest.fixture(scope="session")
def chromium():
    """Debian's Chromium, headless, once per session (tests/support/dashboard.py); the tests skip without it."""
    from tests.support import dashboard

    if not dashboard.CHROMIUM.is_file():
        pytest.skip(dashboard.MISSING_CHROMIUM)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = dashboard.launch_chromium(playwright)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium):
    """A fresh browser context (no cookies) and its page, 1280x800, for one test."""
    from tests.support import dashboard

    context = chromium.new_context(viewport=dashboard.VIEWPORT)
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory):
    """Where the browser tests' pictures go: a temporary directory, and $DASHBOARD_SCREENSHOTS when set."""
    from tests.support import dashboard

    return dashboard.Screenshots(tmp_path_factory.mktemp("screenshots"))


@pytest.fixture
def dashboard_world(tmp_path):
    """`make run` with its examples and tests/support/dashboard_tasks.py's tasks, and `worker-tier ui` on it (from a
    shell with the banner's export line pasted): ``.run`` (a ``LocalRun``), ``.dashboard`` (a ``Dashboard``) and
    ``.customers``, the directory of the customers /charge finds."""
    from types import SimpleNamespace

    from tests.support import dashboard, dashboard_tasks

    customers = tmp_path / "customers"
    customers.mkdir()
    run = dashboard.LocalRun(settings=dashboard_tasks.settings_file(tmp_path),
                             variables={dashboard_tasks.CUSTOMERS_VARIABLE: str(customers)})
    try:
        ui = dashboard.Dashboard(run.shell())
    except BaseException:
        run.stop()
        raise
    try:
        yield SimpleNamespace(run=run, dashboard=ui, customers=customers)
    finally:
        ui.stop()
        run.stop()
