"""Settings at synth: read cdk.json's ``worker_tier`` context into the validated ``Settings``."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from constructs import Construct

from worker_tier.core.errors import SettingsError
from worker_tier.core.settings import Settings

CONTEXT_KEY = "worker_tier"

# Set by the CDK CLI for the app it runs: cdk.json's context merged with cdk.context.json and --context.
CLI_CONTEXT_VARIABLE = "CDK_CONTEXT_JSON"
# Set by the CDK CLI beside it when the context is too large for a variable: a file holding the rest.
CLI_CONTEXT_OVERFLOW_VARIABLE = "CONTEXT_OVERFLOW_LOCATION_ENV"

__all__ = ["CONTEXT_KEY", "Settings", "SettingsError", "app_context", "settings_from_context"]


def app_context(cdk_json: str | os.PathLike[str], environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The context to build a ``cdk.App`` with: none under the CDK CLI (it passes its own), else cdk.json's.

    So ``python app.py`` (``make synth``) synthesizes the same settings as ``cdk synth`` and ``cdk deploy``.
    SettingsError names a cdk.json that is not a JSON object with an object ``context``.
    """
    if CLI_CONTEXT_VARIABLE in environ or CLI_CONTEXT_OVERFLOW_VARIABLE in environ:
        return {}
    path = Path(cdk_json)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SettingsError(f"{str(path)!r} could not be read as JSON: {error}") from error
    context = document.get("context", {}) if isinstance(document, dict) else None
    if not isinstance(context, dict):
        raise SettingsError(f"{str(path)!r} must be a JSON object whose 'context' is an object, got {document!r}")
    return context


def settings_from_context(scope: Construct) -> Settings:
    """The ``worker_tier`` context of ``scope`` as Settings; SettingsError names any bad value."""
    values = scope.node.try_get_context(CONTEXT_KEY)
    return Settings.from_mapping(values or {})
