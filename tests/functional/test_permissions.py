"""Each role's calls against moto, authorized by the policy the stack synthesizes for it (tests/support/iam.py).

The functional tests all run enforced (``make_world``); these cover the delay path's roles, which the other
functional tests drive through in-memory fakes: the producer (send, cancel), the delay dispatcher (one and
several dispatch groups) and the safety net; and each role's reach into the payload bucket.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime, timezone
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.support import iam, stacks
from worker_tier import Client
from worker_tier.delays import delay
from worker_tier.delays.delay import DelayedMessage
from worker_tier.delays.delay_recovery import DelayRecovery
from worker_tier.delays.dispatch_state import WATERMARK_KEY, DispatchGroup
from worker_tier.container.consumer import Consumer
from worker_tier.container.protection import TaskProtection
from worker_tier.delays.dispatcher import DelayDispatcher
from worker_tier.app.forwarding import parameter_name, read_signing_secret
from worker_tier.core.contract import PATH_ATTRIBUTE
from worker_tier.periodic.ticks import Tick, TickEnqueuer
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.worker.batch import Worker

NOW = 1_800_000_000.0  # a minute boundary
PAYLOAD_BUCKET = "payloads"
STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/delay/stream/2026-11-22T00:00:00.000"


class DelayWorld:
    """moto's work queue, DLQ, state and delay tables, as the stack makes them, checked against ``shape``'s roles."""

    def __init__(self, shape: str) -> None:
        self.sqs, self.dynamodb = boto3.client("sqs"), boto3.client("dynamodb")
        self.queue, self.dlq = (self.sqs.create_queue(QueueName=name)["QueueUrl"] for name in ("work", "dlq"))
        self.dynamodb.create_table(TableName="state", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                                   AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                                   BillingMode="PAY_PER_REQUEST")
        boto3.client("s3").create_bucket(Bucket=PAYLOAD_BUCKET)
        self.dynamodb.create_table(
            TableName="delay", BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": delay.PK, "KeyType": "HASH"}, {"AttributeName": delay.SK, "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": delay.PK, "AttributeType": "S"}, {"AttributeName": delay.SK, "AttributeType": "S"}])
        stacks.enforce(shape, queues={"WorkerQueue": "work", "WorkerDeadLetterQueue": "dlq"},
                       tables={"StateTable": "state", "DelaysDelayTable": "delay"}, buckets={stacks.PAYLOAD_BUCKET: PAYLOAD_BUCKET})

    def client(self, now: float = NOW) -> Client:
        return Client(self.queue, "delay", sqs=self.sqs, dynamodb=self.dynamodb, state_table="state", clock=lambda: now,
                      sleep=lambda s: None)

    def dispatcher(self, now: float, group: DispatchGroup | None = None) -> DelayDispatcher:
        return DelayDispatcher("delay", "state", self.queue, dead_letter_queue_url=self.dlq, sqs=self.sqs, dynamodb=self.dynamodb,
                               clock=lambda: now, sleep=lambda s: None, parallel=False, group=group)

    def recovery(self, now: float) -> DelayRecovery:
        return DelayRecovery("state", self.queue, self.dlq, delay_table="delay", sqs=self.sqs, dynamodb=self.dynamodb,
                             clock=lambda: now, sleep=lambda s: None)

    def bodies(self) -> list[str]:
        got = self.sqs.receive_message(QueueUrl=self.queue, MaxNumberOfMessages=10).get("Messages", [])
        return sorted(m["Body"] for m in got)


@pytest.fixture
def enforced():
    """Fail the test on any denied call (this module's worlds turn checking on)."""
    iam.install()
    with mock_aws():
        yield DelayWorld
    denials = iam.ENFORCEMENT.check()
    if denials:
        pytest.fail(iam.denial_lines(denials), pytrace=False)


def insert_record(item: dict[str, Any], at_s: float) -> dict[str, Any]:
    """A Lambda DynamoDB stream record of an INSERT (the shape Lambda delivers)."""
    change = {"ApproximateCreationDateTime": float(int(at_s)), "Keys": {k: item[k] for k in (delay.PK, delay.SK)},
              "SequenceNumber": "1".zfill(21), "SizeBytes": 300, "StreamViewType": "NEW_AND_OLD_IMAGES", "NewImage": item}
    return {"eventID": "event-1", "eventName": "INSERT", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1", "dynamodb": change, "eventSourceARN": STREAM_ARN}


def test_the_safety_net_reads_a_late_cancellable_message_before_sending_it(enforced):
    # GIVEN a dispatcher watermark past minute M, and a cancellable message of minute M written late (its shard is 15)
    world = enforced("default")
    minute = int(NOW // delay.BUCKET_SECONDS)
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": WATERMARK_KEY}, "bucket": {"N": str(minute + 1)}})
    attributes = {PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/remind"}}
    item = DelayedMessage("m-1", int((NOW + 5) * 1000), "late", attributes, delay.CANCELLABLE_SHARD, "key-1", True).to_item()
    world.dynamodb.put_item(TableName="delay", Item=item)
    # WHEN the safety net, under its role, handles the stream's INSERT
    report = world.recovery(NOW + 10).process([insert_record(item, NOW + 10)])
    # THEN it read the item (GetItem on b#<M>#15, allowed) and sent it
    assert (report.late_writes, report.failed_sequence_number) == (1, None)
    assert world.bodies() == ["late"]


@pytest.mark.parametrize(("shape", "groups"), [("default", 1), ("container", 3)])
def test_a_producer_stores_and_cancels_and_the_dispatcher_delivers_in_each_group(enforced, shape, groups):
    # GIVEN a producer (its granted role) storing five long delays and a cancellable one it then cancels
    world = enforced(shape)
    client = world.client()
    for n in range(5):
        client.send("/later", f"m{n}", delay=3600)
    client.send("/later", "cancelled", delay=3600, dedupe_key="k", cancellable=True)
    assert client.cancel("k") is True
    # WHEN each dispatch group's dispatcher runs, under its role, when they are due
    for index in range(groups):
        world.dispatcher(NOW + 3600 + 5, DispatchGroup(index, groups)).run()
    # THEN all five are delivered, and only they
    assert world.bodies() == [f"m{n}" for n in range(5)]


def test_a_call_the_policy_lacks_fails_naming_role_action_resource_and_the_missing_statement(enforced):
    # GIVEN the producer's policy without the statement that lets it store delayed messages
    world = enforced("default")
    active = iam.ENFORCEMENT.world
    assert active is not None
    iam.ENFORCEMENT.activate(active.without("producer", "dynamodb:BatchWriteItem"))
    # WHEN it stores a long delay
    with pytest.raises(Exception, match="AccessDeniedException"):
        world.client().send("/later", "m", delay=3600)
    # THEN the test would fail with one line naming the role, the action, the resource and the missing statement
    (line,) = iam.denial_lines(iam.ENFORCEMENT.check()).splitlines()
    assert line.startswith("IAM denied role Producer")
    assert ": dynamodb:BatchWriteItem on arn:aws:dynamodb:us-east-1:123456789012:table/delay (dynamodb:LeadingKeys=['b#" in line
    missing = "missing statement: Allow dynamodb:BatchWriteItem on arn:aws:dynamodb:us-east-1:123456789012:table/delay where "
    assert missing + "dynamodb:LeadingKeys ['b#" in line



@pytest.mark.parametrize("shape", ["forwarding_secret", "forwarding_parameter"])
def test_the_container_worker_reads_its_signing_key_by_the_granted_arn(enforced, shape):
    # GIVEN the signing key in Secrets Manager (moto adds the random suffix) or in an SSM SecureString parameter
    enforced(shape)
    if shape == "forwarding_secret":
        arn = boto3.client("secretsmanager").create_secret(Name=stacks.SIGNING_SECRET_NAME, SecretString="k3y")["ARN"]
    else:
        arn = stacks.SIGNING_PARAMETER_ARN
        boto3.client("ssm").put_parameter(Name=parameter_name(arn), Value="k3y", Type="SecureString")
    # WHEN the container worker reads it, under its task role
    with iam.ENFORCEMENT.acting_as("container"):
        key = read_signing_secret(arn)
    # THEN the read is allowed (GetSecretValue on the secret's full ARN, or GetParameter on the parameter)
    assert key == b"k3y"


def test_the_dispatcher_runs_under_its_own_role(enforced):
    # GIVEN a stored long delay, and the dispatcher's policy without its Query of the delay table
    world = enforced("default")
    world.client().send("/later", "m", delay=3600)
    active = iam.ENFORCEMENT.world
    assert active is not None
    iam.ENFORCEMENT.activate(active.without("dispatcher", "dynamodb:Query"))
    # WHEN it runs when the message is due  THEN the run fails as on AWS
    with pytest.raises(ClientError, match="AccessDeniedException"):
        world.dispatcher(NOW + 3600 + 5).run()
    # AND the denial names the dispatcher's role, the read (Query, or Scan, of that one statement) and the table
    lines = iam.denial_lines(iam.ENFORCEMENT.check()).splitlines()
    assert lines and all(line.startswith("IAM denied role DelaysSchedulerRole") for line in lines)
    assert all(re.search(r": dynamodb:(Query|Scan) on arn:aws:dynamodb:us-east-1:123456789012:table/delay\b", line) for line in lines)


@pytest.mark.parametrize("shape", sorted(stacks.SHAPES))
def test_every_condition_operator_and_intrinsic_of_the_stack_is_modelled(shape):
    # GIVEN every role policy and queue policy of the shape, resolved (an unmodelled intrinsic would raise)
    template = stacks.templates()[shape]
    policies = iam.roles_of(template, iam.Resources())
    # THEN each condition block evaluates (an unmodelled operator would raise), and the roles the tests act as exist
    for policy in policies.values():
        for statement in (*policy.statements, *policy.resource_statements):
            for operator, block in statement.get("Condition", {}).items():
                iam.condition_holds(operator, block, {})
    assert iam.role_of_function(template, stacks.WORKER_HANDLER) in policies


def test_the_periodic_function_claims_its_tick_under_its_own_role(aws):
    # GIVEN the functional world (enforced), its periodic role without the statement that lets it claim cron# items
    active = iam.ENFORCEMENT.world
    assert active is not None
    iam.ENFORCEMENT.activate(active.without("periodic", "dynamodb:PutItem"))
    tick = Tick("backup-job", "/backup", datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc))
    # WHEN it enqueues a tick  THEN the claim is refused as on AWS
    with pytest.raises(ClientError, match="AccessDeniedException"):
        TickEnqueuer(aws.queue_url, aws.state_table, sqs=aws.sqs, dynamodb=aws.dynamodb, clock=lambda: NOW).enqueue(tick)
    # AND the denial names the periodic function's role, the claim and its cron# key
    (line,) = iam.denial_lines(iam.ENFORCEMENT.check()).splitlines()
    assert line.startswith("IAM denied role PeriodicTasksCronRole")
    assert ": dynamodb:PutItem on arn:aws:dynamodb:us-east-1:123456789012:table/state (dynamodb:LeadingKeys=['cron#" in line


def test_the_heartbeat_thread_acts_as_the_container_worker_that_started_it(aws):
    # GIVEN the functional world (enforced), its container task role without the statement that extends visibility,
    # and a container worker with a task that outlasts a heartbeat interval
    active = iam.ENFORCEMENT.world
    assert active is not None
    iam.ENFORCEMENT.activate(active.without("container", "sqs:ChangeMessageVisibility"))
    tasks = Registry()
    release = threading.Event()

    @tasks.task("/long")
    def long(task: Any) -> None:
        release.wait(10)

    worker = Worker(Settings(), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                    registry=tasks, sqs=aws.sqs, dynamodb=aws.dynamodb)
    consumer = Consumer(worker, aws.sqs, aws.queue_url, poll_wait_seconds=1, heartbeat_interval=1,
                        protection=TaskProtection(agent_uri=""))
    Client(aws.queue_url, sqs=aws.sqs).send("/long", "{}")
    # WHEN the heartbeat, on its own thread, extends the running task's message
    running = threading.Thread(target=consumer.run, daemon=True)
    running.start()
    deadline = time.monotonic() + 15
    while consumer.heartbeat.calls == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    release.set()
    consumer.stopping.set()
    running.join(15)
    # THEN its calls were checked as the container task role's, and refused
    lines = iam.denial_lines(iam.ENFORCEMENT.check()).splitlines()
    assert lines and all(line.startswith("IAM denied role LongTasksTaskTaskRole") for line in lines)
    assert any(": sqs:ChangeMessageVisibility on arn:aws:sqs:" in line for line in lines)


def _s3_denials(world_s3: Any, kind: str, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Each call made as role ``kind`` on the payload bucket; the operations IAM refused, in order."""
    refused = []
    with iam.ENFORCEMENT.acting_as(kind):
        for operation, params in calls:
            try:
                getattr(world_s3, operation)(**params)
            except ClientError as error:
                assert error.response["Error"]["Code"] == "AccessDeniedException", error
                refused.append(f"{operation} {params.get('Key', '')}".strip())
    return refused


def _every_payload_call(bucket: str) -> list[tuple[str, dict[str, Any]]]:
    """Put under payloads/ (now and delayed) and elsewhere; read, head and delete a root key (AWS's Extended Client
    writes there) and a payloads/ key; list the bucket."""
    return [
        ("put_object", {"Bucket": bucket, "Key": "payloads/new", "Body": b"body"}),
        ("put_object", {"Bucket": bucket, "Key": "payloads/delayed/new", "Body": b"body"}),
        ("put_object", {"Bucket": bucket, "Key": "elsewhere/new", "Body": b"body"}),
        ("get_object", {"Bucket": bucket, "Key": "0b6e6c4e-extended-client-key"}),
        ("head_object", {"Bucket": bucket, "Key": "payloads/existing"}),
        ("list_objects_v2", {"Bucket": bucket, "Prefix": "payloads/"}),
        ("copy_object", {"Bucket": bucket, "Key": "0b6e6c4e-extended-client-key", "MetadataDirective": "REPLACE",
                         "CopySource": {"Bucket": bucket, "Key": "0b6e6c4e-extended-client-key"}, "Metadata": {"k": "v"}}),
        ("delete_object", {"Bucket": bucket, "Key": "0b6e6c4e-extended-client-key"}),
        ("delete_object", {"Bucket": bucket, "Key": "payloads/existing"}),
    ]


@pytest.mark.parametrize("kind", ["worker", "container"])
def test_a_worker_reads_puts_and_deletes_any_payload(aws, kind):
    # GIVEN the functional world (enforced) and two bodies in its payload bucket: one at the root, one under payloads/
    for key in ("0b6e6c4e-extended-client-key", "payloads/existing"):
        aws.s3.put_object(Bucket=aws.payload_bucket, Key=key, Body=b"stored")
    # WHEN the Lambda worker, or the container worker, puts, reads, lists and deletes, under its role
    refused = _s3_denials(aws.s3, kind, _every_payload_call(aws.payload_bucket))
    # THEN none is refused (a worker keeps any object for its message's new life, by a copy onto itself)
    assert refused == []
    assert iam.ENFORCEMENT.check() == []


@pytest.mark.parametrize("kind", ["producer", "periodic"])
def test_a_producer_and_the_periodic_function_put_and_delete_only_under_payloads_and_read_nothing(aws, kind):
    # GIVEN the functional world (enforced) and two bodies in its payload bucket
    for key in ("0b6e6c4e-extended-client-key", "payloads/existing"):
        aws.s3.put_object(Bucket=aws.payload_bucket, Key=key, Body=b"stored")
    # WHEN a producer (its role granted by grant_produce) or the periodic-task function makes every call, under its role
    refused = _s3_denials(aws.s3, kind, _every_payload_call(aws.payload_bucket))
    # THEN it may put under payloads/ (sent now or delayed) and delete there (its orphans), and nothing else
    assert refused == ["put_object elsewhere/new", "get_object 0b6e6c4e-extended-client-key", "head_object payloads/existing",
                       "list_objects_v2", "copy_object 0b6e6c4e-extended-client-key",
                       "delete_object 0b6e6c4e-extended-client-key"]
    iam.ENFORCEMENT.check()


@pytest.mark.parametrize("kind", ["dispatcher", "recovery"])
def test_the_delay_dispatcher_and_the_safety_net_may_not_touch_a_payload(aws, kind):
    # GIVEN the functional world (enforced) and a body in its payload bucket
    aws.s3.put_object(Bucket=aws.payload_bucket, Key="payloads/existing", Body=b"stored")
    # WHEN the delay dispatcher or the safety net makes every call, under its role
    refused = _s3_denials(aws.s3, kind, _every_payload_call(aws.payload_bucket))
    # THEN every one is refused: they move pointers, never bodies
    assert len(refused) == len(_every_payload_call(aws.payload_bucket))
    iam.ENFORCEMENT.check()


def test_the_payload_bucket_refuses_plain_http_even_to_a_granted_role(aws):
    # GIVEN the functional world's worker policy, with the payload bucket's policy beside it
    active = iam.ENFORCEMENT.world
    assert active is not None
    worker = active.policies["worker"]
    # WHEN a read it is granted arrives over TLS, and over plain HTTP
    over = {secure: worker.decide(iam.Request("s3:GetObject", f"arn:aws:s3:::{aws.payload_bucket}/payloads/k",
                                              {"aws:SecureTransport": secure})) for secure in (True, False)}
    # THEN TLS is allowed, and plain HTTP explicitly denied by the bucket policy (enforce_ssl)
    assert over[True].allowed
    assert not over[False].allowed and over[False].reason.startswith("explicitly denied by")
    assert '"aws:SecureTransport": "false"' in over[False].reason
