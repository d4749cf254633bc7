"""The middleware pipeline's pieces: which hooks it keeps, how its chain nests, and the errors of the setting and option."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from worker_tier.core.errors import MiddlewareError, TaskRegistrationError
from worker_tier.pipeline.middleware import Middleware, Pipeline, load
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings, SettingsError

REPO = Path(__file__).resolve().parents[2]


class OnlyBefore(Middleware):
    def before_task(self, batch: Any, task: Any) -> None: ...


class Wrapping(Middleware):
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def around_task(self, batch: Any, task: Any, call_next: Any) -> None:
        self.calls.append(self.name)
        call_next(batch, task)

    def wraps(self, definition: Any) -> bool:
        return self.name != "skips"


def test_a_hook_no_middleware_overrides_is_not_in_the_pipeline():
    # GIVEN a middleware with one hook  WHEN the pipeline is built  THEN only that hook is kept
    pipeline = Pipeline([OnlyBefore(), Middleware()])
    assert len(pipeline.before_task) == 1
    assert (pipeline.before_batch, pipeline.after_batch, pipeline.after_task, pipeline.on_send, pipeline.on_dead_letter) == ((),) * 5


def test_the_chain_nests_the_first_middleware_outermost_and_leaves_out_those_that_do_not_wrap_the_task():
    # GIVEN three middleware, one of which does not wrap this task
    calls: list[str] = []
    pipeline = Pipeline([Wrapping("outer", calls), Wrapping("skips", calls), Wrapping("inner", calls)])
    # WHEN the chain runs
    pipeline.chain(None, lambda batch, task: calls.append("task"))(None, None)
    # THEN the wrapping ones ran outermost first, then the task
    assert calls == ["outer", "inner", "task"]


def test_the_setting_loads_a_class_or_an_instance_by_its_reference():
    # GIVEN references to a class and to an instance  WHEN loaded  THEN each is a Middleware, the class built
    loaded = load(["worker_tier.pipeline.middleware:Middleware", " tests.unit.test_middleware:INSTANCE "])
    assert type(loaded[0]) is Middleware and loaded[1] is INSTANCE


INSTANCE = OnlyBefore()


@pytest.mark.parametrize("reference, message", [
    ("no_such_module:Thing", "middleware 'no_such_module:Thing' could not be loaded (ModuleNotFoundError: No module named "
     "'no_such_module'); each entry must be 'module:attribute' naming a Middleware subclass or instance in a deployed module: "
     "fix the name or deploy the module"),
    ("worker_tier.pipeline.middleware:Nothing", "middleware 'worker_tier.pipeline.middleware:Nothing' could not be loaded (AttributeError: module "
     "'worker_tier.pipeline.middleware' has no attribute 'Nothing'); each entry must be 'module:attribute' naming a Middleware subclass or "
     "instance in a deployed module: fix the name or deploy the module"),
    ("worker_tier.pipeline.middleware:load", "middleware 'worker_tier.pipeline.middleware:load' is function <function load at"),
])
def test_a_reference_that_is_not_a_middleware_is_refused_naming_it(reference, message):
    with pytest.raises(MiddlewareError) as error:
        load([reference])
    assert str(error.value).startswith(message)


def test_the_setting_must_be_module_attribute_references():
    with pytest.raises(SettingsError) as error:
        Settings(middleware="worker_tier.pipeline.tracing.TracingMiddleware")
    assert str(error.value) == ("middleware must be comma-separated 'module:attribute' references like "
                                "'worker_tier.pipeline.tracing:TracingMiddleware,billing.audit:Audit', got "
                                "'worker_tier.pipeline.tracing.TracingMiddleware'")


def test_the_setting_round_trips_through_the_environment():
    settings = Settings(middleware="worker_tier.pipeline.tracing:TracingMiddleware,audit:Audit")
    assert settings.to_environment()["WORKER_TIER_MIDDLEWARE"] == "worker_tier.pipeline.tracing:TracingMiddleware,audit:Audit"
    assert Settings.from_environment(settings.to_environment()).middleware == settings.middleware


def test_a_tasks_middleware_must_be_a_list_of_middleware():
    with pytest.raises(TaskRegistrationError) as error:
        Registry().task("/t", middleware=OnlyBefore())
    assert str(error.value).startswith("middleware for '/t' must be a list of Middleware subclasses or instances, got OnlyBefore")
    with pytest.raises(TaskRegistrationError) as error:
        Registry().task("/t", middleware=[OnlyBefore, "audit:Audit"])
    assert str(error.value) == ("middleware 1 for '/t' is str 'audit:Audit', not a middleware; it must be a "
                                "worker_tier.pipeline.middleware.Middleware subclass or instance")


def test_a_tasks_middleware_class_is_built_once_at_registration():
    registry = Registry()
    registry.task("/t", middleware=[OnlyBefore])(lambda t: None)
    [built] = registry.get("/t").middleware  # type: ignore[union-attr]
    assert type(built) is OnlyBefore


def test_a_worker_without_tracing_never_imports_opentelemetry():
    # GIVEN a fresh interpreter  WHEN the worker's module is imported and a Worker handles a batch
    code = ("import sys; from worker_tier.core.settings import Settings; from worker_tier.worker.batch import Worker; "
            "Worker(Settings(), queue_url='q', dead_letter_queue_url=None).handle({'Records': []}, None); "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    result = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])})
    # THEN OpenTelemetry was never imported
    assert result.stdout == "[]\n"


def test_a_worker_runs_the_middleware_its_setting_names_after_the_built_in_ones():
    # GIVEN settings naming a middleware instance  WHEN a Worker is built from them
    from worker_tier.worker.batch import Worker

    worker = Worker(Settings(middleware="tests.unit.test_middleware:INSTANCE"), queue_url="q", dead_letter_queue_url=None)
    # THEN its pipeline ends with it, after the built-in ones
    assert [type(m).__name__ for m in worker.pipeline.middleware] == ["BatchMetricsPublisher", "Heartbeats", "FlowControl", "OnlyBefore"]
    assert worker.pipeline.middleware[-1] is INSTANCE
