"""TaskCode.from_directories: a task directory is deployed under its own name, so the name must import as itself."""

from __future__ import annotations

import pytest

from worker_tier_cdk.code import CONTAINER_REQUIREMENTS, DOCKER_DIR, RUNTIME_IMPORT_NAMES, TaskCode, TaskCodeError
from worker_tier_cdk.requirements import PIP_PLATFORM_BY_ARCHITECTURE, lambda_target, runtime_pins
from worker_tier_cdk.runtime import LAMBDA_ARCHITECTURE, POWERTOOLS_VERSION, PYTHON_VERSION

SHADOWING = ("must not be a standard-library module's name, which it would shadow")
DEPENDENCY = f"must not be a package the runtime imports ({', '.join(sorted(RUNTIME_IMPORT_NAMES))})"
NOT_IDENTIFIER = "must be a Python identifier (letters, digits and underscores, not first a digit, not a keyword)"


@pytest.mark.parametrize(
    "name, rule",
    [
        ("json", SHADOWING),
        ("logging", SHADOWING),
        ("boto3", DEPENDENCY),
        ("botocore", DEPENDENCY),
        ("aws_lambda_powertools", DEPENDENCY),
        ("dateutil", DEPENDENCY),
        ("typing_extensions", DEPENDENCY),
        ("worker_tier", "must not start with 'worker_tier', the runtime's own name"),
        ("worker_tier_cdk", "must not start with 'worker_tier', the runtime's own name"),
        ("my-tasks", NOT_IDENTIFIER),
        ("2tasks", NOT_IDENTIFIER),
        ("class", NOT_IDENTIFIER),
    ],
)
def test_a_directory_whose_name_would_not_import_as_itself_is_refused(tmp_path, name, rule):
    # GIVEN a task directory named like a module the runtime imports, or not importable at all
    (tmp_path / name).mkdir()
    # WHEN it is named as task code  THEN a TaskCodeError names the directory and the rule
    with pytest.raises(TaskCodeError) as error:
        TaskCode.from_directories(tmp_path / name)
    assert str(error.value) == (f"task code directory {str(tmp_path / name)!r} is deployed as the package {name!r}, "
                                f"so its name {rule}; rename the directory")


def test_a_symlinked_directory_keeps_its_links_name(tmp_path):
    # GIVEN a link 'linked' to a directory 'realdir'
    (tmp_path / "realdir").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "realdir")
    # WHEN it is named as task code  THEN it deploys as 'linked', the name task_modules uses
    assert TaskCode.from_directories(tmp_path / "linked").directories == (tmp_path / "linked",)


def test_a_relative_directory_is_made_absolute(tmp_path, monkeypatch):
    # GIVEN ./tasks in the current directory  WHEN named relatively  THEN it is kept as an absolute path
    (tmp_path / "tasks").mkdir()
    monkeypatch.chdir(tmp_path)
    assert TaskCode.from_directories("tasks").directories == (tmp_path / "tasks",)


# The task code's own requirements (TaskCode.from_directories(..., requirements=...)): checked when named.

RUNTIME_PINS = runtime_pins(DOCKER_DIR / CONTAINER_REQUIREMENTS)


def _requirements(tmp_path, text: str):
    (tmp_path / "webapp").mkdir(exist_ok=True)
    (tmp_path / "requirements.txt").write_text(text)
    return tmp_path / "requirements.txt"


def test_the_runtime_pins_are_the_images_boto3_and_powertools():
    # GIVEN the image's requirements  WHEN read as the runtime's pins  THEN they pin what the runtime ships
    assert set(RUNTIME_PINS) == {"boto3", "aws-lambda-powertools"}
    assert RUNTIME_PINS["aws-lambda-powertools"] == POWERTOOLS_VERSION


@pytest.mark.parametrize("line, name, version", [
    ("boto3==1.20.0", "boto3", "1.20.0"),
    ("AWS_Lambda.Powertools[tracer] == 2.0.0", "aws-lambda-powertools", "2.0.0"),
    ("boto3===1.20.0 ; python_version >= '3.11'", "boto3", "1.20.0"),
])
def test_a_requirement_pinning_a_runtime_package_to_another_version_is_refused(tmp_path, line, name, version):
    # GIVEN a requirements file pinning boto3 or Powertools to a version the runtime does not ship
    requirements = _requirements(tmp_path, f"flask==3.1.0\n{line}\n")
    # WHEN it is named as task code's requirements  THEN a TaskCodeError names the line, the package and both versions
    with pytest.raises(TaskCodeError) as error:
        TaskCode.from_directories(tmp_path / "webapp", requirements=requirements)
    assert str(error.value) == (f"{requirements}:2: {line!r} pins {name} {version}, but the runtime ships {name} "
                                f"{RUNTIME_PINS[name]} and imports its own; pin {name}=={RUNTIME_PINS[name]} or remove the pin")


@pytest.mark.parametrize("name", ["botocore", "s3transfer"])
def test_a_pin_of_what_follows_boto3_is_refused(tmp_path, name):
    # GIVEN a requirements file pinning botocore or s3transfer, whose version the runtime's boto3 pin decides
    requirements = _requirements(tmp_path, f"{name}==1.0.0\n")
    # WHEN it is named  THEN a TaskCodeError says why the pin cannot hold
    with pytest.raises(TaskCodeError) as error:
        TaskCode.from_directories(tmp_path / "webapp", requirements=requirements)
    assert str(error.value) == (f"{requirements}:1: '{name}==1.0.0' pins {name}, which the runtime ships at the version "
                                f"its boto3 {RUNTIME_PINS['boto3']} requires; remove the pin")


@pytest.mark.parametrize("line", ["-r base.txt", "--requirement=base.txt", "-c constraints.txt", "-e ."])
def test_an_option_the_image_cannot_follow_is_refused(tmp_path, line):
    # GIVEN a requirements file that includes another file or an editable install
    requirements = _requirements(tmp_path, f"{line}\n")
    # WHEN it is named  THEN a TaskCodeError says the image copies this one file
    with pytest.raises(TaskCodeError) as error:
        TaskCode.from_directories(tmp_path / "webapp", requirements=requirements)
    assert str(error.value) == (f"{requirements}:1: {line!r} is not supported: the container image copies this one "
                                "file and installs nothing editable; list the requirements in it")


def test_the_runtimes_own_pins_ranges_and_other_packages_are_accepted(tmp_path):
    # GIVEN the runtime's exact pins, an unpinned boto3, a range, options and comments
    text = (f"# the app's\n--find-links wheels\nboto3=={RUNTIME_PINS['boto3']}\naws-lambda-powertools\n"
            "flask>=3,<4  # web\ndjango==5.2 --hash=sha256:00\n")
    requirements = _requirements(tmp_path, text)
    # WHEN it is named  THEN it is kept, absolute
    assert TaskCode.from_directories(tmp_path / "webapp", requirements=requirements).requirements == requirements


def test_a_missing_requirements_file_is_refused(tmp_path):
    # GIVEN no requirements file  WHEN one is named  THEN a TaskCodeError names the path
    (tmp_path / "webapp").mkdir()
    with pytest.raises(TaskCodeError) as error:
        TaskCode.from_directories(tmp_path / "webapp", requirements=tmp_path / "nope.txt")
    assert str(error.value) == f"requirements file {str(tmp_path / 'nope.txt')!r} does not exist or is not a file"


def test_the_install_targets_the_lambda_workers_architecture_and_python():
    # GIVEN the Lambda worker's architecture and runtime  THEN pip installs for exactly those
    platform, python_version = lambda_target()
    assert platform == PIP_PLATFORM_BY_ARCHITECTURE[LAMBDA_ARCHITECTURE.name] == "manylinux2014_aarch64"
    assert python_version == PYTHON_VERSION


def test_a_middleware_module_must_be_deployed_unless_it_is_worker_tiers_own(tmp_path):
    # GIVEN task code with a package "tasks" holding audit.py
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "__init__.py").write_text("")
    (tmp_path / "tasks" / "audit.py").write_text("")
    code = TaskCode.from_directories(str(tmp_path / "tasks"))
    # WHEN the middleware setting names it and Worker Tier's tracing  THEN it passes
    code.check_middleware("tasks.audit:Audit, worker_tier.pipeline.tracing:TracingMiddleware")
    # AND a module no directory deploys is refused, naming the setting and the fix
    with pytest.raises(TaskCodeError) as error:
        code.check_middleware("billing.audit:Audit")
    assert str(error.value).startswith("middleware names 'billing.audit', but no task code directory is named 'billing'")
