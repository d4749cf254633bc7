"""The example worker's views, written as EB worker apps write them: only sqsd may POST, JSON tasks, cron urls."""

from __future__ import annotations

import json
from functools import wraps

from django.http import HttpResponse, HttpResponseBadRequest
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from examples import jobs


def from_sqsd(view):
    """A POST from the worker daemon only (User-Agent aws-sqsd/<version>); anyone else gets a 400."""

    @csrf_exempt  # sqsd sends no CSRF token
    @require_POST
    @wraps(view)
    def checked(request, *args, **kwargs):
        if "aws-sqsd" not in request.headers.get("User-Agent", ""):
            return HttpResponseBadRequest("this endpoint only takes messages from the worker daemon (aws-sqsd)")
        try:
            return view(request, *args, **kwargs)
        except jobs.StoreBusyError as error:
            return HttpResponse(str(error), status=500)
        except jobs.RateLimitedError as error:
            return HttpResponse(str(error), status=429, headers={"Retry-After": str(error.retry_after_seconds)})

    return checked


@from_sqsd
def run_task(request):
    """An ordinary message: the JSON body names the task and its arguments."""
    try:
        message = json.loads(request.body)
    except ValueError:
        return HttpResponseBadRequest("the body is not JSON")
    function = jobs.TASKS.get(message.get("task"))
    if function is None:
        return HttpResponseBadRequest(f"unknown task {message.get('task')!r}")
    attempt = int(request.headers["X-Aws-Sqsd-Receive-Count"])
    return HttpResponse(function(attempt, **message.get("arguments", {})))


@from_sqsd
def update(request, frequency):
    """A periodic task (empty body): its name and tick come in headers."""
    if frequency not in jobs.UPDATE_FREQUENCIES:
        return HttpResponseBadRequest(f"unknown update frequency {frequency!r}")
    headers = request.headers
    return HttpResponse(jobs.update(frequency, headers["X-Aws-Sqsd-Taskname"], headers["X-Aws-Sqsd-Scheduled-At"]))


@from_sqsd
def purge_sessions(request):
    """A periodic task; cron.yaml's url has no trailing slash, the route takes both."""
    return HttpResponse(jobs.purge_sessions(request.headers["X-Aws-Sqsd-Scheduled-At"]))
