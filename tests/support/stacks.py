"""The stack, synthesized once per source tree in each stack shape the permission tests run against.

Synth starts jsii (seconds for the first stack, more on a loaded machine), so every shape is synthesized in one
app, and the templates are kept in a cache keyed by a hash of ``src`` and ``cron.yaml``: the next run (or the
other xdist worker) reads them in milliseconds, and any change to the constructs or the runtime re-synthesizes.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from worker_tier.core.settings import Settings

REPO = Path(__file__).resolve().parents[2]
ACCOUNT = "123456789012"  # moto's
REGION = "us-east-1"
# A partial ARN (no random suffix): the stack grants it and it with "-??????", which the test's moto secret has.
SIGNING_SECRET_NAME = "worker-tier-signing"
SIGNING_SECRET_ARN = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{SIGNING_SECRET_NAME}"
SIGNING_PARAMETER_ARN = f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/worker-tier/signing"
APP_PORT = 8080
PRODUCER_ROLE = "Producer"
# The logical id stem of the stack's payload bucket (WorkerTierStack's "PayloadBucket" construct).
PAYLOAD_BUCKET = "PayloadBucket"

# Every shape the stack takes: the default, FIFO, the container worker, forwarding with a signing secret (Secrets
# Manager, or an SSM parameter), several dispatch groups, and priorities (a high and a low queue).
SHAPES: dict[str, Settings] = {
    "default": Settings(),
    "fifo": Settings(fifo=True, container_worker=True),
    "container": Settings(container_worker=True, dispatch_groups=3),
    "forwarding_secret": Settings(container_worker=True, app_port=APP_PORT, app_signing_secret_arn=SIGNING_SECRET_ARN),
    "forwarding_parameter": Settings(container_worker=True, app_port=APP_PORT, app_signing_secret_arn=SIGNING_PARAMETER_ARN),
    "priorities": Settings(priorities=True, container_worker=True),
    "priorities_forwarding": Settings(priorities=True, container_worker=True, app_port=APP_PORT),
}


def templates() -> dict[str, dict[str, Any]]:
    """Each shape's template (CloudFormation JSON), from the cache or synthesized now."""
    cache = Path(tempfile.gettempdir()) / f"worker-tier-templates-{_source_hash()}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    synthesized = _synth_all()
    partial = cache.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(synthesized))
    os.replace(partial, cache)
    return synthesized


def _synth_all() -> dict[str, dict[str, Any]]:
    """One app, one stack per shape."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from worker_tier.periodic import cron_config
    from worker_tier_cdk import TaskCode
    from worker_tier_cdk.stack import WorkerTierStack

    app = cdk.App(outdir=tempfile.mkdtemp(prefix="worker-tier-cdk-"))
    task_code = TaskCode.from_directories(REPO / "tasks")
    stacks = {
        shape: WorkerTierStack(app, f"WorkerTier{index}", settings=settings, task_code=task_code,
                               cron_entries=cron_config.load(REPO / "cron.yaml", fifo=settings.fifo))
        for index, (shape, settings) in enumerate(SHAPES.items())
    }
    for stack in stacks.values():
        _add_producer(stack)
    app.synth()
    return {shape: Template.from_stack(stack).to_json() for shape, stack in stacks.items()}


def _add_producer(stack: Any) -> None:
    """A role granted what the docs tell a producer to grant: send to the work queue and offload large bodies to the
    payload bucket; store, cancel and reschedule delays."""
    from aws_cdk import aws_iam as iam

    role = iam.Role(stack, PRODUCER_ROLE, assumed_by=iam.AccountRootPrincipal())
    stack.worker.grant_produce(role)
    if stack.delay_dispatcher is not None:
        stack.delay_dispatcher.grant_produce(role)


def _source_hash() -> str:
    """A hash of everything synth reads that a test run may change."""
    digest = hashlib.sha256()
    paths = [*sorted((REPO / "src").rglob("*.py")), REPO / "cron.yaml", Path(__file__)]
    for path in paths:
        digest.update(str(path.relative_to(REPO)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def enforce(shape: str, queues: dict[str, str], tables: dict[str, str], buckets: dict[str, str] | None = None) -> None:
    """Check every call a Worker Tier role makes from now to the test's end against ``shape``'s synthesized policies.

    ``queues``, ``tables`` and ``buckets`` name the moto resources by the logical id stems of the template's
    (``WorkerQueue``: ``"work"``, ``PAYLOAD_BUCKET``: ``"payloads"``). A conftest fixture calls ``iam.ENFORCEMENT.check()`` after each test and fails it on a denial.
    """
    from tests.support import iam

    template = templates()[shape]
    roles = {
        "worker": iam.role_of_function(template, WORKER_HANDLER),
        "periodic": iam.role_of_function(template, PERIODIC_HANDLER),
        "producer": next(logical_id for logical_id, resource in template["Resources"].items()
                         if logical_id.startswith(PRODUCER_ROLE) and resource["Type"] == "AWS::IAM::Role"),
    }
    if any(r["Type"] == "AWS::ECS::TaskDefinition" for r in template["Resources"].values()):
        roles["container"] = iam.task_role(template)
    if not SHAPES[shape].fifo:
        roles["dispatcher"] = iam.role_of_function(template, DISPATCHER_HANDLER)
        roles["recovery"] = iam.role_of_function(template, RECOVERY_HANDLER)
    resources = iam.Resources(queues=queues, tables=tables, buckets=buckets or {})
    iam.install().activate(iam.world_of(template, resources, roles))


WORKER_HANDLER = "worker_tier.handlers.worker.lambda_handler"
PERIODIC_HANDLER = "worker_tier.handlers.periodic.lambda_handler"
DISPATCHER_HANDLER = "worker_tier.handlers.dispatcher.lambda_handler"
RECOVERY_HANDLER = "worker_tier.handlers.recovery.lambda_handler"


IAM_SITE = Path(__file__).resolve().parent / "iam_site"


def subprocess_pythonpath() -> str:
    """PYTHONPATH for a runtime subprocess: this tree's code, the tests, and the IAM enforcement hook (sitecustomize)."""
    return os.pathsep.join([str(REPO / "src"), str(REPO), str(IAM_SITE)])


def share_with_subprocesses(directory: Path) -> dict[str, str]:
    """The environment variables that carry the active world into subprocesses; their denials land in ``directory``."""
    from tests.support import iam

    world = iam.ENFORCEMENT.world
    if world is None:
        return {}
    world_file, denials_file = directory / "iam-world.json", directory / "iam-denials.txt"
    world_file.write_text(world.to_json())
    denials_file.touch()
    return {iam.WORLD_VARIABLE: str(world_file), iam.DENIALS_VARIABLE: str(denials_file)}
