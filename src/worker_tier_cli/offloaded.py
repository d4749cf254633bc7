"""An offloaded message's body, read from S3 for a person: what ``dlq show`` prints in place of the pointer.

A message carrying ``ExtendedPayloadSize`` holds only a pointer (``worker_tier.core.payloads``); its body is in
S3. The command line reads it with the operator's own credentials. The pointer names the bucket; when the
deployment's payload bucket is known (``--payload-bucket``, its variable or the stack's output), a pointer to
another bucket is not followed: a message in this DLQ should point into this deployment's bucket, and one that
does not is shown as it is, with the reason. Whatever stops the read (a malformed pointer, another bucket, a
missing object, S3 refusing) is said in one line and the pointer is still shown: the message itself is intact.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from worker_tier.core.errors import PayloadError, PayloadUnavailableError
from worker_tier.core.payloads import PayloadStore, Pointer, pointer_of


@dataclass(frozen=True)
class OffloadedBody:
    """The pointer a message holds (None when malformed), the body read from S3 (None when it was not) and why not."""

    pointer_body: str
    pointer: Pointer | None
    body: str | None
    problem: str | None

    @property
    def size(self) -> int | None:
        """The body's UTF-8 bytes: as read, else as the size attribute declares."""
        if self.body is not None:
            return len(self.body.encode("utf-8"))
        return self.pointer.size if self.pointer is not None else None

    def as_json(self) -> dict[str, Any]:
        """``dlq show --json``'s ``payload`` object: where the body lives, its size, and why it was not read."""
        return {"bucket": self.pointer.bucket if self.pointer else None, "key": self.pointer.key if self.pointer else None,
                "size": self.size, "pointer": self.pointer_body, "error": self.problem}

    def lines(self) -> list[str]:
        """What ``dlq show`` prints for the body: a header naming the object, then the body; or the reason and the pointer."""
        if self.body is not None and self.pointer is not None:
            return [f"body (from {self.pointer.uri}, {self.size} bytes):", self.body]
        where = f" at {self.pointer.uri}" if self.pointer is not None else ""
        return [f"body: offloaded{where}, not read: {self.problem}", "pointer (the message's body as SQS holds it):",
                self.pointer_body]


def read(body: str, attributes: Mapping[str, Any], deployment_bucket: str | None, s3: Any,
         sleep: Callable[[float], None] = time.sleep) -> OffloadedBody:
    """The offloaded body of a message whose ``body`` is a pointer, read from S3 with ``s3`` (S3's throttling retried
    as the worker retries it, waiting with ``sleep``); what stops the read is returned as its ``problem``, never raised."""
    try:
        pointer = pointer_of(body, attributes)
    except PayloadError as error:
        return OffloadedBody(body, None, None, str(error))
    if deployment_bucket is not None and pointer.bucket != deployment_bucket:
        return OffloadedBody(body, pointer, None, (
            f"it points into bucket {pointer.bucket!r}, not this deployment's payload bucket {deployment_bucket!r}; "
            f"read it yourself (aws s3 cp {pointer.uri} -), or pass --payload-bucket {pointer.bucket} to trust that bucket"))
    store = PayloadStore(pointer.bucket, s3, sleep=sleep)
    try:
        return OffloadedBody(body, pointer, store.get(pointer), None)
    except (PayloadError, PayloadUnavailableError) as error:
        return OffloadedBody(body, pointer, None, str(error))
