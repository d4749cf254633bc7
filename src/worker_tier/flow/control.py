"""``FlowControl``: the middleware that holds a task to its rate limit and concurrency (``@task(rate_limit=,
concurrency=)``), across every worker, on the state table (``worker_tier.flow.limiter``).

It wraps only the tasks that ask, outermost of their own chain after the built-in middleware, so the user's
middleware and the task see only messages that run. For each message:

1. the concurrency slot of its key (``concurrency_key``; one key for the task without it), held on a lease the
   message's heartbeat renews, given back when the task ends however it ends;
2. the rate of its key (``rate_key``): admitted now, or up to ``FLOW_MAX_HOLD_SECONDS`` ahead (the worker sleeps
   until then, holding its slot), else throttled;
3. the task.

A message over a limit raises ``ThrottledError`` with the wait: the worker gives it back for that long (plus
jitter), counts the wait in the state table and never as an attempt (``worker_tier.worker.fates``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from worker_tier.core import contract
from worker_tier.core.errors import ConfigurationError, NonRetryableError, ThrottledError
from worker_tier.core.observability import logger
from worker_tier.core.task_keys import task_key
from worker_tier.pipeline.middleware import CallNext, Middleware

if TYPE_CHECKING:
    from worker_tier.flow.limiter import ConcurrencySlots, RateLimiter, Slot
    from worker_tier.core.task import Task
    from worker_tier.worker.batch import Worker
    from worker_tier.worker.fates import _Invocation as Batch
    from worker_tier.worker.registry import TaskDefinition

# The longest a worker sleeps for a message's reserved turn; further ahead, the message is given back.
FLOW_MAX_HOLD_SECONDS = 1.0
# A concurrency wait: until the first lease ends, at least the minimum; a lease ending beyond the maximum (an
# invocation's deadline) says nothing of when its task ends, so the wait is then the minimum.
MIN_CONCURRENCY_WAIT_SECONDS = 1.0
MAX_CONCURRENCY_WAIT_SECONDS = 30.0
# Without a heartbeat, a Lambda message's slot is leased until its invocation ends, plus this.
INVOCATION_LEASE_MARGIN_SECONDS = 5.0


def flow_controlled(definition: TaskDefinition | None) -> bool:
    """True for a task with a rate limit or a concurrency limit."""
    return definition is not None and (definition.rate_limit is not None or definition.concurrency is not None)


class FlowControl(Middleware):
    """Rate limits and concurrency keys for the tasks that declare them (module docstring)."""

    def __init__(self, worker: Worker, sleep: Callable[[float], Any] = time.sleep) -> None:
        self._worker = worker
        self.sleep = sleep  # how it waits for a reserved turn (tests pass their clock's)
        self._rates: RateLimiter | None = None
        self._slots: ConcurrencySlots | None = None

    def wraps(self, definition: TaskDefinition | None) -> bool:
        return flow_controlled(definition)

    def around_task(self, batch: Batch, task: Task, call_next: CallNext) -> None:
        definition = self._worker.registry.get(task.path)
        assert definition is not None  # wraps() chose this task's chain by its definition
        if self._worker.settings.fifo:
            raise NonRetryableError(
                f"task {definition.path!r} has a rate_limit or concurrency, which a FIFO queue cannot give (a throttled "
                "message would hold up its group or lose its order); synth refuses it: run these tasks on a standard queue"
            )
        slot = self._take_slot(batch, task, definition) if definition.concurrency is not None else None
        try:
            if definition.rate is not None:
                self._admit(batch, task, definition)
            # The task sees its attempts, not the receives it spent waiting (one read, on a message received before).
            self._worker.count_waits(task.record, task, batch)
            call_next(batch, task)
        finally:
            if slot is not None:
                self._give_back(slot)

    def _table(self) -> str:
        table = self._worker._state_table
        if not table:
            raise ConfigurationError(
                f"flow control (rate_limit, concurrency) keeps its limits in the state table, and none is configured: "
                f"set {contract.STATE_TABLE_VARIABLE} (the stack sets it on every worker)"
            )
        return table

    def rates(self) -> RateLimiter:
        from worker_tier.flow.limiter import RateLimiter  # the limiter: imported with the first flow-controlled message

        if self._rates is None:
            self._rates = RateLimiter(self._worker._dynamodb.get, self._table())
        return self._rates

    def slots(self) -> ConcurrencySlots:
        from worker_tier.flow.limiter import ConcurrencySlots

        if self._slots is None:
            self._slots = ConcurrencySlots(self._worker._dynamodb.get, self._table(), self._worker._random)
        return self._slots

    def _admit(self, batch: Batch, task: Task, definition: TaskDefinition) -> None:
        rate = definition.rate
        assert rate is not None
        key = task_key(definition.rate_key, task, "rate_key", definition.path) if definition.rate_key is not None else None
        hold = FLOW_MAX_HOLD_SECONDS
        if batch.remaining_ms is not None:
            hold = max(0.0, min(hold, (batch.remaining_ms() - batch.margin_ms) / 1000))
        admission = self.rates().admit(definition.path, key, rate, self._worker._clock(), hold)
        if not admission.admitted:
            # Back when its turn is within the hold, not after it: then it reserves the turn, and no turn goes unused
            # while it is on its way back.
            from worker_tier.flow.limiter import RATE_KEY_PREFIX, item_key

            raise ThrottledError(max(0.0, admission.wait - FLOW_MAX_HOLD_SECONDS), f"rate limit {rate.text} of {definition.path!r}"
                                 + (f" for key {key[:80]!r}" if key is not None else ""),
                                 item_key(RATE_KEY_PREFIX, definition.path, key))
        if admission.wait > 0:
            self.sleep(admission.wait)

    def _take_slot(self, batch: Batch, task: Task, definition: TaskDefinition) -> Slot:
        limit = definition.concurrency
        assert limit is not None
        key = (task_key(definition.concurrency_key, task, "concurrency_key", definition.path)
               if definition.concurrency_key is not None else None)
        heartbeat = batch.heartbeat if batch.leases and task.message_id in batch.leases else None
        if heartbeat is not None:
            lease = float(heartbeat.extension_seconds)
        elif batch.remaining_ms is not None:
            lease = batch.remaining_ms() / 1000 + INVOCATION_LEASE_MARGIN_SECONDS
        else:
            lease = float(self._worker.settings.visibility_timeout)
        import uuid  # here, not at import: the worker's cold start never pays for it

        holder = uuid.uuid4().hex[:16]  # short: a held slot is billed by its bytes on every write of the item
        slots, clock = self.slots(), self._worker._clock
        slot, wait, _ = slots.take(definition.path, key, limit, holder, clock(), lease)
        if slot is None:
            from worker_tier.flow.limiter import SLOTS_KEY_PREFIX, item_key

            # A lease ending far off (a Lambda invocation's deadline, without a heartbeat) says nothing of when its task
            # ends: then try again soon.
            wait = MIN_CONCURRENCY_WAIT_SECONDS if wait > MAX_CONCURRENCY_WAIT_SECONDS else max(wait, MIN_CONCURRENCY_WAIT_SECONDS)
            raise ThrottledError(wait, f"concurrency {limit} of {definition.path!r}"
                                 + (f" for key {key[:80]!r}" if key is not None else "") + " is reached",
                                 item_key(SLOTS_KEY_PREFIX, definition.path, key))
        if heartbeat is not None:
            held = slot

            def renew() -> None:
                if not slots.renew(held, clock(), lease):
                    batch.metrics.count(contract.METRIC_SLOT_LOST)
                    logger.warning("a concurrency slot's lease could not be renewed: given back, or taken after it ended",
                                   extra={"message_id": task.message_id, "path": definition.path})

            heartbeat.on_extended(task.message_id, renew)
        return slot

    def _give_back(self, slot: Slot) -> None:
        """Free the slot; if that fails, its lease ends it (logged)."""
        try:
            self.slots().give_back(slot)
        except Exception as error:
            logger.warning("a concurrency slot could not be given back: its lease frees it when it ends",
                           extra={"error": f"{type(error).__name__}: {error}"[:300]})
