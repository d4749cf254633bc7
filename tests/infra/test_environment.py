"""Every function and container gets every variable its code reads.

"What its code reads" is declared where it is read, never listed here: each entry
module's ``NEEDS`` (``worker_tier.core.contract.Needs``), through which it reads its
resources, so an undeclared resource reads as None and a missing required one stops
it at start. A ``NEEDS`` with ``settings`` reads every setting's variable too.

The entry module is the template's own: a function's ``Handler`` module, or the
module a container's ``EntryPoint`` runs with ``python -m``.
"""

from __future__ import annotations


import pytest
from aws_cdk.assertions import Template

from tests.support.entry_modules import (
    CONTAINER_ENTRY_MODULE,
    LAMBDA_WORKER_MODULE,
    SETTINGS_VARIABLES,
    needs_of,
    resources,
    variables_read,
)
from tests.support.synth import synth
from worker_tier.core import contract
from worker_tier.core.contract import Resources
from worker_tier.core.settings import Settings

RESOURCE_VARIABLES = frozenset(Resources.variable(name) for name in contract.RESOURCE_FIELDS)
# A FIFO queue has no per-message delay, so a FIFO stack has no delay table to produce into.
DELAY_TABLE_VARIABLES = frozenset({contract.DELAY_TABLE_VARIABLE, contract.DELAY_SHARDS_VARIABLE})

STACKS = {
    "default": Settings(),
    "container": Settings(container_worker=True),
    "fifo-container": Settings(fifo=True, container_worker=True),
    "container-without-large-payloads": Settings(container_worker=True, large_payloads=False),
    "priorities-container": Settings(priorities=True, container_worker=True),
}


def absent_by_design(settings: Settings, entry_module: str) -> set[str]:
    """Variables a resource's code reads that it is rightly not given."""
    absent = {contract.DELAY_HORIZON_VARIABLE}  # only the local environment lowers the dispatch horizon
    if not (entry_module == LAMBDA_WORKER_MODULE and settings.container_worker):
        absent.add(contract.CONTAINER_QUEUE_URL_VARIABLE)  # only the Lambda worker forwards, and only to a container worker
    if settings.fifo:
        absent |= DELAY_TABLE_VARIABLES
    if not settings.large_payloads:
        absent.add(contract.PAYLOAD_BUCKET_VARIABLE)  # no bucket: nothing is offloaded, and an offloaded message dead-letters
    if not settings.priorities:
        absent |= {contract.HIGH_QUEUE_URL_VARIABLE, contract.LOW_QUEUE_URL_VARIABLE}  # no level has a queue of its own
    if entry_module != CONTAINER_ENTRY_MODULE:
        absent.add(contract.SEND_QUEUE_URL_VARIABLE)  # the queue it consumes is already the work queue
    return absent


@pytest.fixture(scope="module", params=sorted(STACKS))
def stack_template(request, tmp_path_factory) -> tuple[Settings, Template]:
    settings = STACKS[request.param]
    stack, _ = synth(settings=settings, outdir=str(tmp_path_factory.mktemp(request.param)))
    return settings, Template.from_stack(stack)


def test_every_resource_has_every_variable_its_code_reads(stack_template):
    # GIVEN a synthesized stack (default, with the container worker, FIFO with the container worker)
    settings, template = stack_template
    # WHEN each function's and container's variables are compared with what its entry module declares it reads
    missing = {
        resource.path: sorted(
            variables_read(resource.entry_module) - absent_by_design(settings, resource.entry_module) - set(resource.environment)
        )
        for resource in resources(template)
    }
    # THEN none is missing
    assert {path: names for path, names in missing.items() if names} == {}


def test_no_resource_lacks_a_variable_its_code_cannot_start_without(stack_template):
    # GIVEN a synthesized stack  WHEN each resource's required variables are compared with what it is given
    settings, template = stack_template
    for resource in resources(template):
        required = {Resources.variable(name) for name in needs_of(resource.entry_module).required}
        # THEN every one is given: none is excused as absent by design
        assert required <= set(resource.environment), resource.path
        assert not required & absent_by_design(settings, resource.entry_module), resource.path


def test_every_variable_given_is_one_the_contract_names(stack_template):
    # GIVEN a synthesized stack  WHEN each resource's Worker Tier variables are listed
    _, template = stack_template
    for resource in resources(template):
        ours = {name for name in resource.environment if name.startswith(contract.ENVIRONMENT_PREFIX)}
        # THEN each is a resource or a setting variable: one name per setting, no second spelling
        assert ours <= RESOURCE_VARIABLES | SETTINGS_VARIABLES, (resource.path, sorted(ours - RESOURCE_VARIABLES - SETTINGS_VARIABLES))


def test_the_container_worker_is_not_told_to_forward_to_itself(stack_template):
    # GIVEN a stack with the container worker  THEN its container has no container queue to forward to
    settings, template = stack_template
    containers = [r for r in resources(template) if r.entry_module == CONTAINER_ENTRY_MODULE]
    assert len(containers) == (1 if settings.container_worker else 0)
    assert all(contract.CONTAINER_QUEUE_URL_VARIABLE not in c.environment for c in containers)


def test_the_container_workers_tasks_send_follow_ups_to_the_work_queue(stack_template):
    # GIVEN a stack with the container worker, which consumes its own queue
    _, template = stack_template
    queues = {r.entry_module: r.environment.get(contract.QUEUE_URL_VARIABLE) for r in resources(template)}
    for container in [r for r in resources(template) if r.entry_module == CONTAINER_ENTRY_MODULE]:
        # THEN Client.from_env in its tasks sends to the queue the Lambda worker consumes, not its own
        assert container.environment[contract.SEND_QUEUE_URL_VARIABLE] == queues[LAMBDA_WORKER_MODULE]
        assert container.environment[contract.QUEUE_URL_VARIABLE] != container.environment[contract.SEND_QUEUE_URL_VARIABLE]


def test_the_workers_declare_what_their_tasks_producers_read():
    # GIVEN the Lambda worker and the container worker, whose task code may call Client.from_env
    for entry_module in (LAMBDA_WORKER_MODULE, CONTAINER_ENTRY_MODULE):
        # WHEN their declarations are read  THEN they cover the producer's variables and every setting
        assert contract.PRODUCER_NEEDS.variables() <= needs_of(entry_module).variables()
        assert variables_read(entry_module) >= SETTINGS_VARIABLES


def test_the_periodic_task_function_reads_no_delay_table_and_no_setting():
    # GIVEN the periodic-task handler, which runs no task code  WHEN its declaration is read
    read = variables_read("worker_tier.handlers.periodic")
    # THEN it reads its queue and state table (and the payload bucket, for a tick too large for the queue), and nothing
    # of the delay table or the settings
    # (and the priority levels' queues, for an entry's priority)
    assert {contract.QUEUE_URL_VARIABLE, contract.STATE_TABLE_VARIABLE, contract.PAYLOAD_BUCKET_VARIABLE,
            contract.HIGH_QUEUE_URL_VARIABLE, contract.LOW_QUEUE_URL_VARIABLE} == read
