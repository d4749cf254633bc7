"""``worker_tier.handlers.cron.lambda_handler``: the periodic-task entry point under its first name.

Kept importable because SAM and Terraform templates name it; see docs/design.md, "Entry points".
"""

from worker_tier.handlers.periodic import lambda_handler

__all__ = ["lambda_handler"]
