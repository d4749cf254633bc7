"""A Django EB worker, as public ones are written (compare DataGreed/django-eb-sqs-worker): one module, its views and urls.

``application`` is its WSGI entry point (wsgi.py's), ``asgi_application`` its ASGI one (asgi.py's).
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="tests-only",
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["localhost"],  # sqsd posts to localhost: EB apps already allow it
        MIDDLEWARE=["django.middleware.common.CommonMiddleware"],
        LOGGING_CONFIG=None,
    )

from django.core.asgi import get_asgi_application
from django.core.wsgi import get_wsgi_application
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from tests.apps import CRASH_MESSAGE, FLAKY_BODY, RETRY_AFTER_SECONDS

received: list[dict[str, Any]] = []


def _from_sqsd(view: Any) -> Any:
    """Record the request, and refuse one sqsd did not send (django-eb-sqs-worker checks the User-Agent too)."""
    @csrf_exempt
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        received.append({"path": request.path, "headers": dict(request.headers), "body": request.body.decode()})
        if "aws-sqsd" not in request.headers.get("User-Agent", ""):
            return HttpResponseBadRequest("only sqsd may post here")
        return view(request, *args, **kwargs)  # type: ignore[no-any-return]

    return checked


@_from_sqsd
def run_task(request: HttpRequest) -> HttpResponse:
    job = json.loads(request.body)
    name, arguments = job["task"], job.get("arguments", {})
    if name == "send_email":
        return JsonResponse({"sent_to": arguments["to"]})
    if name == "flaky" and request.headers["X-Aws-Sqsd-Receive-Count"] == "1":
        return HttpResponse(FLAKY_BODY, status=500)
    if name == "flaky":
        return HttpResponse("done")
    if name == "throttled":
        return HttpResponse("slow down", status=429, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    if name == "crash":
        raise RuntimeError(CRASH_MESSAGE)
    return HttpResponseBadRequest(f"unknown task {name}")


@_from_sqsd
def update(request: HttpRequest, frequency: str) -> HttpResponse:
    return JsonResponse({"updated": frequency, "at": request.headers["X-Aws-Sqsd-Scheduled-At"]})


@_from_sqsd
def cleanup(request: HttpRequest) -> HttpResponse:
    return HttpResponse("cleaned")


urlpatterns = [
    path("", run_task),
    path("update/<str:frequency>", update),
    path("cleanup/", cleanup),
]

application = get_wsgi_application()
asgi_application = get_asgi_application()
