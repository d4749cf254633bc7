"""Settings at synth: read cdk.json's ``worker_tier`` context into the validated ``Settings``."""

from __future__ import annotations

from constructs import Construct

from worker_tier.errors import SettingsError
from worker_tier.settings import Settings

CONTEXT_KEY = "worker_tier"

__all__ = ["CONTEXT_KEY", "Settings", "SettingsError", "settings_from_context"]


def settings_from_context(scope: Construct) -> Settings:
    """The ``worker_tier`` context of ``scope`` as Settings; SettingsError names any bad value."""
    values = scope.node.try_get_context(CONTEXT_KEY)
    return Settings.from_mapping(values or {})
