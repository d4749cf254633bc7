"""The local environment behind `make run`: Worker Tier on one machine, against embedded moto.

Not deployed (the Lambda asset excludes this folder).
"""

from worker_tier_local.environment import LocalEnvironment

__all__ = ["LocalEnvironment"]
