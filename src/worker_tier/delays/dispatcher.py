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
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping

from worker_tier.core import contract, limits
from worker_tier.core import wall_clock
from worker_tier.delays import delay
from worker_tier.core.aws import AwsService, LazyClient, new_client
from worker_tier.delays.delay import BUCKET_SECONDS, DISPATCH_HORIZON_SECONDS
from worker_tier.core.errors import LeaseLostError
from worker_tier.delays.dispatch_state import EPOCH_ATTRIBUTE, GROUPS_ATTRIBUTE, LAYOUT_KEY, DispatchGroup, GroupState, Layout, watermark_epoch
from worker_tier.delays.delivery import Delivery
from worker_tier.core.priority import PriorityQueues
from worker_tier.delays.minute import (
    DISPATCHER_CONNECT_TIMEOUT_SECONDS,
    DISPATCHER_READ_TIMEOUT_SECONDS,
    DISPATCH_THREADS,
    RunReport,
    _Budget,
    _DelayTable,
    _MinuteDispatch,
    _write_watermark,
)
from worker_tier.core.errors import DispatchIncompleteError, LayoutLostError, SettingsError, StateError

# A first run (or one after the watermark was lost) starts no earlier than this before now: older minutes'
# items are the safety net's (their TTL REMOVE recovers them), so a stray old key cannot cost days of catch-up.
START_LOOKBACK_SECONDS = delay.DISPATCHED_RETENTION_SECONDS + 60 * 60
# A watermark further ahead of the clock than the horizon plus this is not one this dispatcher wrote.
WATERMARK_AHEAD_ALLOWANCE_SECONDS = 2 * 60
# A horizon beyond SQS's longest DelaySeconds would send a message that SQS then shows early (DelaySeconds clamps).
MAX_HORIZON_SECONDS = limits.SQS_MAX_DELAY_SECONDS
LAYOUT_CHANGING = "the layout of dispatch groups changed again while this run read it: the next run goes on"
SCAN_UNFINISHED = "initial scan of the delay table not finished: invocation time running out; the next run resumes it"








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
        clock: Callable[[], float] = wall_clock.now,
        sleep: Callable[[float], None] = time.sleep,
        parallel: bool = True,
        horizon_seconds: int = DISPATCH_HORIZON_SECONDS,
        pool: Any = None,
        group: DispatchGroup | None = None,
        priority_queue_urls: Mapping[str, str] | None = None,
    ) -> None:
        self.group = group or DispatchGroup()  # the shards this dispatcher reads, and its state keys (worker_tier.delays.dispatch_state)
        self.delay_table = delay_table
        self.state_table = state_table
        self.queue_url = queue_url
        # With priorities, each message goes to its level's queue (its worker_tier.priority attribute).
        self.priority_queue_urls = dict(priority_queue_urls or {})
        self.queues = PriorityQueues(queue_url, **self.priority_queue_urls)
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
                group=DispatchGroup(index, self.group.count), priority_queue_urls=self.priority_queue_urls)
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
                                       queue_url=self.queues, budget=self._budget, clock=self._clock, sleep=self._sleep).run()
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




def _scheduled_minute(item: dict[str, Any]) -> int:
    """The minute of a key the dispatcher reads; a big number for any other key, so a minimum ignores it."""
    pk = item.get(contract.DELAY_PARTITION_KEY, {}).get("S", "")
    parsed = delay.parse_bucket_key(pk) if isinstance(pk, str) and delay.is_scheduled_key(pk) else None
    return parsed[0] if parsed else delay.MAX_DUE_MS


