"""The dashboard's end-to-end world: `make run` and `worker-tier ui` as real subprocesses, driven in Debian's Chromium.

``LocalRun`` starts ``python -m worker_tier_local`` (what `make run` runs) and reads its banner's export line, as a
person pastes it into another shell; ``Dashboard`` starts ``python -m worker_tier ui --port 0`` in that shell's
environment and reads the URL (with its token) it prints first. The browser is Debian's ``chromium`` driven by
Playwright through ``executable_path``: nothing here downloads a browser, and without /usr/bin/chromium the tests
skip saying how to install it (``.ci/run`` does).

Screenshots go to a temporary directory always, and also to the directory ``SCREENSHOTS_VARIABLE`` names
(`make screenshots` sets it to docs/images).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from tests.support import stacks

REPO = stacks.REPO
CHROMIUM = Path("/usr/bin/chromium")
# A name of another site that resolves to this machine, as a DNS-rebinding attacker's does (Chromium's own resolver).
REBINDING_HOST = "rebinding.test"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", f"--host-resolver-rules=MAP {REBINDING_HOST} 127.0.0.1"]
MISSING_CHROMIUM = (f"the dashboard's browser tests need Debian's Chromium at {CHROMIUM}, which is not installed: "
                    "`apt-get install chromium` (as root; .ci/run installs it)")
SCREENSHOTS_VARIABLE = "DASHBOARD_SCREENSHOTS"  # `make screenshots`: DASHBOARD_SCREENSHOTS=docs/images
VIEWPORT = {"width": 1280, "height": 800}
DASHBOARD_URL = re.compile(r"Worker Tier dashboard: (http://127\.0\.0\.1:\d+/\S*)")  # worker-tier ui's first line
BANNER_DASHBOARD_URL = re.compile(r"  dashboard +(http://127\.0\.0\.1:\d+/\S*)")  # make run ARGS=--ui's banner
STARTUP_SECONDS = 60.0


class OutputReader:
    """A subprocess's stdout read line by line on a thread, searchable while it runs; its stderr kept by another
    (so neither pipe ever fills and blocks it)."""

    def __init__(self, process: subprocess.Popen, name: str) -> None:
        self.process, self.name = process, name
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True).start()
        threading.Thread(target=self._read_errors, name=f"{name}-stderr", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _read_errors(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.errors.append(line.rstrip("\n"))

    def wait_for(self, pattern: str | re.Pattern[str], seconds: float = 30.0, after: int = 0) -> re.Match[str]:
        """The first match of ``pattern`` in a line (from line ``after`` on); AssertionError with the output if none comes."""
        compiled = re.compile(pattern)
        deadline = time.monotonic() + seconds
        with self._changed:
            while True:
                for line in self.lines[after:]:
                    if match := compiled.search(line):
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._changed.wait(0.5)):
                    raise AssertionError(f"{self.name}: {compiled.pattern!r} never appeared (exit {self.process.poll()}); "
                                         "its output:\n" + "\n".join(self.lines[-60:] + self.errors[-20:]))
                self._changed.wait(min(left, 0.5))

    def text(self) -> str:
        with self._changed:
            return "\n".join(self.lines)


def _stop(process: subprocess.Popen, seconds: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it outlives ``seconds``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class LocalRun:
    """`make run` (``python -m worker_tier_local --port 0``) in a subprocess whose roles' calls are IAM-enforced.

    ``environment`` is the test's (tests/e2e/conftest.py's ``iam_enforced`` puts the IAM world's variables in it);
    the subprocess gets ``stacks.subprocess_pythonpath()``, so its worker, dispatcher and periodic calls are checked.
    """

    def __init__(self, *args: str, settings: Path | None = None, variables: dict[str, str] | None = None) -> None:
        command = [sys.executable, "-m", "worker_tier_local", "--port", "0", "--duration", "600", *args]
        if settings is not None:
            command += ["--settings", str(settings)]
        environment = {**os.environ, **(variables or {}), "PYTHONPATH": stacks.subprocess_pythonpath()}
        self.process = subprocess.Popen(command, env=environment, cwd=REPO, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.output = OutputReader(self.process, "make run")
        try:
            self.exported = _exported(self.output.wait_for(r"^  export ", STARTUP_SECONDS).string)
            self.output.wait_for(r"next cron tick at |sent  ", STARTUP_SECONDS)  # past the banner: the run loop starts
        except BaseException:
            self.stop()
            raise

    @property
    def endpoint_url(self) -> str:
        return self.exported["AWS_ENDPOINT_URL"]

    def client(self, service: str) -> Any:
        """A boto3 client of the test's own (not a role's) on this environment's moto."""
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint_url, region_name=self.exported["AWS_REGION"],
                            aws_access_key_id="local", aws_secret_access_key="local")

    def resource(self, variable: str) -> str:
        """A resource the export line names (``worker_tier.core.contract``'s ``*_VARIABLE``: the DLQ's URL, a table)."""
        return self.exported[variable]

    def producer(self) -> Any:
        """``Client.from_env()`` as another shell with the export line gets it (the test's own calls, not a role's)."""
        from worker_tier import Client

        return Client.from_env(self.exported, sqs=self.client("sqs"), dynamodb=self.client("dynamodb"))

    def depth(self, variable: str) -> int:
        """Visible plus in flight plus delayed messages of the queue ``variable`` names (a dashboard's peek hides none)."""
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"]
        attributes = self.client("sqs").get_queue_attributes(QueueUrl=self.resource(variable), AttributeNames=names)
        return sum(int(attributes["Attributes"].get(name, 0)) for name in names)

    def dead_letters(self) -> list[dict[str, Any]]:
        """The DLQ's visible messages, read without deleting them (visible again at once): body and String attributes.

        A message the dashboard holds while it reads the DLQ is not among them: ``eventually`` the expected ones.
        """
        from worker_tier.core import contract

        received = self.client("sqs").receive_message(
            QueueUrl=self.resource(contract.DLQ_URL_VARIABLE), MaxNumberOfMessages=10, VisibilityTimeout=0,
            MessageAttributeNames=["All"]).get("Messages") or []
        return [{"body": m["Body"], "attributes": {k: v.get("StringValue") for k, v in m.get("MessageAttributes", {}).items()}}
                for m in received]

    def shell(self) -> dict[str, str]:
        """A fresh shell's environment with the banner's export line pasted (no AWS or Worker Tier variable of its own)."""
        from worker_tier.core import contract

        fresh = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", contract.ENVIRONMENT_PREFIX))}
        return {**fresh, **self.exported, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}

    def stop(self) -> None:
        _stop(self.process)


def _exported(line: str) -> dict[str, str]:
    """The variables the banner's export line sets, read as a shell would (PATH left to the shell it is pasted in)."""
    words = shlex.split(line)
    assert words[0] == "export", line
    return {name: value for name, value in (w.split("=", 1) for w in words[1:]) if name != "PATH"}


class Dashboard:
    """`worker-tier ui --port 0` in ``shell`` (a shell with `make run`'s export line pasted): its URL with the token."""

    def __init__(self, shell: dict[str, str], *args: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "worker_tier", "ui", "--port", "0", *args], env=shell,
                                        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.output = OutputReader(self.process, "worker-tier ui")
        try:
            found = self.output.wait_for(DASHBOARD_URL, STARTUP_SECONDS)
            assert found.string == self.output.lines[0], f"the URL is not the first line: {self.output.text()}"
            self.url = found.group(1)  # http://127.0.0.1:PORT/?token=...
            self.origin = re.match(r"http://[^/]+", self.url).group(0)  # type: ignore[union-attr]
            self._wait_listening()
        except BaseException:
            self.stop()
            raise

    def _wait_listening(self) -> None:
        """Until the server answers (it may print its URL before it accepts)."""
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                urllib.request.urlopen(self.origin + "/", timeout=2).close()
                return
            except urllib.error.HTTPError:
                return  # it answers (without the token, a refusal)
            except OSError:
                assert time.monotonic() < deadline and self.process.poll() is None, (
                    f"the dashboard never answered at {self.origin}: {self.output.text()}")
                time.sleep(0.1)

    def at(self, path: str) -> str:
        """``path`` on the dashboard (the token is the session cookie's after the first visit to ``url``)."""
        return self.origin + path

    def stop(self) -> None:
        _stop(self.process)


def launch_chromium(playwright: Any) -> Any:
    """Debian's Chromium, headless, in a fresh profile (Playwright's launch makes one), never a downloaded browser."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)


class Screenshots:
    """Each page's picture: always in ``directory``; also in $DASHBOARD_SCREENSHOTS when set (docs/images)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        published = os.environ.get(SCREENSHOTS_VARIABLE)
        self.published = Path(published).resolve() if published else None

    def take(self, page: Any, name: str, full_page: bool = False) -> Path:
        """``dashboard-NAME.png`` of ``page`` as it is now; the temporary copy's path."""
        path = self.directory / f"dashboard-{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        if self.published is not None:
            self.published.mkdir(parents=True, exist_ok=True)
            (self.published / path.name).write_bytes(path.read_bytes())
        return path


def eventually(check: Callable[[], Any], seconds: float = 20.0, interval: float = 0.25) -> Any:
    """``check()``'s first truthy value; AssertionError when none comes within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, f"{getattr(check, '__name__', check)} never held within {seconds} s"
        time.sleep(interval)
    return value


class AttackerSite:
    """Another origin on this machine (127.0.0.1, another port) serving one HTML page, as a malicious local page would."""

    def __init__(self, html: str) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        body = html.encode()

        class _Page(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: no access log on stderr."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        threading.Thread(target=self._server.serve_forever, name="attacker-site", daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def follow_nav(page: Any, label: str) -> None:
    """Click the dashboard's navigation link ``label`` ("Dead letters", "Delayed", ...), as a person moves between pages."""
    page.locator("nav").get_by_role("link", name=label, exact=True).click()
    page.wait_for_load_state()
