"""``MemoryObjects``: an in-memory S3 for the calls Worker Tier makes with large payloads, for ``TaskWorld``.

The calls (``worker_tier.core.payloads.PayloadStore``'s): PutObject, GetObject (its ``Body`` a botocore
``StreamingBody``, with ``ContentLength``) and DeleteObject, on buckets made with ``create_bucket``. A missing key
is ``NoSuchKey``, a missing bucket ``NoSuchBucket``, both as botocore's ``ClientError`` with S3's 404; deleting a
missing key succeeds (S3 answers 204 either way). Any other call is refused with ``UnsupportedCallError`` by the
routing, naming it. Each answer and error code was checked against moto
(tests/functional/test_testing_stand_ins.py).
"""

from __future__ import annotations

import hashlib
import io
from typing import IO, Any

from botocore.response import StreamingBody

from worker_tier.testing.tables import client_error

NOT_FOUND = {"ResponseMetadata": {"HTTPStatusCode": 404}}


class MemoryObjects:
    """S3 buckets in memory: bucket name → key → the object's bytes."""

    def __init__(self) -> None:
        self.buckets: dict[str, dict[str, bytes]] = {}

    def create_bucket(self, Bucket: str, **_: Any) -> dict[str, Any]:
        """An empty bucket (an existing one is kept as it is)."""
        self.buckets.setdefault(Bucket, {})
        return {"Location": f"/{Bucket}"}

    # -- the S3 API (boto3's names and shapes) ----------------------------------------------

    def put_object(self, Bucket: str, Key: str, Body: bytes | str | IO[bytes] = b"", **_: Any) -> dict[str, Any]:
        data = _bytes(Body)
        self._bucket(Bucket, "PutObject")[Key] = data
        return {"ETag": f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'}

    def get_object(self, Bucket: str, Key: str, **_: Any) -> dict[str, Any]:
        objects = self._bucket(Bucket, "GetObject")
        if Key not in objects:
            raise client_error("NoSuchKey", "GetObject", message="The specified key does not exist.", **NOT_FOUND)
        data = objects[Key]
        return {"Body": StreamingBody(io.BytesIO(data), len(data)), "ContentLength": len(data),
                "ETag": f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'}

    def copy_object(self, Bucket: str, Key: str, CopySource: Any, **_: Any) -> dict[str, Any]:
        """A copy of CopySource (``{"Bucket", "Key"}`` or ``"bucket/key"``) at Bucket/Key; onto itself, it is unchanged."""
        source_bucket, source_key = ((CopySource["Bucket"], CopySource["Key"]) if isinstance(CopySource, dict)
                                     else str(CopySource).lstrip("/").split("/", 1))
        objects = self._bucket(source_bucket, "CopyObject")
        if source_key not in objects:
            raise client_error("NoSuchKey", "CopyObject", message="The specified key does not exist.", **NOT_FOUND)
        data = objects[source_key]
        self._bucket(Bucket, "CopyObject")[Key] = data
        return {"CopyObjectResult": {"ETag": f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'}}

    def delete_object(self, Bucket: str, Key: str, **_: Any) -> dict[str, Any]:
        self._bucket(Bucket, "DeleteObject").pop(Key, None)
        return {"ResponseMetadata": {"HTTPStatusCode": 204}}

    def _bucket(self, name: str, operation: str) -> dict[str, bytes]:
        if name not in self.buckets:
            raise client_error("NoSuchBucket", operation, message="The specified bucket does not exist", **NOT_FOUND)
        return self.buckets[name]


def _bytes(body: bytes | str | IO[bytes]) -> bytes:
    """PutObject's Body as boto3 takes it: bytes, text (sent as UTF-8) or a readable file."""
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    return body.read()
