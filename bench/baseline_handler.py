"""The baseline for cold_import_ratio: a minimal Powertools SQS handler that creates its boto3 client at import."""

import json

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

processor = BatchProcessor(event_type=EventType.SQS)
logger = Logger()
sqs = boto3.client("sqs")


def record_handler(record):
    json.loads(record.body)


def lambda_handler(event, context):
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
