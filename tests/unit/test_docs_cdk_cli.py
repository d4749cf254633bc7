"""The docs name the CDK CLI so that npx runs it from a plain shell."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Without node_modules, `npx cdk` resolves the registry's unrelated `cdk` package, not aws-cdk.
BARE_NPX_CDK = re.compile(r"\bnpx\s+(?:--?\S+\s+)*cdk\b")


def test_no_page_tells_the_reader_to_run_bare_npx_cdk():
    # GIVEN the README and every docs/ page  WHEN searched for `npx cdk`  THEN none says it
    found = [f"{page.relative_to(REPO)}:{number}: {line.strip()}"
             for page in PAGES
             for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1)
             if BARE_NPX_CDK.search(line)]
    assert found == []


def test_the_pattern_finds_bare_npx_cdk_and_passes_the_pinned_cli():
    # GIVEN the forms a page might use  WHEN matched  THEN only the bare ones are found
    assert BARE_NPX_CDK.search("make deploy     # or: npx cdk deploy")
    assert BARE_NPX_CDK.search("npx --yes cdk deploy")
    assert not BARE_NPX_CDK.search("npx --yes aws-cdk@2 deploy")
    assert not BARE_NPX_CDK.search("npx aws-cdk@2 bootstrap")
