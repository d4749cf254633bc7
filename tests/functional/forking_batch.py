"""A Lambda batch whose first task forks, run as a process of its own (``test_worker``): the fork stays out of pytest's.

``python -m tests.functional.forking_batch HOW LOG`` handles one batch of three messages: ``/fork`` forks, and its
child ends as HOW says (``exit-0``, ``exit-3``, ``raise`` or ``return``) while the parent waits for it; then
``/record`` twice. Each task appends ``<what> <pid>`` to LOG; the parent appends ``child-status <exit status>``. It
prints the batch's response and its own pid as JSON.

``python -m tests.functional.forking_batch HOW LOG idempotent`` makes ``/fork`` an idempotent task, its state table in
a moto server this process runs (a server, not moto's in-process mock: the child's calls must reach the parent's
table); after the child ends, the parent appends ``record-status <the idempotency record's status>``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.support.fakes import FakeSQS
from worker_tier import Task
from worker_tier.worker.idempotency import STATE_TABLE_PARTITION_KEY
from worker_tier.core.envelope import lambda_record
from worker_tier.worker.registry import Registry
from worker_tier.core.settings import Settings
from worker_tier.worker.batch import Worker

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:work"
HOW_THE_CHILD_ENDS = ("exit-0", "exit-3", "raise", "return")


def main(how: str, log: Path, idempotent: bool) -> None:
    def note(what: str) -> None:
        with log.open("a") as file:
            file.write(f"{what} {os.getpid()}\n")

    def fork(task: Task) -> None:
        child = os.fork()
        if child == 0:
            note("child")
            if how == "exit-0":
                sys.exit(0)
            if how == "exit-3":
                sys.exit(3)
            if how == "raise":
                raise RuntimeError("the child failed")
            return
        _, status = os.waitpid(child, 0)
        note(f"child-status {os.waitstatus_to_exitcode(status)}")
        if dynamodb is not None:
            statuses = [item["status"]["S"] for item in dynamodb.scan(TableName="state")["Items"]]
            note(f"record-status {' '.join(statuses) or 'none'}")

    dynamodb = _state_table() if idempotent else None
    tasks = Registry()
    tasks.task("/fork", idempotent=idempotent)(fork)
    tasks.task("/record")(lambda task: note(f"record-{task.body}"))
    worker = Worker(Settings(), queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/work",
                    dead_letter_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/dlq", registry=tasks, sqs=FakeSQS(),
                    state_table="state" if idempotent else None, dynamodb=dynamodb)
    messages = [("/fork", "0"), ("/record", "1"), ("/record", "2")]
    event = {"Records": [
        lambda_record({"MessageId": f"m{n}", "ReceiptHandle": f"r{n}", "Body": body, "Attributes": {"ApproximateReceiveCount": "1"},
                       "MessageAttributes": {"beanstalk.sqsd.path": {"DataType": "String", "StringValue": path}}},
                      QUEUE_ARN, "us-east-1")
        for n, (path, body) in enumerate(messages)
    ]}
    response = worker.handle(event, None)
    print(json.dumps({"pid": os.getpid(), "response": response}))


def _state_table() -> Any:
    """A DynamoDB client of a moto server started here, with the state table made."""
    import boto3
    from moto.server import ThreadedMotoServer

    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(name, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    dynamodb = boto3.client("dynamodb", endpoint_url=f"http://{host}:{port}", region_name="us-east-1")
    dynamodb.create_table(TableName="state", KeySchema=[{"AttributeName": STATE_TABLE_PARTITION_KEY, "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": STATE_TABLE_PARTITION_KEY, "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")
    return dynamodb


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:] == ["idempotent"])
