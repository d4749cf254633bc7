"""AWS clients, created on first use so that importing Worker Tier stays cheap.

They are botocore clients, made from one botocore session per process: ``import boto3`` also imports s3transfer
(about a third of boto3's import and client cost on a cold start) for nothing the runtime calls. A client is
the same either way: boto3's ``client()`` is botocore's, from a session that reads the same variables and files.
Once boto3 is imported (by the app, a test, moto), clients come from ``boto3.client()`` as they always did, so that
its default session rules: ``boto3.setup_default_session``, an open ``worker_tier.testing`` world, and moto's
``mock_aws`` (which sets it aside for a session of its own, one that sends to moto) all keep working.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Literal

# Call-level throttling and transient errors are retried by botocore's standard mode:
# https://boto3.amazonaws.com/v1/documentation/api/latest/guide/retries.html#standard-retry-mode
CLIENT_MAX_ATTEMPTS = 5


# A heartbeat must land inside its margin (10 s) or the message goes to another worker, so its calls are
# bounded well inside it (botocore's defaults are 60 s to connect and 60 s to read, with retries): one attempt
# of at most 2 + 3 s, and the heartbeat's own retries within the window do the rest.
# https://botocore.amazonaws.com/v1/documentation/api/latest/reference/config.html
HEARTBEAT_CONNECT_TIMEOUT_SECONDS = 2
HEARTBEAT_READ_TIMEOUT_SECONDS = 3

# The services the runtime calls; boto3's stubs type a client by its service's literal name.
AwsService = Literal["sqs", "dynamodb", "secretsmanager", "ssm", "s3"]


def new_client(service: AwsService, **config: Any) -> Any:
    """A client with standard retries; honours AWS_ENDPOINT_URL (moto, the local environment).

    ``config`` overrides botocore Config fields (for example ``read_timeout``). Made by ``boto3.client()`` once
    boto3 is imported, else from this process's botocore session (see the module's docstring).
    """
    from botocore.config import Config

    max_attempts = config.pop("max_attempts", CLIENT_MAX_ATTEMPTS)
    client_config = Config(retries={"mode": "standard", "max_attempts": max_attempts}, **config)
    boto3 = sys.modules.get("boto3")
    with _session_lock:  # a session (boto3's default one made on first use included) is not thread-safe: clients are
        if boto3 is not None:  # its default session may be set, set aside (moto) or made now: boto3.client() decides
            return boto3.client(service, config=client_config)
        return _botocore_session().create_client(service, config=client_config)


_session_lock = threading.Lock()
_session: list[Any] = []  # the process's botocore session, once made


def _botocore_session() -> Any:
    """The botocore session clients are made from when boto3's default session is not set (made on first use)."""
    if not _session:
        import botocore.session

        _session.append(botocore.session.get_session())
    return _session[0]


def new_heartbeat_client() -> Any:
    """An SQS client whose every call ends within a heartbeat's margin: one short attempt, no botocore retries."""
    return new_client(
        "sqs",
        connect_timeout=HEARTBEAT_CONNECT_TIMEOUT_SECONDS,
        read_timeout=HEARTBEAT_READ_TIMEOUT_SECONDS,
        max_attempts=0,  # botocore's max_attempts counts retries: 0 is the first attempt alone
    )


class LazyClient:
    """Holds an injected client, or creates one on first use."""

    def __init__(self, service: AwsService, client: Any = None, factory: Any = None) -> None:
        self._service = service
        self._client = client
        self._factory = factory

    def get(self) -> Any:
        """The client, created now (by ``factory``, else with the defaults) if none was injected."""
        if self._client is None:
            self._client = self._factory() if self._factory is not None else new_client(self._service)
        return self._client


CONDITION_FAILED = "ConditionalCheckFailedException"


def error_response(error: BaseException) -> dict[str, Any]:
    """A botocore error's parsed response; {} for errors that carry none (``ReadTimeoutError`` has ``response = None``)."""
    return getattr(error, "response", None) or {}


def error_code(error: BaseException) -> str:
    """The AWS error code of a botocore ClientError, else the exception's type name."""
    return (error_response(error).get("Error") or {}).get("Code") or type(error).__name__


# Failures after which a request may still have been carried out: the answer was lost, not refused.
OUTCOME_UNKNOWN_ERRORS = ("ReadTimeoutError", "ConnectionClosedError", "ResponseStreamingError", "IncompleteReadError")


# A write whose answer was lost (read timeout, closed connection, 5xx): AWS may or may not have carried it out.
OUTCOME_UNKNOWN_CODE = "SendOutcomeUnknown"


def outcome_unknown(error: BaseException) -> bool:
    """True when a failed call may still have been carried out: its answer timed out or broke, or AWS said 5xx."""
    if type(error).__name__ in OUTCOME_UNKNOWN_ERRORS:
        return True
    status = (error_response(error).get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return isinstance(status, int) and status >= 500


def is_condition_failure(error: BaseException) -> bool:
    """True when a DynamoDB conditional write was refused by its condition."""
    return error_code(error) == CONDITION_FAILED
