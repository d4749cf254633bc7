"""An emulator of Lambda's SQS event source mapping: poll, build the real event shape, invoke, delete."""

from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

from worker_tier.core import limits
from worker_tier_local.context import LocalContext
from worker_tier.core.envelope import lambda_record

SYSTEM_ATTRIBUTES = ["All"]
POLL_WAIT_SECONDS = 1
# What a batch the function raised on becomes, as Lambda's event source does with a function error:
# https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html
HANDLER_ERROR_LINE = ("the worker function raised on a batch of {count} message(s), which return to the queue after "
                      "their visibility timeout, as Lambda's do: {error}")


class EventSourceEmulator:
    """Polls a queue and invokes a handler the way Lambda's SQS event source does.

    It deletes exactly the records the handler's ``batchItemFailures`` does not
    name; the rest stay in the queue and come back after their visibility timeout.

    With priorities (``levels``: each level's queue URL and ARN, highest first), each poll takes its batch from
    the highest level that has messages (short polls down the levels, a long poll of the highest when all were
    empty), as the container worker does; deployed, Lambda's event sources drain the levels side by side instead.
    """

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        queue_arn: str,
        handler: Callable[[dict[str, Any], Any], dict[str, Any]],
        context_factory: Callable[[], LocalContext],
        batch_size: int,
        region: str,
        levels: Sequence[tuple[str, str]] = (),
    ) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._queue_arn = queue_arn
        self._levels = list(levels)
        self._handler = handler
        self._context_factory = context_factory
        self._batch_size = min(batch_size, limits.SQS_MAX_BATCH_ENTRIES)
        self._region = region

    def poll_once(self, wait_seconds: int = POLL_WAIT_SECONDS) -> int:
        """Receive one batch, invoke the handler, delete what succeeded; return the batch size."""
        if not self._levels:
            return self._handle(self._receive(self._queue_url, wait_seconds), self._queue_url, self._queue_arn)
        for url, arn in self._levels:
            messages = self._receive(url, 0)
            if messages:
                return self._handle(messages, url, arn)
        url, arn = self._levels[0]
        return self._handle(self._receive(url, wait_seconds), url, arn)

    def _receive(self, queue_url: str, wait_seconds: int) -> list[dict[str, Any]]:
        """One ReceiveMessage of up to a batch."""
        response = self._sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=self._batch_size,
            WaitTimeSeconds=wait_seconds,
            MessageSystemAttributeNames=SYSTEM_ATTRIBUTES,
            MessageAttributeNames=["All"],
        )
        return response.get("Messages") or []

    def _handle(self, messages: list[dict[str, Any]], queue_url: str, queue_arn: str) -> int:
        """Invoke the handler with one queue's batch, delete what succeeded; return the batch size."""
        if not messages:
            return 0
        event = {"Records": [lambda_record(m, queue_arn, self._region) for m in messages]}
        try:
            result = self._handler(event, self._context_factory()) or {}
        except Exception as error:  # a function error: Lambda returns the whole batch, and goes on polling
            print(HANDLER_ERROR_LINE.format(count=len(messages), error=f"{type(error).__name__}: {error}"),
                  file=sys.stderr, flush=True)
            return len(messages)
        self._delete_succeeded(messages, result, queue_url)
        return len(messages)

    def _delete_succeeded(self, messages: list[dict[str, Any]], result: dict[str, Any], queue_url: str) -> None:
        """DeleteMessageBatch for every record the response did not report failed."""
        failed = {item["itemIdentifier"] for item in result.get("batchItemFailures", [])}
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
            for i, m in enumerate(messages)
            if m["MessageId"] not in failed
        ]
        for start in range(0, len(entries), limits.SQS_MAX_BATCH_ENTRIES):
            self._sqs.delete_message_batch(
                QueueUrl=queue_url, Entries=entries[start : start + limits.SQS_MAX_BATCH_ENTRIES]
            )
