"""The dashboard's security: who may load a page, and which requests may act.

- **A token, always.** Loopback is not private: any user of the machine can connect to 127.0.0.1. The printed
  URL carries the token once (``?token=``); the server answers with an HttpOnly, SameSite=Strict cookie holding
  it and a redirect that drops it from the address bar and the history. A request without the cookie (or with
  another token) gets 401. ``--no-token`` is for a single-user machine, on loopback only.
- **The Host header** must name the address the server is bound to (``localhost`` too on loopback), so a page of
  another site whose name resolves to 127.0.0.1 (DNS rebinding) is refused before anything runs.
- **Actions are POSTs** with a synchronizer token (``csrf_token``, checked with ``hmac.compare_digest``) and an
  ``Origin`` (else ``Referer``) of this very server; no GET changes anything.
- **Headers**: a CSP without inline script or style, no framing, ``no-store``, no sniffing, and
  ``Referrer-Policy: same-origin``. Not ``no-referrer``: under it browsers send ``Origin: null`` on a form POST
  (the Fetch standard's origin serialization), which would make this server's own forms indistinguishable from
  a sandboxed attacker's.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlencode, urlsplit

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from worker_tier.core.errors import WorkerTierError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 43 characters, 256 bits
MIN_TOKEN_CHARS = 16  # a --token shorter than this is refused
TOKEN_PARAMETER = "token"
CSRF_FIELD = "csrf_token"
COOKIE_PREFIX = "worker_tier_ui_"  # + the port: cookies are not kept apart by port, two dashboards would clash
LOOPBACK_NAMES = ("localhost",)
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)
UNAUTHORIZED_PAGE = ("<!doctype html><title>Worker Tier dashboard: token needed</title><h1>Token needed</h1>"
                     "<p>Open the URL <code>worker-tier ui</code> printed (it carries the token once), in this browser.</p>")


class GuardError(WorkerTierError, ValueError):
    """A dashboard that cannot be served safely as asked (no token off loopback, a short token)."""


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is this machine's loopback."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(host: str, token: str | None) -> None:
    """GuardError naming the rule when ``token`` is missing off loopback, or too short to guess at."""
    if token is None and not is_loopback(host):
        raise GuardError(f"--host {host} without a token: any machine that reaches {host} could act on the queues; "
                         "drop --no-token (a token is made and printed), or bind 127.0.0.1")
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise GuardError(f"--token must be at least {MIN_TOKEN_CHARS} characters, got {len(token)}; leave it out to "
                         "have one made")


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """The Host header values a browser sends to this server; None (any) for a wildcard bind, where the token guards."""
    if host in ("0.0.0.0", "::", ""):
        return None
    names = {host, *(LOOPBACK_NAMES if is_loopback(host) else ())}
    return frozenset(f"{name}:{port}".lower() for name in (f"[{n}]" if ":" in n else n for n in names))


# Sec-Fetch-Site values of a request another page made (https://www.w3.org/TR/fetch-metadata/): refused, except the
# token's own login (a pasted or --open link). "same-origin", "none" (typed, bookmarked) and no header (not a browser)
# go on.
OTHER_SITES = frozenset({"same-site", "cross-site"})


def same(given: str | None, expected: str) -> bool:
    """``given == expected`` in constant time (no early exit an attacker could time)."""
    return given is not None and hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


class Guard:
    """ASGI middleware: the Host check, the token cookie, the POST origin check, and the security headers."""

    def __init__(self, app: ASGIApp, *, token: str | None, hosts: frozenset[str] | None, port: int) -> None:
        self.app, self.token, self.hosts = app, token, hosts
        self.cookie = f"{COOKIE_PREFIX}{port}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(Request(scope))

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        if refusal is not None:
            await refusal(scope, receive, with_headers)
        else:
            await self.app(scope, receive, with_headers)

    def _refusal(self, request: Request) -> Response | None:
        """The answer that refuses ``request``, or None when it may go on."""
        host = request.headers.get("host", "").lower()
        if self.hosts is not None and host not in self.hosts:
            return HTMLResponse(f"Host {host!r} is not this dashboard's address", status_code=403)
        if self.token is not None:
            given = request.query_params.get(TOKEN_PARAMETER)
            if given is not None and request.method == "GET":
                return self._login(request, given)
            if not same(request.cookies.get(self.cookie), self.token):
                return HTMLResponse(UNAUTHORIZED_PAGE, status_code=401)
        if request.headers.get("sec-fetch-site") in OTHER_SITES:
            # A page of another port of this host is same-site (cookies are per host): its frame or image would
            # carry the cookie, and a DLQ page's read is not free of effects (it holds the letters it reads).
            return HTMLResponse("request from another site's page refused: open the dashboard's own address",
                                status_code=403)
        if request.method not in ("GET", "HEAD") and not same_origin(request):
            return HTMLResponse("cross-origin request refused: actions come from this dashboard's own pages",
                                status_code=403)
        return None

    def _login(self, request: Request, given: str) -> Response:
        """The token from the URL: a cookie, and the same page without it in the address."""
        if not same(given, self.token or ""):
            return HTMLResponse(UNAUTHORIZED_PAGE, status_code=401)
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != TOKEN_PARAMETER]
        here = "/" + request.url.path.lstrip("/")  # never "//host/...": a redirect off this server
        response = RedirectResponse(here + (f"?{urlencode(rest)}" if rest else ""), status_code=303)
        response.set_cookie(self.cookie, self.token or "", httponly=True, samesite="strict", path="/")
        return response


def same_origin(request: Request) -> bool:
    """Whether a POST comes from this server's own page: its Origin (else its Referer) is this Host's."""
    expected = f"{request.url.scheme}://{request.headers.get('host', '')}".lower()
    origin = request.headers.get("origin")
    if origin is not None:
        return origin.lower() == expected
    referer = urlsplit(request.headers.get("referer", ""))
    return f"{referer.scheme}://{referer.netloc}".lower() == expected


async def checked_form(request: Request, csrf_token: str) -> FormData:
    """The POST's form, once its ``csrf_token`` field is this server's; HTTPException 403 otherwise."""
    form = await request.form()
    given = form.get(CSRF_FIELD)
    if not isinstance(given, str) or not same(given, csrf_token):
        raise HTTPException(403, "missing or wrong csrf_token: reload the page and submit its form again")
    return form
