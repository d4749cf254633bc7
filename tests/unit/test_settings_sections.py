"""Settings is made of three sections, runtime, deployment and app; each setting is declared in exactly one."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from worker_tier.core.settings import SECTIONS, AppSettings, DeploymentSettings, RuntimeSettings, Settings, SettingsError


def test_settings_is_made_of_the_sections_in_order():
    # GIVEN / WHEN Settings' bases  THEN they are the three sections, as SECTIONS lists them for the docs page
    assert (RuntimeSettings, DeploymentSettings, AppSettings) == SECTIONS
    assert Settings.__bases__ == tuple(reversed(SECTIONS))  # reversed, so the fields come in SECTIONS' order
    # AND the fields, and so each function's environment, run section by section in that order
    names = [field.name for field in dataclasses.fields(Settings)]
    assert names == [field.name for section in SECTIONS for field in dataclasses.fields(section)]


def test_every_setting_belongs_to_exactly_one_section():
    # GIVEN the fields each section declares
    counts = Counter(field.name for section in SECTIONS for field in dataclasses.fields(section))
    # WHEN they are compared with Settings' fields
    # THEN each setting is in one section, none is in two, and Settings declares none of its own
    assert [name for name, count in counts.items() if count > 1] == []
    assert set(counts) == {field.name for field in dataclasses.fields(Settings)}


def test_every_section_says_what_it_governs_and_who_reads_it():
    # GIVEN / WHEN each section's docstring  THEN it describes the section and names who reads it
    for section in SECTIONS:
        assert section.__doc__ and "Read " in section.__doc__, section.__name__


def test_a_sections_setting_reads_and_validates_through_settings():
    # GIVEN one setting from each section
    settings = Settings(max_retries=5, memory_size=512, app="web:app", task_modules="")
    # WHEN read  THEN each is an attribute of Settings
    assert (settings.max_retries, settings.memory_size, settings.app) == (5, 512, "web:app")
    # AND the ranges still hold whatever the section
    with pytest.raises(SettingsError, match=r"^memory_size must be 128..10240, got 1$"):
        Settings(memory_size=1)


def test_settings_are_keyword_only_so_the_sections_order_means_nothing():
    # GIVEN / WHEN settings passed by position  THEN they are refused: only names identify a setting
    with pytest.raises(TypeError):
        Settings(300)  # type: ignore[misc]


def test_a_section_is_not_built_on_its_own_so_nothing_escapes_validation():
    # GIVEN / WHEN a section given a value outside its range  THEN it is refused: only Settings builds and validates
    for section, name in zip(SECTIONS, ("max_retries", "memory_size", "app_port"), strict=True):
        with pytest.raises(TypeError):
            section(**{name: -1})
