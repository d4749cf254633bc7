"""The ``deployment`` fixture (tests.cli.deployment): moto with a work queue, its DLQ and a state table; and
``lossy``: moto's server behind a proxy that loses chosen answers (tests.cli.lossy_proxy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from click.testing import CliRunner, Result
from moto.server import ThreadedMotoServer

from tests.cli.dashboard import dashboard
from tests.cli.deployment import NOW, deployment
from tests.cli.lossy_proxy import LossyProxy
from worker_tier.core import contract, envelope, message
from worker_tier_cli import cli
from worker_tier_cli.session import Runtime

__all__ = ["dashboard", "deployment", "lossy"]


@dataclass
class Lossy:
    """A work queue and its DLQ on moto's server, reached by the command line through ``proxy`` with boto3's real
    clients (and so botocore's own retries); ``sqs`` reaches moto directly."""

    sqs: Any
    proxy: LossyProxy
    queue_url: str
    dlq_url: str
    runtime: Runtime

    def dead_letter(self, path: str, body: str) -> str:
        original = {contract.PATH_ATTRIBUTE: {"DataType": "String", "StringValue": path}}
        reason = message.failure_reason(RuntimeError("boom"), attempts=3, path=path, failed_at=NOW)
        sent = self.sqs.send_message(QueueUrl=self.dlq_url, MessageBody=body,
                                     MessageAttributes=envelope.dead_letter_attributes(original, reason))
        return str(sent["MessageId"])

    def run(self, *command: str) -> Result:
        args = ["--endpoint-url", self.proxy.url, "--region", "us-east-1", "--queue-url", self.queue_url,
                "--dlq-url", self.dlq_url, *command]
        return CliRunner().invoke(cli, args, obj=self.runtime)

    def bodies(self, queue_url: str) -> list[str]:
        """The bodies in a queue (consumed)."""
        got: list[str] = []
        while batch := self.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10,
                                                VisibilityTimeout=600).get("Messages"):
            got += [m["Body"] for m in batch]
        return got


@pytest.fixture
def lossy(tmp_path):
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    port = server.get_host_and_port()[1]
    proxy = LossyProxy(port)
    sqs = boto3.client("sqs", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
    yield Lossy(sqs, proxy, sqs.create_queue(QueueName="work")["QueueUrl"], sqs.create_queue(QueueName="dlq")["QueueUrl"],
                Runtime(interactive=lambda: False, wait_seconds=0, state_dir=tmp_path / "state", environ={}))
    proxy.close()
    server.stop()
