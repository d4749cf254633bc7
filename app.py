#!/usr/bin/env python3
"""CDK app entry: wires the stack and cdk-nag; makes no AWS calls."""

import aws_cdk as cdk

from infra.nag import add_checks
from infra.stack import WorkerTierStack

app = cdk.App()
WorkerTierStack(app, "WorkerTier")
add_checks(app)
app.synth()
