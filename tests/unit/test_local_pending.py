"""What a local run names at exit: each message it sent that no task has finished with, and when it is due."""

from __future__ import annotations

from datetime import datetime

from worker_tier_local.pending import Pending, QueueBacklog, SentLedger

SENT_AT = 1_800_000_000.0


def _clock_time(epoch_seconds: float) -> str:
    return f"{datetime.fromtimestamp(epoch_seconds).astimezone():%H:%M:%S}"


def test_a_delayed_message_not_yet_due_at_exit_is_named_with_its_due_time():
    # GIVEN a run that sent /hello now and /hello 150 s later, and saw the first one succeed
    now = [SENT_AT]
    ledger = SentLedger(clock=lambda: now[0])
    ledger.sent("/hello", "aaaaaaaa-1")
    ledger.sent("/hello", "bbbbbbbb-2", delay_seconds=150)
    ledger.finished("aaaaaaaa-1", "/hello")
    # WHEN it stops 147 s in, with the delayed one waiting in the queue
    now[0] = SENT_AT + 147
    pending = Pending((QueueBacklog("queue", 0, 0, 1),), undispatched=0, delay_table="delays", unhandled=ledger.unhandled())
    lines = pending.lines(now=now[0])
    # THEN the exit message names it: path, id, due time, and how long until then
    assert lines[0] == "still pending at exit: 1 message(s), lost with moto's in-memory state"
    assert lines[-2] == "  sent by this run and not finished (a longer --duration sees them through):"
    assert lines[-1] == f"    /hello   bbbbbbbb  due at {_clock_time(SENT_AT + 150)} (due in 3 s)"


def test_a_message_due_but_not_yet_handled_at_exit_says_how_long_ago_it_was_due():
    # GIVEN a message sent with a 10 s delay  WHEN the run stops 12 s later, no task having finished it
    ledger = SentLedger(clock=lambda: SENT_AT)
    ledger.sent("/flaky", "cccccccc-3", delay_seconds=10)
    [sent] = ledger.unhandled()
    # THEN its line says it was due 2 s ago and is not handled yet
    assert sent.line(SENT_AT + 12) == f"/flaky   cccccccc  due at {_clock_time(SENT_AT + 10)} (due 2 s ago, not yet handled)"


def test_a_delayed_message_delivered_under_a_new_id_is_settled_by_its_path_once_due():
    # GIVEN a message sent through the delay table (the delay dispatcher sends it to the queue under a new id)
    now = [SENT_AT]
    ledger = SentLedger(clock=lambda: now[0])
    ledger.sent("/hello", "dddddddd-4", delay_seconds=150)
    # WHEN a /hello finishes under another id before it is due, and again after
    ledger.finished("sqs-id-1", "/hello")
    before = ledger.unhandled()
    now[0] = SENT_AT + 151
    ledger.finished("sqs-id-2", "/hello")
    # THEN only the finish after its due time settles it
    assert [sent.message_id for sent in before] == ["dddddddd-4"]
    assert ledger.unhandled() == ()


def test_a_run_whose_messages_all_finished_has_nothing_pending():
    # GIVEN every sent message finished and empty queues  WHEN the exit message is made  THEN it says nothing is pending
    ledger = SentLedger(clock=lambda: SENT_AT)
    ledger.sent("/poison", "eeeeeeee-5")
    ledger.finished("eeeeeeee-5", "/poison")
    pending = Pending((QueueBacklog("queue", 0, 0, 0),), undispatched=0, delay_table="delays", unhandled=ledger.unhandled())
    assert pending.lines() == ["nothing pending at exit: every message sent was processed or dead-lettered"]
