"""Message priorities in the stack: a queue per level shaped like the work queue, an event source and a concurrency
share each, grants limited to what each role does with them, their outputs, and the high level's age alarm."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Template

from tests.support.synth import actions_of, synth
from worker_tier.core import contract, priority
from worker_tier.core.errors import CronConfigError, SettingsError
from worker_tier.core.settings import Settings
from worker_tier.periodic import cron_config

SETTINGS = Settings(priorities=True, container_worker=True, http_connections=40)
CRON = """version: 1
cron:
 - {name: urgent-sync, url: /sync, schedule: "*/5 * * * *", priority: high}
 - {name: nightly, url: /nightly, schedule: "0 3 * * *"}
"""


@pytest.fixture(scope="module")
def prioritized(tmp_path_factory):
    stack, _ = synth(settings=SETTINGS, outdir=str(tmp_path_factory.mktemp("priorities")), cron_entries=cron_config.parse(CRON))
    return stack, Template.from_stack(stack)


def _id(stack, construct) -> str:
    return stack.get_logical_id(construct.node.default_child)


def _queue_actions(template: Template, role_id: str, queue_id: str) -> set[str]:
    """Every action the role's policies allow on the queue whose logical id is ``queue_id``."""
    actions: set[str] = set()
    for policy in template.find_resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} not in policy["Properties"].get("Roles", []):
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            if {"Fn::GetAtt": [queue_id, "Arn"]} in resources:
                actions |= set(actions_of(statement))
    return actions


def _role_id(stack, function) -> str:
    return stack.get_logical_id(function.role.node.default_child)


def test_each_level_queue_is_the_work_queues_shape_with_its_dlq_and_redrive(prioritized):
    # GIVEN a stack with priorities  WHEN its queues are read
    stack, template = prioritized
    queues = template.find_resources("AWS::SQS::Queue")
    work = queues[_id(stack, stack.worker.queue)]["Properties"]
    # THEN a high and a low queue exist, each with the work queue's options and its DLQ and redrive policy
    assert sorted(stack.worker.level_queues) == ["high", "low"]
    for level_queue in stack.worker.level_queues.values():
        properties = queues[_id(stack, level_queue)]["Properties"]
        assert properties == work


def test_each_level_has_its_own_event_source_with_its_concurrency_share(prioritized):
    # GIVEN a stack with priorities and http_connections 40
    stack, template = prioritized
    mappings = template.find_resources("AWS::Lambda::EventSourceMapping")
    worker_mappings = {m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]: m["Properties"] for m in mappings.values()
                       if m["Properties"]["FunctionName"] == {"Ref": stack.get_logical_id(stack.worker.function.node.default_child)}}
    # WHEN each level's queue's mapping is read
    levels = {"normal": stack.worker.queue, **stack.worker.level_queues}
    shares = {level: worker_mappings[_id(stack, queue)]["ScalingConfig"]["MaximumConcurrency"] for level, queue in levels.items()}
    # THEN high may use all of http_connections, normal half, low a quarter; each reports partial failures
    assert shares == {"high": 40, "normal": 20, "low": 10} == priority.concurrency_shares(40)
    assert len(worker_mappings) == 3
    assert all(m["FunctionResponseTypes"] == ["ReportBatchItemFailures"] for m in worker_mappings.values())


def test_no_share_is_below_lambdas_minimum_concurrency():
    # GIVEN the smallest http_connections Lambda allows  WHEN the shares are taken  THEN none is below 2
    assert priority.concurrency_shares(2) == {"high": 2, "normal": 2, "low": 2}


def test_the_worker_consumes_and_sends_every_level_and_the_delivering_functions_only_send(prioritized):
    # GIVEN a stack with priorities, the delay dispatcher, its safety net and periodic tasks
    stack, template = prioritized
    consume = {"sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes",
               "sqs:GetQueueUrl"}
    send = {"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"}
    senders = [stack.delay_dispatcher.function, stack.delay_dispatcher.recovery.function, stack.periodic_tasks.function]
    for level_queue in stack.worker.level_queues.values():
        queue_id = _id(stack, level_queue)
        # WHEN each role's actions on the level's queue are read
        # THEN the worker consumes and sends; the dispatcher, the safety net and the periodic tasks only send
        assert _queue_actions(template, _role_id(stack, stack.worker.function), queue_id) == consume | send
        for function in senders:
            assert _queue_actions(template, _role_id(stack, function), queue_id) == send
        # AND the container worker's tasks (not forwarding) send follow-ups there, and read nothing of it
        task_role = stack.get_logical_id(stack.container_worker.service.task_definition.task_role.node.default_child)
        assert _queue_actions(template, task_role, queue_id) == send


def test_every_function_that_sends_is_told_where_the_levels_queues_are(prioritized):
    # GIVEN a stack with priorities
    stack, template = prioritized
    functions = template.find_resources("AWS::Lambda::Function")
    senders = [stack.worker.function, stack.delay_dispatcher.function, stack.delay_dispatcher.recovery.function,
               stack.periodic_tasks.function]
    for function in senders:
        # WHEN its environment is read  THEN it names both levels' queues
        variables = functions[stack.get_logical_id(function.node.default_child)]["Properties"]["Environment"]["Variables"]
        assert variables[contract.HIGH_QUEUE_URL_VARIABLE] == {"Ref": _id(stack, stack.worker.level_queues["high"])}
        assert variables[contract.LOW_QUEUE_URL_VARIABLE] == {"Ref": _id(stack, stack.worker.level_queues["low"])}


def test_the_levels_queues_are_stack_outputs_and_producers_environment(prioritized):
    # GIVEN a stack with priorities
    stack, template = prioritized
    outputs = template.find_outputs("*")
    # WHEN its outputs and its producer environment are read  THEN both name the levels' queues
    assert outputs[contract.STACK_OUTPUTS["high_queue_url"]]["Value"] == {"Ref": _id(stack, stack.worker.level_queues["high"])}
    assert outputs[contract.STACK_OUTPUTS["low_queue_url"]]["Value"] == {"Ref": _id(stack, stack.worker.level_queues["low"])}
    environment = stack.resolve(stack.producer_environment())
    assert environment[contract.HIGH_QUEUE_URL_VARIABLE] == {"Ref": _id(stack, stack.worker.level_queues["high"])}


def test_the_high_queue_has_its_own_oldest_message_alarm(prioritized):
    # GIVEN a stack with priorities  WHEN the high queue's age alarm is read
    stack, template = prioritized
    alarm = template.find_resources("AWS::CloudWatch::Alarm")[_id(stack, stack.worker.high_oldest_message_alarm)]
    # THEN it watches the high queue, at a quarter of oldest_message_alarm
    assert alarm["Properties"]["Dimensions"] == [{"Name": "QueueName",
                                                  "Value": {"Fn::GetAtt": [_id(stack, stack.worker.level_queues["high"]), "QueueName"]}}]
    assert alarm["Properties"]["Threshold"] == SETTINGS.oldest_message_alarm // 4


def test_a_ticks_priority_travels_in_its_schedules_input(prioritized):
    # GIVEN cron.yaml with a high-priority entry and a normal one  WHEN the schedules' inputs are read
    _, template = prioritized
    inputs = [s["Properties"]["Target"]["Input"] for s in template.find_resources("AWS::Scheduler::Schedule").values()]
    # THEN the high entry's input names its priority, and the normal one's carries none
    assert sum('"priority":"high"' in str(i) for i in inputs) == 1
    assert not any('"priority":"normal"' in str(i) for i in inputs)


def test_a_stack_without_priorities_keeps_one_queue_and_one_event_source(template):
    # GIVEN the default stack  WHEN its worker's mappings are read  THEN one, at http_connections, and no level outputs
    mappings = template.find_resources("AWS::Lambda::EventSourceMapping")
    assert [m["Properties"]["ScalingConfig"]["MaximumConcurrency"] for m in mappings.values()
            if "ScalingConfig" in m["Properties"]] == [Settings().http_connections]
    assert "HighQueueUrl" not in template.find_outputs("*")


def test_priorities_on_a_fifo_queue_are_refused():
    # WHEN priorities are asked for on a FIFO queue  THEN a one-line error names both settings and the fix
    with pytest.raises(SettingsError) as error:
        Settings(fifo=True, priorities=True)
    assert str(error.value) == (
        "priorities true with fifo true: a message group's order would not hold across the levels' queues; "
        "turn priorities off, or use a standard queue"
    )


def test_an_unknown_cron_priority_is_refused_naming_the_entry_line_value_and_levels():
    # WHEN cron.yaml gives an entry an unknown priority  THEN the error names the line, entry, value and levels
    text = 'version: 1\ncron:\n - {name: sync, url: /sync, schedule: "* * * * *", priority: urgent}\n'
    with pytest.raises(CronConfigError) as error:
        cron_config.parse(text)
    assert str(error.value) == "cron.yaml line 3, entry 'sync': priority must be one of high, normal, low, got 'urgent'"


def test_a_cron_priority_without_the_priorities_setting_fails_synth(tmp_path):
    # GIVEN an entry with priority high and the priorities setting off  WHEN the stack is built  THEN synth fails
    with pytest.raises(CronConfigError) as error:
        synth(settings=Settings(), outdir=str(tmp_path), cron_entries=cron_config.parse(CRON))
    assert str(error.value) == (
        "cron.yaml line 3, entry 'urgent-sync': priority 'high' needs the priorities setting (its queue exists only "
        "with it): set priorities true in the stack's worker_tier settings, or remove the entry's priority"
    )


def test_a_forwarding_container_worker_scales_on_every_levels_backlog(tmp_path):
    # GIVEN a forwarding stack with priorities (its container worker reads the levels' queues)
    stack, _ = synth(settings=Settings(priorities=True, container_worker=True, app_port=8080), outdir=str(tmp_path),
                     cron_entries=[])
    template = Template.from_stack(stack)
    # WHEN its scaling policy's math is read
    [policy] = template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()
    metrics = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]["Metrics"]
    [expression] = [m["Expression"] for m in metrics if "Expression" in m]
    # THEN the backlog is the three levels' visible messages, per running task
    assert expression == "(visible + visible_high + visible_low) / IF(running > 0, running, 1)"
    # AND the task role consumes each level's queue
    task_role = stack.get_logical_id(stack.container_worker.service.task_definition.task_role.node.default_child)
    for level_queue in stack.worker.level_queues.values():
        assert "sqs:ReceiveMessage" in _queue_actions(template, task_role, _id(stack, level_queue))
