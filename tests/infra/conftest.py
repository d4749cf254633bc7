"""One synthesized stack per session: jsii start-up costs seconds, so stacks are shared."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Template

from tests.support.synth import synth
from worker_tier_cdk.stack import WorkerTierStack


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


