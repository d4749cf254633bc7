"""Large payloads benchmark: what an offloaded message costs, and how fast 1 MB and 10 MB bodies go round.

Two parts, in one run:

- **Cost per message**, from the calls each way makes, counted on real clients against moto, priced at AWS's
  public us-east-1 prices (``PRICES``, as of the date in ``PRICES_AS_OF``). Ours: ``Client.send`` offloads the
  body (PutObject, SendMessageBatch), the worker reads it (ReceiveMessage, GetObject) and, once the task
  succeeded, deletes the message and then the object (DeleteMessageBatch, DeleteObject). The baseline sends the
  same bytes through SQS in 1 MiB messages (SQS's largest) with no S3, as a team would without offloading (and
  reassembling them, which nothing here does). SQS bills every 64 KiB of a request's payload as one request:
  https://aws.amazon.com/sqs/pricing/ ; S3's PUT, GET and DELETE: https://aws.amazon.com/s3/pricing/ .
- **Throughput** of 1 MiB and 10 MiB bodies through the local environment's moto server (``LocalServer``, what
  ``make run`` serves), send to task to delete, ours against AWS's own Extended Client
  (``amazon-sqs-extended-client``: ``send_message``, ``receive_message``, ``delete_message`` with
  ``delete_payload_from_s3``), on the same server, interleaved, each run ``RUNS`` times, the worst kept.
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter
from typing import Any, Callable

import boto3

from bench import results
from tests.support import extended_client
from worker_tier.core import contract, limits
from worker_tier.core.envelope import lambda_record
from worker_tier.core.payloads import PayloadStore
from worker_tier.core.settings import Settings
from worker_tier.producer.client import Client
from worker_tier.worker.batch import Worker
from worker_tier.worker.registry import Registry

REGION = "us-east-1"
BUCKET = "bench-payloads"
PATH = "/bench-large"
SIZES = {"256KiB": 256 * 1024, "1MiB": 1024 * 1024, "5MiB": 5 * 1024 * 1024, "10MiB": 10 * 1024 * 1024}
# Body bytes, messages per run: bodies no SQS queue holds, so both ways offload every one.
THROUGHPUT = {"1MiB": (1024 * 1024, 20), "10MiB": (10 * 1024 * 1024, 4)}
RUNS = 3
CHUNK_BYTES = 64 * 1024  # SQS bills each 64 KiB of a request's payload as one request
PRICES_AS_OF = "2026-11"
PRICES = {  # USD, us-east-1, standard queue and S3 Standard
    "sqs_request": 0.40 / 1_000_000,
    "s3_put": 0.005 / 1_000,
    "s3_get": 0.0004 / 1_000,
    "s3_delete": 0.0,
}
GOALS = {"offload_cost_ratio_vs_chunks_5MiB": ("<=", 0.25), "throughput_ratio_vs_extended_client_1MiB": (">=", 0.8),
         "throughput_ratio_vs_extended_client_10MiB": (">=", 0.8)}


class Counting:
    """A boto3 client that counts each call by operation and the payload bytes SQS bills for, then makes it."""

    def __init__(self, inner: Any, calls: Counter[str], billed: Counter[str]) -> None:
        self.inner, self.calls, self.billed = inner, calls, billed
        self.meta = inner.meta

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def counted(**kwargs: Any) -> Any:
            self.calls[name] += 1
            response = method(**kwargs)
            self.billed[name] += _billed_requests(name, kwargs, response)
            return response

        return counted


def _billed_requests(name: str, request: dict[str, Any], response: Any) -> int:
    """SQS requests billed for one call: one per 64 KiB of the payload it carries (at least one)."""
    if name == "send_message_batch":
        payload = sum(len(e["MessageBody"].encode()) for e in request["Entries"])
    elif name == "send_message":
        payload = len(request["MessageBody"].encode())
    elif name == "receive_message":
        payload = sum(len(m["Body"].encode()) for m in (response.get("Messages") or []))
    else:
        payload = 0
    return max(1, math.ceil(payload / CHUNK_BYTES))


def _endpoint_clients(endpoint: str) -> tuple[Any, Any]:
    session = boto3.session.Session(aws_access_key_id="bench", aws_secret_access_key="bench", region_name=REGION)
    return session.client("sqs", endpoint_url=endpoint), session.client("s3", endpoint_url=endpoint)


def _queue(sqs: Any, name: str) -> tuple[str, str]:
    url = sqs.create_queue(QueueName=name, Attributes={"MaximumMessageSize": str(limits.SQS_MAX_MESSAGE_BYTES)})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def _worker(sqs: Any, s3: Any, queue_url: str, seen: list[int]) -> Worker:
    registry = Registry()
    registry.task(PATH)(lambda task: seen.append(len(task.body)))
    return Worker(Settings(), queue_url=queue_url, dead_letter_queue_url=None, registry=registry, sqs=sqs,
                  payloads=PayloadStore(BUCKET, s3))


def ours_round(sqs: Any, s3: Any, queue_url: str, queue_arn: str, body: str, count: int) -> None:
    """``count`` messages of ``body``: sent by the Client (offloaded), received, run by the worker, deleted."""
    seen: list[int] = []
    client = Client(queue_url, sqs=sqs, payload_bucket=BUCKET, s3=s3, maximum_message_size=limits.SQS_MAX_MESSAGE_BYTES)
    worker = _worker(sqs, s3, queue_url, seen)
    for _ in range(count):
        client.send(PATH, body)
    while len(seen) < count:
        received = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"],
                                       MessageSystemAttributeNames=["All"], WaitTimeSeconds=1).get("Messages") or []
        records = [lambda_record(m, queue_arn, REGION) for m in received]
        if records:
            failures = worker.handle({"Records": records}, None)["batchItemFailures"]
            assert not failures, failures
    assert seen == [len(body)] * count, seen


def peer_round(sqs: Any, s3: Any, queue_url: str, body: str, count: int) -> None:
    """The same with AWS's Extended Client (``sqs`` one of its clients): send_message, receive_message (GetObject),
    delete_message (DeleteObject)."""
    sqs.large_payload_support = BUCKET
    sqs.s3_client = s3
    sqs.always_through_s3 = False
    sqs.delete_payload_from_s3 = True
    done = 0
    for _ in range(count):
        sqs.send_message(QueueUrl=queue_url, MessageBody=body,
                         MessageAttributes={contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": PATH}})
    while done < count:
        received = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"],
                                       WaitTimeSeconds=1).get("Messages") or []
        for message in received:
            assert len(message["Body"]) == len(body)
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            done += 1


def chunked_round(sqs: Any, queue_url: str, body: str) -> None:
    """The baseline of the cost part: the same bytes as 1 MiB SQS messages, received and deleted, no S3."""
    data, step = body, limits.SQS_MAX_MESSAGE_BYTES - 1024  # room for the attributes
    parts = [data[i:i + step] for i in range(0, len(data), step)]
    for start in range(0, len(parts), 1):  # SendMessageBatch holds at most 1 MiB in all: one part per call
        sqs.send_message_batch(QueueUrl=queue_url, Entries=[{"Id": "0", "MessageBody": parts[start]}])
    got = 0
    while got < len(parts):
        received = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages") or []
        if received:
            sqs.delete_message_batch(QueueUrl=queue_url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(received)])
            got += len(received)


def _cost(calls: Counter[str], billed: Counter[str]) -> float:
    sqs_requests = sum(n for name, n in billed.items() if name not in {"put_object", "get_object", "delete_object"})
    return (sqs_requests * PRICES["sqs_request"] + calls["put_object"] * PRICES["s3_put"]
            + calls["get_object"] * PRICES["s3_get"] + calls["delete_object"] * PRICES["s3_delete"])


def costs(endpoint: str, sizes: dict[str, int] = SIZES) -> dict[str, Any]:
    """Calls and USD per message, ours (offloaded) against the same bytes in 1 MiB SQS messages, per body size."""
    figures: dict[str, Any] = {}
    sqs_raw, s3_raw = _endpoint_clients(endpoint)
    s3_raw.create_bucket(Bucket=BUCKET)
    for label, size in sizes.items():
        body = "x" * size
        calls, billed = Counter[str](), Counter[str]()
        sqs, s3 = Counting(sqs_raw, calls, billed), Counting(s3_raw, calls, billed)
        url, arn = _queue(sqs_raw, f"cost-ours-{label}")
        ours_round(sqs, s3, url, arn, body, 1)
        chunk_calls, chunk_billed = Counter[str](), Counter[str]()
        chunk_url, _ = _queue(sqs_raw, f"cost-chunks-{label}")
        chunked_round(Counting(sqs_raw, chunk_calls, chunk_billed), chunk_url, body)
        ours_usd, chunks_usd = _cost(calls, billed), _cost(chunk_calls, chunk_billed)
        figures[f"offload_calls_{label}"] = dict(calls)
        figures[f"offload_usd_per_million_{label}"] = round(ours_usd * 1_000_000, 2)
        figures[f"chunks_usd_per_million_{label}"] = round(chunks_usd * 1_000_000, 2)
        figures[f"offload_cost_ratio_vs_chunks_{label}"] = round(ours_usd / chunks_usd, 3)
    # Where offloading pays: the body size at which the chunks' SQS requests cost what one PUT and one GET add.
    s3_extra = PRICES["s3_put"] + PRICES["s3_get"]
    per_chunk = 2 * PRICES["sqs_request"]  # each 64 KiB is billed on the send and on the receive
    figures["offload_pays_above_bytes"] = int(math.ceil(s3_extra / per_chunk) * CHUNK_BYTES)
    return figures


def _timed(round_: Callable[[], None]) -> float:
    started = time.perf_counter()
    round_()
    return time.perf_counter() - started


def throughput(endpoint: str, runs: int = RUNS, bodies: dict[str, tuple[int, int]] = THROUGHPUT) -> dict[str, Any]:
    """Messages and MB per second, ours against the Extended Client, interleaved; each run's worst kept."""
    figures: dict[str, Any] = {}
    sqs, s3 = _endpoint_clients(endpoint)
    peer_sqs = extended_client.session(aws_access_key_id="bench", aws_secret_access_key="bench",
                                       region_name=REGION).client("sqs", endpoint_url=endpoint)
    for label, (size, count) in bodies.items():
        body = "y" * size
        url, arn = _queue(sqs, f"rate-ours-{label}")
        peer_url, _ = _queue(sqs, f"rate-peer-{label}")
        ours_rates, peer_rates = [], []
        for _ in range(runs):
            ours_rates.append(count / _timed(functools.partial(ours_round, sqs, s3, url, arn, body, count)))
            peer_rates.append(count / _timed(functools.partial(peer_round, peer_sqs, s3, peer_url, body, count)))
        ratios = [o / p for o, p in zip(ours_rates, peer_rates, strict=True)]
        figures[f"ours_msgs_per_s_{label}"] = {"runs": [round(r, 2) for r in ours_rates], "worst": round(min(ours_rates), 2)}
        figures[f"extended_client_msgs_per_s_{label}"] = {"runs": [round(r, 2) for r in peer_rates], "worst": round(min(peer_rates), 2)}
        figures[f"ours_mb_per_s_{label}"] = round(min(ours_rates) * size / 1_000_000, 1)
        figures[f"throughput_ratio_vs_extended_client_{label}"] = {"runs": [round(r, 3) for r in ratios], "worst": round(min(ratios), 3)}
        left = s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0)
        assert left == 0, f"{left} objects left after the {label} runs: a deletion was missed"
    return figures


def measure(sizes: dict[str, int] = SIZES, bodies: dict[str, tuple[int, int]] = THROUGHPUT, runs: int = RUNS) -> dict[str, Any]:
    from worker_tier_local.server import LocalServer

    server = LocalServer("127.0.0.1", 0, REGION)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        return {**costs(endpoint, sizes), **throughput(endpoint, runs, bodies)}
    finally:
        server.stop()


def run():
    return results.write("payloads", measure(), GOALS, "make bench")
