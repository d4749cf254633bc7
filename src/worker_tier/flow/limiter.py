"""Flow control's state on the state table: a rate limit (GCRA), a concurrency key's slots, and a message's waits.

Every item lives under ``contract.FLOW_KEY_PREFIX`` (``flow#``), the one prefix the workers' roles may write for
flow control (``dynamodb:LeadingKeys``), and carries the table's TTL attribute.

**Rate: GCRA, not a token bucket.** The generic cell rate algorithm keeps one number per limit, the theoretical
arrival time ``tat`` (µs since the epoch): a message conforms when ``tat - tau <= now`` (``tau``, the burst
tolerance, is ``(burst - 1) x T``; ``T`` is the interval, 1/rate), and admitting it moves ``tat`` to
``max(tat, now) + T``. A token bucket stores two (tokens and the last refill) and every admission must read both
to refill, so two workers' admissions conflict and one must retry. GCRA's busy case is an atomic add:
``SET tat = tat + T`` under the condition ``now < tat <= now + tau + hold``, which any number of workers can
apply at once without reading (DynamoDB serialises them); the idle case (``tat <= now`` or no item) is
``SET tat = now + T`` under that condition. Each admission is therefore one UpdateItem, 1 write unit on
an item under 1 KB; a failed condition (1 write unit too) returns the item, so the next try picks the right case.
A worker admits a message up to ``hold`` seconds ahead of its time (a reservation) and sleeps until then; a
message further ahead is throttled with the wait the item shows, and a worker that saw ``tat`` beyond its reach
throttles from what it saw without a call at all (``tat`` only grows, so what it saw is a lower bound).

Clocks: each worker reads its own. A clock ahead by ``s`` lets its worker run up to ``s / T`` messages early,
once, as the clocks meet; it never raises the rate: every admission advances the one shared ``tat`` by ``T``.

**Concurrency: slots in one item per key.** Slot ``i`` is two attributes, its holder ``h<i>`` and its lease's
end ``u<i>`` (µs). A worker takes slot ``i`` with a conditional SET (free: missing, 0, or its lease ended) and
gives it back by setting ``u<i>`` to 0 while it still holds it. The lease is the heartbeat's: renewed after
each extension of the message, so a worker that dies frees its slot within one heartbeat window; without a
heartbeat it ends with the invocation. A failed take returns the item, from which the next try picks a free
slot, or the wait until the first lease ends.

**Waits: not attempts.** Each time a message waits (throttled, or given back unstarted) its item
``flow#waits#<message id>`` counts one more (``ADD``); the worker subtracts the count from SQS's receive count
wherever attempts decide a fate (``worker_tier.worker.fates``).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from worker_tier.core.aws import is_condition_failure
from worker_tier.core.contract import FLOW_KEY_PREFIX, STATE_PARTITION_KEY, STATE_TTL_ATTRIBUTE
from worker_tier.core.errors import TaskRegistrationError

RATE_KEY_PREFIX = f"{FLOW_KEY_PREFIX}rate#"
SLOTS_KEY_PREFIX = f"{FLOW_KEY_PREFIX}concurrency#"
WAITS_KEY_PREFIX = f"{FLOW_KEY_PREFIX}waits#"
TAT_ATTRIBUTE = "tat"
PATH_ATTRIBUTE = "path"
KEY_ATTRIBUTE = "key"
RATE_ATTRIBUTE = "rate"
LIMIT_ATTRIBUTE = "limit"
WAITS_ATTRIBUTE = "waits"
WAIT_UNTIL_ATTRIBUTE = "until"
LIMITER_ATTRIBUTE = "limiter"

# Slots in one item. A held slot is about 40 bytes (a given-back one is removed), and DynamoDB bills a write by the
# item's size (1 unit per KB): up to about 20 held at once a take or give-back is 1 write unit; at 100, 4 or 5.
MAX_CONCURRENCY = 100
# A rate is one item, written once per admission, and one partition takes at most 1,000 write units a second
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html): a faster rate needs
# a rate_key, which spreads it over one item per key.
MAX_RATE_PER_SECOND = 1000
# The slowest rate: one a year. A slower one's interval would outgrow the numbers the limiter stores.
MIN_RATE_PER_SECOND = 1 / (366 * 86400)
# Tries of one admission: each failed condition returns the item, so a second try is almost always right.
MAX_TRIES = 4
# How long an item outlives the last moment it matters: a rate's tat, a slot's lease, a waiting message.
KEEP_SECONDS = 24 * 60 * 60
# Limits a worker remembers what it last saw of (a lower bound of each rate's tat, each key's slots); past this many
# (a key per customer), it forgets them all and learns each again from its next write's answer.
MAX_REMEMBERED = 10_000
# A label (path, key) stored beside the numbers for `worker-tier status`: cut to this many characters.
LABEL_CHARS = 200
_MICRO = 1_000_000
_UNITS = {name: seconds for seconds, names in ((1, "s sec secs second seconds"), (60, "m min mins minute minutes"),
                                                (3600, "h hr hrs hour hours"), (86400, "d day days"))
          for name in names.split()}
_RATE = re.compile(r"\s*([0-9]{1,9}(?:\.[0-9]{1,9})?)\s*/\s*([0-9]{1,9}(?:\.[0-9]{1,9})?)?\s*([a-z]+)\s*")


@dataclass(frozen=True)
class Rate:
    """A rate limit: ``count`` messages per ``seconds``, in bursts of at most ``burst``.

    Examples
    --------
    >>> Rate.parse("100/s").interval_us, Rate.parse("5/minute").interval_us, Rate.parse("3/10s").interval_us
    (10000, 12000000, 3333333)
    """

    count: float
    seconds: float
    burst: int = 1
    text: str = ""

    @classmethod
    def parse(cls, text: Any, burst: Any = 1, what: str = "rate_limit") -> Rate:
        """``"<count>/<unit>"`` or ``"<count>/<n><unit>"`` (s, m, h, d, or second, minute, hour, day); TaskRegistrationError otherwise."""
        match = _RATE.fullmatch(text.lower()) if isinstance(text, str) else None
        unit = _UNITS.get(match.group(3)) if match else None
        if match is None or unit is None:
            raise TaskRegistrationError(
                f"{what} is {text!r}, not a rate; write '<count>/<unit>' such as '100/s', '5/m', '1000/h' or '3/10s' "
                "(units s, m, h, d)"
            )
        count, seconds = float(match.group(1)), float(match.group(2) or 1) * unit
        if count <= 0 or seconds <= 0 or not MIN_RATE_PER_SECOND <= count / seconds <= MAX_RATE_PER_SECOND:
            raise TaskRegistrationError(
                f"{what} is {text!r}: a rate must be from 1 a year to {MAX_RATE_PER_SECOND:,} a second (one state-table "
                "item takes at most 1,000 writes a second); for more, add a rate_key, which gives each key its own"
            )
        if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= 100_000:
            raise TaskRegistrationError(
                f"rate_burst {burst!r} with {what} {text!r} must be a whole number from 1 to 100000 "
                "(how many messages may run at once before the rate spaces them)"
            )
        return cls(count, seconds, burst, text.strip())

    @property
    def interval_us(self) -> int:
        """T: microseconds between two messages at this rate."""
        return max(1, int(self.seconds * _MICRO / self.count))

    @property
    def tolerance_us(self) -> int:
        """tau: how far ahead of now ``tat`` may stand while a message still conforms."""
        return self.interval_us * (self.burst - 1)


def item_key(prefix: str, path: str, key: str | None) -> str:
    """A limit's partition key: the prefix and a hash of path and key (a path may be 2 KB; the key is the user's).

    Examples
    --------
    >>> key = item_key(RATE_KEY_PREFIX, "/charge", "customer-7")
    >>> key.startswith("flow#rate#"), len(key), key == item_key(RATE_KEY_PREFIX, "/charge", "customer-8")
    (True, 42, False)
    """
    digest = hashlib.sha256(f"{path}\x00{'' if key is None else key}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{prefix}{digest}"


def _number(item: Mapping[str, Any], name: str) -> int | None:
    value = (item.get(name) or {}).get("N")
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class Admission:
    """A limiter's answer: admitted (after ``wait`` seconds, a reservation) or throttled (back in ``wait`` seconds)."""

    admitted: bool
    wait: float
    calls: int = 0  # DynamoDB writes it took, for the bench's units per message


class RateLimiter:
    """GCRA admissions on the state table; ``seen`` keeps each limit's last known ``tat`` (a lower bound)."""

    def __init__(self, dynamodb: Callable[[], Any], table: str) -> None:
        self._dynamodb = dynamodb
        self._table = table
        self._seen: dict[str, int] = {}
        self._busy: dict[str, bool] = {}  # limits whose last admission here found them busy: the next guess is busy too

    def admit(self, path: str, key: str | None, rate: Rate, now: float, hold: float) -> Admission:
        """Admit one message of ``path`` (per ``key``) at ``now`` (epoch seconds, this worker's clock)."""
        pk = item_key(RATE_KEY_PREFIX, path, key)
        now_us, interval, tolerance = int(now * _MICRO), rate.interval_us, rate.tolerance_us
        latest = now_us + tolerance + max(0, int(hold * _MICRO))
        seen = self._seen.get(pk)
        calls = 0
        fresh = False  # whether ``seen`` came from DynamoDB during this admission (then the case is known, not guessed)
        for _ in range(MAX_TRIES):
            if seen is not None and seen > latest:
                return Admission(False, (seen - tolerance - now_us) / _MICRO, calls)
            calls += 1
            # Under load a ``seen`` behind the clock says little (other workers reserve turns ahead of it): guess the
            # case this worker's last admission found; a wrong guess fails, returns the item, and the next try knows.
            idle = seen is None or (seen <= now_us and (fresh or not self._busy.get(pk, False)))
            written, tat = self._write(pk, path, key, rate, now_us, latest, idle)
            if not written:
                seen, fresh = tat, True
                if tat is not None:  # a true lower bound: the next message may throttle on it without a call
                    _remember(self._seen, pk, max(tat, self._seen.get(pk, 0)))
                continue
            _remember(self._busy, pk, not idle)
            new = tat if tat is not None else now_us + interval
            _remember(self._seen, pk, new)
            return Admission(True, max(0, new - interval - tolerance - now_us) / _MICRO, calls)
        # Every try met another worker's write in between: a crowded limit; come back after a few intervals.
        return Admission(False, max(interval * MAX_TRIES, 1) / _MICRO, calls)

    def _write(self, pk: str, path: str, key: str | None, rate: Rate, now_us: int, latest: int, idle: bool) -> tuple[bool, int | None]:
        """One conditional UpdateItem, the idle or the busy case: (True, the new tat), or (False, the tat the item held,
        None without one) when the condition failed."""
        interval = rate.interval_us
        names = {"#tat": TAT_ATTRIBUTE, "#exp": STATE_TTL_ATTRIBUTE, "#path": PATH_ATTRIBUTE, "#key": KEY_ATTRIBUTE,
                 "#rate": RATE_ATTRIBUTE}
        values: dict[str, Any] = {
            ":now": {"N": str(now_us)}, ":exp": {"N": str((latest + interval) // _MICRO + KEEP_SECONDS)},
            ":path": {"S": path[:LABEL_CHARS]}, ":key": {"S": "" if key is None else key[:LABEL_CHARS]},
            ":rate": {"S": f"{rate.text} burst {rate.burst}"},
        }
        labels = "#exp = :exp, #path = :path, #key = :key, #rate = :rate"
        if idle:
            values[":new"] = {"N": str(now_us + interval)}
            request = {"UpdateExpression": f"SET #tat = :new, {labels}",
                       "ConditionExpression": "attribute_not_exists(#tat) OR #tat <= :now"}
        else:
            values[":interval"], values[":latest"] = {"N": str(interval)}, {"N": str(latest)}
            request = {"UpdateExpression": f"SET #tat = #tat + :interval, {labels}",
                       "ConditionExpression": "#tat > :now AND #tat <= :latest"}
        try:
            answer = self._dynamodb().update_item(
                TableName=self._table, Key={STATE_PARTITION_KEY: {"S": pk}}, ExpressionAttributeNames=names,
                ExpressionAttributeValues=values, ReturnValues="UPDATED_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **request,
            )
        except Exception as error:
            if is_condition_failure(error):
                return False, _number(getattr(error, "response", {}).get("Item") or {}, TAT_ATTRIBUTE)
            raise
        return True, _number(answer.get("Attributes") or {}, TAT_ATTRIBUTE)


@dataclass(eq=False)
class Slot:
    """A concurrency slot held: its item, index and holder, to renew and give back (after which renewing stops)."""

    pk: str
    index: int
    holder: str
    given_back: bool = False


class ConcurrencySlots:
    """At most N at once per key: leases on slots of one item (module docstring)."""

    def __init__(self, dynamodb: Callable[[], Any], table: str, rng: Callable[[], float] = random.random) -> None:
        self._dynamodb = dynamodb
        self._table = table
        self._random = rng
        self._seen: dict[str, dict[str, Any]] = {}

    def take(self, path: str, key: str | None, limit: int, holder: str, now: float, lease_seconds: float) -> tuple[Slot | None, float, int]:
        """(the slot, 0, writes) when one was free; (None, seconds until the first lease ends, writes) when all are held."""
        pk = item_key(SLOTS_KEY_PREFIX, path, key)
        now_us = int(now * _MICRO)
        until = now_us + max(1, int(lease_seconds * _MICRO))
        item = self._seen.get(pk, {})
        fresh = False  # whether ``item`` came from DynamoDB during this take (the cache may be stale: slots given back)
        tried: set[int] = set()
        calls = 0
        for _ in range(MAX_TRIES):
            ends = {i: _number(item, f"u{i}") or 0 for i in range(limit) if i not in tried}
            free = [i for i, end in ends.items() if end < now_us]
            if not free and (fresh or not ends):
                return None, _first_end(item, limit, now_us), calls
            # The cache never throttles on its own: a slot it shows held may have been given back since.
            candidates = free or [min(ends, key=ends.__getitem__)]
            index = candidates[int(self._random() * len(candidates)) % len(candidates)]
            tried.add(index)
            calls += 1
            try:
                self._dynamodb().update_item(
                    TableName=self._table, Key={STATE_PARTITION_KEY: {"S": pk}},
                    UpdateExpression="SET #h = :holder, #u = :until, #exp = :exp, #path = :path, #key = :key, #limit = :limit",
                    ConditionExpression="attribute_not_exists(#u) OR #u < :now",
                    ExpressionAttributeNames={"#h": f"h{index}", "#u": f"u{index}", "#exp": STATE_TTL_ATTRIBUTE,
                                              "#path": PATH_ATTRIBUTE, "#key": KEY_ATTRIBUTE, "#limit": LIMIT_ATTRIBUTE},
                    ExpressionAttributeValues={
                        ":holder": {"S": holder}, ":until": {"N": str(until)}, ":now": {"N": str(now_us)},
                        ":exp": {"N": str(until // _MICRO + KEEP_SECONDS)}, ":path": {"S": path[:LABEL_CHARS]},
                        ":key": {"S": "" if key is None else key[:LABEL_CHARS]}, ":limit": {"N": str(limit)},
                    },
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except Exception as error:
                if not is_condition_failure(error):
                    raise
                item = dict(getattr(error, "response", {}).get("Item") or {})
                _remember(self._seen, pk, item)
                fresh = True
                continue
            return Slot(pk, index, holder), 0.0, calls
        return None, _first_end(item, limit, now_us), calls

    def renew(self, slot: Slot, now: float, lease_seconds: float) -> bool:
        """Move the slot's lease to ``lease_seconds`` from ``now`` while its holder still has it; False when it does not
        (True, with no call, once it was given back)."""
        if slot.given_back:
            return True
        until = int(now * _MICRO) + max(1, int(lease_seconds * _MICRO))
        return self._if_held(slot, "SET #u = :until, #exp = :exp", {
            ":until": {"N": str(until)}, ":exp": {"N": str(until // _MICRO + KEEP_SECONDS)}})

    def give_back(self, slot: Slot) -> bool:
        """Free the slot while its holder still has it; False when it did not (its lease ended and another took it)."""
        slot.given_back = True
        return self._if_held(slot, "REMOVE #h, #u", {})

    def _if_held(self, slot: Slot, update: str, values: dict[str, Any]) -> bool:
        names = {"#h": f"h{slot.index}", "#u": f"u{slot.index}"}
        if "#exp" in update:
            names["#exp"] = STATE_TTL_ATTRIBUTE
        try:
            self._dynamodb().update_item(
                TableName=self._table, Key={STATE_PARTITION_KEY: {"S": slot.pk}}, UpdateExpression=update,
                ConditionExpression="#h = :holder", ExpressionAttributeNames=names,
                ExpressionAttributeValues={**values, ":holder": {"S": slot.holder}},
            )
        except Exception as error:
            if is_condition_failure(error):
                return False
            raise
        return True


def _remember(seen: dict[str, Any], key: str, value: Any) -> None:
    """``seen[key] = value``, forgetting everything first once ``seen`` holds MAX_REMEMBERED limits."""
    if len(seen) >= MAX_REMEMBERED and key not in seen:
        seen.clear()
    seen[key] = value


def _first_end(item: Mapping[str, Any], limit: int, now_us: int) -> float:
    """Seconds until the first of the item's slot leases ends (at least 0)."""
    ends = [_number(item, f"u{i}") or 0 for i in range(limit)]
    return max(0, min(ends) - now_us) / _MICRO


class Waits:
    """How many times each message waited (throttled, or given back unstarted): receives that were not attempts."""

    def __init__(self, dynamodb: Callable[[], Any], table: str) -> None:
        self._dynamodb = dynamodb
        self._table = table

    def add(self, message_id: str, until: float, limiter: str) -> int:
        """Count one more wait of ``message_id``, due back at ``until`` (epoch s); return its waits so far."""
        answer = self._dynamodb().update_item(
            TableName=self._table, Key={STATE_PARTITION_KEY: {"S": f"{WAITS_KEY_PREFIX}{message_id}"}},
            UpdateExpression="ADD #waits :one SET #until = :until, #limiter = :limiter, #exp = :exp",
            ExpressionAttributeNames={"#waits": WAITS_ATTRIBUTE, "#until": WAIT_UNTIL_ATTRIBUTE, "#limiter": LIMITER_ATTRIBUTE,
                                      "#exp": STATE_TTL_ATTRIBUTE},
            ExpressionAttributeValues={":one": {"N": "1"}, ":until": {"N": str(math.ceil(until))},
                                       ":limiter": {"S": limiter[:LABEL_CHARS]},
                                       ":exp": {"N": str(math.ceil(until) + KEEP_SECONDS * 15)}},
            ReturnValues="UPDATED_NEW",
        )
        return _number(answer.get("Attributes") or {}, WAITS_ATTRIBUTE) or 1

    def count(self, message_id: str) -> int:
        """The waits recorded for ``message_id`` (0 when none), read strongly consistent."""
        item = self._dynamodb().get_item(
            TableName=self._table, Key={STATE_PARTITION_KEY: {"S": f"{WAITS_KEY_PREFIX}{message_id}"}}, ConsistentRead=True,
        ).get("Item") or {}
        return _number(item, WAITS_ATTRIBUTE) or 0
