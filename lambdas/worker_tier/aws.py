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
