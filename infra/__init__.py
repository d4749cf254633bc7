"""Worker Tier's CDK infrastructure.

The runtime package ``worker_tier`` lives in ``lambdas/`` (the Lambda asset root)
and is not installed; infra shares its settings and constants, so this package
puts ``lambdas/`` on the import path once.
"""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LAMBDAS_DIR = REPO_ROOT / "lambdas"

if str(LAMBDAS_DIR) not in sys.path:
    sys.path.insert(0, str(LAMBDAS_DIR))
