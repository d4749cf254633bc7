"""A batch's records before the batch loop reads them: those it cannot read, and the FIFO records behind them;
and a DLQ reason record a redrive moved into the work queue (``is_reason_record``).

A record without a receipt handle, or whose ``attributes`` / ``messageAttributes`` are not objects, must reach
neither the batch loop nor the heartbeat; a readable record of its FIFO group that follows it must not run first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worker_tier.core.observability import logger

if TYPE_CHECKING:
    from worker_tier.core.task import Task



def all_readable(event: Any) -> list[Any] | None:
    """A Lambda SQS event's records, when every one is named (``message.split_records``) and readable
    (``split_unreadable``), as in every batch Lambda sends: one pass over them where those take two. None
    otherwise, or when the event is not a dict with a ``Records`` list: then those two sort the records out.
    """
    records = event.get("Records") if event.__class__ is dict else None
    if records.__class__ is not list:
        return None
    none = _NO_ATTRIBUTES
    readable = [
        r for r in records
        if r.__class__ is dict and (message_id := r.get("messageId")).__class__ is str and message_id
        and r.get("receiptHandle").__class__ is str
        and r.get("attributes", none).__class__ is dict
        and r.get("messageAttributes", none).__class__ is dict
    ]
    return readable if len(readable) == len(records) else None


def split_unreadable(records: list[Any]) -> tuple[list[Any], list[Any]]:
    """Records the batch loop and the heartbeat can read, and those they cannot (no receipt handle, or
    ``attributes`` / ``messageAttributes`` that are not objects): those must not reach either."""
    none = _NO_ATTRIBUTES  # ``.__class__ is`` rather than type(): this runs for every record of every batch
    unreadable = [
        r for r in records
        if r.get("receiptHandle").__class__ is not str
        or r.get("attributes", none).__class__ is not dict
        or r.get("messageAttributes", none).__class__ is not dict
    ]
    if not unreadable:
        return records, unreadable
    kept = {id(r) for r in unreadable}
    return [r for r in records if id(r) not in kept], unreadable


_NO_ATTRIBUTES: dict[str, Any] = {}


def fifo_stopped(named: list[Any], unreadable: list[Any]) -> list[Any]:
    """Readable records that follow an unreadable one of their FIFO group (any group, when its group is unknown)."""
    unreadable_ids = {id(r) for r in unreadable}
    stopped_groups: set[str | None] = set()  # None: a record whose group is unknown
    every_group = False
    stopped = []
    for record in named:
        system = record.get("attributes")
        group = system.get("MessageGroupId") if isinstance(system, dict) else None
        if id(record) in unreadable_ids:
            every_group = every_group or group is None
            stopped_groups.add(group)
        elif every_group or group in stopped_groups:
            stopped.append(record)
    return stopped


def is_reason_record(task: Task) -> bool:
    """Whether a message is a DLQ reason record moved into the work queue by a redrive that moves everything
    (StartMessageMoveTask): logged and dropped (reported done, so deleted), never run nor dead-lettered again.
    Its message was moved with it and runs; the record only described why that message died."""
    from worker_tier.worker.dead_letter import reason_record  # only a message from the DLQ gets here

    record = reason_record(task.body, task.record.get("messageAttributes") or {})
    if record is None:
        return False
    logger.warning("a DLQ reason record arrived as work (a redrive moved it from the DLQ); dropped, not run",
                   extra={"reason_record_for": record.get("source_message_id")})
    return True

