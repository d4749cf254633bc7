"""One trace from a producer's Client.send, through the worker's task, to the task's follow-up: Lambda and container paths.

The header travels in SQS's AWSTraceHeader system attribute. moto 5.2.5 drops it from SendMessageBatch (the Client's
call), so the world's SQS is the strict stand-in, which keeps it as SQS does (``tests.support.strict_sqs``).
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.aws_world import AwsWorld
from tests.support.container import consumer_for, depth, run_until
from tests.support.strict_sqs import StrictSQS
from worker_tier import Client, NonRetryableError, Task
from worker_tier.core.contract import FAILURE_ATTRIBUTE
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.pipeline.tracing import TracingMiddleware
from worker_tier.worker.batch import Worker


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def follow_up_tasks(aws: AwsWorld) -> Registry:
    registry = Registry()

    @registry.task("/first")
    def first(task: Task) -> None:
        Client(aws.queue_url, sqs=aws.sqs).send("/second", "follow-up")

    registry.task("/second")(lambda t: None)
    return registry


def run_lambda(aws: AwsWorld, registry: Registry, tracing: TracingMiddleware) -> None:
    worker = Worker(Settings(), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                    registry=registry, sqs=aws.sqs, middleware=[tracing])
    for _ in range(2):  # the first message, then its follow-up
        event = aws.receive_event()
        assert worker.handle(event, None) == {"batchItemFailures": []}
        for record in event["Records"]:
            aws.sqs.delete_message(QueueUrl=aws.queue_url, ReceiptHandle=record["receiptHandle"])


def run_container(aws: AwsWorld, registry: Registry, tracing: TracingMiddleware) -> None:
    consumer = consumer_for(aws, registry, middleware=[tracing])
    sent = aws.count("SendMessageBatch")
    thread = run_until(consumer, lambda: aws.count("SendMessageBatch") > sent and depth(aws) == 0)
    consumer.stopping.set()
    thread.join(10)


@pytest.mark.parametrize("run", [run_lambda, run_container], ids=["lambda", "container"])
def test_one_trace_runs_from_the_producer_through_the_task_to_its_follow_up(aws, spans, run):
    # GIVEN a producer sending inside its own span, and a task that sends a follow-up
    provider, exporter = spans
    aws.sqs = StrictSQS(aws.sqs)
    with provider.get_tracer("producer").start_as_current_span("produce") as producing:
        Client(aws.queue_url, sqs=aws.sqs).send("/first", "go")
    trace_id = producing.get_span_context().trace_id
    # WHEN the worker runs the message and then its follow-up, with tracing
    run(aws, follow_up_tasks(aws), TracingMiddleware(tracer_provider=provider))
    # THEN both sends carried the trace in AWSTraceHeader, a system attribute, not one of the 10 message attributes
    headers = [entry["MessageSystemAttributes"]["AWSTraceHeader"]["StringValue"]
               for params in aws.params("SendMessageBatch") for entry in params["Entries"]]
    assert len(headers) == 2
    xray_root = f"Root=1-{trace_id:032x}"[:15] + "-" + f"{trace_id:032x}"[8:]
    assert all(header.startswith(xray_root + ";") and header.endswith(";Sampled=1") for header in headers)
    # AND each task ran in a span of that trace: the first a child of the producer's span, the follow-up of the first's
    by_name = {span.name: span for span in exporter.get_finished_spans()}
    first, second = by_name["process /first"], by_name["process /second"]
    assert {first.context.trace_id, second.context.trace_id} == {trace_id}
    assert first.parent.span_id == producing.get_span_context().span_id
    assert second.parent.span_id == first.context.span_id
    assert headers[1].split(";")[1] == f"Parent={first.context.span_id:016x}"


def test_a_failing_task_ends_its_span_with_the_error(aws, spans):
    # GIVEN a traced message whose task raises
    provider, exporter = spans
    aws.sqs = StrictSQS(aws.sqs)
    registry = Registry()

    @registry.task("/boom")
    def boom(task: Task) -> None:
        raise RuntimeError("boom")

    with provider.get_tracer("producer").start_as_current_span("produce"):
        Client(aws.queue_url, sqs=aws.sqs).send("/boom", "go")
    # WHEN the worker runs it
    run_lambda_once = Worker(Settings(), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                             registry=registry, sqs=aws.sqs, middleware=[TracingMiddleware(tracer_provider=provider)])
    assert len(run_lambda_once.handle(aws.receive_event(), None)["batchItemFailures"]) == 1
    # THEN its span says so, with the exception recorded
    [span] = [s for s in exporter.get_finished_spans() if s.name == "process /boom"]
    assert span.status.status_code.name == "ERROR"
    assert [event.attributes["exception.message"] for event in span.events] == ["boom"]


def test_a_forward_to_the_container_worker_keeps_the_message_trace_header(aws, spans):
    # GIVEN a traced message for a container task, on the Lambda worker
    provider, _ = spans
    # WHEN it forwards the message
    header, producing = forward_trace_header(aws, provider, [])
    # THEN the forward carries the producer's trace header as it came
    assert header.endswith(f"Parent={producing:016x};Sampled=1")


class Unprintable(NonRetryableError):
    def __str__(self) -> str:
        raise RuntimeError("str exploded")


def test_a_task_error_that_cannot_be_printed_keeps_its_fate_under_tracing(aws, spans):
    # GIVEN a traced task that refuses its message with an error whose str() raises
    provider, exporter = spans
    registry = Registry()

    @registry.task("/refuse")
    def refuse(task: Task) -> None:
        raise Unprintable()

    Client(aws.queue_url, sqs=aws.sqs).send("/refuse", "go")
    worker = Worker(Settings(), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                    registry=registry, sqs=aws.sqs, middleware=[TracingMiddleware(tracer_provider=provider)])
    # WHEN the worker runs it
    assert worker.handle(aws.receive_event(), None) == {"batchItemFailures": []}
    # THEN it is dead-lettered as the task asked, its reason naming its own error, and the span ends in error
    [copy] = [p for p in aws.params("SendMessage") if p["QueueUrl"] == aws.dead_letter_queue_url]
    assert "Unprintable" in copy["MessageAttributes"][FAILURE_ATTRIBUTE]["StringValue"]
    [span] = [s for s in exporter.get_finished_spans() if s.name == "process /refuse"]
    assert span.status.status_code.name == "ERROR"


def test_a_forward_keeps_the_message_trace_header_inside_another_span(aws, spans):
    # GIVEN a traced message for a container task, forwarded while another span is current (as a Lambda layer's is)
    provider, _ = spans
    # WHEN it forwards the message inside an invocation's own span
    with provider.get_tracer("layer").start_as_current_span("invocation"):
        header, producing = forward_trace_header(aws, provider, [TracingMiddleware(tracer_provider=provider)])
    # THEN the forward carries the producer's header, not the invocation's
    assert header.endswith(f"Parent={producing:016x};Sampled=1")


def forward_trace_header(aws: AwsWorld, provider: TracerProvider, middleware: list[TracingMiddleware]) -> tuple[str, int]:
    """Send a container task's message in a producer span, let the Lambda worker forward it: the forward's
    AWSTraceHeader, and the producer span's id."""
    aws.sqs = StrictSQS(aws.sqs)
    long_queue = aws.sqs.create_queue(QueueName="long")["QueueUrl"]
    registry = Registry()
    registry.task("/long", container=True)(lambda t: None)
    with provider.get_tracer("producer").start_as_current_span("produce") as producing:
        Client(aws.queue_url, sqs=aws.sqs).send("/long", "go")
    worker = Worker(Settings(), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                    registry=registry, sqs=aws.sqs, container_queue_url=long_queue, middleware=middleware)
    assert worker.handle(aws.receive_event(), None) == {"batchItemFailures": []}
    [forward] = [p for p in aws.params("SendMessage") if p["QueueUrl"] == long_queue]
    return forward["MessageSystemAttributes"]["AWSTraceHeader"]["StringValue"], producing.get_span_context().span_id
