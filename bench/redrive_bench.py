"""Redrive benchmark: SQS calls to move 1,000 dead letters with a filter, ours vs the naive one-by-one move.

Both run against moto in-process through a client that counts every SQS call. Ours is
``worker_tier_cli.redrive.move_batches`` (what ``worker-tier redrive --path`` runs): ReceiveMessage of 10,
SendMessageBatch, DeleteMessageBatch, and at the end the release of what it skipped. The naive one
receives one message, sends it, deletes it, and again. A mixed run adds a quarter of messages the filter
skips, to show what skipping costs.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import Any

import boto3
from moto import mock_aws

from bench import results
from worker_tier.core import contract, envelope, message
from worker_tier.core.errors import NonRetryableError
from worker_tier_cli.dead_letters import DeadLetter, Filter
from worker_tier_cli.redrive import move_batches

MESSAGES = 1_000
# The mixed run: a quarter more messages, of another path, over fewer messages (moto's receive scans the
# whole queue, so the naive move's time grows with the square of the messages; the counts do not).
MIXED_MESSAGES = 200
SKIPPED_SHARE = 0.25
PATH = "/resize"
GOALS = {"redrive_api_calls_ratio": ("<=", 0.35)}
FAILED_AT = datetime(2026, 11, 22, tzinfo=timezone.utc)
REGION = "us-east-1"


class CountingSQS:
    """An SQS client that counts each call by operation, then makes it."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def counted(**kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(**kwargs)

        return counted


def _dead_letters(sqs: Any, dlq_url: str, count: int, path: str) -> None:
    original = {contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": path}}
    reason = message.failure_reason(NonRetryableError("bad"), attempts=3, path=path, failed_at=FAILED_AT)
    attributes = envelope.dead_letter_attributes(original, reason)
    for start in range(0, count, 10):
        sqs.send_message_batch(QueueUrl=dlq_url, Entries=[
            {"Id": str(n), "MessageBody": f"{path}-{start + n}", "MessageAttributes": attributes}
            for n in range(min(10, count - start))])


def _world(matching: int, others: int) -> tuple[Any, str, str]:
    sqs = boto3.client("sqs", region_name=REGION)
    work, dlq = sqs.create_queue(QueueName="work")["QueueUrl"], sqs.create_queue(QueueName="dlq")["QueueUrl"]
    _dead_letters(sqs, dlq, matching, PATH)
    _dead_letters(sqs, dlq, others, "/other")
    return sqs, work, dlq


def ours(matching: int, others: int = 0) -> tuple[int, int]:
    """SQS calls of the batch move, and how many messages reached the work queue."""
    with mock_aws():
        sqs, work, dlq = _world(matching, others)
        counting = CountingSQS(sqs)
        report = move_batches(counting, dlq, work, Filter(path=PATH), wait_seconds=0)
        return sum(counting.calls.values()), report.moved


def naive(matching: int, others: int = 0) -> tuple[int, int]:
    """SQS calls of receive one, send it, delete it; a message that does not match is left hidden."""
    with mock_aws():
        sqs, work, dlq = _world(matching, others)
        counting, moved = CountingSQS(sqs), 0
        while True:
            received = counting.receive_message(QueueUrl=dlq, MaxNumberOfMessages=1, VisibilityTimeout=300,
                                                MessageAttributeNames=["All"]).get("Messages") or []
            if not received:
                return sum(counting.calls.values()), moved
            letter = DeadLetter.from_sqs(received[0])
            if letter.path != PATH:
                continue
            counting.send_message(QueueUrl=work, MessageBody=letter.body, MessageAttributes=letter.original_attributes())
            counting.delete_message(QueueUrl=dlq, ReceiptHandle=letter.receipt_handle)
            moved += 1


def measure(messages: int = MESSAGES, mixed_messages: int = MIXED_MESSAGES) -> dict[str, float]:
    (our_calls, our_moved), (naive_calls, naive_moved) = ours(messages), naive(messages)
    others = int(mixed_messages * SKIPPED_SHARE)
    (mixed_calls, mixed_moved), (naive_mixed_calls, _) = ours(mixed_messages, others), naive(mixed_messages, others)
    assert our_moved == naive_moved == messages and mixed_moved == mixed_messages, (our_moved, naive_moved, mixed_moved)
    return {
        "redrive_api_calls_per_1000": round(our_calls * 1000 / messages, 1),
        "naive_redrive_api_calls_per_1000": round(naive_calls * 1000 / messages, 1),
        "redrive_api_calls_ratio": round(our_calls / naive_calls, 4),
        "redrive_api_calls_per_1000_with_25pct_skipped": round(mixed_calls * 1000 / mixed_messages, 1),
        "naive_redrive_api_calls_per_1000_with_25pct_skipped": round(naive_mixed_calls * 1000 / mixed_messages, 1),
    }


def run():
    return results.write("redrive", measure(), GOALS, "make bench")
