"""The dashboard's Starlette application: its routes, each a page or an action (``build_app``).

Reading pages are GETs and change nothing. Each action is two steps, both server-side: a GET that names exactly
what will happen (the confirmation, with its form), then the form's POST with its ``csrf_token`` (``guard``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
from botocore.exceptions import BotoCoreError, ClientError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from worker_tier.core import contract
from worker_tier.core.errors import JobNotFoundError, MessageError, WorkerTierError
from worker_tier.core.message import format_due_at
from worker_tier.delays.cancellation import check_reschedule_delay
from worker_tier_cli import job
from worker_tier_cli.dead_letters import Filter
from worker_tier_cli.delayed import DEFAULT_LIMIT, DEFAULT_WITHIN_MINUTES, MAX_WITHIN_MINUTES, cancelling_client
from worker_tier_cli.session import Session, parse_time
from worker_tier_cli.ui import pages
from worker_tier_cli.ui.guard import CSRF_FIELD, Guard, checked_form, new_token
from worker_tier_cli.ui.outcomes import LogOutcomes, OutcomeSource
from worker_tier_cli.ui.runs import DeadLettersBusyError, Runs, RunningError

HERE = Path(__file__).parent
SCOPES = ("all", "group", "one")  # what a redrive moves: every dead letter, one path and error's, one message
RUN_REFRESH_SECONDS = 1


class Dashboard:
    """The pages and actions over one session (its clients are made once and shared by every request)."""

    def __init__(self, session: Session, outcomes: OutcomeSource, csrf_token: str) -> None:
        self.session, self.feed, self.csrf_token = session, outcomes, csrf_token
        self.runs = Runs(session)
        self.templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                                            undefined=jinja2.StrictUndefined)
        self.templates.filters["truncate_body"] = truncate_body

    def page(self, name: str, request: Request, status_code: int = 200, **values: Any) -> HTMLResponse:
        html = self.templates.get_template(name).render(
            request=request, csrf_field=CSRF_FIELD, csrf_token=self.csrf_token, path=request.url.path, **values)
        return HTMLResponse(html, status_code=status_code)

    # -- reading pages ----------------------------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        return self.page("overview.html", request, shown=pages.overview(self.session))

    def dead_letters(self, request: Request) -> Response:
        limit = _int(request, "limit", pages.DEFAULT_DLQ_LIMIT, 1, pages.MAX_DLQ_LIMIT)
        return self.page("dlq.html", request, shown=pages.dead_letter_groups(self.session, limit),
                         job_attribute=contract.JOB_ATTRIBUTE)

    def delayed(self, request: Request) -> Response:
        within = _int(request, "within", DEFAULT_WITHIN_MINUTES, 1, MAX_WITHIN_MINUTES)
        limit = _int(request, "limit", DEFAULT_LIMIT, 1, 1000)
        path = request.query_params.get("path") or None
        return self.page("delayed.html", request, shown=pages.coming(self.session, path, within, limit))

    def periodic(self, request: Request) -> Response:
        return self.page("periodic.html", request, shown=pages.periodic(self.session))

    def outcomes(self, request: Request) -> Response:
        lines, cursor, note = self.feed.after(0)
        return self.page("outcomes.html", request, lines=lines, cursor=cursor, note=note)

    def outcomes_json(self, request: Request) -> Response:
        lines, cursor, note = self.feed.after(_int(request, "after", 0, 0, 2**63))
        return JSONResponse({"cursor": cursor, "note": note, "lines": [line["line"] for line in lines]})

    def job(self, request: Request) -> Response:
        job_id = (request.query_params.get("id") or "").strip()
        values: dict[str, Any] = {"job_id": job_id, "status": None, "problem": "", "fields": [], "history": []}
        if job_id:
            try:
                status = job.lookup(self.session, job_id)
            except (JobNotFoundError, MessageError) as error:
                code = 404 if isinstance(error, JobNotFoundError) else 400
                return self.page("job.html", request, code, **{**values, "problem": str(error)})
            values.update(status=status, fields=job.fields(status), history=job.history(status))
        return self.page("job.html", request, **values)

    # -- redrive ------------------------------------------------------------------------------------------

    def confirm_redrive(self, request: Request) -> Response:
        scope, which = _redrive_filter(dict(request.query_params))
        return self.page("confirm_redrive.html", request, scope=scope, which=which,
                         shown=pages.matching(self.session, which))

    async def redrive(self, request: Request) -> Response:
        form = await checked_form(request, self.csrf_token)
        scope, which = _redrive_filter({k: v for k, v in form.items() if isinstance(v, str)})
        try:
            run = await run_in_threadpool(self.runs.start, which, _scope_text(scope, which))
        except RunningError as running:
            return self.page("refused.html", request, 409, title="A redrive is running",
                             detail=str(running), link=f"/dlq/runs/{running.running.run_id}")
        return RedirectResponse(f"/dlq/runs/{run.run_id}", status_code=303)

    def redrive_run(self, request: Request) -> Response:
        run = self.runs.runs.get(request.path_params["run_id"])
        if run is None:
            raise HTTPException(404, "no such redrive in this dashboard (runs are kept until it stops)")
        return self.page("redrive_run.html", request, run=run, refresh=None if run.done else RUN_REFRESH_SECONDS)

    # -- delayed: cancel and reschedule ------------------------------------------------------------------

    def confirm_cancel(self, request: Request) -> Response:
        key = _required(dict(request.query_params), "key")
        return self.page("confirm_delayed.html", request, action="cancel", at=None,
                         shown=pages.cancellable(self.session, key))

    async def cancel(self, request: Request) -> Response:
        form = await checked_form(request, self.csrf_token)
        key = _required(form, "key")
        outcome = await run_in_threadpool(lambda: cancelling_client(self.session).cancel_outcome(key))
        return self.page("delayed_outcome.html", request, action="cancel", key=key, outcome=outcome)

    def confirm_reschedule(self, request: Request) -> Response:
        query = dict(request.query_params)
        key, at = _required(query, "key"), self._new_time(query)
        try:  # a time the reschedule would refuse is said here, with no form to confirm
            check_reschedule_delay(parse_time(at).timestamp() - self.session.runtime.clock())
        except MessageError as error:
            return self.page("refused.html", request, 400, title="This reschedule cannot be done", detail=str(error),
                             link="/delayed")
        return self.page("confirm_delayed.html", request, action="reschedule", at=at,
                         shown=pages.cancellable(self.session, key))

    async def reschedule(self, request: Request) -> Response:
        form = await checked_form(request, self.csrf_token)
        key, at = _required(form, "key"), self._new_time(form)
        client = cancelling_client(self.session)  # its reschedule moves a tracked message's job too (docs/jobs.md)
        try:
            outcome = await run_in_threadpool(lambda: client.reschedule_outcome(key, at=parse_time(at)))
        except MessageError as error:
            raise HTTPException(400, str(error)) from None
        return self.page("delayed_outcome.html", request, action="reschedule", key=key, outcome=outcome)

    def _new_time(self, values: Any) -> str:
        """The ``at`` field as an ISO 8601 UTC time; 400 naming the value when it is not one."""
        text = _required(values, "at")
        try:
            return format_due_at(int(parse_time(text).timestamp() * 1000))
        except ValueError as problem:
            raise HTTPException(400, f"at: {problem}") from None

    # -- errors -------------------------------------------------------------------------------------------

    async def http_error(self, request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        return self.page("refused.html", request, error.status_code, title=f"{error.status_code}", detail=error.detail,
                         link=None)

    async def deployment_error(self, request: Request, error: Exception) -> Response:
        """A resource not named, or an AWS error: said on the page, in the command line's words."""
        code = 502 if isinstance(error, (BotoCoreError, ClientError)) else 409 if isinstance(error, DeadLettersBusyError) else 400
        return self.page("refused.html", request, code, title=type(error).__name__, detail=str(error), link=None)


BODY_SHOWN_CHARS = 1024  # of each dead letter's body on the DLQ page: a page of 200 KB bodies would be megabytes


def truncate_body(body: str) -> str:
    """``body``, cut to ``BODY_SHOWN_CHARS`` with what is left and where to read it whole."""
    if len(body) <= BODY_SHOWN_CHARS:
        return body
    rest = len(body.encode("utf-8", "replace")) - len(body[:BODY_SHOWN_CHARS].encode("utf-8", "replace"))
    return f"{body[:BODY_SHOWN_CHARS]}… {rest} bytes more: worker-tier dlq show reads it whole"


def build_app(session: Session, *, token: str | None, hosts: frozenset[str] | None, port: int,
              outcomes: OutcomeSource | None = None, csrf_token: str | None = None) -> Guard:
    """The dashboard over ``session``, behind its ``Guard`` (``token`` None: no token, loopback only)."""
    dashboard = Dashboard(session, outcomes or LogOutcomes(session), csrf_token or new_token())
    routes = [
        Route("/", dashboard.overview),
        Route("/dlq", dashboard.dead_letters),
        Route("/dlq/redrive", dashboard.confirm_redrive, methods=["GET"]),
        Route("/dlq/redrive", dashboard.redrive, methods=["POST"]),
        Route("/dlq/runs/{run_id}", dashboard.redrive_run),
        Route("/delayed", dashboard.delayed),
        Route("/delayed/cancel", dashboard.confirm_cancel, methods=["GET"]),
        Route("/delayed/cancel", dashboard.cancel, methods=["POST"]),
        Route("/delayed/reschedule", dashboard.confirm_reschedule, methods=["GET"]),
        Route("/delayed/reschedule", dashboard.reschedule, methods=["POST"]),
        Route("/periodic", dashboard.periodic),
        Route("/job", dashboard.job),
        Route("/outcomes", dashboard.outcomes),
        Route("/outcomes.json", dashboard.outcomes_json),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={
        HTTPException: dashboard.http_error, WorkerTierError: dashboard.deployment_error,
        ClientError: dashboard.deployment_error, BotoCoreError: dashboard.deployment_error})
    app.state.dashboard = dashboard
    return Guard(app, token=token, hosts=hosts, port=port)


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    """A query parameter in ``low..high``; 400 naming it and the range otherwise."""
    text = request.query_params.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise HTTPException(400, f"{name} must be a whole number {low}..{high}, got {text!r}")
    return value


def _required(values: Any, name: str) -> str:
    value = values.get(name)
    if not isinstance(value, str) or not value:
        raise HTTPException(400, f"{name} is required")
    return value


def _redrive_filter(values: dict[str, str]) -> tuple[str, Filter]:
    """The scope of a redrive (all, group, one) and its Filter; 400 naming what is missing."""
    scope = values.get("scope", "")
    if scope not in SCOPES:
        raise HTTPException(400, f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if scope == "group":
        return scope, Filter(_required(values, "path"), _required(values, "error"))
    if scope == "one":
        return scope, Filter(message_id=_required(values, "message_id"))
    return scope, Filter()


def _scope_text(scope: str, which: Filter) -> str:
    if scope == "group":
        return f"the dead letters of path {which.path} failing with {which.error_type}"
    if scope == "one":
        return f"dead letter {which.message_id}"
    return "every dead letter"
