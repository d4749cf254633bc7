"""The X-Ray trace header of the current OpenTelemetry span, put on an outgoing message's ``AWSTraceHeader``.

Shared by ``TracingMiddleware`` (``worker_tier.pipeline.tracing``) and by a producer's sends outside a worker
(``worker_tier.pipeline.middleware.on_send``); it imports OpenTelemetry's X-Ray propagator only when asked.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from worker_tier.core import contract

if TYPE_CHECKING:
    from worker_tier.core.envelope import Envelope


_log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def xray_propagator() -> Any:
    """The X-Ray propagator, imported on first use; None (said once) when the ``tracing`` extra is not installed."""
    try:
        from opentelemetry.propagators.aws import AwsXRayPropagator
    except ImportError:
        _log.warning("OpenTelemetry is imported but opentelemetry-propagator-aws-xray is not installed: messages are sent "
                     "without a trace header; install worker-tier[tracing]")
        return None
    return AwsXRayPropagator()


def trace_header(context: Any = None) -> str | None:
    """The X-Ray header of the current span (or of ``context``); None when there is no valid span.

    Examples
    --------
    >>> trace_header() is None  # no span is current
    True
    """
    propagator = xray_propagator()
    if propagator is None:
        return None
    from opentelemetry.propagators.aws.aws_xray_propagator import TRACE_HEADER_KEY

    carrier: dict[str, str] = {}
    propagator.inject(carrier, context=context)
    return carrier.get(TRACE_HEADER_KEY)


def add_trace_header(message: Envelope) -> None:
    """Put the current span's header on an outgoing message's system attributes (``AWSTraceHeader``), unless it
    has one: a message forwarded to the container worker keeps its own trace, whatever span is current here."""
    if message.system_attributes and contract.TRACE_HEADER_SYSTEM_ATTRIBUTE in message.system_attributes:
        return
    header = trace_header()
    if header is None:
        return
    message.system_attributes = {**(message.system_attributes or {}),
                                 contract.TRACE_HEADER_SYSTEM_ATTRIBUTE: {"DataType": "String", "StringValue": header}}
