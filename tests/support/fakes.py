"""In-memory fakes of the AWS calls Worker Tier makes, for unit tests with no network."""

from __future__ import annotations

import itertools
from typing import Any, Callable


class FakeSQS:
    """SendMessageBatch and ChangeMessageVisibilityBatch, with programmable per-entry failures.

    ``fail`` is called with (call number, entry) and returns None (accept) or a
    ``(code, sender_fault)`` pair for a Failed entry. ``sent`` holds every accepted
    entry in order; ``by_queue`` the same entries by QueueUrl.
    """

    def __init__(
        self,
        fail: Callable[[int, dict[str, Any]], tuple[str, bool] | None] | None = None,
        clock: Callable[[], float] | None = None,
        maximum_message_size: int = 1024 * 1024,
    ) -> None:
        self.maximum_message_size = maximum_message_size  # what GetQueueAttributes reports; not enforced (see StrictSQS)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[dict[str, Any]] = []
        self.by_queue: dict[str, list[dict[str, Any]]] = {}
        self._fail = fail or (lambda call, entry: None)
        self._clock = clock
        self._ids = itertools.count(1)

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append(("SendMessageBatch", {"QueueUrl": QueueUrl, "Entries": Entries}))
        return self._batch(Entries, accept=lambda entry: self._accept(QueueUrl, entry), with_id=True)

    def _accept(self, queue_url: str, entry: dict[str, Any]) -> None:
        """Keep what was accepted; with a clock, when it becomes visible (sent time + DelaySeconds)."""
        if self._clock is not None:
            entry = {**entry, "visible_at": self._clock() + entry.get("DelaySeconds", 0)}
        self.sent.append(entry)
        self.by_queue.setdefault(queue_url, []).append(entry)

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        self.calls.append(("GetQueueAttributes", {"QueueUrl": QueueUrl, "AttributeNames": AttributeNames}))
        return {"Attributes": {"MaximumMessageSize": str(self.maximum_message_size)}}

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append(("ChangeMessageVisibilityBatch", {"QueueUrl": QueueUrl, "Entries": Entries}))
        return self._batch(Entries, accept=lambda e: None, with_id=False)

    def change_message_visibility(self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int) -> dict[str, Any]:
        self.calls.append(("ChangeMessageVisibility", {"QueueUrl": QueueUrl, "ReceiptHandle": ReceiptHandle}))
        return {}

    def count(self, operation: str) -> int:
        return sum(1 for name, _ in self.calls if name == operation)

    def _batch(self, entries: list[dict[str, Any]], accept: Callable[[dict], None], with_id: bool) -> dict[str, Any]:
        successful, failed = [], []
        call_number = len(self.calls)
        for entry in entries:
            failure = self._fail(call_number, entry)
            if failure is None:
                accept(entry)
                successful.append({"Id": entry["Id"], **({"MessageId": f"m-{next(self._ids)}"} if with_id else {})})
            else:
                code, sender_fault = failure
                failed.append({"Id": entry["Id"], "Code": code, "Message": f"{code} (fake)", "SenderFault": sender_fault})
        return {"Successful": successful, "Failed": failed}
