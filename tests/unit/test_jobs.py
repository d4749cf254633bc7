"""A job record read as a JobStatus, and the conditions that keep a job's changes in order (worker_tier.core.jobs)."""

from __future__ import annotations

import pytest

from worker_tier import JobStatus
from worker_tier.core import contract, jobs
from worker_tier.core.errors import MessageError

JOB = "0123456789abcdef0123456789abcdef"


def test_a_first_record_decodes_to_its_status_with_whole_numbers_as_ints():
    # GIVEN a producer's first record of a job due at 5 s, with a parent
    item = jobs.first_item(JOB, "/report", 1_000, 5_000, "f" * 32, 3600)
    # WHEN read at 2 s
    status = JobStatus.from_item(item, now_ms=2_000)
    # THEN it is delayed until its due time, with its path, times and parent, and not final
    assert (status.job_id, status.state, status.path, status.created_at, status.due_at, status.parent) == (
        JOB, "delayed", "/report", 1_000, 5_000, "f" * 32)
    assert status.final is False and status.history == [{"state": "delayed", "at": 1_000, "details": {"due_at": 5_000}}]
    assert item["expiration"] == {"N": str(5 + 3600)}  # kept from its due time


def test_a_delayed_job_reads_queued_once_due():
    item = jobs.first_item(JOB, "/report", 1_000, 5_000, None, 3600)
    assert JobStatus.from_item(item, now_ms=5_000).state == contract.JOB_QUEUED


def test_a_succeeded_record_decodes_its_result_and_is_final():
    item = {**jobs.first_item(JOB, "/add", 1_000, None, None, 3600), "state": {"S": "succeeded"},
            "result": {"S": '{"sum": 3, "ratio": 0.5}'}, "attempt": {"N": "2"}, "worker": {"M": {"pid": {"N": "7"}}}}
    status = JobStatus.from_item(item, now_ms=9_000)
    assert (status.result, status.attempt, status.worker, status.final) == ({"sum": 3, "ratio": 0.5}, 2, {"pid": 7}, True)
    assert status.to_dict()["final"] is True and status.to_dict()["result"] == {"sum": 3, "ratio": 0.5}


def test_only_a_run_may_reopen_a_dead_lettered_job_and_nothing_reopens_a_succeeded_or_cancelled_one():
    # GIVEN the conditions of a running change and of a retrying one
    running = jobs.Transition(JOB, contract.JOB_RUNNING, 10, 3600).request("state")
    retrying = jobs.Transition(JOB, contract.JOB_RETRYING, 10, 3600).request("state")
    # THEN both refuse succeeded and cancelled, and only the retrying one refuses dead-lettered
    for request in (running, retrying):
        assert "#state <> :succeeded AND #state <> :cancelled" in request["ConditionExpression"]
        assert "updated_at <= :at" in request["ConditionExpression"]
    assert ":dead" not in running["ConditionExpression"] and "#state <> :dead" in retrying["ConditionExpression"]


def test_a_change_without_its_event_counts_it_dropped_and_needs_no_room_in_the_history():
    request = jobs.Transition(JOB, contract.JOB_RUNNING, 10, 3600, fields={"next_try_at": None}).request_without_event("state")
    assert "size(history)" not in request["ConditionExpression"] and "list_append" not in request["UpdateExpression"]
    assert request["UpdateExpression"].endswith("REMOVE #f0 ADD events_dropped :one")


def test_a_cancel_writes_only_from_delayed():
    request = jobs.Transition(JOB, contract.JOB_CANCELLED, 10, 3600, only_from=contract.JOB_DELAYED).request("state")
    assert "#state = :from" in request["ConditionExpression"] and request["ExpressionAttributeValues"][":from"] == {"S": "delayed"}


def test_a_keyed_job_id_comes_from_its_key_and_an_unkeyed_one_is_fresh():
    assert jobs.new_job_id("report-9") == jobs.new_job_id("report-9") != jobs.new_job_id("report-10")
    assert jobs.new_job_id() != jobs.new_job_id() and jobs.JOB_ID_PATTERN.match(jobs.new_job_id())


def test_an_event_cuts_long_details_and_leaves_out_missing_ones():
    event = jobs.event("retrying", 5, {"error": "x" * 2000, "next_try_at": None})
    assert event == {"state": "retrying", "at": 5, "details": {"error": "x" * jobs.EVENT_DETAIL_MAX_CHARS}}


@pytest.mark.parametrize("job_id", ["nope", "0" * 31, "A" * 32, 42, None])
def test_something_that_is_no_job_id_is_refused_naming_it_and_the_rule(job_id):
    with pytest.raises(MessageError) as error:
        jobs.checked_job_id(job_id)
    assert str(error.value) == f"a job id is 32 lower-case hex digits, as send(track=True) returns it, got {job_id!r}"
