"""The baseline for the cold-start figures: a minimal Powertools SQS handler that creates its boto3 client at import.

Its record handler parses the body; a body that is the JSON string ``"fail"`` fails, after the handler sets
the message's visibility (one ChangeMessageVisibility with the client made at import: the backoff our worker
gives a failure, done the plain way), so Powertools reports it in ``batchItemFailures``.
"""

import json
import os

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

processor = BatchProcessor(event_type=EventType.SQS)
logger = Logger()
sqs = boto3.client("sqs")
QUEUE_URL = os.environ.get("QUEUE_URL", "")
RETRY_IN_SECONDS = 30


def record_handler(record):
    if json.loads(record.body) == "fail":
        sqs.change_message_visibility(QueueUrl=QUEUE_URL, ReceiptHandle=record.receipt_handle, VisibilityTimeout=RETRY_IN_SECONDS)
        raise RuntimeError("this record fails")


def lambda_handler(event, context):
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
