"""An Elastic Beanstalk worker app in Flask, as EB teams write them: sqsd POSTs every message to it.

Ordinary messages arrive at ``/`` (EB's HttpPath) with a JSON body ``{"task": ..., "arguments": ...}``;
the ticks of ``examples/cron.yaml`` arrive at their urls with an empty body. Status 200 deletes the message;
anything else is a failure the worker retries. Run it: ``make run ARGS="--app examples.flask_app:app"``.
"""

from __future__ import annotations

from flask import Flask, abort, request

from examples import jobs

app = Flask(__name__)
# cron.yaml's "/update/often/" reaches "/update/<frequency>", and "/purge-sessions" reaches "/purge-sessions/".
app.url_map.strict_slashes = False


@app.before_request
def only_from_sqsd():
    """The worker daemon's User-Agent is aws-sqsd/<version>; anyone else gets a 400."""
    if "aws-sqsd" not in request.headers.get("User-Agent", ""):
        abort(400, "this endpoint only takes messages from the worker daemon (aws-sqsd)")


@app.errorhandler(jobs.StoreBusyError)
def store_busy(error: jobs.StoreBusyError):
    return str(error), 500


@app.errorhandler(jobs.RateLimitedError)
def rate_limited(error: jobs.RateLimitedError):
    return str(error), 429, {"Retry-After": str(error.retry_after_seconds)}


@app.post("/")
def run_task():
    """An ordinary message: the JSON body names the task and its arguments."""
    message = request.get_json(force=True, silent=True) or {}
    function = jobs.TASKS.get(message.get("task"))
    if function is None:
        abort(400, f"unknown task {message.get('task')!r}")
    return function(int(request.headers["X-Aws-Sqsd-Receive-Count"]), **message.get("arguments", {}))


@app.post("/update/<frequency>")
def update(frequency: str):
    """A periodic task (empty body): its name and tick come in headers."""
    if frequency not in jobs.UPDATE_FREQUENCIES:
        abort(400, f"unknown update frequency {frequency!r}")
    return jobs.update(frequency, request.headers["X-Aws-Sqsd-Taskname"], request.headers["X-Aws-Sqsd-Scheduled-At"])


@app.post("/purge-sessions/")
def purge_sessions():
    """A periodic task declared with a trailing slash; cron.yaml's url has none."""
    return jobs.purge_sessions(request.headers["X-Aws-Sqsd-Scheduled-At"])
