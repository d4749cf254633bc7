"""What every command shares: the AWS clients (made once, injectable), the target, the clock, the terminal."""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import boto3

from worker_tier_cli.dead_letters import RECEIVE_WAIT_SECONDS
from worker_tier_cli.target import ENDPOINT_VARIABLE, Target

_RELATIVE = re.compile(r"^(\d+)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/worker-tier``, else ``~/.local/state/worker-tier`` (the XDG base directory default)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "worker-tier"


@dataclass
class Runtime:
    """The process's edges, injected by tests: a boto3-like ``client(service, **kwargs)``, the clock, sleep, the terminal."""

    client: Callable[..., Any] = boto3.client
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    interactive: Callable[[], bool] = lambda: sys.stdin.isatty() and sys.stdout.isatty()
    wait_seconds: int = RECEIVE_WAIT_SECONDS
    # Where redrive keeps its journal (what a stopped run sent): $XDG_STATE_HOME/worker-tier, else ~/.local/state/...
    state_dir: Path | None = field(default_factory=default_state_dir)
    # The WORKER_TIER_* variables naming the deployment (worker_tier_cli.target), as Client.from_env() reads them.
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)


@dataclass
class Session:
    """One command's runtime, endpoint, region and target; clients are made on first use."""

    runtime: Runtime
    endpoint_url: str | None
    region: str | None
    target: Target = field(init=False)
    _clients: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, runtime: Runtime, endpoint_url: str | None = None, region: str | None = None,
             given: Mapping[str, str] | None = None) -> Session:
        """A session whose target reads ``runtime``'s variables and the stack's outputs, with ``given`` resources first
        (the deployment options by resource name: ``queue_url``, ``stack``...)."""
        session = cls(runtime, endpoint_url, region)
        session.target = Target(lambda: session.client("cloudformation"), environ=runtime.environ,
                                endpoint=lambda: session.endpoint_url or runtime.environ.get(ENDPOINT_VARIABLE))
        for name, value in (given or {}).items():
            session.target.give(name, value)
        return session

    def client(self, service: str, config: Any = None) -> Any:
        """The client of ``service``; with ``config`` (a botocore Config, e.g. no retries) a second one kept apart."""
        key = service if config is None else f"{service}:{id(config)}"
        if key not in self._clients:
            kwargs: dict[str, Any] = {k: v for k, v in (("endpoint_url", self.endpoint_url), ("region_name", self.region)) if v}
            if config is not None:
                kwargs["config"] = config
            self._clients[key] = self.runtime.client(service, **kwargs)
        return self._clients[key]

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.runtime.clock(), timezone.utc)


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """An ISO 8601 time (UTC when it names no zone); given ``now`` (``--since``), an age too: 30m, 2h, 7d before it."""
    relative = _RELATIVE.match(text.strip())
    if relative and now is not None:
        return now - timedelta(seconds=int(relative.group(1)) * _UNIT_SECONDS[relative.group(2)])
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        ages = " or an age (30m, 2h, 7d)" if now is not None else ""
        raise ValueError(f"expected an ISO 8601 time (2026-11-22T09:30:00Z){ages}, got {text!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
