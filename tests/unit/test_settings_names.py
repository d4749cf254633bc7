"""Setting names are a public contract: a cdk.json key and its WORKER_TIER_* variable never change.

The snapshot below is literal on purpose: deployed stacks, cdk.json files and running functions
carry these names, so a rename must fail here rather than be followed by a derived list. Add a
row for a new setting; never edit or remove one.
"""

from __future__ import annotations

import dataclasses

import pytest

from worker_tier.core.settings import Settings, SettingsError

# cdk.json key (context.worker_tier) -> the environment variable that carries it into a function.
NAMES = {
    "app": "WORKER_TIER_APP",
    "app_health_path": "WORKER_TIER_APP_HEALTH_PATH",
    "app_image": "WORKER_TIER_APP_IMAGE",
    "app_port": "WORKER_TIER_APP_PORT",
    "app_route_by_path": "WORKER_TIER_APP_ROUTE_BY_PATH",
    "app_signing_secret_arn": "WORKER_TIER_APP_SIGNING_SECRET_ARN",
    "avg_processing_seconds": "WORKER_TIER_AVG_PROCESSING_SECONDS",
    "batch_size": "WORKER_TIER_BATCH_SIZE",
    "connect_timeout": "WORKER_TIER_CONNECT_TIMEOUT",
    "container_base_image": "WORKER_TIER_CONTAINER_BASE_IMAGE",
    "container_concurrency": "WORKER_TIER_CONTAINER_CONCURRENCY",
    "container_cpu": "WORKER_TIER_CONTAINER_CPU",
    "container_max_tasks": "WORKER_TIER_CONTAINER_MAX_TASKS",
    "container_memory_mb": "WORKER_TIER_CONTAINER_MEMORY_MB",
    "container_min_tasks": "WORKER_TIER_CONTAINER_MIN_TASKS",
    "container_subnets": "WORKER_TIER_CONTAINER_SUBNETS",
    "priorities": "WORKER_TIER_PRIORITIES",
    "container_worker": "WORKER_TIER_CONTAINER_WORKER",
    "delay_shards": "WORKER_TIER_DELAY_SHARDS",
    "dispatch_groups": "WORKER_TIER_DISPATCH_GROUPS",
    "error_visibility_timeout": "WORKER_TIER_ERROR_VISIBILITY_TIMEOUT",
    "fifo": "WORKER_TIER_FIFO",
    "heartbeat": "WORKER_TIER_HEARTBEAT",
    "heartbeat_interval": "WORKER_TIER_HEARTBEAT_INTERVAL",
    "http_connections": "WORKER_TIER_HTTP_CONNECTIONS",
    "http_path": "WORKER_TIER_HTTP_PATH",
    "inactivity_timeout": "WORKER_TIER_INACTIVITY_TIMEOUT",
    "max_backoff": "WORKER_TIER_MAX_BACKOFF",
    "max_batching_window": "WORKER_TIER_MAX_BATCHING_WINDOW",
    "max_retries": "WORKER_TIER_MAX_RETRIES",
    "memory_size": "WORKER_TIER_MEMORY_SIZE",
    "mime_type": "WORKER_TIER_MIME_TYPE",
    "large_payloads": "WORKER_TIER_LARGE_PAYLOADS",
    "oldest_message_alarm": "WORKER_TIER_OLDEST_MESSAGE_ALARM",
    "payload_access_log_bucket": "WORKER_TIER_PAYLOAD_ACCESS_LOG_BUCKET",
    "payload_kms": "WORKER_TIER_PAYLOAD_KMS",
    "payload_max_bytes": "WORKER_TIER_PAYLOAD_MAX_BYTES",
    "job_retention": "WORKER_TIER_JOB_RETENTION",
    "job_result_max_bytes": "WORKER_TIER_JOB_RESULT_MAX_BYTES",
    "payload_threshold": "WORKER_TIER_PAYLOAD_THRESHOLD",
    "retention_period": "WORKER_TIER_RETENTION_PERIOD",
    "target_latency_seconds": "WORKER_TIER_TARGET_LATENCY_SECONDS",
    "task_modules": "WORKER_TIER_TASK_MODULES",
    "middleware": "WORKER_TIER_MIDDLEWARE",
    "timeout_margin": "WORKER_TIER_TIMEOUT_MARGIN",
    "via_sns": "WORKER_TIER_VIA_SNS",
    "visibility_timeout": "WORKER_TIER_VISIBILITY_TIMEOUT",
}
# Valid for no setting: not a number, not true/false, not a path, MIME type, module, app, ARN or image.
INVALID = "not valid!"


def test_the_cdk_json_keys_and_variables_are_the_snapshot():
    # GIVEN the default settings
    settings = Settings()
    # WHEN each field is paired with the variable to_environment() writes for it
    declared = dict(zip((f.name for f in dataclasses.fields(Settings)), settings.to_environment(), strict=True))
    # THEN keys and variables are exactly the snapshot: nothing renamed, nothing missing, nothing unlisted
    assert declared == NAMES


@pytest.mark.parametrize("key", sorted(NAMES))
def test_each_cdk_json_key_is_read_as_its_setting(key):
    # GIVEN cdk.json's worker_tier context with an invalid value under the key
    # WHEN it is read  THEN the setting of that name checks it, and the error names it first
    with pytest.raises(SettingsError) as error:
        Settings.from_mapping({key: INVALID})
    assert str(error.value).startswith(f"{key} must be ")


@pytest.mark.parametrize(("key", "variable"), sorted(NAMES.items()))
def test_each_variable_is_read_as_its_setting(key, variable):
    # GIVEN a function's environment with an invalid value in the variable
    # WHEN the settings are read from it  THEN the variable reaches its setting, and the error names one of them
    with pytest.raises(SettingsError) as error:
        Settings.from_environment({variable: INVALID})
    assert str(error.value).split(" ")[0] in (key, variable)
