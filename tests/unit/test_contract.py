"""The wire contract: one home for every name that crosses a process boundary."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

from worker_tier.core import contract, message, observability, state
from worker_tier.delays import delay
from worker_tier.core.contract import Needs, Resources, setting_variable
from worker_tier.core.errors import SettingsError
from worker_tier.core.settings import Settings

REPO = Path(__file__).resolve().parents[2]
# The only modules that may spell a variable name: the contract, and the settings that name their own.
NAMING_MODULES = {REPO / "src" / "worker_tier" / "core" / "contract.py", REPO / "src" / "worker_tier" / "core" / "settings.py"}
VARIABLE_NAME = re.compile(r"WORKER_TIER_[A-Z0-9]")
EVERY_RESOURCE = Resources(
    queue_url="https://sqs/q", dlq_url="https://sqs/dlq", state_table="state", delay_table="delays",
    container_queue_url="https://sqs/container", send_queue_url="https://sqs/work", delay_horizon_seconds=120,
)


def _string_literals(path: Path) -> list[tuple[int, str]]:
    """Every string constant of a module (docstrings and f-string parts too), with its line."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_no_module_but_the_contract_and_settings_spells_a_variable_name():
    # GIVEN every module under src/  WHEN its string literals are searched for a WORKER_TIER_<NAME>
    spelled = [f"{path.relative_to(REPO)}:{line}: {text[:80]!r}"
               for path in sorted((REPO / "src").rglob("*.py")) if path not in NAMING_MODULES
               for line, text in _string_literals(path) if VARIABLE_NAME.search(text)]
    # THEN there is none: they name the contract's constants instead
    assert spelled == []


def test_the_search_finds_a_spelled_variable_name(tmp_path):
    # GIVEN a module that reads a variable by its literal name  WHEN searched as above  THEN it is found
    module = tmp_path / "reader.py"
    module.write_text('import os\nqueue = os.environ["WORKER_TIER_QUEUE_URL"]\n')
    assert [line for line, text in _string_literals(module) if VARIABLE_NAME.search(text)] == [2]


def test_the_resource_variables_are_the_deployed_names():
    # GIVEN every resource set  WHEN written as variables  THEN the names are the ones deployed stacks carry
    assert EVERY_RESOURCE.to_environment() == {
        "WORKER_TIER_QUEUE_URL": "https://sqs/q", "WORKER_TIER_DLQ_URL": "https://sqs/dlq",
        "WORKER_TIER_STATE_TABLE": "state", "WORKER_TIER_DELAY_TABLE": "delays",
        "WORKER_TIER_CONTAINER_QUEUE_URL": "https://sqs/container", "WORKER_TIER_SEND_QUEUE_URL": "https://sqs/work",
        "WORKER_TIER_DELAY_HORIZON": "120",
    }


def test_resources_round_trip_through_the_environment():
    # GIVEN every resource set  WHEN written as variables and read back  THEN nothing changes
    assert Resources.from_environment(EVERY_RESOURCE.to_environment()) == EVERY_RESOURCE


def test_unset_and_empty_variables_are_no_resource():
    # GIVEN a queue URL only, and an empty state table variable
    environment = {contract.QUEUE_URL_VARIABLE: "https://sqs/q", contract.STATE_TABLE_VARIABLE: ""}
    # WHEN read  THEN only the queue is a resource, and writing it back gives only the queue
    resources = Resources.from_environment(environment)
    assert resources == Resources(queue_url="https://sqs/q")
    assert resources.to_environment() == {contract.QUEUE_URL_VARIABLE: "https://sqs/q"}


def test_a_horizon_that_is_not_a_whole_number_is_named():
    with pytest.raises(SettingsError) as error:
        Resources.from_environment({contract.DELAY_HORIZON_VARIABLE: "two minutes"})
    assert str(error.value) == "WORKER_TIER_DELAY_HORIZON must be a whole number, got 'two minutes'"


def test_needs_read_only_what_they_declare():
    # GIVEN an entry point that declares its queue only  WHEN it reads an environment with every resource
    resources = Needs("the example", required=("queue_url",)).read(EVERY_RESOURCE.to_environment())
    # THEN an undeclared resource reads as None, so code using one fails in tests rather than drifting
    assert resources == Resources(queue_url="https://sqs/q")


def test_a_missing_required_variable_is_named_with_its_reader():
    with pytest.raises(SettingsError) as error:
        Needs("the delay dispatcher", required=("state_table", "delay_table")).read({contract.STATE_TABLE_VARIABLE: "s"})
    assert str(error.value) == "WORKER_TIER_DELAY_TABLE must be set: the delay dispatcher reads its delay_table from it"


def test_a_need_that_is_no_resource_is_refused():
    with pytest.raises(SettingsError) as error:
        Needs("the example", optional=("long_queue_url",))
    assert str(error.value).startswith("'long_queue_url' is not a Resources field; the fields are: queue_url, dlq_url")


def test_joined_needs_keep_required_over_optional():
    # GIVEN a worker that requires its queue, joined with a producer for which the queue is optional
    joined = Needs("the worker", required=("queue_url",), settings=True) | contract.PRODUCER_NEEDS
    # THEN the queue stays required, the producer's others are optional, and settings are still read
    assert joined == Needs("the worker", ("queue_url",), ("send_queue_url", "delay_table", "payload_bucket",
                                                          "high_queue_url", "low_queue_url"), True)


@pytest.mark.parametrize(
    "entry_module, reader",
    [("worker_tier.handlers.dispatcher", "_new_dispatcher"), ("worker_tier.handlers.recovery", "_new_recovery"),
     ("worker_tier.handlers.periodic", "_new_enqueuer"), ("worker_tier.handlers.worker", "_new_worker")],
)
def test_each_handler_stops_at_start_naming_a_missing_variable(monkeypatch, entry_module, reader):
    # GIVEN a function whose environment lacks every resource
    import importlib

    module = importlib.import_module(entry_module)
    for name in module.NEEDS.variables():
        monkeypatch.delenv(name, raising=False)
    # WHEN its handler builds what it runs  THEN it stops, naming the first variable it requires
    with pytest.raises(SettingsError) as error:
        getattr(module, reader)()
    assert str(error.value).startswith(f"{Resources.variable(module.NEEDS.required[0])} must be set: ")


def test_setting_variables_are_the_ones_settings_write():
    # GIVEN the default settings  WHEN written as variables  THEN each is named as setting_variable names it
    assert set(Settings().to_environment()) == {setting_variable(f.name) for f in dataclasses.fields(Settings)}
    assert contract.DELAY_SHARDS_VARIABLE in Settings().to_environment()


def test_no_resource_variable_is_also_a_setting_variable():
    settings = set(Settings().to_environment())
    assert not settings & set(EVERY_RESOURCE.to_environment())


def test_the_old_homes_name_the_contracts_values():
    # GIVEN the modules that have always exported these names  THEN they are the contract's, not copies
    assert (message.PATH_ATTRIBUTE, message.FAILURE_ATTRIBUTE) == (contract.PATH_ATTRIBUTE, contract.FAILURE_ATTRIBUTE)
    assert (observability.METRICS_NAMESPACE, observability.METRIC_PROCESSED) == (contract.METRICS_NAMESPACE, contract.METRIC_PROCESSED)
    assert (state.PARTITION_KEY, state.TTL_ATTRIBUTE, state.KEY_PREFIXES) == (
        contract.STATE_PARTITION_KEY, contract.STATE_TTL_ATTRIBUTE, contract.STATE_KEY_PREFIXES)
    assert (delay.PK, delay.SK, delay.TTL_ATTRIBUTE, delay.BUCKET_KEY_PREFIX, delay.DEDUPE_PREFIX) == (
        contract.DELAY_PARTITION_KEY, contract.DELAY_SORT_KEY, contract.DELAY_TTL_ATTRIBUTE,
        contract.DELAY_BUCKET_KEY_PREFIX, contract.DELAY_DEDUPE_KEY_PREFIX)


def test_metric_names_are_distinct_and_say_dispatcher_not_scheduler():
    # GIVEN every metric name of the contract
    names = {name: value for name, value in vars(contract).items() if name.startswith("METRIC_")}
    # THEN no two constants name one metric (the dispatcher and the safety net count refiles under one constant)
    assert len(set(names.values())) == len(names)
    # AND none still calls the delay dispatcher a scheduler
    assert [value for value in names.values() if "Scheduler" in value] == []


def test_cdk_json_repeats_no_default():
    # GIVEN this repo's cdk.json  WHEN its worker_tier settings are compared with the defaults
    values = json.loads((REPO / "cdk.json").read_text())["context"].get("worker_tier", {})
    defaults = Settings()
    # THEN each one it sets is an override: a repeated default would pin the stack to today's value
    assert [name for name, value in values.items() if getattr(defaults, name) == value] == []
    Settings.from_mapping(values)


@pytest.mark.parametrize("fifo", [False, True])
def test_queue_attributes_follow_the_settings(fifo):
    # GIVEN settings  WHEN the work queue's and the DLQ's attributes are made
    settings = Settings(fifo=fifo, visibility_timeout=600, retention_period=86400)
    queue, dead_letter = contract.queue_attributes(settings), contract.queue_attributes(settings, dead_letter=True)
    # THEN the work queue keeps the settings' timings, the DLQ SQS's maximum retention, and both are FIFO alike
    assert (queue["VisibilityTimeout"], queue["MessageRetentionPeriod"]) == ("600", "86400")
    assert dead_letter["MessageRetentionPeriod"] == str(contract.DEAD_LETTER_RETENTION_SECONDS)
    fifo_attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}
    for attributes in (queue, dead_letter):
        assert attributes["SqsManagedSseEnabled"] == "true"
        assert (fifo_attributes.items() <= attributes.items()) is fifo
        assert ("FifoQueue" in attributes) is fifo
