"""Moved to ``worker_tier.periodic.cron_preview`` (``python -m worker_tier.periodic.cron_preview``); importable and runnable here too."""

import sys

from worker_tier.periodic.cron_preview import main as main, next_runs as next_runs, render as render

if __name__ == "__main__":
    sys.exit(main())
