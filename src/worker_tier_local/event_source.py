"""An emulator of Lambda's SQS event source mapping: poll, build the real event shape, invoke, delete."""

from __future__ import annotations

import sys
from typing import Any, Callable

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
    ) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._queue_arn = queue_arn
        self._handler = handler
        self._context_factory = context_factory
        self._batch_size = min(batch_size, limits.SQS_MAX_BATCH_ENTRIES)
        self._region = region

    def poll_once(self, wait_seconds: int = POLL_WAIT_SECONDS) -> int:
        """Receive one batch, invoke the handler, delete what succeeded; return the batch size."""
        response = self._sqs.receive_message(
            QueueUrl=self._queue_url,
            MaxNumberOfMessages=self._batch_size,
            WaitTimeSeconds=wait_seconds,
            MessageSystemAttributeNames=SYSTEM_ATTRIBUTES,
            MessageAttributeNames=["All"],
        )
        messages = response.get("Messages") or []
        if not messages:
            return 0
        event = {"Records": [lambda_record(m, self._queue_arn, self._region) for m in messages]}
        try:
            result = self._handler(event, self._context_factory()) or {}
        except Exception as error:  # a function error: Lambda returns the whole batch, and goes on polling
            print(HANDLER_ERROR_LINE.format(count=len(messages), error=f"{type(error).__name__}: {error}"),
                  file=sys.stderr, flush=True)
            return len(messages)
        self._delete_succeeded(messages, result)
        return len(messages)

    def _delete_succeeded(self, messages: list[dict[str, Any]], result: dict[str, Any]) -> None:
        """DeleteMessageBatch for every record the response did not report failed."""
        failed = {item["itemIdentifier"] for item in result.get("batchItemFailures", [])}
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
            for i, m in enumerate(messages)
            if m["MessageId"] not in failed
        ]
        for start in range(0, len(entries), limits.SQS_MAX_BATCH_ENTRIES):
            self._sqs.delete_message_batch(
                QueueUrl=self._queue_url, Entries=entries[start : start + limits.SQS_MAX_BATCH_ENTRIES]
            )
