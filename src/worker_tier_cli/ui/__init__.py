"""``worker-tier ui``: the web dashboard, a page for each thing ``status``, ``dlq``, ``redrive``, ``delayed`` and
``tail`` show (docs/dashboard.md).

Why Starlette, Jinja2 and uvicorn, with server-rendered pages and a little script: an on-call person needs
tables, forms and confirmations, which HTML does without a front-end build; every number and action comes from
the command line's own modules (``worker_tier_cli``), so the pages add no logic of their own to keep in step.
Starlette is small, typed and well kept (it is under FastAPI); it gives routing, forms (python-multipart), a
test client, and plain ASGI middleware for the security checks (``guard``); Jinja2 escapes every value by
default, which matters when message bodies and reasons are written by whoever sent the message; uvicorn serves
it on one chosen socket. None of it is installed unless asked for: the ``ui`` extra.
"""
