"""The delay dispatcher: each minute, move what falls due within the horizon from the delay table into SQS.

One idea in one module, a run, whose steps are listed below: the loop over minutes
(``DelayDispatcher``), one minute's rounds of reads and sends (``_MinuteDispatch``, given its
collaborators: the group's records ``dispatch_state.GroupState``, the delay table's pages
``_DelayTable``, ``delivery.Delivery``, and the run's ``_Budget`` of time and threads).

One run, of one shard group (``worker_tier.delays.dispatch_state``: with ``dispatch_groups`` = G,
group g reads the shards s with s % G == g, and has its own lease, watermark, minute records
and first-run Scan; G = 1 is one group over all shards under the keys of before), under
the group's lease in the state table so its runs never overlap:

0. read the layout of groups; if it has another G, change it first (seeded from the old
   groups' earliest watermark, so a change loses nothing: see ``dispatch_state``);
1. read the watermark: the first minute not yet fully dispatched, and that
   minute's per-shard cursors (how far each shard has been dispatched). Without
   one of the layout's epoch, start at the layout's seed; without a seed either
   (first run, deleted, or unreadable: reported), start after the latest
   minute whose record has ``finished_ms`` (of this epoch), else at the earliest minute a
   resumable, time-checked Scan finds; never before ``START_LOOKBACK_SECONDS``
   ago (older items are the safety net's). A watermark further ahead of the
   clock than the horizon plus ``WATERMARK_AHEAD_ALLOWANCE_SECONDS`` is reported
   and left alone;
2. for each minute from the watermark to the last one that has ended by
   now + ``DISPATCH_HORIZON_SECONDS``: write the minute's record (``started_ms``
   once, before its first Query ever), then go in rounds. A round reads the next
   page of every open shard of the group, all of its share of the ``delay.MAX_SHARDS``
   whatever shard count the producers used (in parallel; a page of ``ROUND_ITEMS`` over
   the group's shard count, so a round is as long whatever G; the cancellable shard with
   ConsistentRead, so a cancel that committed before the minute's record is never read
   back: ``worker_tier.delays.cancellation``), sends the pages merged in due order with
   ``DelaySeconds = ceil(due − now)`` (0..900, ``now`` read just before each
   SendMessageBatch call, retries included), in waves of one SendMessageBatch
   per thread (``DISPATCH_THREADS``) in flight together, each batch at the moment
   in the second that rounds its DelaySeconds least (``worker_tier.delays.send_moment``;
   at most ``POSTPONED_BATCHES`` wait for theirs while later ones go), then saves
   each shard's cursor over what was handled (a wave is a prefix of the round in
   due order but for those, which go first from ``ALIGNING_STOPS_MS`` before the margin).
   Every answer of a wave is taken in (accepted messages counted, refusals
   dead-lettered) before a failure in it stops the run.
   When every shard is done the record gets ``finished_ms`` and the watermark
   moves to the next minute (the safety net, ``worker_tier.delays.delay_recovery``,
   reads these records);
3. stop before the invocation's time runs out, between any two waves (no wave
   starts with less than ``RUN_MARGIN_MS`` left, and inside one no send or DLQ
   send starts with less than ``SEND_FLOOR_MS``, no refile or DLQ pointer once
   time is low, and no state call is retried with less than ``STATE_RETRY_FLOOR_MS``;
   every call is bounded by the clients' timeouts, ``DISPATCHER_CALL_SECONDS``);
   the cursors and the watermark stay true.

Before a round's first send, each item that is not a delayed message (``delay.read_item``)
goes to the DLQ as a pointer with its reason, and each item due in a later minute
than its pk's is refiled there (``delivery.refile``): SQS would show it early. The
cursors pass both.

A message has one of three fates at dispatch: SQS accepts it; SQS refuses it for
a sender fault, and it goes to the dead-letter queue with a ``worker_tier.failure``
reason (or, when the DLQ refuses that copy too, a small message pointing at its
delay-table item, which is kept until its TTL); or SQS keeps failing it
transiently, and the run stops there (its reason names the last error SQS gave),
to resume from the cursors next time. A run stopped on a transient failure resends
only what was not taken in: the messages of each shard from its first one that was
neither accepted nor dead-lettered on. Only an AWS call's errors are transient; an
exception of any other kind (a bug) is not retried: it ends the run, cursors saved.

One run is bound by CPU rather than the network: a single interpreter (the GIL)
builds and parses every call, and botocore spends milliseconds on each, so the
threads help until the CPU is full (figures: ``bench/results/scheduler.json``).

Memory holds at most one round (``ROUND_ITEMS``). A run that finds itself behind (missed
runs, an outage) catches up from the watermark; messages already due go out at
once, and their lateness is recorded. Dispatched items stay in the table until
their TTL. Duplicates come only from the round a run died in (killed, crashed,
or a cursor write lost): what it sent after the last saved cursor goes again.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from worker_tier.core import contract, limits
from worker_tier.delays import delay, delivery, send_moment
from worker_tier.core.aws import AwsService, LazyClient, error_code, is_condition_failure, new_client
from worker_tier.delays.delay import BUCKET_SECONDS, DISPATCH_HORIZON_SECONDS, DelayedMessage
from worker_tier.delays.dispatch_state import (
    EPOCH_ATTRIBUTE,
    GROUPS_ATTRIBUTE,
    LAYOUT_KEY,
    DispatchGroup,
    GroupState,
    Layout,
    watermark_epoch,
)
from worker_tier.delays.delivery import Delivery
from worker_tier.core.errors import DispatchIncompleteError, LayoutLostError, SettingsError, StateError, UnreadableItemError, WorkerTierError
from worker_tier.core.envelope import message_bytes
from worker_tier.core.retry import BATCH_ENTRIES, STATE_CALLS, batches

# A first run (or one after the watermark was lost) starts no earlier than this before now: older minutes'
# items are the safety net's (their TTL REMOVE recovers them), so a stray old key cannot cost days of catch-up.
START_LOOKBACK_SECONDS = delay.DISPATCHED_RETENTION_SECONDS + 60 * 60
# A watermark further ahead of the clock than the horizon plus this is not one this dispatcher wrote.
WATERMARK_AHEAD_ALLOWANCE_SECONDS = 2 * 60
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
# A horizon beyond SQS's longest DelaySeconds would send a message that SQS then shows early (DelaySeconds clamps).
MAX_HORIZON_SECONDS = limits.SQS_MAX_DELAY_SECONDS
TIME_RUNNING_OUT = "invocation time running out"
LAYOUT_CHANGING = "the layout of dispatch groups changed again while this run read it: the next run goes on"
SCAN_UNFINISHED = "initial scan of the delay table not finished: invocation time running out; the next run resumes it"


class LeaseLostError(WorkerTierError):
    """Another run moved the watermark: this run no longer holds its lease on the state table.

    Not ``worker_tier.worker.fates.HeartbeatLeaseLostError``, a message whose visibility the heartbeat lost.
    """


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


class DelayDispatcher:
    """Dispatches the delay table into the work queue.

    Examples
    --------
    >>> from tests.support.fake_dynamodb import FakeDynamoDB
    >>> from tests.support.fakes import FakeSQS
    >>> dynamodb = FakeDynamoDB()
    >>> dynamodb.create_table("delay", "pk", "sk"); dynamodb.create_table("state", "pk")
    >>> dispatcher = DelayDispatcher("delay", "state", "https://q/work", dead_letter_queue_url="https://q/dlq",
    ...                            sqs=FakeSQS(), dynamodb=dynamodb, clock=lambda: 1_800_000_000.0, parallel=False)
    >>> dispatcher.run().stopped
    ''
    """

    def __init__(
        self,
        delay_table: str,
        state_table: str,
        queue_url: str,
        *,
        dead_letter_queue_url: str,
        sqs: Any = None,
        dynamodb: Any = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        parallel: bool = True,
        horizon_seconds: int = DISPATCH_HORIZON_SECONDS,
        pool: Any = None,
        group: DispatchGroup | None = None,
    ) -> None:
        self.group = group or DispatchGroup()  # the shards this dispatcher reads, and its state keys (worker_tier.delays.dispatch_state)
        self.delay_table = delay_table
        self.state_table = state_table
        self.queue_url = queue_url
        self.dead_letter_queue_url = dead_letter_queue_url
        self.horizon_seconds = _checked_horizon(horizon_seconds)
        self._dynamodb = LazyClient("dynamodb", dynamodb, factory=_pooled_client("dynamodb"))
        self._sqs = LazyClient("sqs", sqs, factory=_pooled_client("sqs"))
        self._clock = clock
        self._sleep = sleep
        self._budget = _Budget(sleep)  # the run's time left and threads, for every call of the run
        self.state = GroupState(self._dynamodb, state_table, self.group, clock=clock, call=self._budget.with_retries)
        self.delivery = Delivery(self._sqs, dead_letter_queue_url, delay_table, clock=clock, sleep=sleep)
        self._table = _DelayTable(self._dynamodb, delay_table, self.group, self.delivery, self._budget)
        # Anything with Executor.map; the bench passes one that runs the calls on a simulated clock.
        self._given_pool, self._parallel = pool, parallel
        self._siblings: dict[int, DelayDispatcher] = {self.group.index: self}

    def for_group(self, index: int) -> DelayDispatcher:
        """The dispatcher of group ``index`` of this one's group count, sharing its clients, clock and pool; made once."""
        if index not in self._siblings:
            self._siblings[index] = DelayDispatcher(
                self.delay_table, self.state_table, self.queue_url, dead_letter_queue_url=self.dead_letter_queue_url,
                sqs=self._sqs.get(), dynamodb=self._dynamodb.get(), clock=self._clock, sleep=self._sleep,
                parallel=self._parallel, horizon_seconds=self.horizon_seconds, pool=self._given_pool,
                group=DispatchGroup(index, self.group.count))
        return self._siblings[index]

    def run(self, remaining_ms: Callable[[], int] | None = None) -> RunReport:
        """One dispatch run; see the module docstring."""
        holder = str(uuid.uuid4())
        self._sqs.get()  # clients are made here, not in the pool's threads (a boto3 session is not thread-safe)
        if not self._acquire(holder):
            return RunReport(ran=False, group=self.group.index, stopped="another run holds the lease")
        report = RunReport(group=self.group.index)
        self._budget.remaining_ms = remaining_ms
        own_pool = ThreadPoolExecutor(max_workers=DISPATCH_THREADS) if self._given_pool is None and self._parallel else None
        self._budget.pool = self._given_pool or own_pool
        try:
            self._dispatch(report)
        except LeaseLostError as error:  # e.g. a lost response to our own watermark write: the next run resumes
            report.stopped = str(error)
        finally:
            if own_pool is not None:
                own_pool.shutdown()
            self.state.release(holder)
        return report

    def _acquire(self, holder: str) -> bool:
        """Claim the run's lease; False while another run holds it."""
        return self.state.acquire(holder)

    def _dispatch(self, report: RunReport) -> None:
        try:
            layout = self._read_layout(report)
            if layout is None:
                return
            self.state.layout = layout
            start = self._read_watermark(report)
        except LayoutLostError as error:  # never fall back to epoch 0: that would revive the G = 1 watermark of before
            own = self.state.get(self.group.watermark_key) if self.group.count > 1 else None
            hint = f"; {self.group.watermark_key} carries epoch {watermark_epoch(own)}" if own is not None else ""
            report.state_unreadable = report.stopped = f"{error}{hint}"
            return
        if start is None:
            report.stopped = SCAN_UNFINISHED
            return
        watermark, cursors = start
        last = math.floor((self._clock() + self.horizon_seconds) / BUCKET_SECONDS) - 1
        if self._is_ahead(watermark, last, report):
            return
        while watermark <= last:
            try:
                done = _MinuteDispatch(watermark, cursors, report, state=self.state, table=self._table, delivery=self.delivery,
                                       queue_url=self.queue_url, budget=self._budget, clock=self._clock, sleep=self._sleep).run()
            except DispatchIncompleteError as error:
                report.stopped = str(error)
                break
            if not done:
                break
            self.state.record_finish(watermark)
            _write_watermark(self.state, watermark + 1, {}, expected=watermark)
            watermark, cursors = watermark + 1, {}
            report.buckets += 1
        report.watermark = watermark
        report.lag_s = max(0.0, self._clock() + self.horizon_seconds - watermark * BUCKET_SECONDS, self._other_groups_lag_s())

    def _other_groups_lag_s(self) -> float:
        """The largest lag among the layout's other groups (eventually consistent reads; none at G = 1), so a group
        that never runs shows in the lag every running group publishes. A group without a position is late since
        the layout was written (unknown for a layout written before ``changed_ms``); an unreadable one reports itself."""
        lags = [0.0]
        horizon_s = self._clock() + self.horizon_seconds
        layout = self.state.layout
        for index in range(self.group.count):
            if index == self.group.index:
                continue
            group = DispatchGroup(index, self.group.count)
            try:
                position = layout.position(group, self.state.get(group.watermark_key, consistent=False))
            except StateError:
                continue
            if position is not None:
                lags.append(horizon_s - position[0] * BUCKET_SECONDS)
            elif layout.changed_ms is not None:
                lags.append(horizon_s - math.floor(layout.changed_ms / 1000 / BUCKET_SECONDS) * BUCKET_SECONDS)
        return max(lags)

    def _is_ahead(self, watermark: int, last: int, report: RunReport) -> bool:
        """A watermark past the horizon by more than the allowance is not trusted, and not moved further."""
        ahead_s = (watermark - last - 1) * BUCKET_SECONDS
        if ahead_s <= WATERMARK_AHEAD_ALLOWANCE_SECONDS:
            return False
        report.watermark, report.watermark_ahead_s = watermark, float(ahead_s)
        report.stopped = (f"watermark minute {watermark} is {ahead_s} s past the horizon (minute {last + 1}); over "
                          f"{WATERMARK_AHEAD_ALLOWANCE_SECONDS} s is not a minute this dispatcher passed: left as it is")
        return True

    def _read_layout(self, report: RunReport) -> Layout | None:
        """The layout of dispatch groups, changed to this dispatcher's group count first if it differs; None: stop."""
        for _ in range(2):
            item = self.state.get(LAYOUT_KEY)
            try:
                layout = Layout.from_item(item)
            except StateError as error:
                report.state_unreadable = (f"{error}: the delay dispatcher stops until it is rewritten with the deployed "
                                           f"{GROUPS_ATTRIBUTE} and the {EPOCH_ATTRIBUTE} on the groups' watermarks (never "
                                           "deleted: docs/delays.md)")
                report.stopped = report.state_unreadable
                return None
            if layout.groups == self.group.count:
                return layout
            changed = self.state.change_layout(item, layout)
            if changed is not None:
                return changed
        report.stopped = LAYOUT_CHANGING
        return None

    def _read_watermark(self, report: RunReport) -> tuple[int, dict[int, str]] | None:
        """The first minute not fully dispatched, and its cursors; None while the first run's Scan is unfinished.

        A watermark of an earlier layout's epoch is deleted, and the group starts at the layout's seed.
        """
        start, unreadable = self.state.read_watermark()
        if unreadable:
            report.state_unreadable = unreadable
        if start is not None:
            return start
        minute = self._restart_minute()
        return None if minute is None else (minute, {})

    def _restart_minute(self) -> int | None:
        """Without a watermark: after the latest finished minute, else the earliest minute a Scan finds.

        Never earlier than ``START_LOOKBACK_SECONDS`` ago: the TTL's REMOVE of older items
        reaches the safety net, which sends what was not dispatched.
        """
        floor = math.floor((self._clock() - START_LOOKBACK_SECONDS) / BUCKET_SECONDS)
        scan = self.state.read_scan()
        if scan is None:
            finished = self._latest_finished_minute(floor)
            if finished is not None:
                return finished + 1
        earliest = self._scan_earliest(scan)
        return None if earliest is None else max(floor, earliest)

    def _latest_finished_minute(self, floor: int) -> int | None:
        """Probe minute records back from the horizon to ``floor``; the first with ``finished_ms``, or None."""
        bucket = math.floor((self._clock() + self.horizon_seconds) / BUCKET_SECONDS) - 1
        while bucket >= floor and not self._budget.time_low():
            if self.state.finished(bucket):
                return bucket
            bucket -= 1
        return None

    def _scan_earliest(self, scan: tuple[int, dict[str, Any]] | None) -> int | None:
        """The earliest minute among the dispatcher's keys (keys only), or now; None when time ran low first.

        Messages stored before the dispatcher first ran may be due in minutes already past.
        Resumable: between pages, the Scan's position and running minimum are saved
        in the group's Scan record. Keys the dispatcher does not read are the safety net's.
        """
        earliest = math.floor(self._clock() / BUCKET_SECONDS)
        request: dict[str, Any] = {"TableName": self.delay_table, "ProjectionExpression": "pk, sk"}
        if scan is not None:
            earliest = min(earliest, scan[0])
            request["ExclusiveStartKey"] = scan[1]
        while not self._budget.time_low():
            page = self._budget.with_retries(lambda: self._dynamodb.get().scan(**request))
            earliest = min([earliest, *(_scheduled_minute(item) for item in page.get("Items") or [])])
            if "LastEvaluatedKey" not in page:
                self.state.finish_scan()
                return earliest
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
            self.state.save_scan(earliest, page["LastEvaluatedKey"])
        return None


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
        queue_url: str,
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


def _checked_horizon(seconds: object) -> int:
    """``seconds`` when it is a whole number of seconds in 1..``MAX_HORIZON_SECONDS``; else SettingsError naming it and the rule."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= MAX_HORIZON_SECONDS:
        raise SettingsError(f"delay horizon {seconds!r} is not allowed: the horizon is whole seconds 1..{MAX_HORIZON_SECONDS} "
                            "(SQS's maximum DelaySeconds); beyond it a message would be visible before it is due")
    return seconds


def _pooled_client(service: AwsService) -> Callable[[], Any]:
    """A factory of the dispatcher's default client: one pooled connection per thread, each call bounded (DISPATCHER_CALL_SECONDS)."""
    return lambda: new_client(service, max_pool_connections=DISPATCH_THREADS, connect_timeout=DISPATCHER_CONNECT_TIMEOUT_SECONDS,
                              read_timeout=DISPATCHER_READ_TIMEOUT_SECONDS, max_attempts=0)


def _batches(sizes: list[int]) -> Iterator[list[int]]:
    """Indices in runs of at most 10 entries and SQS's total bytes per SendMessageBatch."""
    return batches(range(len(sizes)), sizes.__getitem__, max_count=limits.SQS_MAX_BATCH_ENTRIES,
                         max_bytes=limits.SQS_MAX_MESSAGE_BYTES)


def _scheduled_minute(item: dict[str, Any]) -> int:
    """The minute of a key the dispatcher reads; a big number for any other key, so a minimum ignores it."""
    pk = item.get(contract.DELAY_PARTITION_KEY, {}).get("S", "")
    parsed = delay.parse_bucket_key(pk) if isinstance(pk, str) and delay.is_scheduled_key(pk) else None
    return parsed[0] if parsed else delay.MAX_DUE_MS


def _due_order(message: DelayedMessage) -> tuple[int, str]:
    """A round's send order: due time, then id (each shard's sort-key order too)."""
    return message.due_ms, message.message_id
