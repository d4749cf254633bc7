"""Worker Tier settings: names, defaults, ranges and validation, in one place.

One idea, kept whole: every setting's declaration, so a default or a range is stated once.

The same ``Settings`` is read from ``cdk.json`` at synth (``infra``), from
``WORKER_TIER_*`` environment variables in a function, and by the local
environment, so every default and range below is stated once.

``Settings`` is made of three sections, each a frozen dataclass of fields whose
docstring says what it governs and who reads it: ``RuntimeSettings`` (how the
worker runs each message), ``DeploymentSettings`` (what the stack builds) and
``AppSettings`` (an Elastic Beanstalk worker app). A setting's name is its
``cdk.json`` key and, upper-cased, its ``WORKER_TIER_*`` variable, whichever
section it sits in; ``Settings`` validates them all together.
"""

from __future__ import annotations

import dataclasses
import difflib
import keyword
import re
from itertools import pairwise
from dataclasses import dataclass
from typing import Any, Mapping

from worker_tier.core import limits
from worker_tier.core.contract import setting_variable
from worker_tier.core.errors import SettingsError

# Elastic Beanstalk worker defaults:
# https://docs.aws.amazon.com/elasticbeanstalk/latest/dg/command-options-general.html#command-options-general-elasticbeanstalksqsd
DEFAULT_VISIBILITY_TIMEOUT_SECONDS = 300
DEFAULT_ERROR_VISIBILITY_TIMEOUT_SECONDS = 2
DEFAULT_MAX_RETRIES = 10
DEFAULT_HTTP_CONNECTIONS = 50
DEFAULT_INACTIVITY_TIMEOUT_SECONDS = 299
DEFAULT_RETENTION_PERIOD_SECONDS = 345600
DEFAULT_HTTP_PATH = "/"
DEFAULT_MIME_TYPE = "application/json"
DEFAULT_CONNECT_TIMEOUT_SECONDS = 5

# Worker Tier's own defaults.
DEFAULT_MAX_BACKOFF_SECONDS = 15 * 60
DEFAULT_BATCH_SIZE = 10
DEFAULT_MAX_BATCHING_WINDOW_SECONDS = 0
DEFAULT_MEMORY_MB = 256
# The largest offloaded body a worker reads: a quarter of the default worker's memory, since a body is held as its
# bytes and as text at once, beside the runtime (AWS's Extended Client allows 2 GB: limits.EXTENDED_CLIENT_MAX_PAYLOAD_BYTES).
DEFAULT_PAYLOAD_MAX_BYTES = 64 * 1024 * 1024
PAYLOAD_MEMORY_SHARE = 4
DEFAULT_TIMEOUT_MARGIN_SECONDS = 10
DEFAULT_OLDEST_MESSAGE_ALARM_SECONDS = 15 * 60
DEFAULT_TASK_MODULES = "tasks"
DEFAULT_DELAY_SHARDS = 8
# The delay dispatcher queries every possible shard of every minute (so no producer's shard count can be missed),
# and an empty Query still costs 0.5 read unit: 16 shards is ~16,000 writes/s into one minute's partitions
# (DynamoDB's 1,000 per partition) and keeps the delay path under half EventBridge Scheduler's cost (make bench).
MAX_DELAY_SHARDS = 16
# One delay dispatcher invocation each minute reads every shard; fanned out, one per group of shards (shard % groups).
# At most one group per shard. `make bench` (docs/benchmarks.md#delay-dispatch-at-scale) measures what each G carries.
DEFAULT_DISPATCH_GROUPS = 1
DEFAULT_HEARTBEAT_INTERVAL_SECONDS = 30
HEARTBEAT_MARGIN_SECONDS = 10
# Container worker (opt-in): backlog-per-task target = target_latency_seconds / avg_processing_seconds.
DEFAULT_TARGET_LATENCY_SECONDS = 600
DEFAULT_AVG_PROCESSING_SECONDS = 60
DEFAULT_CONTAINER_MIN_TASKS = 1
DEFAULT_CONTAINER_MAX_TASKS = 10
DEFAULT_CONTAINER_CONCURRENCY = 4
DEFAULT_CONTAINER_CPU = 1024
DEFAULT_CONTAINER_MEMORY_MB = 2048
# Running tasks get this long after SIGTERM; the rest of the stop timeout is for releasing and exiting.
DEFAULT_CONTAINER_GRACE_SECONDS = 100
CONTAINER_SUBNETS_PRIVATE = "private"  # private subnets behind one NAT gateway, no public IP
CONTAINER_SUBNETS_PUBLIC = "public"  # public subnets with public IPs, no NAT gateway to pay for
CONTAINER_SUBNET_CHOICES = (CONTAINER_SUBNETS_PRIVATE, CONTAINER_SUBNETS_PUBLIC)
DEFAULT_CONTAINER_SUBNETS = CONTAINER_SUBNETS_PRIVATE
# A tag, not a digest: a real digest cannot be looked up at synth. Pin yours: "...python:3.14-slim@sha256:<digest>".
DEFAULT_CONTAINER_BASE_IMAGE = "public.ecr.aws/docker/library/python:3.14-slim"
# Lambda's advice: a visibility timeout of at least six times the function timeout, so Lambda can retry a
# throttled invocation before the message shows again. https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
ADVISED_VISIBILITY_TIMEOUT_FACTOR = 6
# Tracked jobs (docs/jobs.md): kept a week; a result up to 16 KiB in the record (each write of a record costs a write
# unit per KB of it); at most 256 KiB, which leaves the history its room under DynamoDB's 400 KB item limit.
DEFAULT_JOB_RETENTION_SECONDS = 7 * 24 * 3600
MIN_JOB_RETENTION_SECONDS = 3600
MAX_JOB_RETENTION_SECONDS = 366 * 24 * 3600
DEFAULT_JOB_RESULT_MAX_BYTES = 16 * 1024
MAX_JOB_RESULT_BYTES = 256 * 1024

_MIME_TYPE = r"^[\w.+-]+/[\w.+-]+$"
_REQUEST_PATH = r"/[\x21-\x7e]*"  # an HTTP request target: visible ASCII, no spaces
# An S3 bucket name: https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html
_BUCKET_NAME = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
_SIGNING_SECRET_ARN = r"arn:aws[a-z-]*:(secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+|ssm:[a-z0-9-]+:\d{12}:parameter/[\w/.-]+)"
# registry/repository[:tag][@sha256:digest], as Docker's reference grammar allows (lower-case repository).
_IMAGE_REFERENCE = r"[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?"


@dataclass(frozen=True)
class _Range:
    low: int
    high: int
    eb_option: str | None = None

    def check(self, name: str, value: Any) -> None:
        """Raise SettingsError unless value is an int within low..high."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingsError(f"{name} must be a whole number {self.low}..{self.high}{self._eb()}, got {value!r}")
        if not self.low <= value <= self.high:
            raise SettingsError(f"{name} must be {self.low}..{self.high}{self._eb()}, got {value}")

    def _eb(self) -> str:
        return f" (EB {self.eb_option})" if self.eb_option else ""


_RANGES: dict[str, _Range] = {
    "visibility_timeout": _Range(0, limits.SQS_MAX_VISIBILITY_TIMEOUT_SECONDS, "VisibilityTimeout"),
    "error_visibility_timeout": _Range(0, limits.SQS_MAX_VISIBILITY_TIMEOUT_SECONDS, "ErrorVisibilityTimeout"),
    "max_retries": _Range(1, 100, "MaxRetries"),
    "http_connections": _Range(
        limits.LAMBDA_SQS_MIN_MAXIMUM_CONCURRENCY, limits.LAMBDA_SQS_MAX_MAXIMUM_CONCURRENCY, "HttpConnections"
    ),
    "inactivity_timeout": _Range(1, limits.LAMBDA_MAX_TIMEOUT_SECONDS, "InactivityTimeout"),
    "retention_period": _Range(
        limits.SQS_MIN_RETENTION_SECONDS, limits.SQS_MAX_RETENTION_SECONDS, "RetentionPeriod"
    ),
    "max_backoff": _Range(1, limits.SQS_MAX_VISIBILITY_TIMEOUT_SECONDS),
    "batch_size": _Range(1, limits.LAMBDA_SQS_MAX_BATCH_SIZE_STANDARD),
    "max_batching_window": _Range(0, limits.LAMBDA_SQS_MAX_BATCHING_WINDOW_SECONDS),
    "memory_size": _Range(limits.LAMBDA_MIN_MEMORY_MB, limits.LAMBDA_MAX_MEMORY_MB),
    "timeout_margin": _Range(1, limits.LAMBDA_MAX_TIMEOUT_SECONDS),
    "oldest_message_alarm": _Range(60, limits.SQS_MAX_RETENTION_SECONDS),
    "delay_shards": _Range(1, MAX_DELAY_SHARDS),
    "dispatch_groups": _Range(1, MAX_DELAY_SHARDS),
    "heartbeat_interval": _Range(1, 3600),
    "target_latency_seconds": _Range(1, 7 * 24 * 3600),
    "avg_processing_seconds": _Range(1, 7 * 24 * 3600),
    "container_min_tasks": _Range(1, 1000),
    "container_max_tasks": _Range(1, 1000),
    "container_concurrency": _Range(1, 64),
    "container_cpu": _Range(256, 16384),
    "container_memory_mb": _Range(512, 122880),
    "connect_timeout": _Range(1, 60, "ConnectTimeout"),
    "app_port": _Range(0, 65535),
    "payload_threshold": _Range(0, limits.SQS_MAX_MESSAGE_BYTES),
    "payload_max_bytes": _Range(1024, limits.EXTENDED_CLIENT_MAX_PAYLOAD_BYTES),
    "job_retention": _Range(MIN_JOB_RETENTION_SECONDS, MAX_JOB_RETENTION_SECONDS),
    "job_result_max_bytes": _Range(0, MAX_JOB_RESULT_BYTES),
}


def _setting(default: Any, doc: str, *, allowed: str | None = None, eb_option: str | None = None) -> Any:
    """A Settings field carrying its description (docs/settings.md is generated from it: ``make docs``).

    ``allowed`` and ``eb_option`` describe the fields ``_RANGES`` does not cover.
    """
    metadata = {"doc": doc, "allowed": allowed, "eb_option": eb_option}
    return dataclasses.field(default=default, metadata={k: v for k, v in metadata.items() if v is not None})


@dataclass(frozen=True, kw_only=True, init=False, repr=False, eq=False)
class RuntimeSettings:
    """How the worker runs each message: its timeouts, retries and backoff, heartbeats, the task modules it
    imports, and how it reads a message (default route, content type, SNS envelope).

    Read at run time, from the ``WORKER_TIER_*`` variables, by the worker (``worker_tier.worker``), in a
    function or in the container worker, as it handles each message. The stack reads some of
    them too, to match the queue and the function to the worker: the visibility timeout, the function's
    timeout, the redrive policy.
    """

    visibility_timeout: int = _setting(
        DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
        "The work queue's visibility timeout, seconds; at least inactivity_timeout + max_batching_window and "
        "heartbeat_interval + 10. Below AWS's advised 6 x inactivity_timeout synth warns, except for EB's own 300 / 299 pair.",
    )
    inactivity_timeout: int = _setting(
        DEFAULT_INACTIVITY_TIMEOUT_SECONDS,
        "The worker function's timeout, seconds (Lambda's maximum is 900; longer tasks need the container worker).",
    )
    timeout_margin: int = _setting(
        DEFAULT_TIMEOUT_MARGIN_SECONDS,
        "Seconds the timeout guard keeps free: with less left, the remaining records are released unstarted "
        "(visibility 0). Must be below inactivity_timeout.",
    )
    error_visibility_timeout: int = _setting(
        DEFAULT_ERROR_VISIBILITY_TIMEOUT_SECONDS,
        "Base of the retry backoff, seconds: a failed message waits uniform 0..min(max_backoff, "
        "error_visibility_timeout x 2^(receive - 1)).",
    )
    max_backoff: int = _setting(
        DEFAULT_MAX_BACKOFF_SECONDS, "Cap of the retry backoff, seconds."
    )
    max_retries: int = _setting(
        DEFAULT_MAX_RETRIES,
        "Attempts before the worker dead-letters a failing message with its reason (receives that waited for a flow "
        "limit or were given back unstarted are not attempts); the queue's redrive policy, at max_retries + 3 "
        "receives, is only the backstop.",
    )
    heartbeat: bool = _setting(
        False,
        "Heartbeats for every task (otherwise only for @task(heartbeat=True)): the message's visibility is "
        "extended while its task runs.",
    )
    heartbeat_interval: int = _setting(
        DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
        "Seconds between heartbeats; each extends the visibility by heartbeat_interval + 10.",
    )
    task_modules: str = _setting(
        DEFAULT_TASK_MODULES,
        "Modules the worker imports so their @task functions register; each must be deployed by the stack's TaskCode. "
        "Empty only with app or app_port (every message goes to the app).",
        allowed="comma-separated module names, e.g. `tasks,billing.tasks`",
    )
    middleware: str = _setting(
        "",
        "Middleware the worker runs after its built-in ones, in this order (docs/middleware.md); each a Middleware "
        "subclass (built with no arguments) or instance, in a module the stack deploys.",
        allowed="comma-separated `module:attribute` references, e.g. `worker_tier.pipeline.tracing:TracingMiddleware`",
    )
    http_path: str = _setting(
        DEFAULT_HTTP_PATH,
        "The route of a message without a beanstalk.sqsd.path attribute (from S3, SNS or an EB producer).",
        allowed="a path starting with `/`",
        eb_option="HttpPath",
    )
    mime_type: str = _setting(
        DEFAULT_MIME_TYPE,
        "The body's content type, as Task.content_type.",
        allowed="a MIME type, `type/subtype`",
        eb_option="MimeType",
    )
    via_sns: bool = _setting(
        False,
        "Unwrap SNS-wrapped bodies (an SNS Notification envelope) before the task or the app sees them.",
    )
    payload_threshold: int = _setting(
        0,
        "Bytes (body and attributes) above which a message's body goes to the payload bucket and the queue carries a "
        "pointer, in AWS's Extended Client format (docs/large-payloads.md); 0: only a message the queue's "
        "MaximumMessageSize cannot hold.",
    )
    job_retention: int = _setting(
        DEFAULT_JOB_RETENTION_SECONDS,
        "Seconds a tracked job's record (send(track=True), docs/jobs.md) is kept after its last change, through the "
        "state table's TTL.",
    )
    job_result_max_bytes: int = _setting(
        DEFAULT_JOB_RESULT_MAX_BYTES,
        "The largest task result (JSON, bytes) kept in its job's record; a larger one goes to the payload bucket "
        "(results/), or without one is recorded as dropped with its size. 0: results are never kept in the record.",
    )
    payload_max_bytes: int = _setting(
        DEFAULT_PAYLOAD_MAX_BYTES,
        "The largest body a producer offloads and a worker reads, bytes; at most a quarter of memory_size (and of "
        "container_memory_mb), since a body is held as bytes and as text at once. AWS's Extended Client allows 2 GB.",
    )


@dataclass(frozen=True, kw_only=True, init=False, repr=False, eq=False)
class DeploymentSettings:
    """What the stack builds, and how large: the queue's kind and retention, the event source's batching and
    concurrency, the worker function's memory, the alarms, the delay table's shards and its dispatcher, and
    the container worker's size, scaling and network.

    Read at synth by the CDK constructs (``worker_tier_cdk``), and by the local environment, which builds the
    same resources in-process. The runtime reads a few back (``fifo``, ``delay_shards``,
    ``container_concurrency``) to work with what the stack built.
    """

    fifo: bool = _setting(
        False,
        "A FIFO work queue and dead-letter queue. FIFO has no per-message delay, so no delay table either.",
    )
    retention_period: int = _setting(
        DEFAULT_RETENTION_PERIOD_SECONDS,
        "How long the work queue keeps a message, seconds; the dead-letter queue keeps 14 days.",
    )
    batch_size: int = _setting(
        DEFAULT_BATCH_SIZE,
        "Messages per worker invocation; 1..10 on a FIFO queue, and above 10 only with max_batching_window >= 1.",
    )
    max_batching_window: int = _setting(
        DEFAULT_MAX_BATCHING_WINDOW_SECONDS,
        "Seconds the event source may wait to fill a batch.",
    )
    http_connections: int = _setting(
        DEFAULT_HTTP_CONNECTIONS,
        "The SQS event source's maximum concurrency: how many worker invocations run at once; with app_port, the "
        "container worker's threads (POSTs in flight, as EB's per-instance HttpConnections).",
    )
    memory_size: int = _setting(DEFAULT_MEMORY_MB, "The worker function's memory, MB.")
    oldest_message_alarm: int = _setting(
        DEFAULT_OLDEST_MESSAGE_ALARM_SECONDS,
        "The oldest-message-age alarm's threshold, seconds.",
    )
    delay_shards: int = _setting(
        DEFAULT_DELAY_SHARDS,
        "Partitions a producer spreads one minute of the delay table over. The delay dispatcher reads all 16 "
        "whatever the setting, so changing it is safe.",
    )
    dispatch_groups: int = _setting(
        DEFAULT_DISPATCH_GROUPS,
        "Delay dispatcher invocations each minute, group g reading the shards s with s % dispatch_groups == g, each "
        "with its own lease and watermark: more delayed messages due per minute put on time (docs/benchmarks.md), "
        "if producers spread them over at least as many delay_shards. Above 1 the dispatcher gets a full vCPU "
        "(1,769 MB). Each group adds an invocation and about 5 state-table writes a minute. Changing it loses nothing "
        "and sends nothing early: what was dispatched after the slowest group's watermark is sent again.",
    )
    priorities: bool = _setting(
        False,
        "Message priorities (docs/priorities.md): a high and a low queue beside the work queue (the normal level), each "
        "with its own event source and a share of http_connections; `send(priority=...)` picks the level. Not with fifo.",
    )
    container_worker: bool = _setting(
        False,
        "Deploy the container worker (ECS Fargate) for @task(container=True) tasks.",
    )
    large_payloads: bool = _setting(
        True,
        "Deploy the payload bucket: bodies too large for the queue go to S3 (docs/large-payloads.md). Off: such a send "
        "is refused, and an offloaded message from another producer is dead-lettered.",
    )
    payload_kms: bool = _setting(
        False,
        "Encrypt the payload bucket with its own customer managed KMS key (rotated) instead of S3-managed keys.",
    )
    payload_access_log_bucket: str = _setting(
        "",
        "An existing bucket for the payload bucket's S3 server access logs; empty: none.",
        allowed="a bucket name, or empty",
    )
    target_latency_seconds: int = _setting(
        DEFAULT_TARGET_LATENCY_SECONDS,
        "How long a message may wait before it starts, seconds; with avg_processing_seconds it sets the "
        "backlog-per-task target (their ratio) of the container worker's scaling and the worker's backlog alarm. "
        "At least avg_processing_seconds.",
    )
    avg_processing_seconds: int = _setting(
        DEFAULT_AVG_PROCESSING_SECONDS,
        "A task's average run time, seconds (see target_latency_seconds).",
    )
    container_min_tasks: int = _setting(DEFAULT_CONTAINER_MIN_TASKS, "Fewest container worker tasks.")
    container_max_tasks: int = _setting(
        DEFAULT_CONTAINER_MAX_TASKS, "Most container worker tasks; at least container_min_tasks."
    )
    container_concurrency: int = _setting(
        DEFAULT_CONTAINER_CONCURRENCY, "Tasks each container worker runs at once."
    )
    container_cpu: int = _setting(
        DEFAULT_CONTAINER_CPU, "The Fargate task's CPU units; one of Fargate's cpu values."
    )
    container_memory_mb: int = _setting(
        DEFAULT_CONTAINER_MEMORY_MB, "The Fargate task's memory, MB; a size Fargate allows for container_cpu."
    )
    container_subnets: str = _setting(
        DEFAULT_CONTAINER_SUBNETS,
        "`private`: private subnets, one NAT gateway, no public IP. `public`: public subnets with public IPs and "
        "no NAT cost. No inbound rules either way.",
        allowed=" or ".join(f"`{choice}`" for choice in CONTAINER_SUBNET_CHOICES),
    )
    container_base_image: str = _setting(
        DEFAULT_CONTAINER_BASE_IMAGE,
        "The container worker image's base, the Dockerfile's BASE_IMAGE build argument. Pin it by digest "
        "(`...@sha256:<digest>`): synth warns while it is not.",
        allowed="an image reference, `registry/repository[:tag][@sha256:digest]`",
    )


@dataclass(frozen=True, kw_only=True, init=False, repr=False, eq=False)
class AppSettings:
    """An Elastic Beanstalk worker app (docs/migrating-from-eb.md): which app gets the messages, in-process
    (``app``) or over HTTP from the container worker (``app_port``), and how it is reached.

    The rest are inert without ``app`` or ``app_port``. Read at run time by the app delivery
    (``app_target.py``, ``app_adapter.py``, ``sqsd.py``, ``forwarding.py``), and at synth by the constructs,
    which check the app is deployed, leave the function without an event source while the container worker
    forwards, grant the signing secret and run ``app_image`` beside the container worker.
    """

    app: str = _setting(
        "",
        "A WSGI or ASGI app the worker delivers each message to in-process, as sqsd POSTs it (empty: none). A "
        "registered @task path wins; the app gets the rest.",
        allowed="empty, or `package.module:attribute`",
    )
    app_route_by_path: bool = _setting(
        False,
        "App mode: POST an ordinary message to its beanstalk.sqsd.path rather than http_path (sqsd never did; "
        "periodic messages always go to their path).",
    )
    app_port: int = _setting(
        0,
        "HTTP forwarding: the container worker POSTs each message to http://localhost:<app_port><path> "
        "(0: no forwarding). Needs container_worker; the container worker then reads the work queue itself.",
    )
    connect_timeout: int = _setting(
        DEFAULT_CONNECT_TIMEOUT_SECONDS,
        "HTTP forwarding: seconds to wait for a connection to the app; inactivity_timeout bounds its answer.",
    )
    app_health_path: str = _setting(
        "",
        "HTTP forwarding: a path the container worker GETs until it answers 200 before it takes messages "
        "(empty: no health gate).",
        allowed="empty, or a path starting with `/`",
    )
    app_signing_secret_arn: str = _setting(
        "",
        "HTTP forwarding: sign each POST with HMAC-SHA256 of its timestamp and body, keyed with this Secrets "
        "Manager secret or SSM SecureString parameter (empty: unsigned).",
        allowed="empty, or a Secrets Manager secret ARN or an SSM parameter ARN",
    )
    app_image: str = _setting(
        "",
        "HTTP forwarding: the app's own image, run as a second container in the container worker's task "
        "(empty: the app runs elsewhere on localhost, or in the worker image).",
        allowed="empty, or an image reference",
    )


# Settings' sections, in the order docs/settings.md shows them; each field is declared in exactly one. A section
# only declares (init=False: it is never built, and makes no methods of its own, which keeps the cold import as it
# was); Settings builds, compares and validates every field.
SECTIONS: tuple[type[RuntimeSettings] | type[DeploymentSettings] | type[AppSettings], ...] = (
    RuntimeSettings, DeploymentSettings, AppSettings
)


# Bases in reverse: a dataclass takes its bases' fields from the last base first, so the fields (and
# to_environment(), and each function's environment) run runtime, deployment, app, as SECTIONS does.
@dataclass(frozen=True)
class Settings(AppSettings, DeploymentSettings, RuntimeSettings):
    """Validated Worker Tier settings; EB option names where EB has one.

    Every field is declared in one of the sections (``SECTIONS``) and reads as ``settings.<name>``;
    the checks below span the sections, so only a whole ``Settings`` is built and validated.

    Examples
    --------
    >>> Settings.from_mapping({"max_retries": 5}).max_retries
    5
    """

    def __post_init__(self) -> None:
        for name, rule in _RANGES.items():
            rule.check(name, getattr(self, name))
        self._check_strings()
        self._check_combinations()

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Settings:
        """Build settings from a mapping such as cdk.json's ``worker_tier`` context."""
        if not isinstance(values, Mapping):
            raise SettingsError(f"worker_tier settings must be a JSON object, got {values!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            close = difflib.get_close_matches(unknown[0], known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SettingsError(f"unknown setting {unknown[0]!r}{hint}; known settings are: {', '.join(sorted(known))}")
        return cls(**values)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Settings:
        """Read every ``WORKER_TIER_<SETTING>`` variable that is set; the rest keep their defaults."""
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            raw = environ.get(setting_variable(field.name))
            if raw is not None:
                values[field.name] = _parse_environment_value(field.name, field.type, raw)
        return cls(**values)

    def to_environment(self) -> dict[str, str]:
        """The ``WORKER_TIER_*`` variables that carry these settings into a function."""
        return {
            setting_variable(f.name): _format_environment_value(getattr(self, f.name))
            for f in dataclasses.fields(self)
        }

    def advisories(self) -> list[str]:
        """What AWS advises against in these settings, though it accepts them (synth shows each as a warning).

        EB's own pair, visibility_timeout 300 with inactivity_timeout 299, is kept for
        compatibility and not warned about; any other pair below AWS's advice is.
        """
        advised = ADVISED_VISIBILITY_TIMEOUT_FACTOR * self.inactivity_timeout
        eb_pair = (self.visibility_timeout, self.inactivity_timeout) == (
            DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
            DEFAULT_INACTIVITY_TIMEOUT_SECONDS,
        )
        if self.visibility_timeout >= advised or eb_pair:
            return []
        return [
            f"visibility_timeout {self.visibility_timeout} is below the {advised} s AWS advises "
            f"({ADVISED_VISIBILITY_TIMEOUT_FACTOR} x inactivity_timeout {self.inactivity_timeout}), so a throttled "
            "batch may show again and count a receive before it runs: "
            "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html"
        ]

    @property
    def backlog_per_task_target(self) -> float:
        """Messages a container task may have waiting: acceptable latency ÷ average processing time."""
        return self.target_latency_seconds / self.avg_processing_seconds

    @property
    def redrive_max_receive_count(self) -> int:
        """The queue's redrive maxReceiveCount: the backstop behind the worker's own give-up.

        The worker dead-letters a message itself, with its reason, on the receive
        whose count reaches ``max_retries``. SQS's redrive moves a message only
        when a receive would exceed maxReceiveCount, so a margin above
        ``max_retries`` gives the worker those extra receives to attach the
        reason even if an invocation crashed or timed out on the way.
        """
        return self.max_retries + REDRIVE_MARGIN_RECEIVES

    def _check_strings(self) -> None:
        if not isinstance(self.http_path, str) or not re.fullmatch(_REQUEST_PATH, self.http_path):
            raise SettingsError(
                f"http_path must be a path starting with '/' of visible ASCII characters, no spaces (EB HttpPath; an "
                f"app receives it as its request target), got {self.http_path!r}"
            )
        if not isinstance(self.mime_type, str) or not re.match(_MIME_TYPE, self.mime_type):
            raise SettingsError(f"mime_type must be a MIME type like 'application/json' (EB MimeType), got {self.mime_type!r}")
        for name in ("fifo", "heartbeat", "container_worker", "app_route_by_path", "via_sns", "large_payloads", "payload_kms",
                     "priorities"):
            if not isinstance(getattr(self, name), bool):
                raise SettingsError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.task_modules == "" and not (self.app or self.app_port):
            raise SettingsError(
                "task_modules is empty: name the modules of your @task functions, or set app or app_port to hand "
                "every message to an EB worker app"
            )
        if self.task_modules != "" and not _is_module_list(self.task_modules):
            raise SettingsError(
                "task_modules must be comma-separated Python module names like 'tasks,billing.tasks', each dotted part "
                f"a Python identifier that is not a keyword, got {self.task_modules!r}"
            )
        if self.middleware != "" and not all(_is_app_reference(m) for m in str(self.middleware).split(",")):
            raise SettingsError(
                "middleware must be comma-separated 'module:attribute' references like "
                f"'worker_tier.pipeline.tracing:TracingMiddleware,billing.audit:Audit', got {self.middleware!r}"
            )
        self._check_container_strings()
        self._check_app_strings()
        bucket = self.payload_access_log_bucket
        if not isinstance(bucket, str) or (bucket and not re.fullmatch(_BUCKET_NAME, bucket)):
            raise SettingsError(
                "payload_access_log_bucket must be empty or an S3 bucket name (3-63 lowercase letters, digits, dots and "
                f"hyphens, starting and ending with a letter or digit), got {bucket!r}"
            )

    def _check_app_strings(self) -> None:
        if not isinstance(self.app, str) or (self.app and not _is_app_reference(self.app)):
            raise SettingsError(
                f"app must be empty or 'package.module:attribute' (a WSGI or ASGI app), got {self.app!r}"
            )
        if not isinstance(self.app_health_path, str) or (
            self.app_health_path and not re.fullmatch(_REQUEST_PATH, self.app_health_path)
        ):
            raise SettingsError(
                f"app_health_path must be empty or a path starting with '/' of visible ASCII characters, no spaces, "
                f"got {self.app_health_path!r}"
            )
        arn = self.app_signing_secret_arn
        if not isinstance(arn, str) or (arn and not re.fullmatch(_SIGNING_SECRET_ARN, arn)):
            raise SettingsError(
                "app_signing_secret_arn must be empty, a Secrets Manager secret ARN "
                "('arn:aws:secretsmanager:<region>:<account>:secret:<name>') or an SSM parameter ARN "
                f"('arn:aws:ssm:<region>:<account>:parameter/<name>'), got {arn!r}"
            )
        if not isinstance(self.app_image, str) or (self.app_image and not re.fullmatch(_IMAGE_REFERENCE, self.app_image)):
            raise SettingsError(
                f"app_image must be empty or an image reference like 'registry/repository:tag', got {self.app_image!r}"
            )

    def _check_container_strings(self) -> None:
        if self.container_subnets not in CONTAINER_SUBNET_CHOICES:
            raise SettingsError(
                f"container_subnets must be one of {', '.join(map(repr, CONTAINER_SUBNET_CHOICES))}, got {self.container_subnets!r}"
            )
        if not isinstance(self.container_base_image, str) or not re.fullmatch(_IMAGE_REFERENCE, self.container_base_image):
            raise SettingsError(
                "container_base_image must be an image reference like 'registry/repository:tag@sha256:<64 hex digits>', "
                f"got {self.container_base_image!r}"
            )

    def _check_fargate_size(self) -> None:
        """Raise SettingsError unless container_cpu and container_memory_mb are a Fargate task size."""
        allowed = limits.FARGATE_MEMORY_MB_BY_CPU.get(self.container_cpu)
        if allowed is None:
            raise SettingsError(
                f"container_cpu must be one of Fargate's cpu values {', '.join(map(str, limits.FARGATE_MEMORY_MB_BY_CPU))}, "
                f"got {self.container_cpu} (with container_memory_mb {self.container_memory_mb})"
            )
        if self.container_memory_mb not in allowed:
            raise SettingsError(
                f"container_memory_mb {self.container_memory_mb} is not a Fargate size for container_cpu "
                f"{self.container_cpu}; it allows {_describe_sizes(allowed)} MB"
            )

    def _check_combinations(self) -> None:
        self._check_fargate_size()
        if self.visibility_timeout < self.inactivity_timeout + self.max_batching_window:
            raise SettingsError(
                f"visibility_timeout must be >= inactivity_timeout + max_batching_window (a message stays hidden while "
                f"its batch gathers and while the function runs) so it is not handed to a second worker while the first "
                f"still runs it, got visibility_timeout {self.visibility_timeout} < inactivity_timeout "
                f"{self.inactivity_timeout} + max_batching_window {self.max_batching_window}"
            )
        if self.visibility_timeout < self.heartbeat_interval + HEARTBEAT_MARGIN_SECONDS:
            raise SettingsError(
                f"visibility_timeout must be >= heartbeat_interval + {HEARTBEAT_MARGIN_SECONDS} s so a held message stays "
                f"invisible from one beat to the next, got {self.visibility_timeout} < "
                f"{self.heartbeat_interval + HEARTBEAT_MARGIN_SECONDS}"
            )
        if self.target_latency_seconds < self.avg_processing_seconds:
            raise SettingsError(
                f"target_latency_seconds must be >= avg_processing_seconds (a backlog of at least one task per worker), "
                f"got {self.target_latency_seconds} < {self.avg_processing_seconds}"
            )
        if self.container_max_tasks < self.container_min_tasks:
            raise SettingsError(
                f"container_max_tasks must be >= container_min_tasks, got {self.container_max_tasks} < {self.container_min_tasks}"
            )
        if self.timeout_margin >= self.inactivity_timeout:
            raise SettingsError(
                f"timeout_margin must be below inactivity_timeout ({self.inactivity_timeout}), got {self.timeout_margin}"
            )
        if self.app and self.app_port:
            raise SettingsError(
                f"app and app_port are two ways to reach one app: set app ({self.app!r}) to call it in-process, or "
                f"app_port ({self.app_port}) to POST to it over HTTP, not both"
            )
        if self.app_port and not self.container_worker:
            raise SettingsError(
                f"app_port {self.app_port} forwards messages over HTTP from the container worker: set container_worker "
                "true too (a Lambda function has no app on localhost)"
            )
        forwarding_only = {"app_health_path": self.app_health_path, "app_signing_secret_arn": self.app_signing_secret_arn,
                           "app_image": self.app_image}
        for name, value in forwarding_only.items():
            if value and not self.app_port:
                raise SettingsError(f"{name} {value!r} applies to HTTP forwarding only: set app_port too")
        self._check_payload_memory()
        if self.fifo and self.priorities:
            raise SettingsError(
                "priorities true with fifo true: a message group's order would not hold across the levels' queues; "
                "turn priorities off, or use a standard queue"
            )
        if self.fifo and self.batch_size > limits.LAMBDA_SQS_MAX_BATCH_SIZE_FIFO:
            raise SettingsError(
                f"batch_size must be 1..{limits.LAMBDA_SQS_MAX_BATCH_SIZE_FIFO} for a FIFO queue, got {self.batch_size}"
            )
        if self.batch_size > limits.LAMBDA_SQS_MAX_BATCH_SIZE_WITHOUT_WINDOW and self.max_batching_window < 1:
            raise SettingsError(
                f"batch_size above {limits.LAMBDA_SQS_MAX_BATCH_SIZE_WITHOUT_WINDOW} needs max_batching_window >= 1, "
                f"got batch_size {self.batch_size} with max_batching_window {self.max_batching_window}"
            )


    def _check_payload_memory(self) -> None:
        """Raise SettingsError when a worker could not hold a body of payload_max_bytes (bytes and text at once)."""
        if not self.large_payloads:
            return
        memories = {"memory_size": self.memory_size}
        if self.container_worker:
            memories["container_memory_mb"] = self.container_memory_mb
        for name, megabytes in memories.items():
            room = megabytes * 1024 * 1024 // PAYLOAD_MEMORY_SHARE
            if self.payload_max_bytes > room:
                raise SettingsError(
                    f"payload_max_bytes {self.payload_max_bytes} is over a quarter of {name} {megabytes} MB ({room} bytes): "
                    f"a worker holds an offloaded body as bytes and as text at once; lower payload_max_bytes to {room} "
                    f"or raise {name} to {-(-self.payload_max_bytes * PAYLOAD_MEMORY_SHARE // (1024 * 1024))}"
                )


# Receives the redrive policy allows beyond max_retries; see Settings.redrive_max_receive_count.
REDRIVE_MARGIN_RECEIVES = 3


def eb_option(name: str) -> str:
    """The Elastic Beanstalk option the setting ``name`` takes the place of, or ``""`` when it has none.

    Examples
    --------
    >>> eb_option("http_path"), eb_option("delay_shards")
    ('HttpPath', '')
    """
    rule = _RANGES.get(name)
    if rule is not None:
        return rule.eb_option or ""
    field = next((f for f in dataclasses.fields(Settings) if f.name == name), None)
    return (field.metadata.get("eb_option") if field is not None else None) or ""


def _describe_sizes(sizes: tuple[int, ...]) -> str:
    """``512, 1024, 2048`` or, for an even run, ``1024..4096 in steps of 1024``."""
    steps = {b - a for a, b in pairwise(sizes)}
    if len(sizes) > 3 and len(steps) == 1:
        return f"{sizes[0]}..{sizes[-1]} in steps of {steps.pop()}"
    return ", ".join(map(str, sizes))


def _parse_environment_value(name: str, kind: Any, raw: str) -> Any:
    """Turn one environment string into the field's type, or say which variable is wrong."""
    if kind in (int, "int"):
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{setting_variable(name)} must be a whole number, got {raw!r}") from None
    if kind in (bool, "bool"):
        if raw.lower() not in ("true", "false"):
            raise SettingsError(f"{setting_variable(name)} must be 'true' or 'false', got {raw!r}")
        return raw.lower() == "true"
    return raw


def _format_environment_value(value: Any) -> str:
    """Format one setting for an environment variable."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _is_module_list(value: object) -> bool:
    """Whether ``value`` is ``module[,module...]``, each module dotted identifiers that are not keywords."""
    return isinstance(value, str) and all(
        part.isidentifier() and not keyword.iskeyword(part) for module in value.split(",") for part in module.split(".")
    )


def _is_app_reference(value: str) -> bool:
    """Whether ``value`` is ``package.module:attribute`` (dotted identifiers on both sides of one colon)."""
    module, colon, attribute = value.partition(":")
    return bool(colon) and _is_module_list(module) and "," not in module and all(
        part.isidentifier() and not keyword.iskeyword(part) for part in attribute.split(".")
    )
