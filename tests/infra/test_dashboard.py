"""The stack's dashboard: the numbers of `worker-tier status`, outcomes per path, and the alarms."""

from __future__ import annotations

import json

from aws_cdk.assertions import Match

from worker_tier.core import contract
from worker_tier_cdk.dashboard import OUTCOME_BY_PATH_METRICS, PATH_DIMENSION


def _body(template) -> dict:
    """The dashboard's body, its tokens (Fn::Join of refs) flattened to text with refs named."""
    [dashboard] = template.find_resources("AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else json.dumps(p).replace('"', "'") for p in parts)
    return json.loads(text)


def _widget(body: dict, title: str) -> dict:
    return next(w for w in body["widgets"] if w["properties"].get("title", "").startswith(title))


def test_one_metric_filter_per_logged_outcome_counts_it_per_path(template):
    # THEN each outcome the worker logs has a filter on the worker's log group, dimension path from the line
    filters = template.find_resources("AWS::Logs::MetricFilter")
    shown = {f["Properties"]["MetricTransformations"][0]["MetricName"]: f["Properties"] for f in filters.values()}
    assert set(shown) == set(OUTCOME_BY_PATH_METRICS.values()) and len(shown) == len(contract.OUTCOME_LOG_MESSAGES)
    for status, text in contract.OUTCOME_LOG_MESSAGES.items():
        properties = shown[OUTCOME_BY_PATH_METRICS[status]]
        transformation = properties["MetricTransformations"][0]
        assert properties["FilterPattern"] == f'{{ $.message = "{text}" }}'
        assert transformation["Dimensions"] == [{"Key": PATH_DIMENSION, "Value": f"$.{PATH_DIMENSION}"}]
        assert transformation["MetricNamespace"] == contract.METRICS_NAMESPACE and transformation["MetricValue"] == "1"
        assert "WorkerLogs" in properties["LogGroupName"]["Ref"]


def test_the_status_widget_shows_what_status_prints(template):
    widget = _widget(_body(template), "Status")
    names = [m[1] for m in widget["properties"]["metrics"]]
    assert names == ["ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessagesNotVisible",
                     "ApproximateNumberOfMessagesDelayed", "ApproximateAgeOfOldestMessage",
                     "ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"]
    labels = [m[-1]["label"] for m in widget["properties"]["metrics"]]
    assert labels == ["visible", "in flight", "delayed", "oldest (s)", "DLQ depth", "DLQ oldest (s)"]


def test_outcomes_per_path_are_one_search_per_outcome(template):
    widget = _widget(_body(template), "Outcomes per path")
    expressions = [m[0]["expression"] for m in widget["properties"]["metrics"]]
    assert expressions == [f"SEARCH('{{{contract.METRICS_NAMESPACE},{PATH_DIMENSION}}} MetricName=\"{name}\"', 'Sum', 60)"
                           for name in OUTCOME_BY_PATH_METRICS.values()]


def test_the_dispatcher_lag_ticks_and_every_alarm_are_on_the_dashboard(template):
    body = _body(template)
    lag = _widget(body, "Delay dispatcher lag")["properties"]["metrics"][0]
    assert lag[:2] == [contract.METRICS_NAMESPACE, contract.METRIC_DISPATCHER_LAG] and lag[-1]["stat"] == "Maximum"
    ticks = [m[1] for m in _widget(body, "Periodic task ticks")["properties"]["metrics"]]
    assert ticks == [contract.METRIC_TICKS_ENQUEUED, contract.METRIC_TICKS_DUPLICATE, contract.METRIC_TICKS_RETRIED]
    alarms = _widget(body, "Alarms")["properties"]["alarms"]
    assert len(alarms) == len(template.find_resources("AWS::CloudWatch::Alarm")) > 5


def test_the_stack_outputs_what_tail_and_status_read(template):
    template.has_output("WorkerLogGroupName", {"Value": {"Ref": Match.string_like_regexp("WorkerLogs")}})
    template.has_output("ScheduleGroupName", {"Value": Match.string_like_regexp("PeriodicTasks-Group")})
