"""Errors: every exception the runtime defines derives from WorkerTierError, and the public ones are exported."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import worker_tier
from worker_tier.core import errors
from worker_tier.core.errors import WorkerTierError



def runtime_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of the runtime package, by its dotted name."""
    found = {}
    for module_info in pkgutil.walk_packages(worker_tier.__path__, "worker_tier."):
        if module_info.name.endswith("__main__"):
            continue  # importing it would run the command line
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_exception_the_runtime_defines_derives_from_worker_tier_error():
    # GIVEN every exception class defined in the runtime's modules
    exceptions = runtime_exceptions()
    # WHEN those not deriving from WorkerTierError are listed
    outside = {name for name, cls in exceptions.items() if not issubclass(cls, WorkerTierError)}
    # THEN there are none
    assert outside == set()


def test_the_walk_finds_exceptions_across_the_package():
    # GIVEN the walk over the runtime (WHEN it runs) THEN it reaches nested modules and the errors module alike
    exceptions = runtime_exceptions()
    assert {"worker_tier.core.errors.SendError", "worker_tier.handlers.recovery.StreamEventError", "worker_tier.delays.delay.DelayStoreError"} <= set(exceptions)


def test_every_error_of_the_errors_module_is_exported_from_the_package():
    # GIVEN the exceptions errors.py defines
    public = {name for name, value in vars(errors).items() if inspect.isclass(value) and issubclass(value, BaseException)}
    # THEN the package exports each one, by the same object
    assert public - set(worker_tier.__all__) == set()
    assert all(getattr(worker_tier, name) is getattr(errors, name) for name in public)


@pytest.mark.parametrize("cls", [
    errors.SettingsError,
    errors.MalformedEventError,
    errors.TaskRegistrationError,
    errors.MessageError,
    importlib.import_module("worker_tier.delays.delay").UnreadableItemError,
    importlib.import_module("worker_tier.handlers.recovery").StreamEventError,
])
def test_errors_that_callers_catch_as_value_error_still_are(cls):
    # GIVEN an error callers may catch as ValueError THEN it is a ValueError as well as a WorkerTierError
    assert issubclass(cls, ValueError) and issubclass(cls, WorkerTierError)
