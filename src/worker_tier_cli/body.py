"""``send``'s BODY argument: the text itself, ``-`` for stdin, or ``@PATH`` for a file, checked before anything is sent.

A body that really starts with ``@`` is written with one more: ``@@hello`` sends ``@hello``. A body read from
stdin or a file is sent as it is (a trailing newline included): SQS carries text, so it must be UTF-8 with only
the characters SQS accepts, and it must fit its ``SizeRule``: the queue's MaximumMessageSize, or, when a payload
bucket is known, ``payload_max_bytes`` (the Client offloads a body too large for the queue to S3). Each refusal is
one line naming where the body came from, what is wrong with it, the rule and the way out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from worker_tier.core import contract, limits, sqs_rules

STDIN_ARGUMENT = "-"
FILE_PREFIX = "@"
USAGE = (f"BODY is the text to send, {STDIN_ARGUMENT} to read it from stdin, or {FILE_PREFIX}PATH to read a file; "
         f"{FILE_PREFIX}{FILE_PREFIX}TEXT sends {FILE_PREFIX}TEXT")
TOO_LARGE_FIX = (f"give the deployment's payload bucket (--payload-bucket, or {contract.PAYLOAD_BUCKET_VARIABLE}; a stack "
                 f"with large_payloads outputs {contract.STACK_OUTPUTS['payload_bucket']}) to send it through S3, or keep "
                 "the payload elsewhere and send its key")
OFFLOAD_TOO_LARGE_FIX = "raise payload_max_bytes (with the worker's memory), or keep the payload elsewhere and send its key"


class BodyError(Exception):
    """A body that cannot be read or would be refused; its message is the one line to print."""


@dataclass(frozen=True)
class SizeRule:
    """The most bytes a body may have, the rule that says so and the fix, as a refusal names them."""

    maximum_bytes: int
    rule: str
    fix: str

    @classmethod
    def queue(cls, maximum_bytes: int = limits.SQS_MAX_MESSAGE_BYTES) -> SizeRule:
        """No payload bucket: the body must fit the queue's MaximumMessageSize."""
        return cls(maximum_bytes, f"the queue takes at most {maximum_bytes:,} (its MaximumMessageSize, with the attributes)",
                   TOO_LARGE_FIX)

    @classmethod
    def offloaded(cls, maximum_bytes: int, bucket: str) -> SizeRule:
        """A payload bucket: a body too large for the queue goes to S3, up to ``payload_max_bytes``."""
        return cls(maximum_bytes, f"a body offloaded to s3://{bucket} may have at most {maximum_bytes:,} "
                                  "(payload_max_bytes: a worker holds the body in memory)", OFFLOAD_TOO_LARGE_FIX)


def read_body(argument: str, stdin: BinaryIO | None, size: SizeRule | None = None) -> str:
    """The body ``argument`` names, checked against SQS's rules and ``size`` (default: SQS's largest message);
    BodyError when it cannot be sent."""
    size = size or SizeRule.queue()
    if argument == STDIN_ARGUMENT:
        if stdin is None:
            raise BodyError(f"the body is {STDIN_ARGUMENT} (stdin), but stdin is closed: pipe the body in, or give it "
                            f"as text or {FILE_PREFIX}PATH")
        return _decoded(stdin.read(size.maximum_bytes + 1), "stdin", size)
    if argument.startswith(FILE_PREFIX) and not argument.startswith(FILE_PREFIX + FILE_PREFIX):
        return _decoded(_read_file(Path(argument[1:]), size.maximum_bytes), f"file {argument[1:]}", size)
    text = argument[1:] if argument.startswith(FILE_PREFIX) else argument
    return _checked(text, len(text.encode("utf-8", "surrogatepass")), "argument", size)


def _read_file(path: Path, maximum_bytes: int) -> bytes:
    """At most ``maximum_bytes`` + 1 bytes of ``path`` (one more tells a body too large)."""
    try:
        with path.open("rb") as file:
            return file.read(maximum_bytes + 1)
    except OSError as error:
        raise BodyError(f"cannot read the body file {str(path)!r} ({error.strerror}): {FILE_PREFIX}PATH reads a file; "
                        f"write {FILE_PREFIX}{FILE_PREFIX}TEXT to send a body starting with {FILE_PREFIX}") from None


def _decoded(raw: bytes, source: str, size: SizeRule) -> str:
    """``raw`` (at most the rule's maximum + 1 bytes read) as text SQS takes, or BodyError."""
    if len(raw) <= size.maximum_bytes:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise BodyError(f"the body from {source} is not UTF-8 (byte 0x{raw[error.start]:02x} at offset {error.start}): "
                            "SQS carries text only; base64-encode binary data, or send its S3 key") from None
    return _checked(raw[:size.maximum_bytes].decode("utf-8", "replace"), len(raw), source, size)


def _checked(text: str, length: int, source: str, size: SizeRule) -> str:
    """``text`` of ``length`` UTF-8 bytes, or BodyError naming ``source``, the value, the rule and the fix."""
    if length > size.maximum_bytes:
        shown = f"{length:,}" if source == "argument" else f"over {size.maximum_bytes:,}"
        raise BodyError(f"the body from {source} is {shown} bytes; {size.rule}: {size.fix}")
    if not text:
        raise BodyError(f"the body from {source} is empty: SQS requires at least one character; send '{{}}' for a "
                        "task that reads no body")
    problem = sqs_rules.body_problem(text)
    if problem:
        raise BodyError(f"the body from {source}: {problem}; remove it, or base64-encode the body")
    return text
