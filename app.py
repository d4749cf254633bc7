#!/usr/bin/env python3
"""This repo's example CDK app: the stack with ./tasks and ./cron.yaml, and cdk-nag; makes no AWS calls."""

from pathlib import Path

from worker_tier_cdk import TaskCode
from worker_tier_cdk.cdk_app import App
from worker_tier_cdk.nag import add_checks
from worker_tier_cdk.stack import WorkerTierStack

HERE = Path(__file__).resolve().parent

app = App(cdk_json=HERE / "cdk.json")  # cdk.json's settings under `python app.py` too; errors in one line
WorkerTierStack(app, "WorkerTier", task_code=TaskCode.from_directories(HERE / "tasks"), cron_file=HERE / "cron.yaml")
add_checks(app)
app.synth()
