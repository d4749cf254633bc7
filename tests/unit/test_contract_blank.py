"""A resource variable that is only whitespace is a missing one, not a queue named ' '."""

from __future__ import annotations

import pytest

from worker_tier.core import contract
from worker_tier.core.contract import Needs, Resources
from worker_tier.core.errors import SettingsError


@pytest.mark.parametrize("blank", [" ", "\t", "\n", "  \r\n"])
def test_a_blank_variable_is_no_resource(blank):
    # GIVEN a queue URL and a state table variable that is only whitespace
    environment = {contract.QUEUE_URL_VARIABLE: "https://sqs/q", contract.STATE_TABLE_VARIABLE: blank}
    # WHEN read  THEN only the queue is a resource
    assert Resources.from_environment(environment) == Resources(queue_url="https://sqs/q")


def test_a_blank_required_variable_is_named_as_missing():
    # GIVEN an entry point that needs the queue  WHEN its variable is only spaces
    with pytest.raises(SettingsError) as error:
        Needs("the worker", required=("queue_url",)).read({contract.QUEUE_URL_VARIABLE: "   "})
    # THEN it stops naming the variable, as when the variable is unset
    assert str(error.value) == "WORKER_TIER_QUEUE_URL must be set: the worker reads its queue_url from it"


def test_a_blank_value_given_directly_is_missing_too():
    # GIVEN Resources built in code with a blank queue URL  WHEN it is named  THEN it counts as missing
    with pytest.raises(SettingsError) as error:
        Resources(queue_url=" ").named("queue_url", "the client")
    assert str(error.value) == "WORKER_TIER_QUEUE_URL must be set: the client reads its queue_url from it"
