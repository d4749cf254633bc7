"""Worker Tier's CDK constructs (``pip install 'worker-tier[cdk]'``).

Add the whole stack, or any one construct, to your own CDK app::

    from worker_tier_cdk import App, TaskCode, WorkerTierStack
    app = App()  # ./cdk.json's settings under `python app.py` too; Worker Tier's errors in one line
    WorkerTierStack(app, "Jobs", task_code=TaskCode.from_directories("tasks"), cron_file="cron.yaml")
    app.synth()

The functions and the container image run the installed ``worker_tier`` runtime plus
the task code you name (``worker_tier_cdk.code``). See docs/design.md.
"""

from worker_tier_cdk.code import TaskCode, TaskCodeError

# What the cdk extra adds to a runtime-only install that the constructs import.
CDK_EXTRA_MODULES = frozenset({"aws_cdk", "constructs", "cdk_nag", "yaml"})
CDK_EXTRA_INSTALL = "pip install 'worker-tier[cdk]'"

# Each construct's home, imported on first use (``__getattr__``).
_LAZY_HOMES = {
    "App": "worker_tier_cdk.cdk_app",
    "WorkerTierStack": "worker_tier_cdk.stack",
    "WorkerQueue": "worker_tier_cdk.worker_queue",
    "WorkerQueueProps": "worker_tier_cdk.worker_queue",
    "DelayDispatcher": "worker_tier_cdk.delay_dispatcher",
    "DelayDispatcherProps": "worker_tier_cdk.delay_dispatcher",
    "ContainerWorker": "worker_tier_cdk.container_worker",
    "ContainerWorkerProps": "worker_tier_cdk.container_worker",
    "PeriodicTasks": "worker_tier_cdk.periodic_tasks",
    "PeriodicTasksProps": "worker_tier_cdk.periodic_tasks",
    "PayloadBucket": "worker_tier_cdk.payload_bucket",
    "PayloadBucketProps": "worker_tier_cdk.payload_bucket",
    "Settings": "worker_tier.core.settings",
    "add_checks": "worker_tier_cdk.nag",
}

__all__ = [
    "App",
    "ContainerWorker",
    "ContainerWorkerProps",
    "DelayDispatcher",
    "DelayDispatcherProps",
    "PayloadBucket",
    "PayloadBucketProps",
    "PeriodicTasks",
    "PeriodicTasksProps",
    "Settings",
    "TaskCode",
    "TaskCodeError",
    "WorkerQueue",
    "WorkerQueueProps",
    "WorkerTierStack",
    "add_checks",
]


def __getattr__(name: str) -> object:
    """The constructs, imported on first use so that ``import worker_tier_cdk`` stays light."""
    import importlib

    if name not in _LAZY_HOMES:
        raise AttributeError(f"module 'worker_tier_cdk' has no attribute {name!r}")
    try:
        module = importlib.import_module(_LAZY_HOMES[name])
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] not in CDK_EXTRA_MODULES:
            raise
        raise ModuleNotFoundError(f"worker_tier_cdk.{name} needs {error.name}, which is not installed; install the "
                                  f"CDK extra: {CDK_EXTRA_INSTALL}", name=error.name) from error
    return getattr(module, name)
