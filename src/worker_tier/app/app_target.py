"""Where an Elastic Beanstalk worker app receives its messages: the request sqsd would POST, and the answer.

Two targets deliver a ``SqsdRequest`` and return an ``AppResponse``: an app called
in-process (WSGI or ASGI, the ``app`` setting) and an app reached over HTTP from the
container worker (``app_port``). Both share sqsd's request rules (``worker_tier.app.sqsd``)
and the worker's outcome rules, so a message fares the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class SqsdRequest:
    """One POST as sqsd would send it: where, with which headers, and the body.

    ``headers`` keep sqsd's spelling and order (``X-Aws-Sqsd-Msgid``...); ``path`` may
    carry a query string, as a ``cron.yaml`` url can.
    """

    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    method: str = "POST"
    # How long the app may take to answer, seconds (the worker sets it: inactivity_timeout, never past the
    # invocation's remaining time less timeout_margin); None: no bound of Worker Tier's own.
    timeout_seconds: float | None = None

    def header(self, name: str) -> str | None:
        """A header's value by case-insensitive name, or None."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key.lower() == wanted), None)


@dataclass(frozen=True)
class AppResponse:
    """The app's answer: its status, its headers (lower-case names) and its body.

    ``error`` describes an exception the app raised or logged while answering (its traceback), or is ''.
    """

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    error: str = ""


class AppTarget(Protocol):
    """Delivers a request to the app and returns its answer; raises when no answer came (the app raised,
    a socket error, a timeout), and the worker treats that as the message's failure."""

    def deliver(self, request: SqsdRequest) -> AppResponse: ...
