"""Settings validation: every bad value names the setting, the value and the rule."""

import pytest

from worker_tier.core.settings import Settings, SettingsError

TASK_MODULES_RULE = ("task_modules must be comma-separated Python module names like 'tasks,billing.tasks', each "
                     "dotted part a Python identifier that is not a keyword, got ")


def test_defaults_are_elastic_beanstalks():
    # GIVEN / WHEN no settings
    settings = Settings()
    # THEN the EB worker defaults apply
    assert (settings.visibility_timeout, settings.error_visibility_timeout, settings.max_retries) == (300, 2, 10)
    assert (settings.http_connections, settings.inactivity_timeout, settings.retention_period) == (50, 299, 345600)
    assert (settings.http_path, settings.mime_type) == ("/", "application/json")


@pytest.mark.parametrize(
    "values, message",
    [
        ({"visibility_timeout": -1}, "visibility_timeout must be 0..43200 (EB VisibilityTimeout), got -1"),
        ({"visibility_timeout": 43201}, "visibility_timeout must be 0..43200 (EB VisibilityTimeout), got 43201"),
        ({"error_visibility_timeout": 50000}, "error_visibility_timeout must be 0..43200 (EB ErrorVisibilityTimeout), got 50000"),
        ({"max_retries": 0}, "max_retries must be 1..100 (EB MaxRetries), got 0"),
        ({"max_retries": 101}, "max_retries must be 1..100 (EB MaxRetries), got 101"),
        ({"max_retries": "3"}, "max_retries must be a whole number 1..100 (EB MaxRetries), got '3'"),
        ({"max_retries": True}, "max_retries must be a whole number 1..100 (EB MaxRetries), got True"),
        ({"http_connections": 1}, "http_connections must be 2..1000 (EB HttpConnections), got 1"),
        ({"http_connections": 1001}, "http_connections must be 2..1000 (EB HttpConnections), got 1001"),
        ({"inactivity_timeout": 0}, "inactivity_timeout must be 1..900 (EB InactivityTimeout), got 0"),
        ({"inactivity_timeout": 901, "visibility_timeout": 1000}, "inactivity_timeout must be 1..900 (EB InactivityTimeout), got 901"),
        ({"retention_period": 59}, "retention_period must be 60..1209600 (EB RetentionPeriod), got 59"),
        ({"retention_period": 1209601}, "retention_period must be 60..1209600 (EB RetentionPeriod), got 1209601"),
        ({"max_backoff": 0}, "max_backoff must be 1..43200, got 0"),
        ({"batch_size": 0}, "batch_size must be 1..10000, got 0"),
        ({"max_batching_window": 301}, "max_batching_window must be 0..300, got 301"),
        ({"memory_size": 127}, "memory_size must be 128..10240, got 127"),
        ({"timeout_margin": 0}, "timeout_margin must be 1..900, got 0"),
        ({"oldest_message_alarm": 59}, "oldest_message_alarm must be 60..1209600, got 59"),
        ({"http_path": "jobs"}, "http_path must be a path starting with '/' of visible ASCII characters, no spaces (EB HttpPath; an app receives it as its request target), got 'jobs'"),
        ({"mime_type": "json"}, "mime_type must be a MIME type like 'application/json' (EB MimeType), got 'json'"),
        ({"fifo": "yes"}, "fifo must be true or false, got 'yes'"),
        *[({"task_modules": value}, TASK_MODULES_RULE + repr(value))
          for value in ("tasks;more", "tasks.", "tasks..x", "tasks.2x", "tasks\n", "tasks, billing", ".tasks", "tasks.class")],
        (
            {"visibility_timeout": 100},
            "visibility_timeout must be >= inactivity_timeout + max_batching_window (a message stays hidden while its "
            "batch gathers and while the function runs) so it is not handed to a second worker while the first still "
            "runs it, got visibility_timeout 100 < inactivity_timeout 299 + max_batching_window 0",
        ),
        (
            {"container_subnets": "dmz"},
            "container_subnets must be one of 'private', 'public', got 'dmz'",
        ),
        (
            {"container_base_image": "Python:3.13 slim"},
            "container_base_image must be an image reference like 'registry/repository:tag@sha256:<64 hex digits>', "
            "got 'Python:3.13 slim'",
        ),
        ({"timeout_margin": 299}, "timeout_margin must be below inactivity_timeout (299), got 299"),
        ({"fifo": True, "batch_size": 11, "max_batching_window": 1}, "batch_size must be 1..10 for a FIFO queue, got 11"),
        (
            {"heartbeat_interval": 295},
            "visibility_timeout must be >= heartbeat_interval + 10 s so a held message stays invisible from one beat "
            "to the next, got 300 < 305",
        ),
        (
            {"target_latency_seconds": 30, "avg_processing_seconds": 60},
            "target_latency_seconds must be >= avg_processing_seconds (a backlog of at least one task per worker), got 30 < 60",
        ),
        ({"container_min_tasks": 5, "container_max_tasks": 2}, "container_max_tasks must be >= container_min_tasks, got 2 < 5"),
        ({"container_concurrency": 0}, "container_concurrency must be 1..64, got 0"),
        ({"container_worker": "yes"}, "container_worker must be true or false, got 'yes'"),
        (
            {"batch_size": 100},
            "batch_size above 10 needs max_batching_window >= 1, got batch_size 100 with max_batching_window 0",
        ),
    ],
)
def test_every_bad_value_is_refused_with_its_rule(values, message):
    # GIVEN a bad value  WHEN settings are built  THEN the error names setting, rule and value
    with pytest.raises(SettingsError) as error:
        Settings.from_mapping(values)
    assert str(error.value) == message


def test_unknown_setting_is_refused_naming_it():
    with pytest.raises(SettingsError, match=r"^unknown setting 'max_retry' \(did you mean 'max_retries'\?\); known settings are: app, app_health_path, .*avg_processing_seconds, batch_size, "):
        Settings.from_mapping({"max_retry": 3})


def test_settings_must_be_an_object():
    with pytest.raises(SettingsError, match=r"^worker_tier settings must be a JSON object, got \[1\]$"):
        Settings.from_mapping([1])


def test_environment_round_trip():
    # GIVEN settings with non-defaults
    settings = Settings(max_retries=4, fifo=True, http_path="/jobs", task_modules="a,b.c")
    # WHEN carried through environment variables
    environment = settings.to_environment()
    # THEN they come back equal
    assert environment["WORKER_TIER_MAX_RETRIES"] == "4"
    assert environment["WORKER_TIER_FIFO"] == "true"
    assert Settings.from_environment(environment) == settings


@pytest.mark.parametrize(
    "name, raw, message",
    [
        ("WORKER_TIER_MAX_RETRIES", "ten", "WORKER_TIER_MAX_RETRIES must be a whole number, got 'ten'"),
        ("WORKER_TIER_FIFO", "1", "WORKER_TIER_FIFO must be 'true' or 'false', got '1'"),
    ],
)
def test_bad_environment_values_name_the_variable(name, raw, message):
    with pytest.raises(SettingsError) as error:
        Settings.from_environment({name: raw})
    assert str(error.value) == message


def test_redrive_backstop_sits_above_max_retries():
    # The worker dead-letters on the max_retries-th receive; SQS's redrive only after more.
    assert Settings(max_retries=5).redrive_max_receive_count == 8


def test_backlog_target_is_latency_over_processing_time():
    # 10 s acceptable latency / 0.1 s... in whole seconds: 600 s / 60 s = 10 messages per worker
    assert Settings(target_latency_seconds=600, avg_processing_seconds=60).backlog_per_task_target == 10


def test_visibility_must_cover_the_batching_window_and_the_function_timeout():
    # GIVEN the edge case: the function may run 299 s after a batch gathered for up to 300 s
    values = {"visibility_timeout": 300, "inactivity_timeout": 299, "max_batching_window": 300}
    # WHEN settings are built  THEN they are refused, naming all three values and the reason
    with pytest.raises(SettingsError) as error:
        Settings.from_mapping(values)
    assert str(error.value) == (
        "visibility_timeout must be >= inactivity_timeout + max_batching_window (a message stays hidden while its "
        "batch gathers and while the function runs) so it is not handed to a second worker while the first still "
        "runs it, got visibility_timeout 300 < inactivity_timeout 299 + max_batching_window 300"
    )
    # AND exactly enough visibility is accepted
    assert Settings.from_mapping({**values, "visibility_timeout": 599}).visibility_timeout == 599


@pytest.mark.parametrize(
    "values, advised",
    [
        ({"visibility_timeout": 600, "inactivity_timeout": 299}, 1794),
        ({"visibility_timeout": 300, "inactivity_timeout": 200}, 1200),
    ],
)
def test_visibility_below_six_function_timeouts_is_advised_against(values, advised):
    # GIVEN a visibility AWS accepts but advises against  WHEN advisories are asked for
    [advice] = Settings.from_mapping(values).advisories()
    # THEN the advice names the values and cites AWS's page
    assert advice == (
        f"visibility_timeout {values['visibility_timeout']} is below the {advised} s AWS advises (6 x inactivity_timeout "
        f"{values['inactivity_timeout']}), so a throttled batch may show again and count a receive before it runs: "
        "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html"
    )


@pytest.mark.parametrize(
    "values",
    [{}, {"visibility_timeout": 1794, "inactivity_timeout": 299}, {"visibility_timeout": 120, "inactivity_timeout": 20}],
)
def test_eb_defaults_and_advised_visibility_need_no_advice(values):
    # GIVEN EB's own pair (kept for compatibility), or a visibility of at least 6 function timeouts
    # WHEN / THEN nothing is advised
    assert Settings.from_mapping(values).advisories() == []


def test_container_worker_defaults_to_private_subnets_and_a_named_base_image():
    # GIVEN / WHEN no settings
    settings = Settings()
    # THEN tasks get no public IP by default, and the base image is the named default (a tag: pin yours by digest)
    assert settings.container_subnets == "private"
    assert settings.container_base_image == "public.ecr.aws/docker/library/python:3.14-slim"


@pytest.mark.parametrize(
    "image",
    [
        "public.ecr.aws/docker/library/python:3.14-slim",
        "python:3.14-slim@sha256:" + "0" * 64,
        "123456789012.dkr.ecr.eu-west-1.amazonaws.com/base/python:3.13",
        "localhost:5000/python",
    ],
)
def test_container_base_image_accepts_tags_and_digests(image):
    assert Settings(container_base_image=image).container_base_image == image


@pytest.mark.parametrize(
    "values, message",
    [
        (
            {"container_cpu": 300},
            "container_cpu must be one of Fargate's cpu values 256, 512, 1024, 2048, 4096, 8192, 16384, "
            "got 300 (with container_memory_mb 2048)",
        ),
        (
            {"container_cpu": 256, "container_memory_mb": 30000},
            "container_memory_mb 30000 is not a Fargate size for container_cpu 256; it allows 512, 1024, 2048 MB",
        ),
        (
            {"container_cpu": 512, "container_memory_mb": 1536},
            "container_memory_mb 1536 is not a Fargate size for container_cpu 512; it allows 1024..4096 in steps of 1024 MB",
        ),
        (
            {"container_cpu": 8192, "container_memory_mb": 17408},
            "container_memory_mb 17408 is not a Fargate size for container_cpu 8192; "
            "it allows 16384..61440 in steps of 4096 MB",
        ),
    ],
)
def test_a_cpu_and_memory_pair_fargate_refuses_is_an_error_naming_both(values, message):
    # GIVEN a container size that is no Fargate task size
    # WHEN the settings are built  THEN the error names both values and what the cpu allows
    with pytest.raises(SettingsError) as error:
        Settings.from_mapping(values)
    assert str(error.value) == message


@pytest.mark.parametrize("cpu, memory", [(256, 512), (256, 2048), (4096, 30720), (16384, 122880), (1024, 2048)])
def test_every_fargate_task_size_is_accepted(cpu, memory):
    # GIVEN / WHEN a pair from Fargate's table
    settings = Settings.from_mapping({"container_cpu": cpu, "container_memory_mb": memory})
    # THEN it is kept
    assert (settings.container_cpu, settings.container_memory_mb) == (cpu, memory)


def test_task_modules_may_be_empty_only_when_an_app_takes_every_message():
    # GIVEN an app-only team  WHEN it names no task modules  THEN that is allowed with app or app_port, refused otherwise
    assert Settings.from_mapping({"task_modules": "", "app": "webapp:app"}).task_modules == ""
    assert Settings.from_mapping({"task_modules": "", "app_port": 8080, "container_worker": True}).task_modules == ""
    with pytest.raises(SettingsError, match=r"^task_modules is empty: name the modules of your @task functions, or set app"):
        Settings.from_mapping({"task_modules": ""})


@pytest.mark.parametrize("path", ["/my report", "/räte", "/a\nb"])
def test_a_path_an_app_cannot_receive_as_its_request_target_is_refused(path):
    # GIVEN an http_path with a space, a non-ASCII letter or a control character  THEN synth refuses it, naming it
    with pytest.raises(SettingsError, match=r"^http_path must be a path starting with '/' of visible ASCII characters"):
        Settings.from_mapping({"http_path": path})
