"""boto3 clients, created on first use so that importing Worker Tier stays cheap."""

from __future__ import annotations

from typing import Any

# Call-level throttling and transient errors are retried by botocore's standard mode:
# https://boto3.amazonaws.com/v1/documentation/api/latest/guide/retries.html#standard-retry-mode
CLIENT_MAX_ATTEMPTS = 5


def new_client(service: str) -> Any:
    """A boto3 client with standard retries; honours AWS_ENDPOINT_URL (moto, the local environment)."""
    import boto3
    from botocore.config import Config

    return boto3.client(service, config=Config(retries={"mode": "standard", "max_attempts": CLIENT_MAX_ATTEMPTS}))


class LazyClient:
    """Holds an injected client, or creates one on first use."""

    def __init__(self, service: str, client: Any = None) -> None:
        self._service = service
        self._client = client

    def get(self) -> Any:
        """The client, created now if none was injected."""
        if self._client is None:
            self._client = new_client(self._service)
        return self._client


CONDITION_FAILED = "ConditionalCheckFailedException"


def error_response(error: BaseException) -> dict:
    """A botocore error's parsed response; {} for errors that carry none (``ReadTimeoutError`` has ``response = None``)."""
    return getattr(error, "response", None) or {}


def error_code(error: BaseException) -> str:
    """The AWS error code of a botocore ClientError, else the exception's type name."""
    return (error_response(error).get("Error") or {}).get("Code") or type(error).__name__


# Failures after which a request may still have been carried out: the answer was lost, not refused.
_OUTCOME_UNKNOWN_ERRORS = ("ReadTimeoutError", "ConnectionClosedError", "ResponseStreamingError", "IncompleteReadError")


def outcome_unknown(error: BaseException) -> bool:
    """True when a failed call may still have been carried out: its answer timed out or broke, or AWS said 5xx."""
    if type(error).__name__ in _OUTCOME_UNKNOWN_ERRORS:
        return True
    status = (error_response(error).get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return isinstance(status, int) and status >= 500


def is_condition_failure(error: BaseException) -> bool:
    """True when a DynamoDB conditional write was refused by its condition."""
    return error_code(error) == CONDITION_FAILED
