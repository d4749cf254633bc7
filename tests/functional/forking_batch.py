"""A Lambda batch whose first task forks, run as a process of its own (``test_worker``): the fork stays out of pytest's.

``python -m tests.functional.forking_batch HOW LOG`` handles one batch of three messages: ``/fork`` forks, and its
child ends as HOW says (``exit-0``, ``exit-3``, ``raise`` or ``return``) while the parent waits for it; then
``/record`` twice. Each task appends ``<what> <pid>`` to LOG; the parent appends ``child-status <exit status>``. It
prints the batch's response and its own pid as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.fakes import FakeSQS
from worker_tier import Task
from worker_tier.message import lambda_record
from worker_tier.registry import Registry
from worker_tier.settings import Settings
from worker_tier.worker import Worker

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:work"
HOW_THE_CHILD_ENDS = ("exit-0", "exit-3", "raise", "return")


def main(how: str, log: Path) -> None:
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

    tasks = Registry()
    tasks.task("/fork")(fork)
    tasks.task("/record")(lambda task: note(f"record-{task.body}"))
    worker = Worker(Settings(), queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/work",
                    dead_letter_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/dlq", registry=tasks, sqs=FakeSQS())
    messages = [("/fork", "0"), ("/record", "1"), ("/record", "2")]
    event = {"Records": [
        lambda_record({"MessageId": f"m{n}", "ReceiptHandle": f"r{n}", "Body": body, "Attributes": {"ApproximateReceiveCount": "1"},
                       "MessageAttributes": {"beanstalk.sqsd.path": {"DataType": "String", "StringValue": path}}},
                      QUEUE_ARN, "us-east-1")
        for n, (path, body) in enumerate(messages)
    ]}
    response = worker.handle(event, None)
    print(json.dumps({"pid": os.getpid(), "response": response}))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
