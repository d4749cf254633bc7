"""The stack's dashboard rows beyond the work queue's own: what ``worker-tier status`` and ``tail`` show.

``WorkerQueue`` draws the queue, the backlog per worker, the outcome counts and the failure paths. This
adds, on the same dashboard:

- the messages each task's flow control made wait (``Throttled`` per task);
- the numbers of ``status``: visible, in flight and delayed messages, the DLQ depth, the age of the oldest
  message in the queue and in the DLQ, the delay dispatcher's lag, the periodic tasks' ticks, and every
  alarm of the stack;
- the outcomes ``tail`` prints, counted per task path. The worker's EMF metrics carry only the ``service``
  dimension (a ``path`` dimension on all of them would make one custom metric per path for each of about
  twenty metrics). Here a metric filter on the worker's log group counts each logged outcome
  (``contract.OUTCOME_LOG_MESSAGES``) with the line's ``path`` as its only dimension: four metrics per
  path that has had such an outcome, and none for a path that only succeeds. Successes are not logged, so
  they stay one per-service count (the Outcomes widget).
"""

from __future__ import annotations

from aws_cdk import Duration, Stack, aws_cloudwatch as cloudwatch, aws_logs as logs

from worker_tier.core import contract
from worker_tier.core.observability import TASK_DIMENSION
from worker_tier_cdk.alarms import count_metric

# Metric name of each per-path outcome count (metric filters; namespace METRICS_NAMESPACE, dimension path).
OUTCOME_BY_PATH_METRICS = {status: "".join(w.capitalize() for w in status.split("_")) + "ByPath"
                           for status in contract.OUTCOME_LOG_MESSAGES}
PATH_DIMENSION = "path"
PERIOD = Duration.minutes(1)
WIDGET_WIDTH = 12  # two widgets a row on the dashboard's 24 columns
MAX_ALARMS_PER_WIDGET = 100  # CloudWatch's AlarmStatusWidget limit


def add_stack_widgets(dashboard: cloudwatch.Dashboard, worker, delay_dispatcher=None, periodic_tasks=None) -> None:
    """Add the status row, per-path outcomes, delay dispatcher, periodic tasks and alarms to ``dashboard``."""
    filters = add_outcome_filters(worker.log_group)
    widgets: list[cloudwatch.IWidget] = [_status_widget(worker), _outcomes_by_path_widget(filters), _throttled_widget()]
    if delay_dispatcher is not None:
        widgets.append(cloudwatch.GraphWidget(title="Delay dispatcher lag (s)", width=WIDGET_WIDTH, left=[
            count_metric(contract.METRIC_DISPATCHER_LAG).with_(statistic="Maximum", label="lag")]))
    if periodic_tasks is not None:
        widgets.append(cloudwatch.GraphWidget(title="Periodic task ticks", width=WIDGET_WIDTH, left=[
            count_metric(name) for name in (contract.METRIC_TICKS_ENQUEUED, contract.METRIC_TICKS_DUPLICATE,
                                            contract.METRIC_TICKS_RETRIED)]))
    alarms = [c for c in Stack.of(dashboard).node.find_all() if isinstance(c, cloudwatch.Alarm)]
    widgets.append(cloudwatch.AlarmStatusWidget(title="Alarms", width=24, alarms=alarms[:MAX_ALARMS_PER_WIDGET]))
    dashboard.add_widgets(*widgets)


def add_outcome_filters(log_group: logs.LogGroup) -> dict[str, logs.MetricFilter]:
    """One metric filter per logged outcome on the worker's log group, counting it per ``path``."""
    return {
        status: logs.MetricFilter(
            log_group, f"{OUTCOME_BY_PATH_METRICS[status]}Filter", log_group=log_group,
            metric_namespace=contract.METRICS_NAMESPACE, metric_name=OUTCOME_BY_PATH_METRICS[status], metric_value="1",
            filter_pattern=logs.FilterPattern.string_value("$.message", "=", text),
            dimensions={PATH_DIMENSION: f"$.{PATH_DIMENSION}"},
        )
        for status, text in contract.OUTCOME_LOG_MESSAGES.items()
    }


def _status_widget(worker) -> cloudwatch.SingleValueWidget:
    """The queue numbers of ``worker-tier status``, latest values."""
    queue, dead = worker.queue, worker.dead_letter_queue
    return cloudwatch.SingleValueWidget(title="Status (as worker-tier status)", width=24, metrics=[
        queue.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum", label="visible"),
        queue.metric_approximate_number_of_messages_not_visible(period=PERIOD, statistic="Maximum", label="in flight"),
        queue.metric("ApproximateNumberOfMessagesDelayed", period=PERIOD, statistic="Maximum", label="delayed"),
        queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum", label="oldest (s)"),
        dead.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum", label="DLQ depth"),
        dead.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum", label="DLQ oldest (s)"),
    ])


def _throttled_widget() -> cloudwatch.GraphWidget:
    """Messages each task's flow control made wait (``Throttled``, printed by the workers with a ``Task`` dimension)."""
    search = cloudwatch.MathExpression(
        expression=(f"SEARCH('{{{contract.METRICS_NAMESPACE},service,{TASK_DIMENSION}}} "
                    f"MetricName=\"{contract.METRIC_THROTTLED}\"', 'Sum', {int(PERIOD.to_seconds())})"),
        label="throttled", period=PERIOD, using_metrics={},
    )
    return cloudwatch.GraphWidget(title="Throttled per task (flow control: waits, not attempts)", width=WIDGET_WIDTH,
                                  left=[search])


def _outcomes_by_path_widget(filters: dict[str, logs.MetricFilter]) -> cloudwatch.GraphWidget:
    """Each logged outcome per path: a SEARCH over the filters' metrics, one line per (outcome, path)."""
    searches = [
        cloudwatch.MathExpression(
            expression=(f"SEARCH('{{{contract.METRICS_NAMESPACE},{PATH_DIMENSION}}} "
                        f"MetricName=\"{OUTCOME_BY_PATH_METRICS[status]}\"', 'Sum', {int(PERIOD.to_seconds())})"),
            label=status, period=PERIOD, using_metrics={},
        )
        for status in filters
    ]
    return cloudwatch.GraphWidget(title="Outcomes per path (logged outcomes; tail prints them)", width=WIDGET_WIDTH,
                                  left=searches)
