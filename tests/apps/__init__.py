"""EB worker apps written as public ones are (Flask, Django, FastAPI), for the app adapter's functional tests.

Each answers sqsd's POSTs the way real EB workers do: a JSON ``{"task": ..., "arguments": ...}`` body on
``/``, periodic tasks on their ``cron.yaml`` urls (a pattern, ``/update/<frequency>``, and a trailing
slash, ``/cleanup/``), a 400 for a request whose User-Agent lacks ``aws-sqsd``, and tasks that answer
500 once then 200 (``flaky``), 429 with Retry-After (``throttled``), or raise (``crash``).
Each records what it received in ``received``, a list the tests clear.
"""

from __future__ import annotations

# What every app answers, in one place: the tests assert against these.
RETRY_AFTER_SECONDS = 120
CRASH_MESSAGE = "database unreachable"
FLAKY_BODY = "temporarily failing: try again"
