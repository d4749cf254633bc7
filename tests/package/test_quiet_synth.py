"""An own app's synth on Node 20 is quiet with the variables docs/installing.md gives (jsii's Node banner)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INSTALLING = REPO / "docs" / "installing.md"
SYNTH_TIMEOUT_SECONDS = 120
# A minimal own app: the banner comes with jsii's start, when aws_cdk is imported.
APP = "import aws_cdk as cdk\napp = cdk.App(outdir={outdir!r})\ncdk.Stack(app, 'Own')\napp.synth()\nprint('synthesized')\n"
# jsii's own variables (JSII_SILENCE_WARNING_*), which the tests' conftest sets for the test process.
_SILENCING = re.compile(r"\b(JSII_SILENCE_WARNING_\w+)=(\S+)")


def _synth(tmp_path: Path, variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The minimal app, run in a fresh process with no JSII_SILENCE_* variable but ``variables``."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("JSII_SILENCE_WARNING_")}
    return subprocess.run([sys.executable, "-c", APP.format(outdir=str(tmp_path))], env={**environment, **variables},
                          capture_output=True, text=True, timeout=SYNTH_TIMEOUT_SECONDS, check=False)


def test_the_documented_variables_silence_the_node_banner_and_are_the_makefiles(tmp_path):
    # GIVEN the export line docs/installing.md gives for an own app
    [export] = [line for line in INSTALLING.read_text(encoding="utf-8").splitlines() if line.startswith("export JSII_")]
    variables = dict(_SILENCING.findall(export))
    # WHEN an own app synthesizes with only those set
    result = _synth(tmp_path, variables)
    # THEN it synthesizes with nothing of the banner on stderr, and the Makefile exports the same values
    assert result.returncode == 0 and "synthesized" in result.stdout, result.stderr
    assert "!!" not in result.stderr and "Node" not in result.stderr, result.stderr
    makefile = dict(re.findall(r"^export (JSII_SILENCE_WARNING_\w+) := (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE))
    assert variables == makefile
