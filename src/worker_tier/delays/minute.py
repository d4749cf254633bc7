"""One minute's dispatch, for one run of the delay dispatcher (``worker_tier.delays.dispatcher``).

``_MinuteDispatch`` reads the minute's shards in rounds of pages (``_DelayTable``), sends each round's
messages at their send moments (``delivery.Delivery``, ``send_moment``), sets aside what cannot be sent,
and saves each shard's cursor after the round (``_write_watermark``); every call stays within the run's
time and threads (``_Budget``). Its collaborators are given to it, so it reaches into no dispatcher.
The timing constants every call of the dispatcher keeps to live here, with the ``RunReport`` a run fills.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from worker_tier.core import contract, limits
from worker_tier.delays import delay, delivery, send_moment
from worker_tier.core.aws import LazyClient, error_code, is_condition_failure
from worker_tier.delays.delay import DelayedMessage
from worker_tier.core.errors import LeaseLostError
from worker_tier.delays.dispatch_state import DispatchGroup, GroupState
from worker_tier.delays.delivery import Delivery
from worker_tier.core.errors import DispatchIncompleteError, UnreadableItemError
from worker_tier.core.envelope import message_bytes
from worker_tier.core.retry import BATCH_ENTRIES, STATE_CALLS, batches

# Every call of the dispatcher's own clients ends within DISPATCHER_CALL_SECONDS: one attempt (botocore retries
# off; BATCH_ENTRIES and STATE_CALLS retry, between our time checks) of at most 1 s to connect and 2 s to read
# (botocore's defaults: 60 s each, 5 attempts). https://botocore.amazonaws.com/v1/documentation/api/latest/reference/config.html
DISPATCHER_CONNECT_TIMEOUT_SECONDS = 1


DISPATCHER_READ_TIMEOUT_SECONDS = 2


DISPATCHER_CALL_SECONDS = DISPATCHER_CONNECT_TIMEOUT_SECONDS + DISPATCHER_READ_TIMEOUT_SECONDS


# A send (SendMessageBatch, or a DLQ send) starts only while this much is left: its own worst call (3 s) and one
# worst cursor write after the wave (3 s). So a wave, started with RUN_MARGIN_MS (10 s) left, ends its sends
# with >= 3 s left: 10 s >= 6 s floor + 2 s (BATCH_ENTRIES' longest pause, before the floor is checked) + 2 s spare.
SEND_FLOOR_MS = 2 * DISPATCHER_CALL_SECONDS * 1000


# A state-table call is retried only while a pause (STATE_CALLS' longest, 2 s) and one more call fit in the run's time.
STATE_RETRY_FLOOR_MS = 2_000 + DISPATCHER_CALL_SECONDS * 1000


RUN_MARGIN_MS = 10_000


# A round holds one page per shard: at most MAX_SHARDS pages of 100 items, or of 1 MB (DynamoDB's page cap) for big items.
QUERY_PAGE_ITEMS = 100


# A round reads at most this many items whatever the group's share of the shards: a group of fewer shards reads
# larger pages (one shard: 1,600 items, ~320 KB of 200 B items), so its rounds are as long as one group's of all 16.
ROUND_ITEMS = QUERY_PAGE_ITEMS * delay.MAX_SHARDS


# The run's threads: one Query per shard in flight at once, and as many SendMessageBatch calls. A botocore
# client pools 10 connections by default; the dispatcher's clients pool this many.
DISPATCH_THREADS = 16


# At most this many batches of a round wait for their moment in the second (worker_tier.delays.send_moment) at once: a busy
# minute's batches come round in runs of a quarter of a second of due times (26 batches at 1,000 a second). Later ones
# go past them meanwhile, so a run that stops mid-round with some still waiting sends again, next run, what went past
# them: at most the round (ROUND_ITEMS), as for a run that dies (its cursors pass the handled prefix of each shard).
POSTPONED_BATCHES = 4 * DISPATCH_THREADS


# From this long before a run's margin (RUN_MARGIN_MS) no batch waits for its moment, and those waiting go first:
# POSTPONED_BATCHES take 4 waves, which fit while AWS answers each within 1.25 s.
ALIGNING_STOPS_MS = 5_000


# A run stopping for time with batches still waiting (a wave overran the margin) sends them while this much is left:
# the first calls of a wave end above SEND_FLOOR_MS.
FLUSH_FLOOR_MS = SEND_FLOOR_MS + DISPATCHER_CALL_SECONDS * 1000


# The sleeps a wave may take for a moment (a sleep may end a hair early) before the batch nearest its moment goes.
MOMENT_SLEEPS = 3


# A clock that has not moved over a sleep this long is stuck: no batch of the minute waits again.
STUCK_AFTER_SLEEP_MS = 5


TIME_RUNNING_OUT = "invocation time running out"


@dataclass
class RunReport:
    """What one run did."""

    ran: bool = True
    group: int = 0  # the shard group the run dispatched (worker_tier.delays.dispatch_state)
    buckets: int = 0
    sent: int = 0
    dead_lettered: int = 0
    watermark: int | None = None
    max_lateness_s: float = 0.0
    lag_s: float = 0.0
    stopped: str = ""
    refiled: int = 0  # items due outside their pk's minute, moved into their due minute
    watermark_ahead_s: float = 0.0  # how far the watermark is past the clock's horizon, when it is beyond belief
    state_unreadable: str = ""  # what was wrong with the watermark item this run found and replaced


@dataclass
class _Page:
    """One page of one shard of a minute: its messages in due order, items that are not messages, and where the next page starts."""

    shard: int
    messages: list[DelayedMessage]
    unreadable: list[tuple[dict[str, Any], str]]  # (item, what is wrong with it)
    next_after: str | None = None
    misplaced: list[tuple[dict[str, Any], DelayedMessage]] = field(default_factory=list)  # due in a later minute
    stored: list[tuple[str, DelayedMessage | None]] = field(default_factory=list)  # every sort key in page order; None: set aside


@dataclass
class _Budget:
    """One run's time left and threads: each call of the run checks them before it starts."""

    sleep: Callable[[float], None]
    remaining_ms: Callable[[], int] | None = None  # the run's time left; None: unbounded
    pool: Any = None  # the run's: the one given, else threads started for the run and stopped after it

    def time_low(self, floor_ms: int = RUN_MARGIN_MS) -> bool:
        """True when less than ``floor_ms`` is left of the run's time."""
        return self.remaining_ms is not None and self.remaining_ms() < floor_ms

    def map(self, call: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``call`` on each item, in flight together on the pool (one by one without one); results in order."""
        if self.pool is None:
            return [call(item) for item in items]
        return list(self.pool.map(call, items))

    def with_retries(self, call: Callable[[], Any], give_up: Callable[[BaseException], bool] = lambda error: False) -> Any:
        """A DynamoDB call under ``STATE_CALLS``; a condition failure, the last error, or one ``give_up`` names propagates.

        No retry once less than a pause and a call (``STATE_RETRY_FLOOR_MS``) is left of the run's time.
        """
        return STATE_CALLS.call(call, sleep=self.sleep, give_up=lambda error: (
            is_condition_failure(error) or give_up(error) or self.time_low(STATE_RETRY_FLOOR_MS)))


class _DelayTable:
    """The delay table as one group's runs read it: pages of its shards' minutes, and refiles of misplaced items."""

    def __init__(self, dynamodb: LazyClient, table: str, group: DispatchGroup, delivery: Delivery, budget: _Budget) -> None:
        self._dynamodb = dynamodb
        self._table = table
        self._group = group
        self._delivery = delivery
        self._budget = budget
        self._refiled_buckets: set[int] = set()  # minutes this dispatcher refiled into: Queried consistently

    def read_pages(self, bucket: int, open_shards: dict[int, str | None]) -> list[_Page]:
        """The next page of each open shard (shard -> the sort key to start after), in parallel."""
        return self._budget.map(lambda shard_after: self._read_page(bucket, *shard_after), list(open_shards.items()))

    def _read_page(self, bucket: int, shard: int, after: str | None) -> _Page:
        """One Query page of one shard, after ``after``, retried on throttling."""
        pk = {"S": delay.bucket_key(bucket, shard)}
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": pk},
            "Limit": ROUND_ITEMS // len(self._group.shards),
        }
        if after is not None:
            request["ExclusiveStartKey"] = {contract.DELAY_PARTITION_KEY: pk, contract.DELAY_SORT_KEY: {"S": after}}
        if bucket in self._refiled_buckets or delay.read_consistently(shard):  # cancellable shard: worker_tier.delays.cancellation
            request["ConsistentRead"] = True
        page = self._budget.with_retries(lambda: self._dynamodb.get().query(**request))
        next_key = page.get("LastEvaluatedKey")
        result = _Page(shard, [], [], next_key[contract.DELAY_SORT_KEY]["S"] if next_key else None)
        for item in page.get("Items") or []:
            message: DelayedMessage | None = None  # stays None when set aside
            try:
                read = delay.read_item(item)
            except UnreadableItemError as error:
                result.unreadable.append((item, str(error)))
            else:
                if read.bucket > bucket:  # due after this minute: sent now, SQS would show it early
                    result.misplaced.append((item, read))
                else:  # due in this minute, or before it (then it is late: sent at once)
                    result.messages.append(read)
                    message = read
            result.stored.append((item[contract.DELAY_SORT_KEY]["S"], message))
        return result

    def refile(self, item: dict[str, Any], message: DelayedMessage, time_low: Callable[[], bool] | None = None) -> bool:
        """Move an item due in a later minute than its pk's into that minute, where this dispatcher reads it in time.

        False when DynamoDB refuses the copy for what it is (too large, say): then it goes to the DLQ as a
        pointer with the reason, and the minute goes on. That minute is read consistently in this run, so a
        Query right after the copy cannot miss it (the safety net leaves inserts ahead of the watermark to us).
        """
        try:
            self._budget.with_retries(
                lambda: delivery.refile(self._dynamodb.get(), self._table, item, message.bucket,
                                        self._group.shard_for(message.shard)),
                give_up=delivery.is_permanent_write_error,
            )
        except Exception as error:
            if not delivery.is_permanent_write_error(error):
                raise
            self._delivery.dead_letter_unreadable(item, f"it is due in minute {message.bucket}, and moving it there was "
                                                        f"refused: {error_code(error)}: {error}", time_low)
            return False
        self._refiled_buckets.add(message.bucket)
        return True


def _write_watermark(state: GroupState, bucket: int, cursors: dict[int, str], *, expected: int) -> None:
    """``GroupState.write_watermark``; LeaseLostError when another run moved the watermark (its condition failed)."""
    try:
        state.write_watermark(bucket, cursors, expected=expected)
    except Exception as error:
        if is_condition_failure(error):
            raise LeaseLostError(f"watermark moved by another run while dispatching minute {expected}") from error
        raise


class _MinuteDispatch:
    """One run's work on one minute: rounds of one page per open shard, from the saved cursors."""

    def __init__(
        self,
        bucket: int,
        cursors: dict[int, str],
        report: RunReport,
        *,
        state: GroupState,
        table: _DelayTable,
        delivery: Delivery,
        queue_url: delivery.Destination,
        budget: _Budget,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.bucket = bucket
        self.cursors = dict(cursors)
        self.report = report
        self.state = state  # the group's records: the minute's start, the cursors
        self.table = table  # the group's shards of the minute
        self.delivery = delivery
        self.queue_url = queue_url
        self.budget = budget  # the run's time left and threads
        self.clock = clock
        self.sleep = sleep
        self.handled: set[int] = set()  # the round's messages (by send position) accepted or dead-lettered
        self.set_aside: set[tuple[int, str]] = set()  # the round's (shard, sort key) refiled or dead-lettered unread
        self.out_of_time = False  # a send was not started or retried for time: the run stops after the wave
        self.clock_stuck = False  # the clock did not move as slept: no batch of the minute waits again

    def run(self) -> bool:
        """True when every shard of the minute is dispatched; False when the run must stop."""
        # Always, before the first Query: the record's condition keeps the first (a minute seeded with another
        # layout's cursors has none of this group's yet).
        self.state.record_start(self.bucket, continuing=bool(self.cursors))
        open_shards: dict[int, str | None] = {shard: self.cursors.get(shard) for shard in self.state.group.shards}
        while open_shards:
            if self.budget.time_low():
                self.report.stopped = TIME_RUNNING_OUT
                return False
            pages = self.table.read_pages(self.bucket, open_shards)
            open_shards = {page.shard: page.next_after for page in pages if page.next_after is not None}
            if not self._set_aside(pages) or not self._round(pages, bool(open_shards)):
                return False
        return True

    def _set_aside(self, pages: list[_Page]) -> bool:
        """Before any send (see _save_cursors): refile items due in a later minute, dead-letter unreadable ones.

        False when time ran low between two of them: the cursors pass what was set aside
        ahead of the first message of each shard, so the next run goes on from there.
        """
        self.set_aside, self.handled = set(), set()
        for page in pages:
            for item, message in page.misplaced:
                if self.budget.time_low():
                    self.report.stopped = TIME_RUNNING_OUT
                    self._save_cursors(pages, [])
                    return False
                if self.table.refile(item, message, self._sends_low):
                    self.report.refiled += 1
                else:
                    self.report.dead_lettered += 1
                self.set_aside.add((page.shard, item[contract.DELAY_SORT_KEY]["S"]))
        for page, (item, problem) in [(p, pair) for p in pages for pair in p.unreadable]:
            if self.budget.time_low():
                self.report.stopped = TIME_RUNNING_OUT
                self._save_cursors(pages, [])
                return False
            self.delivery.dead_letter_unreadable(item, problem, self._sends_low)
            self.set_aside.add((page.shard, item[contract.DELAY_SORT_KEY]["S"]))
            self.report.dead_lettered += 1
        return True

    def _round(self, pages: list[_Page], more: bool) -> bool:
        """Send one round's pages merged in due order; save the cursors unless the minute ends here.

        False when the run must stop.
        """
        messages = sorted((m for page in pages for m in page.messages), key=_due_order)
        try:
            complete = self._send_all(messages)
        except Exception:
            self._save_cursors(pages, messages)
            raise
        if more or not complete:
            self._save_cursors(pages, messages)
        return complete

    def _send_all(self, messages: list[DelayedMessage]) -> bool:
        """Send in waves of one batch per thread, checking the time before each wave; False when time ran low.

        A batch waits for its moment in the second (``worker_tier.delays.send_moment``): a wave takes the
        batches whose moment it is, in due order, and sets aside the others ahead of it, at most
        ``POSTPONED_BATCHES``, until theirs comes (within ``send_moment.MAX_WAIT_MS``). So a wave is a
        prefix of the round in due order but for those. From ``ALIGNING_STOPS_MS`` before the run's margin no batch waits
        and the set-aside ones go first, and a run stopping for time with some still set aside sends
        them (``_send_waiting``), so it has sent only what its cursors pass.
        """
        attributes = [delay.with_due_at(m) for m in messages]
        pending = deque(_batches([message_bytes(m.body, a) for m, a in zip(messages, attributes, strict=True)]))
        moments = {id(batch): send_moment.moment([messages[i].due_ms for i in batch]) for batch in pending}
        postponed: list[list[int]] = []
        while pending or postponed:
            if self.budget.time_low():
                self.report.stopped = TIME_RUNNING_OUT
                self._send_waiting(messages, attributes, postponed)
                return False
            aligning = not self.clock_stuck and not self.budget.time_low(RUN_MARGIN_MS + ALIGNING_STOPS_MS)
            self._send_wave(messages, attributes, self._next_wave(pending, postponed, moments if aligning else {}))
            if self.out_of_time:
                self.report.stopped = TIME_RUNNING_OUT
                return False
        return True

    def _send_waiting(self, messages: list[DelayedMessage], attributes: list[dict[str, Any]], postponed: list[list[int]]) -> None:
        """At a stop for time, the batches still waiting for their moment, wave by wave while ``FLUSH_FLOOR_MS`` is left.

        Otherwise (a wave overran the margin, or AWS answers so slowly that the waves do not fit)
        the rest stay unsent, and the next run sends again what this one sent after them (each
        shard's cursor passes only its handled prefix): at most the round, as when a run dies.
        """
        while postponed and not self.budget.time_low(FLUSH_FLOOR_MS) and not self.out_of_time:
            wave, postponed[:] = postponed[:DISPATCH_THREADS], postponed[DISPATCH_THREADS:]
            self._send_wave(messages, attributes, wave)

    def _next_wave(self, pending: deque[list[int]], postponed: list[list[int]],
                   moments: dict[int, send_moment.Moment | None]) -> list[list[int]]:
        """Up to one batch per thread whose moment it is (any batch without one in ``moments``): the set-aside first, then the next in due order.

        When none is at its moment, the run sleeps until the nearest comes (again, if it woke a
        little early). If the clock did not move as slept, the batch nearest its moment goes, and no
        batch of the minute waits again: every wave sends at least one, and a stuck clock costs one sleep.
        """
        def wait(batch: list[int], now_ms: float) -> float:
            return send_moment.wait_ms(moments.get(id(batch)), now_ms)

        def ready(now_ms: float) -> list[list[int]]:
            return [batch for batch in postponed if wait(batch, now_ms) == 0][:DISPATCH_THREADS]

        now_ms = self.clock() * 1000
        wave = ready(now_ms)
        while len(wave) < DISPATCH_THREADS and pending:
            if wait(pending[0], now_ms) == 0:
                wave.append(pending.popleft())
            elif len(postponed) < POSTPONED_BATCHES:
                postponed.append(pending.popleft())
            else:
                break
        for _ in range(MOMENT_SLEEPS):
            if wave:
                break
            sleep_ms = min(wait(batch, now_ms) for batch in postponed)
            self.sleep(sleep_ms / 1000)
            later_ms = self.clock() * 1000
            if later_ms <= now_ms and sleep_ms >= STUCK_AFTER_SLEEP_MS:
                self.clock_stuck = True
                break
            now_ms = max(now_ms, later_ms)
            wave = ready(now_ms)
        wave = wave or [min(postponed, key=lambda batch: wait(batch, now_ms))]
        taken = {id(batch) for batch in wave}
        postponed[:] = [batch for batch in postponed if id(batch) not in taken]
        return wave

    def _send_wave(self, messages: list[DelayedMessage], attributes: list[dict[str, Any]], wave: list[list[int]]) -> None:
        """The wave's batches in flight together; every answer is taken in (refusals dead-lettered), then the first failure raised.

        So the cursors pass exactly what was handled, whichever batches failed.
        """
        outcomes = self.budget.map(lambda batch: self._send_batch(messages, attributes, batch), wave)
        failures = [outcome if isinstance(outcome, Exception) else self._take_in(messages, batch, outcome)
                    for batch, outcome in zip(wave, outcomes, strict=True)]
        failure = next((error for error in failures if error is not None), None)
        if failure is not None:
            raise failure

    def _send_batch(self, messages: list[DelayedMessage], attributes: list[dict[str, Any]],
                    batch: list[int]) -> delivery.Sent | Exception:
        """In a pool thread: what SQS did, or the error that ended the batch (raised once the wave is taken in).

        Each call's DelaySeconds comes from the clock read just before it (``Delivery.deliver``).
        """
        entries = [delivery.entry(str(i), messages[i], 0.0, attributes[i]) for i in batch]
        try:
            return self.delivery.deliver(self.queue_url, entries, {str(i): messages[i].due_ms for i in batch},
                                                    self._sends_low)
        except Exception as error:  # not transient (delivery.AWS_CALL_ERRORS are retried): the run stops on it
            return error

    def _sends_low(self) -> bool:
        """True when too little time is left to start a send (``SEND_FLOOR_MS``)."""
        return self.budget.time_low(SEND_FLOOR_MS)

    def _take_in(self, messages: list[DelayedMessage], batch: list[int], sent: delivery.Sent) -> Exception | None:
        """Record one batch's answer, dead-letter each refusal; the first DispatchIncompleteError, when some were neither."""
        self.handled.update(int(i) for i in sent.accepted)
        self.report.sent += len(sent.accepted)
        for entry_id, sent_at in sent.sent_at.items():
            self.report.max_lateness_s = max(self.report.max_lateness_s, sent_at - messages[int(entry_id)].due_ms / 1000)
        failure: Exception | None = None
        for entry_id, refusal in sent.refused.items():
            if self._sends_low():
                self.out_of_time = True
                continue
            try:
                self.delivery.dead_letter(messages[int(entry_id)], refusal, self._sends_low)
            except DispatchIncompleteError as error:
                failure = failure or error
                continue
            self.handled.add(int(entry_id))
            self.report.dead_lettered += 1
        left = len(batch) - len(sent.accepted) - len(sent.refused)
        self.out_of_time = self.out_of_time or sent.out_of_time
        if left and failure is None and not sent.out_of_time:
            failure = DispatchIncompleteError(f"minute {self.bucket}: SQS did not accept {left} messages "
                                              f"{sent.unsent(BATCH_ENTRIES.attempts)}")
        return failure

    def _save_cursors(self, pages: list[_Page], messages: list[DelayedMessage]) -> None:
        """Move each shard's cursor over the handled prefix of its page (in stored order), and save them if any moved.

        Handled: a message accepted or dead-lettered, or an item set aside (refiled, or
        its pointer dead-lettered) before the round's first send.
        """
        position = {id(message): index for index, message in enumerate(messages)}
        moved = False
        for page in pages:
            for sort_key, message in page.stored:
                done = (page.shard, sort_key) in self.set_aside if message is None else position.get(id(message)) in self.handled
                if not done:
                    break
                self.cursors[page.shard] = sort_key
                moved = True
        if moved:
            _write_watermark(self.state, self.bucket, self.cursors, expected=self.bucket)


def _batches(sizes: list[int]) -> Iterator[list[int]]:
    """Indices in runs of at most 10 entries and SQS's total bytes per SendMessageBatch."""
    return batches(range(len(sizes)), sizes.__getitem__, max_count=limits.SQS_MAX_BATCH_ENTRIES,
                         max_bytes=limits.SQS_MAX_MESSAGE_BYTES)


def _due_order(message: DelayedMessage) -> tuple[int, str]:
    """A round's send order: due time, then id (each shard's sort-key order too)."""
    return message.due_ms, message.message_id
