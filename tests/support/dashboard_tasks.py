"""Tasks the dashboard's browser tests add to `make run`'s examples (its cdk.json's task_modules: tasks and this module).

- ``/charge`` dead-letters while the customer it names is missing (no file ``customer_file`` names), and succeeds
  once that file exists: an on-call person fixes the cause, then redrives only that path's messages.
- ``/invoice`` returns a result, which a tracked job's page shows.
"""

from __future__ import annotations

from pathlib import Path

from worker_tier import NonRetryableError, Task, task

CHARGE_PATH = "/charge"
INVOICE_PATH = "/invoice"


@task(CHARGE_PATH)
def charge(t: Task) -> dict:
    """NonRetryableError until the body's ``customer_file`` exists; then the charge's receipt."""
    body = t.json()
    if not Path(body["customer_file"]).exists():
        raise NonRetryableError(f"customer {body['customer']} not found")
    return {"charged": body["customer"]}


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
