"""Moved to ``worker_tier.periodic.cron_expression``, beside the ``cron.yaml`` reader that uses it; importable here too."""

from worker_tier.periodic.cron_expression import (
    CronExpressionError as CronExpressionError,
    ParsedCron as ParsedCron,
    parse as parse,
    to_eventbridge as to_eventbridge,
)
