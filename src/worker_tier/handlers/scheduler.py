"""``worker_tier.handlers.scheduler.lambda_handler``: the delay dispatcher's entry point under its first name.

Kept importable because SAM and Terraform templates name it; see docs/design.md, "Entry points".
"""

from worker_tier.handlers.dispatcher import lambda_handler

__all__ = ["lambda_handler"]
