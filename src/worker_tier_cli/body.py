"""``send``'s BODY argument: the text itself, ``-`` for stdin, or ``@PATH`` for a file, checked before anything is sent.

A body that really starts with ``@`` is written with one more: ``@@hello`` sends ``@hello``. A body read from
stdin or a file is sent as it is (a trailing newline included): SQS carries text, so it must be UTF-8 with only
the characters SQS accepts, and it must fit the queue's MaximumMessageSize. Each refusal is one line naming
where the body came from, what is wrong with it, the rule and the way out.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from worker_tier.core import limits, sqs_rules

STDIN_ARGUMENT = "-"
FILE_PREFIX = "@"
USAGE = (f"BODY is the text to send, {STDIN_ARGUMENT} to read it from stdin, or {FILE_PREFIX}PATH to read a file; "
         f"{FILE_PREFIX}{FILE_PREFIX}TEXT sends {FILE_PREFIX}TEXT")
TOO_LARGE_FIX = "keep the payload elsewhere (e.g. S3) and send its key"


class BodyError(Exception):
    """A body that cannot be read or would be refused; its message is the one line to print."""


def read_body(argument: str, stdin: BinaryIO | None, maximum_bytes: int = limits.SQS_MAX_MESSAGE_BYTES) -> str:
    """The body ``argument`` names, checked against SQS's rules and ``maximum_bytes``; BodyError when it cannot be sent."""
    if argument == STDIN_ARGUMENT:
        if stdin is None:
            raise BodyError(f"the body is {STDIN_ARGUMENT} (stdin), but stdin is closed: pipe the body in, or give it "
                            f"as text or {FILE_PREFIX}PATH")
        return _decoded(stdin.read(maximum_bytes + 1), "stdin", maximum_bytes)
    if argument.startswith(FILE_PREFIX) and not argument.startswith(FILE_PREFIX + FILE_PREFIX):
        return _decoded(_read_file(Path(argument[1:]), maximum_bytes), f"file {argument[1:]}", maximum_bytes)
    text = argument[1:] if argument.startswith(FILE_PREFIX) else argument
    return _checked(text, len(text.encode("utf-8", "surrogatepass")), "argument", maximum_bytes)


def _read_file(path: Path, maximum_bytes: int) -> bytes:
    """At most ``maximum_bytes`` + 1 bytes of ``path`` (one more tells a body too large)."""
    try:
        with path.open("rb") as file:
            return file.read(maximum_bytes + 1)
    except OSError as error:
        raise BodyError(f"cannot read the body file {str(path)!r} ({error.strerror}): {FILE_PREFIX}PATH reads a file; "
                        f"write {FILE_PREFIX}{FILE_PREFIX}TEXT to send a body starting with {FILE_PREFIX}") from None


def _decoded(raw: bytes, source: str, maximum_bytes: int) -> str:
    """``raw`` (at most ``maximum_bytes`` + 1 bytes read) as text SQS takes, or BodyError."""
    if len(raw) <= maximum_bytes:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise BodyError(f"the body from {source} is not UTF-8 (byte 0x{raw[error.start]:02x} at offset {error.start}): "
                            "SQS carries text only; base64-encode binary data, or send its S3 key") from None
    return _checked(raw[:maximum_bytes].decode("utf-8", "replace"), len(raw), source, maximum_bytes)


def _checked(text: str, size: int, source: str, maximum_bytes: int) -> str:
    """``text`` of ``size`` UTF-8 bytes, or BodyError naming ``source``, the value, the rule and the fix."""
    if size > maximum_bytes:
        shown = f"{size:,}" if source == "argument" else f"over {maximum_bytes:,}"
        raise BodyError(f"the body from {source} is {shown} bytes; the queue takes at most {maximum_bytes:,} "
                        f"(its MaximumMessageSize, with the attributes): {TOO_LARGE_FIX}")
    if not text:
        raise BodyError(f"the body from {source} is empty: SQS requires at least one character; send '{{}}' for a "
                        "task that reads no body")
    problem = sqs_rules.body_problem(text)
    if problem:
        raise BodyError(f"the body from {source}: {problem}; remove it, or base64-encode the body")
    return text
