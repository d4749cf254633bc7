"""Handlers in-process against moto: a queue, its DLQ and the state table, as the stack makes them.

The state table's client is moto's behind the strict DynamoDB stand-in (``tests.support.strict_dynamodb``), so what
DynamoDB would refuse (a key over 2,048 bytes, 26 writes in a batch) is refused here too.
"""

from __future__ import annotations

import pytest
from moto import mock_aws

from tests.support import iam
from tests.support.aws_world import make_world
from worker_tier.core import observability

iam.install()  # before any client is made: clients copy botocore's handlers when made


@pytest.fixture(autouse=True)
def iam_enforced():
    """Fail the test on any call a role made that its synthesized policy denies (make_world turns checking on)."""
    iam.install()
    yield
    denials = iam.ENFORCEMENT.check()
    if denials:
        pytest.fail(iam.denial_lines(denials), pytrace=False)


@pytest.fixture
def aws():
    with mock_aws():
        yield make_world()


@pytest.fixture
def aws_fifo():
    with mock_aws():
        yield make_world(fifo=True)


@pytest.fixture
def published():
    """The metrics a test's invocations published, summed by name."""
    observability.metrics.clear_metrics()

    def sums() -> dict[str, float]:
        return {name: sum(metric["Value"]) for name, metric in observability.metrics.metric_set.items()}

    yield sums
    observability.metrics.clear_metrics()
