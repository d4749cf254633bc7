"""``cron next``: each cron.yaml entry's next ticks (``make cron-next``), from ``worker_tier.periodic.cron_preview``.

That module reads cron.yaml with PyYAML (``worker_tier.periodic.cron_config``) and computes ticks with croniter; neither
imports aws-cdk-lib, so this works with the cli extra alone. Without croniter or PyYAML it says what to install.
"""

from __future__ import annotations

import importlib
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

import click

from worker_tier_cli.output import emit_json
from worker_tier_cli.session import Session

CRON_EXTRA_MISSING = "{missing} not installed; `worker-tier cron next` needs the cli extra: pip install 'worker-tier[cli]'"
DEFAULT_CRON_YAML = Path("cron.yaml")


def _preview() -> ModuleType:
    """worker_tier.periodic.cron_preview, or a usage error naming the missing package."""
    try:
        return importlib.import_module("worker_tier.periodic.cron_preview")
    except ModuleNotFoundError as missing:
        if missing.name not in ("croniter", "yaml"):
            raise
        raise click.UsageError(CRON_EXTRA_MISSING.format(missing=missing.name)) from None


@click.group("cron")
def cron_group() -> None:
    """cron.yaml's periodic tasks."""


@cron_group.command("next")
@click.argument("cron_yaml", type=click.Path(path_type=Path, dir_okay=False), default=DEFAULT_CRON_YAML)
@click.option("--count", type=click.IntRange(1, 100), default=5, show_default=True, help="Ticks per entry.")
@click.option("--fifo", is_flag=True, help="Check the entries for a FIFO queue (name = MessageGroupId).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a listing.")
@click.pass_context
def cron_next(ctx: click.Context, cron_yaml: Path, count: int, fifo: bool, as_json: bool) -> None:
    """Each entry's schedule, its EventBridge expressions and its next ticks, in UTC and its own zone."""
    preview = _preview()
    from worker_tier.core.errors import CronConfigError
    from worker_tier.periodic.cron_config import load

    try:
        entries = load(cron_yaml, fifo=fifo)
    except CronConfigError as error:
        raise click.ClickException(str(error)) from None
    session = ctx.find_object(Session)
    now = session.now() if session is not None else datetime.now(timezone.utc)
    if not as_json:
        click.echo(preview.render(entries, now, count))
        return
    emit_json([{"name": e.name, "path": e.url, "schedule": e.schedule, "timezone": e.timezone, "enabled": e.enabled,
                "eventbridge": list(e.expressions),
                "next_ticks": [t.astimezone(timezone.utc).isoformat() for t in preview.next_runs(e, now, count)]}
               for e in entries])

