"""Every boto3 client this process makes for SQS or DynamoDB answered by the in-memory stand-ins.

botocore's own ``Stubber`` answers calls this way: a ``before-call`` handler that returns
``(http_response, parsed)`` takes the place of the request
(https://botocore.amazonaws.com/v1/documentation/api/latest/reference/stubber.html). The handlers go on boto3's
default session, so ``Client.from_env()`` in the code under test, and in its tasks, reaches the world's queues
and tables; botocore still checks each call's parameters against the service's model first.
"""

from __future__ import annotations

from typing import Any

import boto3
import botocore
from botocore.awsrequest import AWSResponse, HTTPHeaders

from worker_tier.testing.tables import UnsupportedCallError

_PARAMS = "worker_tier.testing.params"


class Routing:
    """Routes boto3's default session's SQS and DynamoDB calls to ``services`` ({"sqs": ..., "dynamodb": ...})."""

    def __init__(self, services: dict[str, Any]) -> None:
        self._services = services
        self._saved_session: boto3.Session | None = None

    def start(self) -> None:
        """A fresh default session whose clients call the stand-ins."""
        self._saved_session = boto3.DEFAULT_SESSION
        boto3.setup_default_session(region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
        events = boto3.DEFAULT_SESSION.events  # type: ignore[union-attr]  # set just above
        for service in self._services:
            events.register(f"before-parameter-build.{service}", _keep_params)
            events.register(f"before-call.{service}", self._answer)  # type: ignore[arg-type]  # answers are its purpose

    def stop(self) -> None:
        """Give boto3 back the default session it had."""
        boto3.DEFAULT_SESSION = self._saved_session

    def _answer(self, model: Any, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        service = self._services[model.service_model.endpoint_prefix]
        operation = getattr(service, botocore.xform_name(model.name), None)
        if operation is None:
            raise UnsupportedCallError(f"{model.service_model.service_name}'s {model.name} is not modelled by worker_tier.testing")
        parsed = operation(**context.pop(_PARAMS))
        return AWSResponse("https://worker-tier.testing", 200, HTTPHeaders(), None), {"ResponseMetadata": {"HTTPStatusCode": 200}, **parsed}


def _keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    """Keep the call's parameters, as the caller gave them, for the answer."""
    context[_PARAMS] = dict(params)
