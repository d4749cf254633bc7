"""aws.py: error codes from every kind of botocore failure, including those that carry no response."""

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

from worker_tier.core.aws import error_code, is_condition_failure


@pytest.mark.parametrize(
    "error, code",
    [
        (ClientError({"Error": {"Code": "ThrottlingException"}}, "SendMessage"), "ThrottlingException"),
        (ClientError({"Error": {"Code": "ConditionalCheckFailedException"}}, "PutItem"), "ConditionalCheckFailedException"),
        (ReadTimeoutError(endpoint_url="https://sqs.example"), "ReadTimeoutError"),
        (ConnectionClosedError(endpoint_url="https://sqs.example"), "ConnectionClosedError"),
        (EndpointConnectionError(endpoint_url="https://sqs.example"), "EndpointConnectionError"),
        (ClientError({}, "SendMessage"), "ClientError"),
        (ValueError("plain"), "ValueError"),
    ],
)
def test_error_code_never_raises_whatever_the_error_carries(error, code):
    # GIVEN a botocore error whose response is None (timeouts, closed connections) or lacks a code
    # WHEN / THEN its code is the AWS code, else its type name: never an AttributeError
    assert error_code(error) == code


def test_a_timeout_is_not_a_condition_failure():
    assert not is_condition_failure(ReadTimeoutError(endpoint_url="https://dynamodb.example"))


@pytest.mark.parametrize(
    "error, unknown",
    [
        (ReadTimeoutError(endpoint_url="https://sqs.example"), True),
        (ConnectionClosedError(endpoint_url="https://sqs.example"), True),
        (ClientError({"Error": {"Code": "InternalError"}, "ResponseMetadata": {"HTTPStatusCode": 500}}, "SendMessageBatch"), True),
        (ClientError({"Error": {"Code": "ThrottlingException"}, "ResponseMetadata": {"HTTPStatusCode": 400}}, "SendMessageBatch"), False),
        (EndpointConnectionError(endpoint_url="https://sqs.example"), False),
    ],
)
def test_outcome_unknown_only_when_the_answer_was_lost(error, unknown):
    # GIVEN a failed call  THEN it may have been carried out only when its answer was lost or AWS said 5xx
    from worker_tier.core.aws import outcome_unknown

    assert outcome_unknown(error) is unknown


def test_a_heartbeat_client_ends_every_call_within_the_heartbeats_margin():
    # GIVEN the client heartbeats use outside tests  THEN one attempt of at most connect + read timeout,
    # well inside the 10 s margin (botocore's defaults, 60 s + 60 s with retries, would let a hung call outlast it)
    from worker_tier.core.aws import new_heartbeat_client
    from worker_tier.core.settings import HEARTBEAT_MARGIN_SECONDS

    config = new_heartbeat_client().meta.config
    assert config.retries["total_max_attempts"] == 1
    assert config.connect_timeout + config.read_timeout < HEARTBEAT_MARGIN_SECONDS


_MOTO_AFTER_A_CLIENT = """
import os
os.environ.update(AWS_ACCESS_KEY_ID="kept-from-before", AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="eu-west-1")
for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS", "AWS_PROFILE"):
    os.environ.pop(name, None)
from worker_tier.core.aws import new_client
new_client("sqs")  # a client made before moto is imported (module-level code, an earlier test)
from moto import mock_aws
with mock_aws():
    client = new_client("sqs", connect_timeout=1, read_timeout=1, max_attempts=1)
    print(client.create_queue(QueueName="q")["QueueUrl"])
"""


def test_moto_mock_aws_answers_clients_made_in_it_even_after_one_was_made_before_moto_was_imported():
    # GIVEN a process that made a client, then imported moto
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    # WHEN a client made inside mock_aws creates a queue
    result = subprocess.run([sys.executable, "-c", _MOTO_AFTER_A_CLIENT], env=environ, capture_output=True, text=True, check=False,
                            timeout=120)
    # THEN moto answers it (as with boto3.client(), whose default session mock_aws sets aside), not AWS itself
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("/123456789012/q")
