"""Shared test setup: no real AWS credentials or endpoints, quiet jsii, quiet Powertools metrics."""

import os

import pytest

os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "CRITICAL",
    }
)
os.environ.pop("AWS_ENDPOINT_URL", None)
os.environ.pop("AWS_PROFILE", None)


@pytest.fixture
def outcomes():
    """Every worker outcome (``worker_tier.worker.fates.Outcome``) emitted while the test runs, in order."""
    from worker_tier.worker.fates import add_outcome_listener, remove_outcome_listener

    seen: list = []
    add_outcome_listener(seen.append)
    yield seen
    remove_outcome_listener(seen.append)
