"""A Lambda context object with a real remaining-time clock."""

from __future__ import annotations

import time
import uuid
from typing import Callable


class LocalContext:
    """What Lambda passes as ``context``: names, memory and a deadline that really runs down."""

    def __init__(
        self,
        function_name: str,
        timeout_seconds: int,
        memory_mb: int,
        region: str,
        account: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{region}:{account}:function:{function_name}"
        self.memory_limit_in_mb = str(memory_mb)
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = f"local/{self.aws_request_id}"
        self._clock = clock
        self._deadline = clock() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds until the invocation's timeout, never below zero."""
        return max(0, int((self._deadline - self._clock()) * 1000))
