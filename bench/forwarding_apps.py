"""The no-op EB worker app the forwarding benchmark serves: it reads the POST's body and answers 200.

``wsgi`` for gunicorn, ``asgi`` for uvicorn; the same two bytes of answer either way, so the figures
compare the worker's forwarding with a client calling the app directly, not the app's work.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

ANSWER = b"ok"
_HEADERS = [("Content-Type", "text/plain"), ("Content-Length", str(len(ANSWER)))]


def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length:
        environ["wsgi.input"].read(length)
    start_response("200 OK", _HEADERS)
    return [ANSWER]


async def asgi(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
    if scope["type"] == "lifespan":
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:
        event = await receive()
        more = event.get("more_body", False)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(ANSWER)).encode())]})
    await send({"type": "http.response.body", "body": ANSWER})
