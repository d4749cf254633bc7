"""One synthesized stack per session: jsii start-up costs seconds, so stacks are shared."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from infra.nag import add_checks
from infra.stack import WorkerTierStack
from worker_tier.settings import Settings


def synth(settings: Settings | None = None, context: dict | None = None, outdir: str | None = None, cron_entries=None):
    """An app with nag, the stack, and its synthesized assembly (synth fails on any nag finding)."""
    app = cdk.App(context=context or {}, outdir=outdir)
    stack = WorkerTierStack(app, "WorkerTier", settings=settings, cron_entries=cron_entries)
    add_checks(app)
    assembly = app.synth()
    return stack, assembly


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory):
    outdir = str(tmp_path_factory.mktemp("cdk"))
    stack, assembly = synth(outdir=outdir)
    return stack, assembly, Template.from_stack(stack)


@pytest.fixture(scope="session")
def template(synthesized) -> Template:
    return synthesized[2]


@pytest.fixture(scope="session")
def stack(synthesized) -> WorkerTierStack:
    return synthesized[0]
