#!/usr/bin/env python3
"""CDK app entry: wires the stack and cdk-nag; makes no AWS calls."""

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from infra.stack import WorkerTierStack

app = cdk.App()
WorkerTierStack(app, "WorkerTier")
cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
