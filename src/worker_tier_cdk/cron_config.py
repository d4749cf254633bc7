"""Moved to ``worker_tier.periodic.cron_config``, which the CLI and the local environment share; importable here too."""

from worker_tier.core.errors import CronConfigError as CronConfigError
from worker_tier.periodic.cron_config import CronEntry as CronEntry, check_sendable as check_sendable, load as load, parse as parse, send_problem as send_problem
