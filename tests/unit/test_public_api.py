"""The packages' public API: ``__all__`` names every public name, each imports, and the lazy ones are listed too."""

from __future__ import annotations

import importlib

import pytest

import worker_tier
import worker_tier_cdk
from worker_tier.core.errors import ConfigurationError, WorkerTierError

PACKAGES = [worker_tier, worker_tier_cdk]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda package: package.__name__)
def test_every_name_in_all_imports(package):
    # GIVEN a package's __all__
    # WHEN each name is imported from it
    missing = [name for name in package.__all__ if not hasattr(importlib.import_module(package.__name__), name)]
    # THEN every one is there
    assert missing == []


@pytest.mark.parametrize(("package", "lazy"), [
    (worker_tier, worker_tier._CLIENT_NAMES),
    (worker_tier_cdk, tuple(worker_tier_cdk._LAZY_HOMES)),
], ids=["worker_tier", "worker_tier_cdk"])
def test_every_name_the_package_imports_on_first_use_is_in_all(package, lazy):
    # GIVEN the names a package's __getattr__ serves
    # THEN __all__ lists each of them
    assert set(lazy) - set(package.__all__) == set()


@pytest.mark.parametrize("package", PACKAGES, ids=lambda package: package.__name__)
def test_all_lists_every_public_name_the_package_defines_or_imports(package):
    # GIVEN the public names bound in the package's namespace (modules and typing helpers aside)
    bound = {name for name, value in vars(package).items()
             if not name.startswith("_") and not isinstance(value, type(importlib)) and name not in {"TYPE_CHECKING", "Any"}
             and not name.isupper()}
    # THEN __all__ lists each
    assert bound - set(package.__all__) == set()


def test_a_cdk_settings_error_is_a_worker_tier_error_and_still_a_value_error():
    # GIVEN the CDK's TaskCodeError (WHEN a caller catches WorkerTierError or ValueError) THEN either catches it
    from worker_tier_cdk.code import TaskCodeError

    assert issubclass(TaskCodeError, ConfigurationError)
    assert issubclass(TaskCodeError, WorkerTierError) and issubclass(TaskCodeError, ValueError)


def test_every_exception_the_cdk_package_defines_is_a_configuration_error():
    # GIVEN every exception class defined in the CDK package's modules
    import inspect
    import pkgutil

    found = {}
    for module_info in pkgutil.walk_packages(worker_tier_cdk.__path__, "worker_tier_cdk."):
        module = importlib.import_module(module_info.name)
        found.update({f"{module.__name__}.{name}": value for name, value in vars(module).items()
                      if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__})
    # WHEN those outside ConfigurationError are listed
    outside = {name for name, cls in found.items() if not issubclass(cls, ConfigurationError)}
    # THEN there are none, and the walk found the construct props' errors
    assert outside == set()
    assert "worker_tier_cdk.worker_queue.WorkerQueuePropsError" in found
