"""AWS's own SQS Extended Client for Python (``amazon-sqs-extended-client``), the peer our large payloads interoperate with.

Importing the package replaces ``boto3.Session`` and the default session for the whole process (its ``__init__``), so
every boto3 SQS client made afterwards would read offloaded bodies itself and rewrite receipt handles. ``session``
puts boto3 back as it was and returns one session of the Extended Client: only that session's clients are extended.
"""

from __future__ import annotations

from typing import Any

import boto3
import boto3.session


def session(**kwargs: Any) -> Any:
    """An ``SQSExtendedClientSession(**kwargs)``, leaving ``boto3.Session`` and its default session untouched."""
    saved = boto3.session.Session, boto3.Session, boto3.DEFAULT_SESSION
    try:
        from sqs_extended_client.client import SQSExtendedClientSession
    finally:
        boto3.session.Session, boto3.Session, boto3.DEFAULT_SESSION = saved
    return SQSExtendedClientSession(**kwargs)
