"""The worker's side of offloaded bodies, without AWS: its payload bucket from the environment, the attributes a
copy carries, the forward's body, and an ordinary message's path, which never loads the payload code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

from worker_tier.core import contract
from worker_tier.core.message import copy_attributes
from worker_tier.core.payloads import Pointer, size_attribute
from worker_tier.core.settings import Settings
from worker_tier.core.task import Task
from worker_tier.worker.batch import Worker
from worker_tier.worker.forward import forward_request
from worker_tier.worker.registry import Registry


def _offloaded_record() -> dict:
    pointer = Pointer("payloads", "payloads/k", 12)
    return {
        "messageId": "m-1", "receiptHandle": "h-1", "body": pointer.body(), "attributes": {},
        "messageAttributes": {
            contract.PAYLOAD_SIZE_ATTRIBUTE: {"dataType": "Number", "stringValue": "12"},
            contract.PATH_ATTRIBUTE: {"dataType": "String", "stringValue": "/long"},
            "tenant": {"dataType": "Number", "stringValue": "7"},
        },
    }


def test_the_payload_bucket_variable_gives_the_worker_a_store_sized_by_payload_max_bytes():
    # GIVEN the worker's environment with the payload bucket and payload_max_bytes
    environ = {**Settings(payload_max_bytes=4096).to_environment(), contract.PAYLOAD_BUCKET_VARIABLE: "bucket-1"}
    # WHEN the worker is built from it, with an injected S3 client
    s3 = object()
    worker = Worker.from_environment(environ, registry=Registry(), s3=s3)
    # THEN it reads that bucket, at most payload_max_bytes, through that client
    assert worker.payloads is not None
    assert (worker.payloads.bucket, worker.payloads.max_bytes) == ("bucket-1", 4096)
    assert worker.payloads._s3.get() is s3


def test_without_the_variable_the_worker_has_no_payload_store():
    # GIVEN an environment without WORKER_TIER_PAYLOAD_BUCKET (large_payloads off)
    # WHEN the worker is built
    worker = Worker.from_environment({}, registry=Registry())
    # THEN it has no store (an offloaded message is dead-lettered, saying so)
    assert worker.payloads is None


def test_a_copy_carries_the_size_attributes_as_internal_ones_the_client_accepts_there():
    # GIVEN an offloaded record (and one of the Java client's 1.x, with the legacy name)
    record = _offloaded_record()
    legacy = _offloaded_record()
    legacy["messageAttributes"][contract.LEGACY_PAYLOAD_SIZE_ATTRIBUTE] = legacy["messageAttributes"].pop(
        contract.PAYLOAD_SIZE_ATTRIBUTE)
    # WHEN their attributes are taken for a copy
    user, internal = copy_attributes(record)
    _, legacy_internal = copy_attributes(legacy)
    # THEN the size goes as an internal attribute (users may not set it), the user's stay the user's
    assert user == {"tenant": Decimal("7")}
    assert internal == {contract.PAYLOAD_SIZE_ATTRIBUTE: "12"}
    assert legacy_internal == {contract.LEGACY_PAYLOAD_SIZE_ATTRIBUTE: "12"}


def test_a_forward_of_an_offloaded_message_carries_its_pointer_not_its_read_body():
    # GIVEN an offloaded record whose task holds the body read from S3
    record = _offloaded_record()
    task = Task("m-1", "/long", "the real body", record=record)
    # WHEN it is forwarded, and an ordinary one with the same task
    offloaded = forward_request(record, task, "https://sqs.example/long", offloaded=True)
    ordinary = forward_request(record, task, "https://sqs.example/long")
    # THEN the offloaded forward is the pointer with its size; the ordinary one the task's body
    assert offloaded["MessageBody"] == record["body"]
    assert offloaded["MessageAttributes"][contract.PAYLOAD_SIZE_ATTRIBUTE] == size_attribute(12)[
        contract.PAYLOAD_SIZE_ATTRIBUTE]
    assert ordinary["MessageBody"] == "the real body"


def test_an_ordinary_batch_never_loads_the_payload_code():
    # GIVEN a fresh interpreter running a batch of ordinary messages
    script = """
import json, sys
from worker_tier.core.settings import Settings
from worker_tier.worker.batch import Worker
from worker_tier.worker.registry import Registry
tasks = Registry()
tasks.task("/")(lambda task: None)
records = [{"messageId": f"m{i}", "receiptHandle": "h", "body": "{}", "attributes": {}, "messageAttributes": {}}
           for i in range(3)]
response = Worker(Settings(), queue_url="q", dead_letter_queue_url=None, registry=tasks).handle({"Records": records}, None)
print(json.dumps([response, sorted(m for m in sys.modules if "payload" in m or "offloaded" in m)]))
"""
    # WHEN it ends
    repo = Path(__file__).resolve().parents[2]
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    result = subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True, text=True, check=True)
    # THEN every message succeeded and neither the payload store nor the worker's payload module was imported
    response, loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert response == {"batchItemFailures": []}
    assert loaded == []
