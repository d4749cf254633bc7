"""What an open world takes over in the process: boto3's default session, the environment and the wall clock.

Every boto3 client made from the default session for SQS, DynamoDB or S3 is answered by the in-memory stand-ins.
botocore's own ``Stubber`` answers calls this way: a ``before-call`` handler that returns
``(http_response, parsed)`` takes the place of the request
(https://botocore.amazonaws.com/v1/documentation/api/latest/reference/stubber.html). So ``Client.from_env()`` in
the code under test, and in its tasks, reaches the world's queues and tables; botocore still checks each call's
parameters against the service's model first. The environment gets the world's ``WORKER_TIER_*`` variables and
AWS variables that need no account, profile or config file; ``worker_tier.core.wall_clock`` reads the world's clock.

Worlds may overlap: the last one opened and still open holds the process, and when the last one closes the
process gets back what it had before the first opened, whatever order they close in.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import boto3
import botocore
from botocore.awsrequest import AWSResponse, HTTPHeaders

from worker_tier.core import wall_clock
from worker_tier.testing.queues import REGION
from worker_tier.testing.tables import UnsupportedCallError

_PARAMS = "worker_tier.testing.params"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
# No profile, no config or credentials file (botocore reads neither when the path is not a file): an open world
# needs no AWS configuration, whatever the developer's shell names (https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-envvars.html).
AWS_ENVIRONMENT: Mapping[str, str | None] = {
    "AWS_PROFILE": None, "AWS_DEFAULT_PROFILE": None, "AWS_SESSION_TOKEN": None,
    "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"], "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
    "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION, "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


class Routing:
    """Routes the process to one world: ``services`` ({"sqs": ..., "dynamodb": ..., "s3": ...}), ``environment`` (None: unset), ``clock``."""

    def __init__(self, services: dict[str, Any], environment: Mapping[str, str | None], clock: Callable[[], float]) -> None:
        self._services = services
        self._environment = {**AWS_ENVIRONMENT, **environment}
        self._clock = clock
        self._session: boto3.Session | None = None

    def start(self) -> None:
        """Hold the process: the world's variables, a default session whose clients call the stand-ins, its clock."""
        if self in _OPEN:
            return
        if not _OPEN:
            _BEFORE.save()
        _OPEN.append(self)
        self._hold()

    def stop(self) -> None:
        """Let go: the latest other open world holds the process, or, with none, it is as before the first opened."""
        if self not in _OPEN:
            return
        _OPEN.remove(self)
        if _OPEN:
            _OPEN[-1]._hold()
        else:
            _BEFORE.restore()

    def _hold(self) -> None:
        for name, value in self._environment.items():
            _BEFORE.environment.setdefault(name, os.environ.get(name))
            _set_variable(name, value)
        if self._session is None:  # made once the variables are set: it reads no profile
            self._session = boto3.Session(CREDENTIALS["aws_access_key_id"], CREDENTIALS["aws_secret_access_key"], region_name=REGION)
            for service in self._services:
                self._session.events.register(f"before-parameter-build.{service}", _keep_params)
                self._session.events.register(f"before-call.{service}", self._answer)  # type: ignore[arg-type]  # answers are its purpose
        boto3.DEFAULT_SESSION = self._session
        wall_clock.use(self._clock)

    def _answer(self, model: Any, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        service = self._services[model.service_model.endpoint_prefix]
        operation = getattr(service, botocore.xform_name(model.name), None)
        if operation is None:
            raise UnsupportedCallError(f"{model.service_model.service_name}'s {model.name} is not modelled by worker_tier.testing")
        parsed = operation(**context.pop(_PARAMS))
        return AWSResponse("https://worker-tier.testing", 200, HTTPHeaders(), None), {"ResponseMetadata": {"HTTPStatusCode": 200}, **parsed}


class _Before:
    """What the process had before the first world opened: each variable a world sets, the default session, the clock."""

    def __init__(self) -> None:
        self.environment: dict[str, str | None] = {}
        self.session: boto3.Session | None = None
        self.clock: Callable[[], float] = wall_clock.now

    def save(self) -> None:
        self.environment.clear()
        self.session = boto3.DEFAULT_SESSION
        self.clock = wall_clock.use(None)

    def restore(self) -> None:
        for name, value in self.environment.items():
            _set_variable(name, value)
        self.environment.clear()
        boto3.DEFAULT_SESSION = self.session
        wall_clock.use(self.clock)


_OPEN: list[Routing] = []  # the open worlds' routings, in the order they opened
_BEFORE = _Before()


def _set_variable(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    """Keep the call's parameters, as the caller gave them, for the answer."""
    context[_PARAMS] = dict(params)
