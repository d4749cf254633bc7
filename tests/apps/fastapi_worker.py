"""A FastAPI EB worker (ASGI), as new Python workers are written; its client is opened in its lifespan."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from tests.apps import CRASH_MESSAGE, FLAKY_BODY, RETRY_AFTER_SECONDS

received: list[dict[str, Any]] = []


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    yield {"mailer": "smtp://localhost"}  # what a worker opens once: a client, a pool


app = FastAPI(lifespan=lifespan)


@app.middleware("http")
async def only_sqsd(request: Request, call_next: Any) -> Response:
    received.append({"path": request.url.path, "headers": dict(request.headers), "body": (await request.body()).decode()})
    if "aws-sqsd" not in request.headers.get("user-agent", ""):
        return PlainTextResponse("only sqsd may post here", status_code=400)
    return await call_next(request)  # type: ignore[no-any-return]


@app.post("/")
async def run_task(request: Request, x_aws_sqsd_receive_count: str = Header()) -> Response:
    job = await request.json()
    name, arguments = job["task"], job.get("arguments", {})
    if name == "send_email":
        return JSONResponse({"sent_to": arguments["to"], "via": request.state.mailer})
    if name == "flaky" and x_aws_sqsd_receive_count == "1":
        return PlainTextResponse(FLAKY_BODY, status_code=500)
    if name == "flaky":
        return PlainTextResponse("done")
    if name == "throttled":
        return PlainTextResponse("slow down", status_code=429, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    if name == "crash":
        raise RuntimeError(CRASH_MESSAGE)
    return PlainTextResponse(f"unknown task {name}", status_code=400)


@app.post("/update/{frequency}")
async def update(frequency: str, x_aws_sqsd_scheduled_at: str = Header()) -> Response:
    return JSONResponse({"updated": frequency, "at": x_aws_sqsd_scheduled_at})


@app.post("/cleanup/")
async def cleanup() -> Response:
    return PlainTextResponse("cleaned")
