"""The dashboard's reading pages against moto: each shows the deployment's real data, by the command line's modules."""

from __future__ import annotations

from datetime import timedelta

from tests.cli.dashboard import dashboard_over, delay_table
from tests.cli.deployment import NOW
from worker_tier import Client
from worker_tier.core import contract

HOUR = 3600


def test_the_overview_shows_each_queue_the_dlq_depth_and_says_when_there_are_no_metrics_or_alarms(dashboard):
    # GIVEN two messages waiting and one dead letter
    deployment = dashboard.deployment
    for body in ("1", "2"):
        deployment.sqs.send_message(QueueUrl=deployment.queue_url, MessageBody=body)
    deployment.dead_letter("/resize", ValueError("bad image"), "{}")
    # WHEN the overview is loaded
    page = dashboard.browser.get("/")
    # THEN it shows the counts, the DLQ's depth, and says plainly what it cannot show here
    assert page.status_code == 200
    html = page.text
    assert '<tr data-queue="work queue"><td>work queue</td><td class="n">2</td>' in html
    assert "DLQ: <strong>1</strong> dead letter(s)" in html
    assert "No worker metrics: CloudWatch holds no datapoint" in html
    assert "Not read: no stack is named" in html


def test_the_overview_shows_the_last_hours_throughput_and_failure_rate_from_the_workers_metrics(dashboard):
    # GIVEN the worker's metrics for the last hour in CloudWatch: 40 processed, 10 failed attempts
    cloudwatch = dashboard.app.app.state.dashboard.session.client("cloudwatch")
    for name, value in ((contract.METRIC_PROCESSED, 40), (contract.METRIC_SUCCEEDED, 30), (contract.METRIC_FAILED, 10),
                        (contract.METRIC_RETRIED, 8), (contract.METRIC_DEAD_LETTERED, 2)):
        cloudwatch.put_metric_data(Namespace=contract.METRICS_NAMESPACE, MetricData=[{
            "MetricName": name, "Value": value, "Unit": "Count", "Timestamp": NOW - timedelta(minutes=10),
            "Dimensions": [{"Name": "service", "Value": contract.SERVICE_NAME}]}])
    # WHEN the overview is loaded THEN it shows them and the failure rate
    html = dashboard.browser.get("/").text
    assert "<tr><th>processed</th><td class=\"n\">40</td></tr>" in html
    assert "<tr><th>failure rate</th><td class=\"n\">25.0 %</td></tr>" in html


def test_the_dlq_page_groups_dead_letters_by_path_and_error_with_each_body_and_reason(dashboard):
    # GIVEN two dead letters of one path and error, and one of another
    deployment = dashboard.deployment
    first = deployment.dead_letter("/resize", ValueError("bad image 1"), '{"image": 1}')
    deployment.dead_letter("/resize", ValueError("bad image 2"), '{"image": 2}')
    other = deployment.dead_letter("/email", KeyError("to"), '{"to": null}')
    # WHEN the DLQ page is loaded
    html = dashboard.browser.get("/dlq").text
    # THEN the groups come largest first, each message with its body and reason, and a redrive link at each level
    assert html.index('data-path="/resize" data-error="ValueError"') < html.index('data-path="/email" data-error="KeyError"')
    assert f'data-message-id="{first}"' in html and f'data-message-id="{other}"' in html
    assert "bad image 1" in html and "{&#34;image&#34;: 1}" in html
    assert 'href="/dlq/redrive?scope=group&amp;path=%2Fresize&amp;error=ValueError"' in html
    assert f'href="/dlq/redrive?scope=one&amp;message_id={first}"' in html
    # AND reading released them: the DLQ still holds all three
    assert deployment.depth(deployment.dlq_url) == 3


def test_the_delayed_page_lists_the_coming_messages_in_due_order_with_cancel_only_where_it_can(deployment):
    # GIVEN a delay table with a cancellable message and a plain one
    dashboard = dashboard_over(deployment, delay_table=delay_table(deployment))
    client = Client(deployment.queue_url, "delay", sqs=deployment.sqs, dynamodb=deployment.dynamodb,
                    clock=NOW.timestamp, state_table="state")
    client.send("/later", "2", delay=2 * HOUR)
    client.send("/remind", "1", delay=HOUR, dedupe_key="remind-1", cancellable=True)
    # WHEN the delayed page is loaded
    html = dashboard.browser.get("/delayed?within=240").text
    # THEN both come in due order, and only the cancellable one can be cancelled or rescheduled
    assert html.index("/remind") < html.index("/later")
    assert 'href="/delayed/cancel?key=remind-1"' in html
    assert html.count("Cancel…") == 1
    assert "2026-11-22T13:00:00.000Z" in html
