"""Tracing: one trace from a producer's ``Client.send``, through the worker's task, to the task's own sends.

The trace travels in SQS's ``AWSTraceHeader`` message *system* attribute, in X-Ray's format
(``Root=1-...;Parent=...;Sampled=1``): it is not one of a message's 10 attributes and does not count
toward its size (https://docs.aws.amazon.com/xray/latest/devguide/xray-services-sqs.html). Lambda hands
it to the worker in ``record["attributes"]["AWSTraceHeader"]``; the container worker asks for it
(``MessageSystemAttributeNames=["All"]``) and passes it on the same way.

``TracingMiddleware`` runs each task in a span of the OpenTelemetry API whose parent is the message's
header, and puts the current span's header on every message the worker or a task's ``Client`` sends.
A producer outside the worker gets the header from ``worker_tier.pipeline.middleware.on_send`` whenever its
process has imported OpenTelemetry. Enable it in the worker with the ``middleware`` setting
(``worker_tier.pipeline.tracing:TracingMiddleware``); it needs the ``tracing`` extra
(``opentelemetry-api``, ``opentelemetry-propagator-aws-xray``), imported only when it is used.

Not carried: a message sent with a delay over SQS's 15 minutes waits in the delay table, which keeps
its body and message attributes only, so it arrives without the header (a new trace).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worker_tier.core import contract, message
from worker_tier.pipeline.middleware import CallNext, Middleware
from worker_tier.pipeline.trace_header import add_trace_header, xray_propagator

if TYPE_CHECKING:
    from worker_tier.core.envelope import Envelope
    from worker_tier.worker.fates import _Invocation as Batch
    from worker_tier.core.task import Task

__all__ = ["TracingMiddleware"]

# The span's name and attributes follow OpenTelemetry's messaging conventions:
# https://opentelemetry.io/docs/specs/semconv/messaging/messaging-spans/
SPAN_NAME_PREFIX = "process "
MESSAGING_SYSTEM = "aws_sqs"








class TracingMiddleware(Middleware):
    """Runs each task in a consumer span, child of its message's ``AWSTraceHeader``, and sends that span's header on.

    ``tracer_provider``: OpenTelemetry's global one when None.

    Examples
    --------
    >>> from worker_tier.core.settings import Settings
    >>> from worker_tier.worker.batch import Worker
    >>> worker = Worker(Settings(), queue_url="q", dead_letter_queue_url="dlq", middleware=[TracingMiddleware()])
    """

    def __init__(self, tracer_provider: Any = None) -> None:
        try:  # the tracing extra: imported only by a worker that asks for tracing
            from opentelemetry import trace
            from opentelemetry.propagators.aws import AwsXRayPropagator  # noqa: F401 - here only to say what is missing
        except ImportError as error:
            raise ModuleNotFoundError(
                f"worker_tier.pipeline.tracing.TracingMiddleware needs {error.name}, which is not installed; install the tracing "
                "extra: pip install 'worker-tier[tracing]'"
            ) from None
        self._tracer = trace.get_tracer("worker_tier", tracer_provider=tracer_provider)
        self._consumer = trace.SpanKind.CONSUMER
        self._propagator = xray_propagator()

    def around_task(self, batch: Batch, task: Task, call_next: CallNext) -> None:
        from opentelemetry.propagators.aws.aws_xray_propagator import TRACE_HEADER_KEY

        header = task.record.get("attributes", {}).get(contract.TRACE_HEADER_SYSTEM_ATTRIBUTE)
        parent = self._propagator.extract({TRACE_HEADER_KEY: header}) if isinstance(header, str) and self._propagator else None
        attributes = {"messaging.system": MESSAGING_SYSTEM, "messaging.message.id": task.message_id,
                      "messaging.operation.type": "process", "worker_tier.path": task.path}
        # OpenTelemetry's own recording formats the error with str(), which may raise and replace the task's error:
        # the span records it here instead, with the text the dead-letter reason uses.
        with self._tracer.start_as_current_span(
            SPAN_NAME_PREFIX + task.path, context=parent, kind=self._consumer, attributes=attributes,
            record_exception=False, set_status_on_exception=False,
        ) as span:
            try:
                call_next(batch, task)
            except BaseException as error:
                from opentelemetry.trace import Status, StatusCode

                text = message.error_text(error, message.MAX_LOGGED_ERROR_CHARS)
                span.add_event("exception", {"exception.type": type(error).__name__, "exception.message": text})
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {text}"))
                raise

    def on_send(self, message: Envelope) -> None:
        add_trace_header(message)
