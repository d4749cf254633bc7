"""``python app.py`` (make synth) reads cdk.json's context as the CDK CLI would pass it."""

from __future__ import annotations

import json

import pytest

from worker_tier.core.errors import SettingsError
from worker_tier_cdk.settings import CLI_CONTEXT_OVERFLOW_VARIABLE, CLI_CONTEXT_VARIABLE, app_context


def test_without_the_cli_the_context_is_cdk_jsons(tmp_path):
    # GIVEN a cdk.json overriding a setting
    cdk_json = tmp_path / "cdk.json"
    cdk_json.write_text(json.dumps({"app": "python app.py", "context": {"worker_tier": {"max_retries": 5}}}))
    # WHEN the app builds its context outside the CLI  THEN it is cdk.json's
    assert app_context(cdk_json, environ={}) == {"worker_tier": {"max_retries": 5}}


def test_under_the_cli_the_app_takes_the_clis_context(tmp_path):
    # GIVEN the CLI's variable (it merges cdk.json, cdk.context.json and --context itself)
    cdk_json = tmp_path / "cdk.json"
    cdk_json.write_text(json.dumps({"context": {"worker_tier": {"max_retries": 5}}}))
    # WHEN / THEN the app adds nothing of its own
    assert app_context(cdk_json, environ={CLI_CONTEXT_VARIABLE: "{}"}) == {}


def test_a_context_that_is_not_an_object_is_refused_with_the_file_named(tmp_path):
    # GIVEN a cdk.json whose context is a list
    cdk_json = tmp_path / "cdk.json"
    cdk_json.write_text(json.dumps({"context": []}))
    # WHEN / THEN SettingsError names the file and the rule
    with pytest.raises(SettingsError) as error:
        app_context(cdk_json, environ={})
    assert str(error.value) == (f"{str(cdk_json)!r} must be a JSON object whose 'context' is an object, "
                                "got {'context': []}")


def test_under_the_cli_with_a_context_too_large_for_its_variable_the_app_adds_nothing(tmp_path):
    # GIVEN the CLI's overflow variable only (it writes a large context to a file and names it there)
    cdk_json = tmp_path / "cdk.json"
    cdk_json.write_text(json.dumps({"context": {"worker_tier": {"max_retries": 5}}}))
    # WHEN / THEN the app adds nothing of its own: the CDK reads that file itself
    assert app_context(cdk_json, environ={CLI_CONTEXT_OVERFLOW_VARIABLE: str(tmp_path / "overflow.json")}) == {}
