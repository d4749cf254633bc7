"""``delayed list`` and ``delayed cancel KEY``: the delay table's coming messages, and cancelling one by its dedupe key.

``list`` reads the coming minutes of the delay table, from the delay dispatcher's watermark (what it has
not yet dispatched; past each shard's cursor) or from now without one: every possible shard of each
minute, one Query each, until ``--limit`` messages or ``--within`` is reached. ``cancel`` goes through
``worker_tier.Client`` (``worker_tier.delays.cancellation``): the same transaction, the same race.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

import click

from worker_tier.delays import cancellation, delay
from worker_tier.core import contract
from worker_tier.delays.dispatch_state import shard_positions, state_reader
from worker_tier.core.errors import MessageError, StateError, UnreadableItemError
from worker_tier.core.message import format_due_at
from worker_tier_cli.output import emit_json, table
from worker_tier_cli.session import Session

DEFAULT_LIMIT = 20
DEFAULT_WITHIN_MINUTES = 60
MAX_WITHIN_MINUTES = 7 * 24 * 60  # a week of minutes: 16 Queries each, so a bound on what one command reads
# Exit codes of ``delayed cancel`` when nothing was cancelled (0: cancelled; 2: usage, as every command).
EXIT_CODES = {cancellation.STARTED: 3, cancellation.NOT_FOUND: 4, cancellation.NOT_CANCELLABLE: 5, cancellation.CONTENDED: 6}


@dataclass(frozen=True)
class Coming:
    """One message waiting in the delay table."""

    due: str
    in_seconds: int
    path: str
    dedupe_key: str | None
    cancellable: bool
    message_id: str


def _session() -> Session:
    session: Session = click.get_current_context().find_object(Session)  # type: ignore[assignment]
    return session


@click.group("delayed")
def delayed_group() -> None:
    """Messages waiting in the delay table: list them, cancel one."""


@delayed_group.command("list")
@click.option("--path", help="Only messages for this task path.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=DEFAULT_LIMIT, show_default=True, help="At most this many.")
@click.option("--within", "within_minutes", type=click.IntRange(1, MAX_WITHIN_MINUTES), default=DEFAULT_WITHIN_MINUTES,
              show_default=True, help="Minutes ahead to read.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
def list_command(path: str | None, limit: int, within_minutes: int, as_json: bool) -> None:
    """The next messages due, in due order."""
    found, window = coming(_session(), path, limit, within_minutes)
    if as_json:
        emit_json({"messages": [vars(c) for c in found], **window})
        return
    rows = [(c.due, _ahead(c.in_seconds), c.path, c.dedupe_key, "yes" if c.cancellable else "no", c.message_id) for c in found]
    click.echo(table(("due", "in", "path", "dedupe key", "cancellable", "id"), rows))
    click.echo(f"{len(found)} shown, read the minutes {window['from_minute']} through {window['to_minute']}")


@delayed_group.command("cancel")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a line.")
def cancel_command(key: str, as_json: bool) -> None:
    """Cancel the delayed message sent with dedupe key KEY and cancellable=True.

    Exit 0: cancelled, never delivered. 3: too late, the delay dispatcher has started its minute and it is delivered
    as sent. 4: no such message. 5: it was not sent cancellable. 6: other reschedules kept moving it.
    """
    try:
        outcome = cancelling_client(_session()).cancel_outcome(key)
    except MessageError as error:
        raise click.UsageError(str(error)) from error
    if as_json:
        emit_json({"dedupe_key": key, "cancelled": outcome.done, "status": outcome.status, "detail": outcome.detail})
    else:
        click.echo(f"{key}: {outcome.detail}", err=not outcome.done)
    if not outcome.done:
        click.get_current_context().exit(EXIT_CODES[outcome.status])


def coming(session: Session, path: str | None = None, limit: int = DEFAULT_LIMIT,
           within_minutes: int = DEFAULT_WITHIN_MINUTES) -> tuple[list[Coming], dict[str, str]]:
    """Up to ``limit`` messages due within ``within_minutes`` (of ``path`` only, when given), in due order, and the
    first and last minute read (``from_minute``, ``to_minute``)."""
    target, dynamodb, now = session.target, session.client("dynamodb"), session.runtime.clock()
    start, positions = _start(dynamodb, target.optional("state_table"), now)
    last = math.floor(now / delay.BUCKET_SECONDS) + within_minutes
    found: list[Coming] = []
    for message in _coming(dynamodb, target.required("delay_table"), start, last, positions):
        if path is None or _path(message) == path:
            found.append(_row(message, now))
            if len(found) == limit:
                break
    return found, {"from_minute": _minute(start), "to_minute": _minute(last)}


def cancelling_client(session: Session) -> Any:
    """A ``worker_tier.Client`` that can cancel and reschedule (the delay table, the state table, and the payload
    bucket when known: a cancelled message's offloaded body is deleted with it)."""
    from worker_tier import Client

    target = session.target
    bucket = target.optional("payload_bucket")
    offload: dict[str, Any] = {"payload_bucket": bucket, "s3": session.client("s3")} if bucket else {}
    return Client(target.required("queue_url"), target.required("delay_table"), sqs=session.client("sqs"),
                  dynamodb=session.client("dynamodb"), clock=session.runtime.clock,
                  state_table=target.required("state_table"), **offload)


def _start(dynamodb: Any, state_table: str | None, now: float) -> tuple[int, dict[int, tuple[int, str]]]:
    """The first minute to read, and the delay dispatcher's (minute, cursor) per shard: its earliest group's minute,
    else (no position yet) now's minute."""
    here = math.floor(now / delay.BUCKET_SECONDS)
    if not state_table:
        return here, {}

    read = state_reader(dynamodb, state_table)

    try:
        positions = shard_positions(read)
    except StateError:
        return here, {}
    known = [bucket for bucket, _ in positions.values() if bucket >= 0]
    return (min(known) if known else here), positions


def _coming(dynamodb: Any, table_name: str, first: int, last: int,
            positions: dict[int, tuple[int, str]]) -> Iterator[delay.DelayedMessage]:
    """The messages of minutes ``first``..``last`` in due order, past each shard's dispatcher position."""
    for bucket in range(first, last + 1):
        minute: list[delay.DelayedMessage] = []
        for shard in range(delay.MAX_SHARDS):
            done_bucket, cursor = positions.get(shard, (-1, ""))
            if bucket < done_bucket:
                continue
            minute += _shard(dynamodb, table_name, bucket, shard, cursor or None if bucket == done_bucket else None)
        yield from sorted(minute, key=lambda m: (m.due_ms, m.message_id))


def _shard(dynamodb: Any, table_name: str, bucket: int, shard: int, after: str | None) -> list[delay.DelayedMessage]:
    """Every readable message of one shard of one minute, after ``after``."""
    pk = {"S": delay.bucket_key(bucket, shard)}
    request: dict[str, Any] = {"TableName": table_name, "KeyConditionExpression": "pk = :pk", "ExpressionAttributeValues": {":pk": pk}}
    if after is not None:
        request["ExclusiveStartKey"] = {contract.DELAY_PARTITION_KEY: pk, contract.DELAY_SORT_KEY: {"S": after}}
    messages = []
    while True:
        page = dynamodb.query(**request)
        for item in page.get("Items") or []:
            try:
                messages.append(delay.read_item(item))
            except UnreadableItemError:
                continue  # the delay dispatcher dead-letters it with its reason; not a message to list
        if "LastEvaluatedKey" not in page:
            return messages
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _minute(bucket: int) -> str:
    """A minute of the delay table by its start: ``2026-11-22T12:00:00.000Z``."""
    return format_due_at(bucket * delay.BUCKET_SECONDS * 1000)


def _path(message: delay.DelayedMessage) -> str:
    return str(message.attributes.get(contract.PATH_ATTRIBUTE, {}).get("StringValue", ""))


def _row(message: delay.DelayedMessage, now: float) -> Coming:
    return Coming(format_due_at(message.due_ms), math.ceil(message.due_ms / 1000 - now), _path(message), message.dedupe_key,
                  message.cancellable, message.message_id)


def _ahead(seconds: int) -> str:
    """A delay for people: 45s, 12m, 3h05m, 2d04h; overdue ones negative."""
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{days}d{hours:02d}h" if days else f"{hours}h{minutes:02d}m" if hours else f"{minutes}m" if minutes else f"{secs}s"
    return sign + text
