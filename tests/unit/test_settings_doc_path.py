"""`python -m worker_tier_cdk.settings_doc` from a checkout writes the checkout's page, whatever the current directory."""

from __future__ import annotations

from pathlib import Path

from worker_tier_cdk import settings_doc

REPO = Path(__file__).resolve().parents[2]


def test_the_default_page_is_the_checkouts_from_any_directory(tmp_path, monkeypatch):
    # GIVEN the generator run from a directory that is not the repository root
    monkeypatch.chdir(tmp_path)
    # WHEN it checks its default page  THEN it checks the checkout's docs/settings.md, which is current
    assert settings_doc.DEFAULT_OUTPUT == REPO / "docs" / "settings.md"
    assert settings_doc.main(["--check"]) == 0
    assert not (tmp_path / "docs").exists()
