"""Tasks the dashboard's browser tests add to `make run`'s examples (its cdk.json's task_modules: tasks and this module).

- ``/charge`` dead-letters while the customer it names is missing (no file of its number in the directory
  ``CUSTOMERS_VARIABLE`` names), and succeeds once that file exists: an on-call person fixes the cause, then
  redrives only that path's messages.
- ``/invoice`` returns a result, which a tracked job's page shows.
"""

from __future__ import annotations

import os
from pathlib import Path

from worker_tier import NonRetryableError, Task, task

CHARGE_PATH = "/charge"
INVOICE_PATH = "/invoice"
CUSTOMERS_VARIABLE = "DASHBOARD_TEST_CUSTOMERS"  # the directory of the customers that exist, one file each


@task(CHARGE_PATH)
def charge(t: Task) -> dict:
    """NonRetryableError until the body's customer exists; then the charge's receipt."""
    customer = t.json()["customer"]
    if not customer_file(Path(os.environ[CUSTOMERS_VARIABLE]), customer).exists():
        raise NonRetryableError(f"customer {customer} not found")
    return {"charged": customer}


def customer_file(directory: Path, customer: int) -> Path:
    """The file whose existence says ``customer`` exists."""
    return directory / f"customer-{customer}"


@task(INVOICE_PATH)
def invoice(t: Task) -> dict:
    """The invoice's number and total, from the order in the body."""
    order = t.json()
    return {"invoice": f"INV-{order['order_id']}", "total_cents": sum(order["items_cents"])}


def settings_file(directory: Path) -> Path:
    """A cdk.json for `make run --settings` whose task_modules are the example tasks and these; retries after 1 s."""
    import json

    path = directory / "cdk.json"
    settings = {"task_modules": f"tasks,{__name__}", "error_visibility_timeout": 1}
    path.write_text(json.dumps({"context": {"worker_tier": settings}}))
    return path
