"""The wire contract: every name that crosses a process boundary, in one place.

What the stack (``worker_tier_cdk``), the local environment and the runtime must
spell alike lives here and nowhere else:

- the ``WORKER_TIER_*`` resource variables a function or container is given, and
  ``Resources``, their typed form (``from_environment`` / ``to_environment``);
  settings carry their own variables (``Settings.to_environment``), named by
  ``setting_variable`` below;
- ``Needs``: which resources one entry point reads, so the stack's tests can check
  that every function and container is given them;
- message attribute names (Elastic Beanstalk sqsd's and Worker Tier's own);
- metric names, their namespace and the service name, which the dashboard and
  alarms use too;
- the state table's and the delay table's key layout, and the queues' shape
  (``queue_attributes``), which the stack and the local environment both create.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from worker_tier.core import limits
from worker_tier.core.errors import SettingsError

if TYPE_CHECKING:
    from worker_tier.core.settings import Settings

ENVIRONMENT_PREFIX = "WORKER_TIER_"


def setting_variable(setting: str) -> str:
    """The variable that carries one setting: ``WORKER_TIER_<SETTING>``.

    >>> setting_variable("delay_shards")
    'WORKER_TIER_DELAY_SHARDS'
    """
    return ENVIRONMENT_PREFIX + setting.upper()


# Resource variables: what the stack made, for the code to find it.
QUEUE_URL_VARIABLE = "WORKER_TIER_QUEUE_URL"  # the queue this process consumes
DLQ_URL_VARIABLE = "WORKER_TIER_DLQ_URL"
STATE_TABLE_VARIABLE = "WORKER_TIER_STATE_TABLE"
DELAY_TABLE_VARIABLE = "WORKER_TIER_DELAY_TABLE"
# The container worker's queue, where the Lambda worker forwards @task(container=True) messages.
CONTAINER_QUEUE_URL_VARIABLE = "WORKER_TIER_CONTAINER_QUEUE_URL"
# The work queue, where a process that consumes another queue (the container worker) sends follow-ups.
SEND_QUEUE_URL_VARIABLE = "WORKER_TIER_SEND_QUEUE_URL"
# The work queue's other priority levels (priorities setting; worker_tier.core.priority): the normal level is
# QUEUE_URL_VARIABLE's (or SEND_QUEUE_URL_VARIABLE's) queue; unset: priorities are off.
HIGH_QUEUE_URL_VARIABLE = "WORKER_TIER_HIGH_QUEUE_URL"
LOW_QUEUE_URL_VARIABLE = "WORKER_TIER_LOW_QUEUE_URL"
# The S3 bucket large bodies are offloaded to (worker_tier.core.payloads); unset: nothing is offloaded.
PAYLOAD_BUCKET_VARIABLE = "WORKER_TIER_PAYLOAD_BUCKET"
# Only the local environment sets it, with a lower long-delay threshold; deployed, the dispatcher's default holds.
DELAY_HORIZON_VARIABLE = "WORKER_TIER_DELAY_HORIZON"
# A setting, read alone by producers (Client.from_env) that read no other setting.
DELAY_SHARDS_VARIABLE = setting_variable("delay_shards")
# A setting, read alone by the delay dispatcher: how many shard groups run each minute (worker_tier.delays.dispatch_state).
DISPATCH_GROUPS_VARIABLE = setting_variable("dispatch_groups")
# The job_retention setting, for producers of tracked jobs (Client.from_env): their first records' TTL.
JOB_RETENTION_VARIABLE = setting_variable("job_retention")
# Read only by the command line, with the resource variables above: the worker's log group (`worker-tier tail`)
# and the periodic tasks' schedule group (`worker-tier status`); the local environment exports the second.
LOG_GROUP_VARIABLE = "WORKER_TIER_LOG_GROUP"
# The command line's: the stack to read (as --stack), and which of its WorkerQueues (as --worker).
STACK_VARIABLE = "WORKER_TIER_STACK"
WORKER_VARIABLE = "WORKER_TIER_WORKER"
SCHEDULE_GROUP_VARIABLE = "WORKER_TIER_SCHEDULE_GROUP"
# The stack outputs naming a deployment to the command line (`worker-tier --stack`), each published by the construct
# that makes the resource (worker_tier_cdk.outputs): resource -> output key. The first construct of its kind in a
# stack publishes the plain key; a later one puts its construct id in front (InvoicesQueueUrl).
STACK_OUTPUTS = {
    "queue_url": "QueueUrl",
    "dlq_url": "DeadLetterQueueUrl",
    "state_table": "StateTableName",
    "delay_table": "DelayTableName",
    "container_queue_url": "ContainerQueueUrl",
    "worker_function": "WorkerFunctionName",
    "worker_log_group": "WorkerLogGroupName",
    "schedule_group": "ScheduleGroupName",
    "payload_bucket": "PayloadBucketName",
    "high_queue_url": "HighQueueUrl",
    "low_queue_url": "LowQueueUrl",
}
# The field of the delay dispatcher's event naming its shard group ({"group": g}); an event without it is group 0.
DISPATCH_GROUP_FIELD = "group"


@dataclass(frozen=True)
class Resources:
    """The resources a process is pointed at; None where it is not given one.

    >>> Resources(queue_url="https://q").to_environment()
    {'WORKER_TIER_QUEUE_URL': 'https://q'}
    >>> Resources.from_environment({"WORKER_TIER_DELAY_HORIZON": "120"}).delay_horizon_seconds
    120
    """

    queue_url: str | None = dataclasses.field(default=None, metadata={"variable": QUEUE_URL_VARIABLE})
    dlq_url: str | None = dataclasses.field(default=None, metadata={"variable": DLQ_URL_VARIABLE})
    state_table: str | None = dataclasses.field(default=None, metadata={"variable": STATE_TABLE_VARIABLE})
    delay_table: str | None = dataclasses.field(default=None, metadata={"variable": DELAY_TABLE_VARIABLE})
    container_queue_url: str | None = dataclasses.field(default=None, metadata={"variable": CONTAINER_QUEUE_URL_VARIABLE})
    send_queue_url: str | None = dataclasses.field(default=None, metadata={"variable": SEND_QUEUE_URL_VARIABLE})
    payload_bucket: str | None = dataclasses.field(default=None, metadata={"variable": PAYLOAD_BUCKET_VARIABLE})
    delay_horizon_seconds: int | None = dataclasses.field(default=None, metadata={"variable": DELAY_HORIZON_VARIABLE})
    high_queue_url: str | None = dataclasses.field(default=None, metadata={"variable": HIGH_QUEUE_URL_VARIABLE})
    low_queue_url: str | None = dataclasses.field(default=None, metadata={"variable": LOW_QUEUE_URL_VARIABLE})

    @classmethod
    def variable(cls, field_name: str) -> str:
        """The variable that carries one field, e.g. ``"queue_url"`` -> ``WORKER_TIER_QUEUE_URL``."""
        for field in dataclasses.fields(cls):
            if field.name == field_name:
                variable: str = field.metadata["variable"]
                return variable
        raise SettingsError(f"{field_name!r} is not a Resources field; the fields are: {', '.join(RESOURCE_FIELDS)}")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ, fields: Iterable[str] | None = None) -> Resources:
        """Read each variable that is set and not blank (of ``fields`` only, when given); blank counts as unset."""
        wanted = set(RESOURCE_FIELDS if fields is None else fields)
        values: dict[str, object] = {}
        for field in dataclasses.fields(cls):
            raw = environ.get(field.metadata["variable"])
            if field.name in wanted and raw and not raw.isspace():
                values[field.name] = _whole_number(field.metadata["variable"], raw) if field.type == "int | None" else raw
        return cls(**values)  # type: ignore[arg-type]

    def named(self, field_name: str, reader: str = "this process") -> str:
        """A resource ``reader`` cannot run without: its name or URL, else SettingsError naming its variable."""
        value = getattr(self, field_name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise SettingsError(f"{self.variable(field_name)} must be set: {reader} reads its {field_name} from it")
        return str(value)

    def to_environment(self) -> dict[str, str]:
        """The variables for the fields that are set (CDK tokens are strings, so constructs use this too)."""
        return {
            field.metadata["variable"]: str(getattr(self, field.name))
            for field in dataclasses.fields(self)
            if getattr(self, field.name) is not None
        }


RESOURCE_FIELDS = tuple(field.name for field in dataclasses.fields(Resources))


def _whole_number(variable: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise SettingsError(f"{variable} must be a whole number, got {raw!r}") from None


@dataclass(frozen=True)
class Needs:
    """What one entry point reads: resources it cannot run without, ones it uses when given, and the settings.

    ``read`` is how the entry point reads them, so the declaration and the code
    cannot drift: an undeclared field reads as None.

    >>> Needs("the example", required=("queue_url",)).read({})
    Traceback (most recent call last):
    ...
    worker_tier.core.errors.SettingsError: WORKER_TIER_QUEUE_URL must be set: the example reads its queue_url from it
    """

    reader: str
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    settings: bool = False

    def __post_init__(self) -> None:
        for name in (*self.required, *self.optional):
            Resources.variable(name)  # raises for a name that is not a field

    def read(self, environ: Mapping[str, str] = os.environ) -> Resources:
        """The declared resources; SettingsError naming the first required variable that is not set."""
        resources = Resources.from_environment(environ, (*self.required, *self.optional))
        for name in self.required:
            resources.named(name, self.reader)
        return resources

    def check(self, environ: Mapping[str, str] = os.environ) -> None:
        """Raise SettingsError unless every required variable is set (for code that reads them itself)."""
        self.read(environ)

    def __or__(self, other: Needs) -> Needs:
        """What this entry point reads plus what code it runs reads (``other``, e.g. ``PRODUCER_NEEDS``)."""
        required = tuple(dict.fromkeys((*self.required, *other.required)))
        optional = tuple(name for name in dict.fromkeys((*self.optional, *other.optional)) if name not in required)
        return Needs(self.reader, required, optional, self.settings or other.settings)

    def variables(self) -> frozenset[str]:
        """Every resource variable this entry point reads (required or optional)."""
        return frozenset(Resources.variable(name) for name in (*self.required, *self.optional))


# What any producer reads (Client.from_env, in task code too): where to send, and the delay table.
PRODUCER_NEEDS = Needs("a producer (Client.from_env)", optional=(
    "queue_url", "send_queue_url", "delay_table", "payload_bucket", "high_queue_url", "low_queue_url"))

# Message attributes. sqsd's: https://docs.aws.amazon.com/elasticbeanstalk/latest/dg/using-features-managing-env-tiers.html
SQSD_ATTRIBUTE_PREFIX = "beanstalk.sqsd."
PATH_ATTRIBUTE = "beanstalk.sqsd.path"
TASK_NAME_ATTRIBUTE = "beanstalk.sqsd.task_name"
SCHEDULED_TIME_ATTRIBUTE = "beanstalk.sqsd.scheduled_time"
SCHEDULED_JOB_BODY = "elasticbeanstalk scheduled job"
# AWS's SQS Extended Client (Java's amazon-sqs-java-extended-client-lib, Python's amazon-sqs-extended-client): an
# offloaded message carries its body's size in this Number attribute and a pointer to the S3 object as its body
# (worker_tier.core.payloads). The legacy names are the Java client's 1.x ones, still read.
PAYLOAD_SIZE_ATTRIBUTE = "ExtendedPayloadSize"
LEGACY_PAYLOAD_SIZE_ATTRIBUTE = "SQSLargePayloadSize"
PAYLOAD_POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"
LEGACY_PAYLOAD_POINTER_CLASS = "com.amazon.sqs.javamessaging.MessageS3Pointer"
# The keys Worker Tier's producers write under: messages sent now, and delayed ones (which live up to 366 days longer).
PAYLOAD_KEY_PREFIX = "payloads/"
DELAYED_PAYLOAD_KEY_PREFIX = "payloads/delayed/"
SCHEDULED_TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"
ROUTING_ATTRIBUTES = (PATH_ATTRIBUTE, TASK_NAME_ATTRIBUTE, SCHEDULED_TIME_ATTRIBUTE)
# A message's priority level other than the default (worker_tier.core.priority): it names the queue every re-send
# goes to (a retry through the delay table, the DLQ copy redriven, a forward), so it is never shed.
PRIORITY_ATTRIBUTE = "worker_tier.priority"
PRIORITY_HIGH = "high"
PRIORITY_NORMAL = "normal"
PRIORITY_LOW = "low"
PRIORITY_LEVELS = (PRIORITY_HIGH, PRIORITY_NORMAL, PRIORITY_LOW)  # highest first: the container worker's poll order
DEFAULT_PRIORITY = PRIORITY_NORMAL
# The Resources field carrying each level's queue; the normal level's is the work queue itself.
PRIORITY_QUEUE_FIELDS = {PRIORITY_HIGH: "high_queue_url", PRIORITY_LOW: "low_queue_url"}
# A tracked message's job id (docs/jobs.md): one of SQS's 10 attributes, kept by every copy (retries, delays, fresh
# copies, the DLQ copy and its redrive), so each worker that runs it updates the same job record (``job#<id>``).
JOB_ATTRIBUTE = "worker_tier.job"
# What a DLQ copy never sheds for room (worker_tier.core.envelope.dead_letter_attributes): the routing attributes, the
# priority, and the Extended Client's size attribute, without which the copy's pointer body would read as an ordinary body.
KEPT_ATTRIBUTES = (*ROUTING_ATTRIBUTES, PRIORITY_ATTRIBUTE, PAYLOAD_SIZE_ATTRIBUTE, LEGACY_PAYLOAD_SIZE_ATTRIBUTE,
                   JOB_ATTRIBUTE)  # a redriven copy reopens its job
# Worker Tier's own attributes: the producer refuses user attributes with this prefix.
WORKER_TIER_ATTRIBUTE_PREFIX = "worker_tier."
FAILURE_ATTRIBUTE = "worker_tier.failure"
DUE_AT_ATTRIBUTE = "worker_tier.due_at"
SOURCE_MESSAGE_ID_ATTRIBUTE = "worker_tier.source_message_id"  # a forward's source message: the default idempotency key
# A job's states (worker_tier.core.jobs); the last three of JOB_STATES are final.
JOB_QUEUED = "queued"
JOB_DELAYED = "delayed"
JOB_RUNNING = "running"
JOB_RETRYING = "retrying"
JOB_SUCCEEDED = "succeeded"
JOB_DEAD_LETTERED = "dead_lettered"
JOB_CANCELLED = "cancelled"
JOB_STATES = (JOB_QUEUED, JOB_DELAYED, JOB_RUNNING, JOB_RETRYING, JOB_SUCCEEDED, JOB_DEAD_LETTERED, JOB_CANCELLED)
JOB_FINAL_STATES = (JOB_SUCCEEDED, JOB_DEAD_LETTERED, JOB_CANCELLED)
# A job's result too large for its record goes to the payload bucket under this prefix, as results/<job id>.json.
JOB_RESULT_KEY_PREFIX = "results/"
# Receives a message's earlier copies used (a retry re-sent through the delay table); Task.receive_count adds it.
ATTEMPTS_ATTRIBUTE = "worker_tier.attempts"
# When the original message was first received (epoch ms, SQS's ApproximateFirstReceiveTimestamp), carried on a
# retry re-sent through the delay table, so retention_period counts from the original (worker_tier.app.sqsd).
FIRST_RECEIVED_ATTRIBUTE = "worker_tier.first_received_at"
# The X-Ray trace header: an SQS message *system* attribute (not one of the 10, outside the size), SendMessage's
# MessageSystemAttributes, a received message's Attributes and a Lambda record's "attributes" (worker_tier.pipeline.tracing):
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
TRACE_HEADER_SYSTEM_ATTRIBUTE = "AWSTraceHeader"

# HTTP forwarding's signatures (docs/container-worker.md shows the app's checks), keyed with the app_signing_secret_arn
# secret: the POST's Unix time; v1, "v1=" + hex HMAC-SHA256 of "<timestamp>.<body>" (kept for the apps that check it);
# v2, "v2=" + hex HMAC-SHA256 of "v2\n<method>\n<path>\n<X-Aws-Sqsd-Msgid>\n<timestamp>\n<body>", which binds the
# request to its route and its message.
SIGNATURE_TIMESTAMP_HEADER = "X-Worker-Tier-Timestamp"
SIGNATURE_HEADER = "X-Worker-Tier-Signature"
SIGNATURE_VERSION = "v1"
SIGNATURE_V2_HEADER = "X-Worker-Tier-Signature-V2"
SIGNATURE_V2_VERSION = "v2"
# The replay window an app should apply: refuse a signature whose timestamp is further than this from its clock.
SIGNATURE_TOLERANCE_SECONDS = 300

# Metrics: every function logs and publishes under this service and namespace (EMF, a "service" dimension).
SERVICE_NAME = "worker-tier"
METRICS_NAMESPACE = "WorkerTier"
# The Lambda worker and the container worker.
METRIC_PROCESSED = "Processed"
METRIC_SUCCEEDED = "Succeeded"
METRIC_FAILED = "Failed"
METRIC_RETRIED = "Retried"
METRIC_DEAD_LETTERED = "DeadLettered"
METRIC_RELEASED = "Released"
METRIC_FORWARDED = "ForwardedToContainer"
METRIC_TASK_DURATION = "TaskDuration"
METRIC_TASK_DURATION_MAX = "TaskDurationMax"
METRIC_MESSAGE_AGE = "MessageAgeAtStart"
# Not run because it is not due yet (the delay dispatcher's clock ran ahead of the worker's).
METRIC_HELD_BACK = "HeldBack"
# Flow control (worker_tier.flow): a message over its task's rate limit or concurrency waits (not an attempt); a
# wait the state table could not record (it may then count as an attempt); a message re-sent as a fresh copy so
# that its waits never reach the redrive policy's maxReceiveCount; a concurrency slot whose lease could not be renewed.
METRIC_THROTTLED = "Throttled"
METRIC_WAIT_UNRECORDED = "FlowWaitUnrecorded"
METRIC_REFRESHED = "FlowRefreshed"
METRIC_SLOT_LOST = "FlowSlotLost"
# A fresh copy with no room left for worker_tier.attempts (a message with all 10 attributes): it starts from its first.
METRIC_ATTEMPTS_DROPPED = "FlowAttemptsDropped"
# A retry longer than SQS's visibility limit allows, re-sent as a delayed copy through the delay table.
METRIC_RESCHEDULED = "Rescheduled"
# A retry longer than SQS's visibility limit allows with no delay table to carry it: shortened to the limit.
METRIC_RETRY_DELAY_SHORTENED = "RetryDelayShortened"
# Visibility changes SQS refused: those messages keep their current timeout.
METRIC_VISIBILITY_REFUSED = "VisibilityChangesRefused"
# A dead-letter attempt that failed (the DLQ refused it, or it raised): the message backs off and retries.
METRIC_DEAD_LETTER_FAILED = "DeadLetterFailed"
# Records the worker could not name (no messageId), so could not report; logged and backed off.
METRIC_MALFORMED_RECORDS = "MalformedRecords"
# A message whose lease ended (the heartbeat lost it) before its task started: not run, left to its new holder.
METRIC_LEASE_LOST_BEFORE_START = "LeaseLostBeforeStart"
# Large payloads (worker_tier.core.payloads): bodies offloaded to S3, objects deleted after their message succeeded,
# and orphans: objects uploaded for a send that did not happen, deleted at once (the lifecycle rule catches the rest).
METRIC_PAYLOADS_OFFLOADED = "PayloadsOffloaded"
METRIC_PAYLOADS_DELETED = "PayloadsDeleted"
METRIC_PAYLOAD_ORPHANS = "PayloadOrphans"
# The delay dispatcher, each run.
METRIC_DISPATCHED = "DelayedDispatched"
METRIC_DISPATCH_DEAD_LETTERED = "DelayedDeadLettered"
METRIC_DISPATCHER_LAG = "DispatcherLag"
METRIC_DISPATCH_LATENESS = "DelayedMaxLateness"
METRIC_BUCKETS_DISPATCHED = "DelayBucketsDispatched"
# An item due after its minute, moved into its due minute (the dispatcher and the safety net both refile).
METRIC_REFILED = "DelayedRefiled"
METRIC_DISPATCHER_WATERMARK_AHEAD = "DispatcherWatermarkAhead"
METRIC_DISPATCHER_STATE_UNREADABLE = "DispatcherStateUnreadable"
# The delay table's safety net (delay recovery), each stream batch.
METRIC_LATE_WRITES = "DelayedLateWrites"
METRIC_RECOVERED_FROM_TTL = "DelayedRecoveredFromTtl"
METRIC_RECOVERY_DEAD_LETTERED = "DelayedRecoveryDeadLettered"
METRIC_RECOVERY_WATERMARK_AHEAD = "DelayedWatermarkAhead"
# Periodic tasks, each tick.
METRIC_TICKS_ENQUEUED = "TicksEnqueued"
METRIC_TICKS_DUPLICATE = "TicksDuplicate"
METRIC_TICKS_RETRIED = "TicksRetried"
# A sent tick whose claim could not be marked sent: a retry or duplicate may send the tick again.
METRIC_TICK_MARK_FAILED = "TickMarkFailed"

# The worker's log line (worker_tier.worker.fates, the "message" key) for each outcome it logs, by outcome status;
# `worker-tier tail` prints them and the dashboard counts them per path (metric filters on the worker's log
# group, dimension ``path``). A success is not logged: a line per message would cost more than most tasks.
OUTCOME_LOG_MESSAGES = {
    "retrying": "task failed; retrying",
    "rescheduled": "retry re-sent through the delay table",
    "dead_lettered": "task dead-lettered",
    "held_back": "message not due yet: held back",
    "throttled": "over a flow limit: waits, not an attempt",
}

# The state table: one partition key, a TTL, and one key prefix per kind of item (dynamodb:LeadingKeys grants).
STATE_PARTITION_KEY = "pk"
STATE_TTL_ATTRIBUTE = "expiration"
IDEMPOTENCY_KEY_PREFIX = "idempotency#"
DISPATCHER_KEY_PREFIX = "scheduler#"  # the delay dispatcher's first name, kept so deployed state stays readable
TICK_KEY_PREFIX = "cron#"
FLOW_KEY_PREFIX = "flow#"  # flow control: rate limits, concurrency slots, and the waits of throttled messages
JOB_KEY_PREFIX = "job#"  # a tracked message's job record: its state, result and history (docs/jobs.md)
STATE_KEY_PREFIXES = (IDEMPOTENCY_KEY_PREFIX, DISPATCHER_KEY_PREFIX, TICK_KEY_PREFIX, FLOW_KEY_PREFIX, JOB_KEY_PREFIX)

# The delay table: pk "b#<minute>#<shard>", sk "<due ms>#<id>" (worker_tier.delays.delay); dedupe markers "dedupe#<key>".
DELAY_PARTITION_KEY = "pk"
DELAY_SORT_KEY = "sk"
DELAY_TTL_ATTRIBUTE = "expiration"
DELAY_BUCKET_KEY_PREFIX = "b#"
DELAY_DEDUPE_KEY_PREFIX = "dedupe#"

# The queues. A FIFO queue's name ends so; its DLQ is FIFO too. No content-based deduplication: it hashes the
# body only, so two different tasks with one body would become one message; Worker Tier's producers always
# send a MessageDeduplicationId, and SQS refuses a producer that sends none instead of deduplicating silently.
FIFO_QUEUE_SUFFIX = ".fifo"
FIFO_CONTENT_BASED_DEDUPLICATION = False
DEAD_LETTER_RETENTION_SECONDS = limits.SQS_MAX_RETENTION_SECONDS


def queue_attributes(settings: Settings, *, dead_letter: bool = False) -> dict[str, str]:
    """A queue's SQS attributes as the stack creates it (SSE-SQS; the redrive policy aside).

    >>> from worker_tier.core.settings import Settings
    >>> queue_attributes(Settings(fifo=True), dead_letter=True)["ContentBasedDeduplication"]
    'false'
    """
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": str(FIFO_CONTENT_BASED_DEDUPLICATION).lower()}
    if dead_letter:
        timing = {"MessageRetentionPeriod": str(DEAD_LETTER_RETENTION_SECONDS)}
    else:
        timing = {"VisibilityTimeout": str(settings.visibility_timeout), "MessageRetentionPeriod": str(settings.retention_period)}
    return {"SqsManagedSseEnabled": "true", **timing, **(fifo if settings.fifo else {})}
