"""Synthesizing the stack for the infrastructure tests, and reading IAM statements out of its template."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk.assertions import Template

from worker_tier.core.settings import Settings
from worker_tier_cdk import TaskCode, cron_config
from worker_tier_cdk.nag import add_checks
from worker_tier_cdk.stack import WorkerTierStack

REPO = Path(__file__).resolve().parents[2]
TASK_CODE = TaskCode.from_directories(REPO / "tasks")


def synth(settings: Settings | None = None, context: dict | None = None, outdir: str | None = None, cron_entries=None):
    """An app with nag, the stack, and its synthesized assembly (synth fails on any nag finding)."""
    app = cdk.App(context=context or {}, outdir=outdir)
    if cron_entries is None:
        cron_entries = cron_config.load(REPO / "cron.yaml", fifo=(settings or Settings()).fifo)
    stack = WorkerTierStack(app, "WorkerTier", settings=settings, cron_entries=cron_entries, task_code=TASK_CODE)
    add_checks(app)
    assembly = app.synth()
    return stack, assembly


def dynamodb_statements(template: Template) -> list[tuple[str, dict]]:
    """(role logical id, statement) for every IAM statement with a DynamoDB action, in policies and inline policies."""
    found = []
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for role in policy["Properties"].get("Roles", []):
            found += [(role["Ref"], s) for s in policy["Properties"]["PolicyDocument"]["Statement"]]
    for logical_id, role in template.find_resources("AWS::IAM::Role").items():
        for inline in role["Properties"].get("Policies", []):
            found += [(logical_id, s) for s in inline["PolicyDocument"]["Statement"]]
    return [(role, s) for role, s in found if any(a.startswith("dynamodb:") for a in actions_of(s))]


def actions_of(statement: dict) -> list[str]:
    """A statement's actions as a list."""
    return statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]


def on_table(statement: dict, table_logical_prefix: str) -> bool:
    """Whether the statement's resources include the table whose logical id starts with the prefix."""
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    return any(str(r.get("Fn::GetAtt", [""])[0]).startswith(table_logical_prefix) for r in resources if isinstance(r, dict))
