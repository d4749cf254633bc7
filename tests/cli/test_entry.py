"""The entry points: `worker-tier` and `python -m worker_tier`, click kept out of the runtime, the cli extra."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from worker_tier.__main__ import CLI_EXTRA_MISSING, main

REPO = Path(__file__).resolve().parents[2]


def _python(code: str, hide: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter where importing any of ``hide`` fails, as when it is not installed."""
    prelude = f"import sys; sys.modules.update(dict.fromkeys({hide!r})); "
    return subprocess.run([sys.executable, "-c", prelude + code], check=False, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])})


def test_the_console_script_is_the_runtime_main():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["worker-tier"] == "worker_tier.__main__:main"


def test_python_m_worker_tier_hands_other_commands_to_the_cli(capsys):
    # WHEN `python -m worker_tier --help` runs  THEN it is the command line's help, listing its commands
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage: worker-tier" in out and all(c in out for c in ("dlq", "redrive", "send", "status"))


def test_worker_is_still_the_container_worker(capsys):
    # WHEN `python -m worker_tier worker` runs without its queue  THEN it is the container worker's error, exit 2
    assert main(["worker"]) == 2
    assert "WORKER_TIER_QUEUE_URL must be set: the container worker reads its queue_url from it" in capsys.readouterr().err


def test_without_click_the_cli_says_to_install_the_cli_extra():
    result = _python("from worker_tier.__main__ import main; sys.exit(main(['status']))", hide=("click",))
    assert result.returncode == 2
    assert result.stderr == CLI_EXTRA_MISSING.format(missing="click") + "\n"
    assert result.stderr == "worker-tier: click not installed; the command line needs the cli extra: pip install 'worker-tier[cli]'\n"


def test_the_lambda_handlers_do_not_import_click_or_the_cli():
    code = ("import worker_tier.handlers.worker, worker_tier.handlers.dispatcher, worker_tier.__main__; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('click', 'worker_tier_cli')))")
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_only_main_of_the_runtime_imports_the_cli():
    importing = sorted(str(p.relative_to(REPO)) for p in (REPO / "src" / "worker_tier").rglob("*.py")
                       if "worker_tier_cli" in p.read_text())
    assert importing == ["src/worker_tier/__main__.py"]
