"""The example worker as an ASGI app in FastAPI: the same routes as ``examples.flask_app``.

Run it: ``make run ARGS="--app examples.fastapi_app:app"``.
"""

from __future__ import annotations

import json

from fastapi import FastAPI, Header, HTTPException, Request
from fastapi.responses import PlainTextResponse

from examples import jobs

app = FastAPI()


@app.middleware("http")
async def only_from_sqsd(request: Request, call_next):
    """The worker daemon's User-Agent is aws-sqsd/<version>; anyone else gets a 400."""
    if "aws-sqsd" not in request.headers.get("user-agent", ""):
        return PlainTextResponse("this endpoint only takes messages from the worker daemon (aws-sqsd)", status_code=400)
    return await call_next(request)


@app.exception_handler(jobs.StoreBusyError)
async def store_busy(request: Request, error: jobs.StoreBusyError):
    return PlainTextResponse(str(error), status_code=500)


@app.exception_handler(jobs.RateLimitedError)
async def rate_limited(request: Request, error: jobs.RateLimitedError):
    return PlainTextResponse(str(error), status_code=429, headers={"Retry-After": str(error.retry_after_seconds)})


@app.post("/", response_class=PlainTextResponse)
async def run_task(request: Request, x_aws_sqsd_receive_count: int = Header()):
    """An ordinary message: the JSON body names the task and its arguments."""
    try:
        message = json.loads(await request.body())
    except ValueError:
        raise HTTPException(400, "the body is not JSON") from None
    function = jobs.TASKS.get(message.get("task"))
    if function is None:
        raise HTTPException(400, f"unknown task {message.get('task')!r}")
    return function(x_aws_sqsd_receive_count, **message.get("arguments", {}))


# FastAPI redirects a path whose trailing slash differs (307: a failure to sqsd), so each cron url is declared both ways.
@app.post("/update/{frequency}", response_class=PlainTextResponse)
@app.post("/update/{frequency}/", response_class=PlainTextResponse, include_in_schema=False)
async def update(frequency: str, x_aws_sqsd_taskname: str = Header(), x_aws_sqsd_scheduled_at: str = Header()):
    """A periodic task (empty body): its name and tick come in headers."""
    if frequency not in jobs.UPDATE_FREQUENCIES:
        raise HTTPException(400, f"unknown update frequency {frequency!r}")
    return jobs.update(frequency, x_aws_sqsd_taskname, x_aws_sqsd_scheduled_at)


@app.post("/purge-sessions", response_class=PlainTextResponse)
@app.post("/purge-sessions/", response_class=PlainTextResponse, include_in_schema=False)
async def purge_sessions(x_aws_sqsd_scheduled_at: str = Header()):
    """A periodic task."""
    return jobs.purge_sessions(x_aws_sqsd_scheduled_at)
