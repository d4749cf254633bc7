"""Tracked jobs (docs/jobs.md): a job record's layout in the state table, its writes and its reading as a JobStatus.

A message sent with ``track=True`` carries its job id in ``contract.JOB_ATTRIBUTE``; its record is the state-table
item ``job#<id>``. The producer writes the first one (``first_item``: queued, or delayed with its due time); each
worker that runs the message writes one change (``Transition``: running, retrying, succeeded, dead-lettered), and
``Client.cancel`` writes cancelled. Every change is one UpdateItem that sets the state's fields and appends its event
to the record's ``history``, under a condition that keeps the order:

- the record exists (the producer wrote it; an expired record is not brought back by a late worker);
- its last change is not newer than this one (``updated_at``, epoch ms of the writer's clock), unless the record
  is still the producer's first one (queued or delayed): a producer's clock never orders a worker's change, and a
  producer may be any host;
- succeeded and cancelled are final for good; dead-lettered only gives way to running (a redrive runs it again).

The history holds at most ``HISTORY_MAX_EVENTS`` events: a change past that sets the state without its event and
counts it in ``events_dropped`` (a second write, only then: the refused write's old item, returned with the refusal,
tells a full history from a change out of order). A delayed record whose due time has passed reads as
queued (``JobStatus.from_item``), so the delay dispatcher needs no write of its own.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Mapping

from worker_tier.core import contract
from worker_tier.core.errors import MessageError

# The history's events per record: a change past it is counted (events_dropped), not appended. With each event's
# details cut to EVENT_DETAIL_MAX_CHARS a full history stays under 100 KB of the item's 400 KB.
HISTORY_MAX_EVENTS = 100
EVENT_DETAIL_MAX_CHARS = 512
REASON_MAX_CHARS = 1024  # a dead-lettered job's reason, as worker_tier.failure's error_message
JOB_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")
# Deterministic job ids for messages sent with a dedupe_key: a repeated send is the same job.
_DEDUPE_NAMESPACE = uuid.UUID("6f1c2a4e-3b7d-4e8a-9c51-2d0b7e6a9f13")

_STATE, _UPDATED, _HISTORY = "#state", "updated_at", "history"


def new_job_id(dedupe_key: str | None = None) -> str:
    """A fresh job id (32 hex digits), or the one of ``dedupe_key`` (a repeated send of a key is the same job)."""
    return uuid.uuid5(_DEDUPE_NAMESPACE, dedupe_key).hex if dedupe_key is not None else uuid.uuid4().hex


def checked_job_id(job_id: Any) -> str:
    """``job_id`` when it is one (32 lower-case hex digits); MessageError naming the value and the rule otherwise."""
    if not isinstance(job_id, str) or not JOB_ID_PATTERN.match(job_id):
        shown = repr(job_id) if len(repr(job_id)) <= 60 else repr(job_id)[:57] + "..."
        raise MessageError(f"a job id is 32 lower-case hex digits, as send(track=True) returns it, got {shown}")
    return job_id


def job_key(job_id: str) -> dict[str, Any]:
    """The record's key: ``{"pk": {"S": "job#<id>"}}``."""
    return {contract.STATE_PARTITION_KEY: {"S": contract.JOB_KEY_PREFIX + job_id}}


def _expiration(at_ms: int, retention_seconds: int) -> dict[str, str]:
    return {"N": str(at_ms // 1000 + retention_seconds)}


def _value(value: Any) -> dict[str, Any]:
    """A plain value (str, int, float, bool, None, dict, list) as a DynamoDB attribute value."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, (int, float, Decimal)):
        return {"N": str(value)}
    if isinstance(value, Mapping):
        return {"M": {str(k): _value(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"L": [_value(v) for v in value]}
    return {"S": str(value)}


def _plain(value: Mapping[str, Any]) -> Any:
    """A DynamoDB attribute value as a plain value (numbers as int when whole)."""
    kind, inner = next(iter(value.items()))
    if kind == "N":
        number = Decimal(inner)
        return int(number) if number == number.to_integral_value() else float(number)
    if kind == "M":
        return {k: _plain(v) for k, v in inner.items()}
    if kind == "L":
        return [_plain(v) for v in inner]
    if kind == "NULL":
        return None
    return inner


def event(state: str, at_ms: int, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One history event: its state, when (epoch ms) and its details, each cut to ``EVENT_DETAIL_MAX_CHARS``."""
    cut = {k: (v[:EVENT_DETAIL_MAX_CHARS] if isinstance(v, str) else v) for k, v in (details or {}).items() if v is not None}
    return {"state": state, "at": at_ms, "details": cut}


def first_item(job_id: str, path: str, now_ms: int, due_ms: int | None, parent: str | None, retention_seconds: int) -> dict[str, Any]:
    """The producer's first record: queued, or delayed until ``due_ms`` (a send with any delay)."""
    state = contract.JOB_DELAYED if due_ms is not None and due_ms > now_ms else contract.JOB_QUEUED
    details = {"due_at": due_ms} if state == contract.JOB_DELAYED else {}
    item: dict[str, Any] = {
        **job_key(job_id), "state": {"S": state}, "path": {"S": path}, "created_at": {"N": str(now_ms)},
        _UPDATED: {"N": str(now_ms)}, _HISTORY: {"L": [_value(event(state, now_ms, details))]}, "events": {"N": "1"},
        contract.STATE_TTL_ATTRIBUTE: _expiration(max(now_ms, due_ms or 0), retention_seconds),
    }
    if state == contract.JOB_DELAYED:
        item["due_at"] = {"N": str(due_ms)}
    if parent:
        item["parent"] = {"S": parent}
    return item


@dataclass(frozen=True)
class Transition:
    """One change of a job's state, as the UpdateItem that writes it (``request``) and, past the history's cap, the
    one that writes it without its event (``request_without_event``)."""

    job_id: str
    state: str
    at_ms: int
    retention_seconds: int
    fields: Mapping[str, Any] = field(default_factory=dict)  # set with the state (None: removed)
    details: Mapping[str, Any] = field(default_factory=dict)  # the event's
    only_from: str | None = None  # cancel and reschedule: only from this state, whatever its time
    expires_from_ms: int | None = None  # a retry's next try: the record is kept for the retention after it

    def request(self, table: str) -> dict[str, Any]:
        """The UpdateItem: set the state and its fields, append the event, in order (see the module)."""
        return self._request(table, with_event=True)

    def request_without_event(self, table: str) -> dict[str, Any]:
        """The UpdateItem for a record whose history is full: the state and its fields, the event counted as dropped."""
        return self._request(table, with_event=False)

    def _request(self, table: str, *, with_event: bool) -> dict[str, Any]:
        names = {_STATE: "state"}
        values: dict[str, Any] = {":state": {"S": self.state}, ":at": {"N": str(self.at_ms)}, ":one": {"N": "1"},
                                  ":expiration": _expiration(max(self.at_ms, self.expires_from_ms or 0),
                                                             self.retention_seconds)}
        sets = [f"{_STATE} = :state", f"{_UPDATED} = :at", f"{contract.STATE_TTL_ATTRIBUTE} = :expiration"]
        removes = []
        for index, (name, value) in enumerate(sorted(self.fields.items())):
            names[f"#f{index}"] = name
            if value is None:
                removes.append(f"#f{index}")
            else:
                sets.append(f"#f{index} = :f{index}")
                values[f":f{index}"] = _value(value)
        condition = f"attribute_exists({contract.STATE_PARTITION_KEY})"
        if self.only_from is not None:
            condition += f" AND {_STATE} = :from"
            values[":from"] = {"S": self.only_from}
        else:
            condition += (f" AND ({_UPDATED} <= :at OR {_STATE} = :queued OR {_STATE} = :delayed)"
                          f" AND {_STATE} <> :succeeded AND {_STATE} <> :cancelled")
            values.update({":queued": {"S": contract.JOB_QUEUED}, ":delayed": {"S": contract.JOB_DELAYED}})
            values.update({":succeeded": {"S": contract.JOB_SUCCEEDED}, ":cancelled": {"S": contract.JOB_CANCELLED}})
            if self.state != contract.JOB_RUNNING:  # only a redrive's run reopens a dead-lettered job
                condition += f" AND {_STATE} <> :dead"
                values[":dead"] = {"S": contract.JOB_DEAD_LETTERED}
        if with_event:
            sets.append(f"{_HISTORY} = list_append({_HISTORY}, :event)")
            values[":event"] = {"L": [_value(event(self.state, self.at_ms, self.details))]}
            values[":cap"] = {"N": str(HISTORY_MAX_EVENTS)}
            condition += f" AND size({_HISTORY}) < :cap"
            adds = "events :one"
        else:
            adds = "events_dropped :one"
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "") + " ADD " + adds
        return {"TableName": table, "Key": job_key(self.job_id), "UpdateExpression": expression,
                "ConditionExpression": condition, "ExpressionAttributeNames": names, "ExpressionAttributeValues": values,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}


def apply(dynamodb: Any, table: str, transition: Transition) -> bool:
    """Write ``transition``; True when written, False when its condition refused it (out of order, final, or no
    record). A full history takes a second write without the event (its condition keeps the order on its own); a
    change refused for its order costs no second write."""
    from worker_tier.core.aws import error_response, is_condition_failure

    try:
        dynamodb.update_item(**transition.request(table))
        return True
    except Exception as error:
        if not is_condition_failure(error):
            raise
        old = error_response(error).get("Item")
        history = (old or {}).get(_HISTORY, {}).get("L") if isinstance(old, Mapping) else None
        if isinstance(old, Mapping) and (history is None or len(history) < HISTORY_MAX_EVENTS):
            return False  # its old item came back: out of order or final, not a full history
    try:  # refused, and the old item is full or was not returned: the second write's condition tells them apart
        dynamodb.update_item(**transition.request_without_event(table))
        return True
    except Exception as error:
        if not is_condition_failure(error):
            raise
        return False


@dataclass(frozen=True)
class JobStatus:
    """A tracked job as ``Client.status`` reads it (docs/jobs.md).

    ``state`` is one of ``contract.JOB_STATES``; a delayed job whose due time has passed reads as queued. Times are
    epoch milliseconds. ``result`` is the task's return value, decoded from JSON (None until succeeded, and when the
    result was dropped: ``result_dropped`` says why). ``history`` is a list of events, each ``state``, ``at`` and
    ``details``, oldest first.

    Examples
    --------
    >>> JobStatus("0" * 32, "succeeded", "/hello", 1, 2).final
    True
    """

    job_id: str
    state: str
    path: str
    created_at: int
    updated_at: int
    due_at: int | None = None
    attempt: int | None = None
    worker: dict[str, Any] | None = None
    result: Any = None
    reason: str | None = None
    parent: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    next_try_at: int | None = None
    result_object: dict[str, Any] | None = None  # {"bucket", "key", "bytes"}: a result kept in the payload bucket
    result_dropped: dict[str, Any] | None = None  # {"bytes", "reason"}: a result that was not kept
    events_dropped: int = 0

    @property
    def final(self) -> bool:
        """True for succeeded, dead-lettered and cancelled (a redrive may still reopen a dead-lettered job)."""
        return self.state in contract.JOB_FINAL_STATES

    @classmethod
    def from_item(cls, item: Mapping[str, Any], now_ms: int) -> JobStatus:
        """A record as read by GetItem; the result not decoded yet when it is in the bucket (``result_object``)."""
        plain = {name: _plain(value) for name, value in item.items()}
        state = plain.get("state", "")
        due_at = plain.get("due_at")
        if state == contract.JOB_DELAYED and isinstance(due_at, int) and due_at <= now_ms:
            state = contract.JOB_QUEUED
        result_text = plain.get("result")
        return cls(
            job_id=str(plain[contract.STATE_PARTITION_KEY])[len(contract.JOB_KEY_PREFIX):], state=state,
            path=plain.get("path", ""), created_at=plain.get("created_at", 0), updated_at=plain.get(_UPDATED, 0),
            due_at=due_at, attempt=plain.get("attempt"), worker=plain.get("worker"),
            result=json.loads(result_text) if isinstance(result_text, str) else None, reason=plain.get("reason"),
            parent=plain.get("parent"), history=plain.get(_HISTORY, []), next_try_at=plain.get("next_try_at"),
            result_object=plain.get("result_object"), result_dropped=plain.get("result_dropped"),
            events_dropped=plain.get("events_dropped", 0),
        )

    def to_dict(self) -> dict[str, Any]:
        """The status as plain JSON-ready values (``worker-tier job --json``), ``final`` included."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__} | {"final": self.final}
