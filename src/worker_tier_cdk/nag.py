"""cdk-nag's AwsSolutions checks, run as a synth-time validation plugin (findings fail synth)."""

from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks


def add_checks(app: cdk.App) -> None:
    """Run AwsSolutions over everything in ``app`` at synth; acknowledgements live beside their resources."""
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
