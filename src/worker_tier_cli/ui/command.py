"""``worker-tier ui``: the dashboard's command (its server is imported only when it runs: the ui extra)."""

from __future__ import annotations

import html
import sys
import tempfile
import webbrowser
from pathlib import Path
from types import ModuleType

import click

from worker_tier_cli.session import Session

UI_EXTRA_MODULES = ("starlette", "jinja2", "uvicorn", "multipart", "python_multipart")
UI_EXTRA_MISSING = "{missing} not installed; the dashboard needs the ui extra: pip install 'worker-tier[ui]'"


def load_server() -> ModuleType:
    """``worker_tier_cli.ui.serve``, or a one-line UsageError naming the missing package and the extra."""
    try:
        from worker_tier_cli.ui import serve
    except ImportError as error:
        if (error.name or "").split(".")[0] not in UI_EXTRA_MODULES:
            raise
        raise click.UsageError(UI_EXTRA_MISSING.format(missing=(error.name or "").split(".")[0])) from None
    return serve


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to bind. Any other than loopback needs the token (never --no-token).")
@click.option("--port", type=click.IntRange(0, 65535), default=8642, show_default=True, help="0: any free port.")
@click.option("--token", help="The token the URL carries (at least 16 characters); default: a new random one. "
                              "A token on the command line is visible to other users in `ps`: prefer the default.")
@click.option("--no-token", is_flag=True, help="Serve without a token: loopback only, on a machine no one else uses.")
@click.option("--open", "open_browser", is_flag=True, help="Open the dashboard in the default browser.")
def ui_command(host: str, port: int, token: str | None, no_token: bool, open_browser: bool) -> None:
    """The web dashboard: overview, dead letters (redrive), delayed messages (cancel, reschedule), periodic tasks
    and live outcomes, over the same deployment as every other command (docs/dashboard.md).

    Prints its URL, with the token, as its first line; runs until Ctrl-C.
    """
    serve = load_server()
    from worker_tier_cli.ui.guard import GuardError, new_token

    if no_token and token:
        raise click.UsageError("--token and --no-token: give one or the other")
    session: Session = click.get_current_context().find_object(Session)  # type: ignore[assignment]
    session.target.required("queue_url")  # a deployment that cannot be found fails now, in one line, not on each page
    try:
        served = serve.bind(session, host, port, None if no_token else token or new_token())
    except GuardError as error:
        raise click.UsageError(str(error)) from None
    except OSError as error:
        raise click.UsageError(f"cannot listen on {host}:{port}: {error.strerror or error}; pass --port 0 for any "
                               "free port, or another --port") from None
    click.echo(serve.URL_LINE.format(url=served.url))
    sys.stdout.flush()
    if open_browser:
        webbrowser.open(_launch_page(served.url).as_uri())
    served.run()


def _launch_page(url: str) -> Path:
    """A page only this user can read that sends the browser to ``url``: opening it keeps the token out of the
    browser's command line, which other users see in `ps` (Jupyter's way)."""
    folder = Path(tempfile.mkdtemp(prefix="worker-tier-ui-"))  # mode 0700
    page = folder / "open.html"
    page.touch(mode=0o600)
    page.write_text(f'<!doctype html><meta http-equiv="refresh" content="0;url={html.escape(url)}">'
                    f'<a href="{html.escape(url)}">Worker Tier dashboard</a>\n', encoding="utf-8")
    return page
