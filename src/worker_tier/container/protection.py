"""ECS task scale-in protection for the container worker: on while it holds work, renewed by a timer.

The agent's endpoint sets protection for ``ExpiresInMinutes`` at most, so a task busy
for longer must renew it. Renewal runs on its own thread, not the receive loop: a
container whose every slot is taken by long tasks does not receive, yet must stay
protected. https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-scale-in-protection-endpoint.html
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from typing import Any, Callable

from worker_tier.core.message import safe_repr
from worker_tier.core.observability import logger

PROTECTION_MINUTES = 60
# Protection is renewed once half its expiry has passed; the timer checks at most this often.
PROTECTION_CHECK_SECONDS = 5.0
AGENT_TIMEOUT_SECONDS = 5


class TaskProtection:
    """ECS task scale-in protection through the agent's endpoint; a no-op outside ECS.

    Examples
    --------
    >>> protection = TaskProtection(agent_uri="")  # outside ECS: every call does nothing
    >>> protection.hold(True); protection.enabled
    False
    """

    def __init__(
        self,
        agent_uri: str | None = None,
        expires_minutes: float = PROTECTION_MINUTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.agent_uri = agent_uri if agent_uri is not None else os.environ.get("ECS_AGENT_URI")
        self.expires_minutes = expires_minutes
        self.enabled = False
        self._clock = clock
        self._set_at = 0.0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def renew_after_seconds(self) -> float:
        """Seconds after which a protection still needed is renewed: half its expiry."""
        return self.expires_minutes * 30

    def hold(self, busy: bool) -> None:
        """Protect while busy (renewed at half its expiry), unprotect when idle."""
        if not self.agent_uri:
            return
        with self._lock:
            renew = busy and self._clock() - self._set_at > self.renew_after_seconds
            if busy != self.enabled or renew:
                self._put(busy)

    def start(self, busy: Callable[[], bool]) -> None:
        """Call ``hold(busy())`` on a daemon thread until ``stop``, so protection is renewed while work runs."""
        if not self.agent_uri:
            return
        self._stopped.clear()
        check_seconds = min(PROTECTION_CHECK_SECONDS, self.renew_after_seconds / 2)
        self._thread = threading.Thread(
            target=self._run, args=(busy, check_seconds), name="worker-tier-protection", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the renewal timer (protection stays as it is: ``hold(False)`` clears it)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self, busy: Callable[[], bool], check_seconds: float) -> None:
        while not self._stopped.wait(check_seconds):
            try:
                self.hold(busy())
            except Exception as error:  # the timer must not die: the next check tries again
                logger.warning("task protection check failed", extra={"error": safe_repr(error)})

    def _put(self, enabled: bool) -> None:
        """PUT the state; on success remember it. A failure is logged and retried by the next check."""
        body: dict[str, Any] = {"ProtectionEnabled": enabled}
        if enabled:
            body["ExpiresInMinutes"] = self.expires_minutes
        request = urllib.request.Request(
            f"{self.agent_uri}/task-protection/v1/state",
            data=json.dumps(body).encode(),
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=AGENT_TIMEOUT_SECONDS) as response:
                failure = _failure(response.read())
        except OSError as error:  # protection is best effort: work goes on, the failure is logged
            failure = repr(error)
        if failure is not None:
            logger.warning("task protection update failed", extra={"enabled": enabled, "error": failure})
            return
        self.enabled, self._set_at = enabled, self._clock()


def _failure(body: bytes) -> str | None:
    """The agent's refusal in a 200 answer ({"failure": ...} or {"error": ...}), else None."""
    try:
        answer = json.loads(body or b"{}")
    except ValueError:
        return None
    if isinstance(answer, dict):
        for key in ("failure", "error"):
            if answer.get(key):
                return f"{key}: {safe_repr(answer[key])}"
    return None
