"""The ``worker-tier`` command line (``pip install 'worker-tier[cli]'``): operate a deployment.

A package of its own, beside the runtime: ``worker_tier_cdk.code`` stages only ``worker_tier`` into the
Lambda functions and the image, so click never reaches them, and ``python -m worker_tier`` imports this
package only for a command other than ``worker``.
"""

from __future__ import annotations

from worker_tier_cli.commands import cli, main

__all__ = ["cli", "main"]
