"""A Flask EB worker, as public ones are written (compare UrbanCCD-UChicago/plenario's worker)."""

from __future__ import annotations

from typing import Any

from flask import Flask, abort, jsonify, request

from tests.apps import CRASH_MESSAGE, FLAKY_BODY, RETRY_AFTER_SECONDS

app = Flask(__name__)
received: list[dict[str, Any]] = []


@app.before_request
def only_sqsd() -> Any:
    received.append({"path": request.path, "headers": dict(request.headers), "body": request.get_data(as_text=True)})
    if "aws-sqsd" not in request.headers.get("User-Agent", ""):
        abort(400, "only sqsd may post here")
    return None


@app.route("/", methods=["POST"])
def run_task() -> Any:
    job = request.get_json(force=True)
    name, arguments = job["task"], job.get("arguments", {})
    if name == "send_email":
        return jsonify(sent_to=arguments["to"])
    if name == "flaky" and request.headers["X-Aws-Sqsd-Receive-Count"] == "1":
        return FLAKY_BODY, 500
    if name == "flaky":
        return "done"
    if name == "throttled":
        return "slow down", 429, {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if name == "crash":
        raise RuntimeError(CRASH_MESSAGE)
    return f"unknown task {name}", 400


@app.route("/update/<frequency>", methods=["POST"])
def update(frequency: str) -> Any:
    return jsonify(updated=frequency, at=request.headers["X-Aws-Sqsd-Scheduled-At"])


@app.route("/cleanup/", methods=["POST"])
def cleanup() -> Any:
    return "cleaned"
