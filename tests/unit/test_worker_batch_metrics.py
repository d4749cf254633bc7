"""A batch's metrics: the oldest message's age whatever its SentTimestamp looks like, task durations, and the EMF line
the Lambda handler prints after each invocation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.fakes import FakeSQS
from worker_tier.core.contract import METRIC_MESSAGE_AGE, METRIC_TASK_DURATION, METRIC_TASK_DURATION_MAX
from worker_tier.core.observability import BatchMetrics, flush_invocation, log_metrics, metrics
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.core.task import Task
from worker_tier.worker.batch import Worker


@pytest.fixture
def metric_set() -> Iterator[dict[str, Any]]:
    """Powertools' metric set, empty before and after the test."""
    metrics.clear_metrics()
    yield metrics.metric_set
    metrics.clear_metrics()


def _record(message_id: str, attributes: dict[str, Any]) -> dict[str, Any]:
    return {"messageId": message_id, "receiptHandle": f"h-{message_id}", "body": "", "attributes": attributes, "messageAttributes": {}}


def _handle(records: list[dict[str, Any]], now: float) -> None:
    registry = Registry()

    @registry.task("/")
    def nothing(task: Task) -> None:
        return None

    Worker(Settings(), queue_url="q", dead_letter_queue_url=None, registry=registry, sqs=FakeSQS(), clock=lambda: now).handle(
        {"Records": records}, None
    )


@pytest.mark.parametrize(
    ("stamps", "age_ms"),
    [
        (["999", "1000"], 1001.0),  # different lengths: "1000" sorts first as text, 999 is older as a number
        (["1500", "1200", "1900"], 800.0),
        (["1500", None, "oops"], 500.0),  # absent or unreadable: the others count
    ],
)
def test_the_message_age_is_the_oldest_sent_timestamp_read_as_a_number(metric_set, stamps, age_ms):
    # GIVEN records sent at these epoch milliseconds (None: no SentTimestamp), handled at 2.000 s
    records = [_record(f"m-{i}", {} if stamp is None else {"SentTimestamp": stamp}) for i, stamp in enumerate(stamps)]
    # WHEN handled
    _handle(records, now=2.0)
    # THEN the age is the oldest's
    assert metric_set[METRIC_MESSAGE_AGE]["Value"] == [age_ms]


def test_task_durations_are_published_as_their_mean_and_maximum(metric_set):
    # GIVEN three task durations
    batch = BatchMetrics()
    for duration_ms in (1.0, 5.0, 3.0):
        batch.task_duration(duration_ms)
    # WHEN published
    batch.publish()
    # THEN one mean and one maximum, in milliseconds
    assert (metric_set[METRIC_TASK_DURATION]["Value"], metric_set[METRIC_TASK_DURATION_MAX]["Value"]) == ([3.0], [5.0])
    assert metric_set[METRIC_TASK_DURATION]["Unit"] == "Milliseconds"


def _published_batch() -> None:
    batch = BatchMetrics()
    batch.count("Processed", 3)
    batch.task_duration(0.000831001671)
    batch.message_age(11078.536865234375)
    batch.publish()
    metrics.set_timestamp(1_795_977_562_653)


def test_the_handler_prints_the_emf_line_powertools_prints(metric_set, monkeypatch, capsys):
    # GIVEN metrics enabled and a batch's metrics, flushed once by Powertools
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    monkeypatch.setattr(metrics.provider, "timestamp", metrics.provider.timestamp)  # restored after the test
    _published_batch()
    metrics.flush_metrics()
    powertools = capsys.readouterr().out
    # WHEN the same metrics are flushed as the worker's handler flushes them, after it returns
    _published_batch()
    assert log_metrics(lambda event, context: "done")({}, None) == "done"
    # THEN the same line, and the metrics are cleared as Powertools clears them
    assert capsys.readouterr().out == powertools
    assert '"Processed":[3.0]' in powertools
    assert metric_set == {}


def test_disabled_metrics_are_kept_and_not_printed_as_powertools_does(metric_set, monkeypatch, capsys):
    # GIVEN metrics disabled, as the test suite has them
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setattr(metrics.provider, "timestamp", metrics.provider.timestamp)  # restored after the test
    _published_batch()
    # WHEN the handler's flush runs
    flush_invocation()
    # THEN nothing is printed and the metrics stay, as with Powertools' flush
    assert capsys.readouterr().out == ""
    assert metric_set["Processed"]["Value"] == [3.0]
