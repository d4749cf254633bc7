"""An Elastic Beanstalk worker app in the stack: in-process (``app``) and HTTP forwarding (``app_port``).

In-process: synth checks that the app's module is deployed, and the app's requirements reach the
worker function's asset (installed for Lambda's platform from a local wheel directory, so no network)
and the image's build context; no other function gets them. Forwarding: the container worker reads
the work queue, the Lambda worker does not, the app's image runs beside it, and the task role may read
the signing secret and nothing wider.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Annotations, Match, Template

from tests.support.synth import TASK_CODE, actions_of
from tests.support.entry_modules import CONTAINER_ENTRY_MODULE, LAMBDA_WORKER_MODULE, resources, variables_read
from worker_tier.core import contract
from worker_tier.core.settings import Settings
from worker_tier_cdk.code import APP_REQUIREMENTS, TaskCode, TaskCodeError
from worker_tier_cdk.container_worker import APP_CONTAINER, WORKER_CONTAINER
from worker_tier_cdk.grants import PARAMETER_READ_ACTION, SECRET_READ_ACTION, grant_signing_secret
from worker_tier_cdk.nag import add_checks
from worker_tier_cdk.stack import WorkerTierStack

WHEEL_NAME = "tinydep"
WHEEL_VERSION = "0.1"
APP_SETTINGS = Settings(app="webapp.web:app", task_modules="webapp", container_worker=True)
APP_PORT = 8080
PARTIAL_SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:app/signing"
COMPLETE_SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:app/signing-AbC123"
PARAMETER_ARN = "arn:aws:ssm:eu-west-1:123456789012:parameter/app/signing"
APP_IMAGE = "public.ecr.aws/docker/library/nginx:1.27"
FORWARDING_SETTINGS = Settings(container_worker=True, app_port=APP_PORT, app_image=APP_IMAGE, app_health_path="/healthz",
                               app_signing_secret_arn=PARTIAL_SECRET_ARN)


def build_wheel(directory: Path, name: str = WHEEL_NAME, version: str = WHEEL_VERSION) -> Path:
    """A pure-Python wheel of one package ``name`` whose ``VALUE`` is 42, written by hand (no build backend)."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
              for path, data in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,", ""]).encode()
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


def app_project(root: Path) -> TaskCode:
    """A directory ``webapp`` with ``web.py`` and a requirements file served from a local wheel directory."""
    (root / "webapp").mkdir(parents=True)
    (root / "webapp" / "__init__.py").write_text("")
    (root / "webapp" / "web.py").write_text("import tinydep\n\napp = object()\n")
    build_wheel(root / "wheels")
    (root / "requirements.txt").write_text(f"--no-index\n--find-links wheels\n{WHEEL_NAME}=={WHEEL_VERSION}\n")
    return TaskCode.from_directories(root / "webapp", requirements=root / "requirements.txt")


def synth_stack(settings: Settings, task_code: TaskCode, outdir: Path) -> tuple[WorkerTierStack, Template]:
    """The stack with cdk-nag (a finding fails synth) and its template."""
    app = cdk.App(outdir=str(outdir))
    stack = WorkerTierStack(app, "WorkerTier", settings=settings, task_code=task_code, cron_entries=[])
    add_checks(app)
    app.synth()
    return stack, Template.from_stack(stack)


@pytest.fixture(scope="session")
def app_mode(tmp_path_factory) -> tuple[WorkerTierStack, Template, Path]:
    outdir = tmp_path_factory.mktemp("app-mode-out")
    stack, template = synth_stack(APP_SETTINGS, app_project(tmp_path_factory.mktemp("app-mode")), outdir)
    return stack, template, outdir


@pytest.fixture(scope="session")
def forwarding(tmp_path_factory) -> tuple[WorkerTierStack, Template]:
    return synth_stack(FORWARDING_SETTINGS, TASK_CODE, tmp_path_factory.mktemp("forwarding"))


def function_asset(template: Template, outdir: Path, logical_id: str) -> Path:
    """The staged directory of one function's code: ``asset.<hash>`` in the cloud assembly."""
    key = template.find_resources("AWS::Lambda::Function")[logical_id]["Properties"]["Code"]["S3Key"]
    return outdir / f"asset.{key.removesuffix('.zip')}"


def task_definition(template: Template) -> dict:
    [definition] = template.find_resources("AWS::ECS::TaskDefinition").values()
    return definition["Properties"]


def containers(template: Template) -> dict[str, dict]:
    return {c["Name"]: c for c in task_definition(template)["ContainerDefinitions"]}


def logical_id(stack: WorkerTierStack, construct: object) -> str:
    return stack.get_logical_id(construct.node.default_child)  # type: ignore[attr-defined]


def worker_environments(stack: WorkerTierStack, template: Template) -> tuple[dict, dict]:
    """(the Lambda worker's variables, the worker container's variables); the app's container is not ours to read."""
    function = template.find_resources("AWS::Lambda::Function")[logical_id(stack, stack.worker.function)]
    container = containers(template)[WORKER_CONTAINER]
    return (function["Properties"]["Environment"]["Variables"],
            {v["Name"]: v["Value"] for v in container.get("Environment", [])})


def task_role_statements(stack: WorkerTierStack, template: Template) -> list[dict]:
    """Every statement of the container worker's task role's policies."""
    role = logical_id(stack, stack.container_worker.service.task_definition.task_role)  # type: ignore[union-attr]
    return [statement for policy in template.find_resources("AWS::IAM::Policy").values()
            if {"Ref": role} in policy["Properties"].get("Roles", [])
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]]


# In-process app


def test_the_worker_functions_asset_holds_the_app_and_its_requirements(app_mode):
    # GIVEN a stack whose app 'webapp.web:app' needs tinydep, served from a local wheel directory
    stack, template, outdir = app_mode
    # WHEN the worker function's staged asset is read
    asset = function_asset(template, outdir, logical_id(stack, stack.worker.function))
    # THEN it holds the runtime, the app's package and the installed requirement, at its root
    assert (asset / "webapp" / "web.py").is_file()
    assert (asset / WHEEL_NAME / "__init__.py").read_text() == "VALUE = 42\n"
    assert (asset / f"{WHEEL_NAME}-{WHEEL_VERSION}.dist-info" / "METADATA").is_file()
    assert (asset / "worker_tier" / "worker" / "batch.py").is_file()


def test_no_other_function_gets_the_apps_requirements(app_mode):
    # GIVEN the app-mode stack  WHEN every function other than the worker is read
    stack, template, outdir = app_mode
    worker = logical_id(stack, stack.worker.function)
    others = [name for name in template.find_resources("AWS::Lambda::Function") if name != worker]
    assert others, "the stack has the delay dispatcher and its safety net besides the worker"
    # THEN none has the requirement or the app's code
    for name in others:
        asset = function_asset(template, outdir, name)
        assert not (asset / WHEEL_NAME).exists() and not (asset / "webapp").exists(), name


def test_the_images_build_context_installs_the_same_requirements_file(app_mode, tmp_path_factory):
    # GIVEN the app-mode stack with the container worker
    stack, template, outdir = app_mode
    image = containers(template)[WORKER_CONTAINER]["Image"]["Fn::Sub"]
    context = outdir / f"asset.{image.rpartition(':')[2]}"
    # THEN the build context holds the requirements file as the Dockerfile's app-requirements.txt
    requirements = stack.task_code.requirements
    assert requirements is not None
    assert (context / APP_REQUIREMENTS).read_bytes() == requirements.read_bytes()
    assert f"-r /tmp/{APP_REQUIREMENTS}" in (context / "worker.Dockerfile").read_text()


def test_the_apps_setting_reaches_the_worker_and_the_container(app_mode):
    # GIVEN the app-mode stack  THEN both workers are told the app, and the Lambda worker reads the work queue
    _, template, _ = app_mode
    variable = contract.setting_variable("app")
    told = {r.entry_module: r.environment.get(variable) for r in resources(template)}
    assert told[LAMBDA_WORKER_MODULE] == told[CONTAINER_ENTRY_MODULE] == APP_SETTINGS.app
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 2)  # the work queue's, and delay recovery's stream


@pytest.mark.parametrize("app, expected", [
    ("webapp.missing:app", "webapp/missing.py or webapp/missing/__init__.py"),
    ("other.web:app", None),
])
def test_an_app_whose_module_is_not_deployed_fails_synth(tmp_path, app, expected):
    # GIVEN task code that deploys 'webapp' (webapp/web.py) and an app naming a module it does not deploy
    (tmp_path / "webapp").mkdir()
    (tmp_path / "webapp" / "__init__.py").write_text("")
    (tmp_path / "webapp" / "web.py").write_text("app = object()\n")
    task_code = TaskCode.from_directories(tmp_path / "webapp")
    settings = Settings(app=app, task_modules="webapp")
    # WHEN the stack is built  THEN a TaskCodeError names the setting, the module and the rule
    with pytest.raises(TaskCodeError) as error:
        WorkerTierStack(cdk.App(outdir=str(tmp_path / "out")), "WorkerTier", settings=settings, task_code=task_code,
                        cron_entries=[])
    module = app.partition(":")[0]
    if expected is None:
        assert str(error.value) == (
            f"app names {module!r}, but no task code directory is named 'other' (deployed: ['webapp']); pass "
            "task_code=TaskCode.from_directories(...) with the directory that holds it")
    else:
        assert str(error.value) == (f"app names {module!r}, but its task code directory {str(tmp_path / 'webapp')!r} "
                                    f"has no {expected}; name a module that the directory contains")


def test_a_requirement_that_does_not_install_for_lambda_fails_synth_with_pips_reason(tmp_path):
    # GIVEN a requirements file naming a package the local wheel directory does not have
    build_wheel(tmp_path / "wheels")
    (tmp_path / "webapp").mkdir()
    (tmp_path / "webapp" / "__init__.py").write_text("")
    (tmp_path / "requirements.txt").write_text("--no-index\n--find-links wheels\nnot-in-the-wheels==1.0\n")
    task_code = TaskCode.from_directories(tmp_path / "webapp", requirements=tmp_path / "requirements.txt")
    # WHEN the stack is built  THEN synth fails, naming the file, Lambda's platform and pip's own reason
    with pytest.raises(TaskCodeError) as error:
        WorkerTierStack(cdk.App(outdir=str(tmp_path / "out")), "WorkerTier", settings=Settings(task_modules="webapp"),
                        task_code=task_code, cron_entries=[])
    message = str(error.value)
    assert message.startswith(f"pip could not install {str(tmp_path / 'requirements.txt')!r} for Lambda "
                              "(manylinux2014_aarch64, Python 3.14, wheels only):\n")
    assert "not-in-the-wheels" in message


# HTTP forwarding


def test_the_lambda_worker_takes_nothing_from_the_work_queue(forwarding):
    # GIVEN a forwarding stack  WHEN its event source mappings are listed
    stack, template = forwarding
    queue = logical_id(stack, stack.worker.queue)
    mappings = template.find_resources("AWS::Lambda::EventSourceMapping").values()
    # THEN none reads the work queue: the container worker is its one reader
    assert [m for m in mappings if m["Properties"].get("EventSourceArn") == {"Fn::GetAtt": [queue, "Arn"]}] == []


def test_the_container_worker_reads_the_work_queue_and_has_no_queue_of_its_own(forwarding):
    # GIVEN a forwarding stack
    stack, template = forwarding
    function, container = worker_environments(stack, template)
    # THEN the container's queue is the work queue, the Lambda worker forwards to nothing, and there is no other queue
    assert container[contract.QUEUE_URL_VARIABLE] == {"Ref": logical_id(stack, stack.worker.queue)}
    assert stack.container_worker.queue is stack.worker.queue  # type: ignore[union-attr]
    assert contract.SEND_QUEUE_URL_VARIABLE not in container
    assert contract.CONTAINER_QUEUE_URL_VARIABLE not in function
    assert [name for name in template.find_resources("AWS::SQS::Queue") if "LongTaskQueue" in name] == []


def test_the_container_gets_every_variable_its_code_reads(forwarding):
    # GIVEN a forwarding stack  WHEN the container's variables are compared with what its entry module reads
    _, container = worker_environments(*forwarding)
    absent_by_design = {contract.DELAY_HORIZON_VARIABLE, contract.CONTAINER_QUEUE_URL_VARIABLE,
                        contract.SEND_QUEUE_URL_VARIABLE,  # it reads the work queue itself: nothing to send elsewhere
                        contract.HIGH_QUEUE_URL_VARIABLE, contract.LOW_QUEUE_URL_VARIABLE}  # priorities are off
    # THEN none is missing, and it is told where the app is
    assert variables_read(CONTAINER_ENTRY_MODULE) - absent_by_design - set(container) == set()
    assert container[contract.setting_variable("app_port")] == str(APP_PORT)


def test_scaling_tracks_the_work_queues_backlog(forwarding):
    # GIVEN a forwarding stack  WHEN its scaling policy's metrics are read
    stack, template = forwarding
    [policy] = template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()
    metrics = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]["Metrics"]
    [visible] = [m for m in metrics if m["Id"] == "visible"]
    # THEN the backlog it tracks is the work queue's
    assert visible["MetricStat"]["Metric"]["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [logical_id(stack, stack.worker.queue), "QueueName"]}}]


def test_no_alarm_divides_the_backlog_by_lambda_executions_that_never_run(forwarding, app_mode):
    # GIVEN a forwarding stack, whose Lambda worker reads nothing, and an app-mode stack, whose Lambda worker reads the queue
    # WHEN their alarms on backlog per Lambda execution are found
    def backlog_alarms(template: Template) -> list[str]:
        return [name for name in template.find_resources("AWS::CloudWatch::Alarm") if "BacklogPerWorker" in name]

    # THEN only the app-mode stack has one: the container worker's scaling tracks the forwarding stack's backlog
    assert backlog_alarms(forwarding[1]) == []
    assert len(backlog_alarms(app_mode[1])) == 1


def test_the_task_role_consumes_the_work_queue_and_dead_letters_to_the_dlq(forwarding):
    # GIVEN a forwarding stack  WHEN the task role's SQS statements are read
    stack, template = forwarding
    by_queue: dict[str, set[str]] = {}
    for statement in task_role_statements(stack, template):
        if any(action.startswith("sqs:") for action in actions_of(statement)):
            by_queue.setdefault(statement["Resource"]["Fn::GetAtt"][0], set()).update(actions_of(statement))
    # THEN it receives, deletes and changes visibility on the work queue, and sends to the DLQ
    work, dlq = logical_id(stack, stack.worker.queue), logical_id(stack, stack.worker.dead_letter_queue)
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"} <= by_queue[work]
    assert "sqs:SendMessage" in by_queue[dlq]
    assert set(by_queue) == {work, dlq}


def test_the_apps_image_runs_beside_the_worker_which_starts_after_it(forwarding):
    # GIVEN a forwarding stack with app_image
    _, template = forwarding
    found = containers(template)
    app, worker = found[APP_CONTAINER], found[WORKER_CONTAINER]
    # THEN the app is an essential container of the same task, on app_port, logging to CloudWatch
    assert (app["Image"], app["Essential"], app["PortMappings"]) == (
        APP_IMAGE, True, [{"ContainerPort": APP_PORT, "Protocol": "tcp"}])
    assert app["LogConfiguration"]["LogDriver"] == worker["LogConfiguration"]["LogDriver"] == "awslogs"
    # AND the worker starts once the app has started (its own health gate waits for app_health_path)
    assert worker["DependsOn"] == [{"ContainerName": APP_CONTAINER, "Condition": "START"}]
    assert {"Name": contract.setting_variable("app_health_path"), "Value": "/healthz"} in worker["Environment"]


def test_the_task_role_reads_the_partial_secret_arn_and_nothing_wider(forwarding):
    # GIVEN a forwarding stack signing with a secret named by its partial ARN
    stack, template = forwarding
    reads = [s for s in task_role_statements(stack, template)
             if any(a.split(":")[0] in ("secretsmanager", "ssm", "kms") for a in actions_of(s))]
    # THEN the one grant is GetSecretValue on that secret, its six random characters matched by "-??????"
    assert reads == [{"Action": SECRET_READ_ACTION, "Effect": "Allow", "Resource": f"{PARTIAL_SECRET_ARN}-??????"}]


@pytest.mark.parametrize("arn, expected", [
    (COMPLETE_SECRET_ARN, {"Action": SECRET_READ_ACTION, "Effect": "Allow", "Resource": COMPLETE_SECRET_ARN}),
    (PARAMETER_ARN, {"Action": PARAMETER_READ_ACTION, "Effect": "Allow", "Resource": PARAMETER_ARN}),
])
def test_a_complete_secret_arn_or_a_parameter_arn_is_granted_exactly(arn, expected):
    # GIVEN a role  WHEN it is granted the signing secret by a complete secret ARN or an SSM parameter ARN
    stack = cdk.Stack(cdk.App())
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
    grant_signing_secret(role, arn)
    # THEN the role's one statement reads exactly that ARN (a SecureString under aws/ssm needs no KMS grant)
    [policy] = Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [expected]


def test_an_ecr_app_image_is_pulled_with_a_grant_on_its_one_repository(tmp_path):
    # GIVEN a forwarding stack whose app image is in ECR
    image = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/app:v7"
    settings = Settings(container_worker=True, app_port=APP_PORT, app_image=image)
    app = cdk.App(outdir=str(tmp_path))
    stack = WorkerTierStack(app, "WorkerTier", settings=settings, task_code=TASK_CODE, cron_entries=[])
    template = Template.from_stack(stack)
    # THEN the app container runs that image, and the execution role may pull from that repository
    assert containers(template)[APP_CONTAINER]["Image"] == {
        "Fn::Join": ["", ["123456789012.dkr.ecr.eu-west-1.", {"Ref": "AWS::URLSuffix"}, "/team/app:v7"]]}
    pulls = [s for p in template.find_resources("AWS::IAM::Policy").values()
             for s in p["Properties"]["PolicyDocument"]["Statement"] if "ecr:BatchGetImage" in actions_of(s)]
    assert any("repository/team/app" in str(s["Resource"]) and "eu-west-1" in str(s["Resource"]) for s in pulls)


def test_the_forwarding_stack_is_nag_clean(forwarding):
    # GIVEN the forwarding stack, synthesized with cdk-nag (a finding fails synth)  THEN no error is annotated
    stack, _ = forwarding
    Annotations.from_stack(stack).has_no_error("*", Match.any_value())


# -- the signing secret's grant


def test_a_partial_secret_arn_whose_name_ends_like_a_suffix_is_granted_with_the_wildcard():
    """exact secret grants that work. A partial ARN of a secret named 'worker-signer' ends in '-signer'
    (a hyphen and six characters), is taken for a complete ARN, and the grant misses the real ARN
    (...:secret:worker-signer-AbC123): the task gets AccessDenied at start (AWS's documented pitfall)."""
    import aws_cdk as cdk
    from aws_cdk import aws_iam as iam

    from worker_tier_cdk.grants import grant_signing_secret

    stack = cdk.Stack(cdk.App(), "S")
    role = iam.Role(stack, "R", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
    grant_signing_secret(role, "arn:aws:secretsmanager:us-east-1:123456789012:secret:worker-signer")
    resources = json.dumps(stack.resolve(role.node.find_child("DefaultPolicy").document.to_json()))
    assert "worker-signer-??????" in resources or "worker-signer*" in resources, resources
    # AND the ARN as written too: it might be complete
    assert '"arn:aws:secretsmanager:us-east-1:123456789012:secret:worker-signer"' in resources, resources
