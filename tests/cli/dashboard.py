"""The ``dashboard`` fixture: the web dashboard (``worker_tier_cli.ui``) over the ``deployment`` in moto, reached
through Starlette's TestClient as a browser would: at the bound address, logged in with the printed token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from starlette.testclient import TestClient

from worker_tier.core import contract
from worker_tier_cli.session import Session
from worker_tier_cli.ui.guard import CSRF_FIELD, allowed_hosts
from worker_tier_cli.ui.web import build_app

TOKEN = "a-token-of-twenty-chars"
PORT = 8642
ORIGIN = f"http://127.0.0.1:{PORT}"


@dataclass
class Dashboard:
    """The app, a logged-in browser (``browser``), the session's deployment and its CSRF token."""

    app: Any
    browser: TestClient
    deployment: Any

    @property
    def csrf_token(self) -> str:
        return str(self.app.app.state.dashboard.csrf_token)

    @property
    def runs(self) -> Any:
        return self.app.app.state.dashboard.runs

    def post(self, url: str, fields: dict[str, str], **headers: str) -> Any:
        """A form POST from the dashboard's own page, with its CSRF token (unless ``fields`` names another)."""
        return self.browser.post(url, data={CSRF_FIELD: self.csrf_token, **fields},
                                 headers={"Origin": ORIGIN, **headers}, follow_redirects=False)

    def stranger(self) -> TestClient:
        """A browser at the same address that never saw the token."""
        return TestClient(self.app, base_url=ORIGIN)


def dashboard_over(deployment: Any, **given: str) -> Dashboard:
    """The dashboard over ``deployment``'s queues and state table (and ``given`` resources), logged in."""
    resources = {"queue_url": deployment.queue_url, "dlq_url": deployment.dlq_url, "state_table": deployment.state_table,
                 **given}
    session = Session.open(deployment.runtime, None, "us-east-1", resources)
    app = build_app(session, token=TOKEN, hosts=allowed_hosts("127.0.0.1", PORT), port=PORT)
    browser = TestClient(app, base_url=ORIGIN)
    assert browser.get(f"/?token={TOKEN}").status_code == 200
    return Dashboard(app, browser, deployment)


@pytest.fixture
def dashboard(deployment):
    return dashboard_over(deployment)


def delay_table(deployment: Any, name: str = "delay") -> str:
    """A delay table beside the deployment's state table."""
    deployment.dynamodb.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": contract.DELAY_PARTITION_KEY, "KeyType": "HASH"},
                   {"AttributeName": contract.DELAY_SORT_KEY, "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": contract.DELAY_PARTITION_KEY, "AttributeType": "S"},
                              {"AttributeName": contract.DELAY_SORT_KEY, "AttributeType": "S"}],
    )
    return name
