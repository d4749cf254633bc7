"""Retry budgets and chunks: the waits each budget takes, when it gives up, and batch slicing."""

from __future__ import annotations

import pytest

from worker_tier.core.retry import BATCH_ENTRIES, SEND_ENTRIES, STATE_CALLS, TICK_MARK, Retry, chunks


class Flaky:
    """A call that raises each of ``errors`` in turn, then returns "done"."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def test_pauses_double_from_the_base_up_to_the_cap():
    assert [Retry(6, 0.05, 0.3).pause(n) for n in range(5)] == [0.05, 0.1, 0.2, 0.3, 0.3]


def test_attempts_with_pauses_sleeps_only_between_attempts():
    # GIVEN a budget of four attempts and a sleep that records
    waits: list[float] = []
    # WHEN every attempt asks for another try
    attempts = list(Retry(4, 0.5, 1.0).attempts_with_pauses(waits.append))
    # THEN four attempts ran with a pause before each but the first, and none after the last
    assert attempts == [0, 1, 2, 3]
    assert waits == [0.5, 1.0, 1.0]


def test_breaking_out_of_attempts_with_pauses_takes_no_further_pause():
    # GIVEN a loop body that is done at its second attempt
    waits: list[float] = []
    for attempt in Retry(5, 0.1, 1.0).attempts_with_pauses(waits.append):
        if attempt == 1:
            break
    # THEN it waited once, before that attempt
    assert waits == [0.1]


def test_call_retries_until_the_call_returns():
    # GIVEN a call that fails twice
    flaky, waits = Flaky(OSError("reset"), OSError("reset")), []
    # WHEN it is called under a budget of three
    result = Retry(3, 0.1, 1.0).call(flaky, sleep=waits.append)
    # THEN the third attempt's result comes back, after two pauses
    assert (result, flaky.calls, waits) == ("done", 3, [0.1, 0.2])


def test_call_raises_the_last_error_once_the_budget_is_spent():
    # GIVEN a call that fails more often than the budget allows
    flaky = Flaky(OSError("first"), OSError("second"), OSError("third"))
    # WHEN it is called under a budget of two
    with pytest.raises(OSError) as error:
        Retry(2, 0.1, 1.0).call(flaky, sleep=lambda seconds: None)
    # THEN it was tried exactly twice, and the second error is the one raised
    assert (flaky.calls, str(error.value)) == (2, "second")


def test_call_gives_up_at_once_on_an_error_give_up_names():
    # GIVEN a call whose first error is not worth retrying
    flaky, waits = Flaky(KeyError("gone")), []
    # WHEN it is called with give_up naming KeyError
    with pytest.raises(KeyError):
        Retry(5, 0.1, 1.0).call(flaky, give_up=lambda error: isinstance(error, KeyError), sleep=waits.append)
    # THEN it was tried once and never waited
    assert (flaky.calls, waits) == (1, [])


@pytest.mark.parametrize("attempts, base, cap, message", [
    (0, 0.1, 1.0, "Retry attempts must be at least 1 (the first try counts), got 0"),
    (3, -0.1, 1.0, "Retry waits must satisfy 0 <= base_seconds <= cap_seconds, got base_seconds=-0.1 and cap_seconds=1.0"),
    (3, 2.0, 1.0, "Retry waits must satisfy 0 <= base_seconds <= cap_seconds, got base_seconds=2.0 and cap_seconds=1.0"),
])
def test_a_budget_that_cannot_work_is_refused(attempts, base, cap, message):
    with pytest.raises(ValueError) as error:
        Retry(attempts, base, cap)
    assert str(error.value) == message


@pytest.mark.parametrize("budget, attempts, total_seconds", [
    (BATCH_ENTRIES, 8, 5.15),  # the delay table's BatchWriteItem and the dispatcher's sends: a few seconds of a one-minute run
    (SEND_ENTRIES, 5, 1.5),  # the client's sends: well within a task's Lambda time
    (STATE_CALLS, 8, 5.15),
    (TICK_MARK, 3, 2.0),  # well inside the tick's 60 s lease
])
def test_the_named_budgets_keep_their_waits(budget, attempts, total_seconds):
    assert budget.attempts == attempts
    assert budget.total_seconds() == pytest.approx(total_seconds)


def test_chunks_are_consecutive_slices_of_at_most_size():
    # GIVEN 23 items (WHEN chunked by 10) THEN three slices in order, the last one short
    assert [list(chunk) for chunk in chunks(list(range(23)), 10)] == [list(range(10)), list(range(10, 20)), [20, 21, 22]]


def test_chunks_of_nothing_is_no_chunk():
    assert list(chunks([], 25)) == []


def test_a_chunk_size_below_one_is_refused():
    with pytest.raises(ValueError) as error:
        list(chunks([1, 2], 0))
    assert str(error.value) == "chunk size must be at least 1, got 0"


def test_batches_keep_order_and_both_limits():
    # GIVEN sizes around a 1,000-byte budget and a 3-item count
    from worker_tier.core.retry import batches

    sizes = [400, 500, 300, 900, 1200, 1, 1, 1, 1]
    # WHEN batched  THEN each batch respects both limits, an oversized item goes alone, and order is kept
    got = list(batches(sizes, lambda n: n, max_count=3, max_bytes=1000))
    assert got == [[400, 500], [300], [900], [1200], [1, 1, 1], [1]]
    assert [n for batch in got for n in batch] == sizes
