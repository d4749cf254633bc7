"""Tracked jobs (docs/jobs.md) on moto, every role's policy enforced: a tracked message's life in its job record, read by
Client.status and awaited by Client.wait, through the Lambda worker and the container worker."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from tests.support.container import consumer_for, run_until
from tests.support.worker_world import Clock, failure_ids, one_task, raise_, worker_for
from worker_tier import Client, JobCancelledError, JobFailedError, JobNotFoundError, JobWaitTimeout, OutgoingMessage, Task
from worker_tier.core import contract, jobs
from worker_tier.core.errors import MessageError, NonRetryableError, SendError
from worker_tier.core.payloads import PayloadStore
from worker_tier.core.settings import Settings
from worker_tier.worker.registry import Registry
from worker_tier_local.context import LocalContext


def context() -> LocalContext:
    return LocalContext("worker-fn", 300, 128, "us-east-1", "123456789012")


def producer(aws, clock: Clock, **options) -> Client:
    return Client(aws.queue_url, options.pop("delay_table", None), sqs=aws.sqs, dynamodb=aws.dynamodb,
                  state_table=aws.state_table, clock=clock, sleep=lambda s: None, **options)


def run_once(aws, worker) -> dict:
    """One invocation on what is visible, its succeeded messages deleted as the event source would."""
    event = aws.receive_event()
    response = worker.handle(event, context())
    for record in event["Records"]:
        if record["messageId"] not in failure_ids(response):
            aws.sqs.delete_message(QueueUrl=aws.queue_url, ReceiptHandle=record["receiptHandle"])
    return response


def dead_lettered_job(aws, path: str, reason: str) -> tuple[Client, str]:
    """A tracked job whose task raised NonRetryableError(reason) once: its producer and job id."""
    clock = Clock()
    worker = worker_for(aws, one_task(path, raise_(NonRetryableError(reason))), clock)
    client = producer(aws, clock)
    job_id = client.send(path, "{}", track=True)
    run_once(aws, worker)
    return client, job_id


def job_items(aws) -> list[dict]:
    return [i for i in aws.dynamodb.scan(TableName=aws.state_table)["Items"] if i["pk"]["S"].startswith("job#")]


def test_a_tracked_job_reads_queued_then_running_then_succeeded_with_its_result(aws):
    # GIVEN a task that returns a value, and a tracked send
    clock = Clock()
    seen = []

    def add(task: Task):
        seen.append(client.status(job_id).state)
        return {"sum": sum(task.json())}

    worker = worker_for(aws, one_task("/add", add), clock)
    client = producer(aws, clock)
    job_id = client.send("/add", [1, 2], track=True)
    assert client.status(job_id).state == contract.JOB_QUEUED
    # WHEN the worker runs it
    clock.now += 1
    run_once(aws, worker)
    # THEN the job ran, succeeded with the result, its worker and its history recorded
    status = client.status(job_id)
    assert seen == [contract.JOB_RUNNING]
    assert (status.state, status.result, status.final, status.path) == (contract.JOB_SUCCEEDED, {"sum": 3}, True, "/add")
    assert status.worker["function"] == "worker-fn"
    assert [e["state"] for e in status.history] == ["queued", "running", "succeeded"]
    assert client.wait(job_id, timeout=0) == {"sum": 3}


def test_a_failed_attempt_reads_retrying_with_its_attempt_and_next_try_then_succeeded(aws):
    # GIVEN a task that fails once
    clock = Clock()
    calls = []

    def flaky(task: Task):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first try fails")
        return "done"

    worker = worker_for(aws, one_task("/flaky", flaky), clock, settings=Settings(error_visibility_timeout=0))
    client = producer(aws, clock)
    job_id = client.send("/flaky", "{}", track=True)
    # WHEN it fails, then runs again
    run_once(aws, worker)
    retrying = client.status(job_id)
    clock.now += 1
    run_once(aws, worker)
    # THEN the retry was recorded with its attempt and next try, and the second run succeeded
    assert (retrying.state, retrying.attempt) == (contract.JOB_RETRYING, 1)
    assert retrying.next_try_at is not None and retrying.next_try_at >= retrying.updated_at
    assert "RuntimeError: first try fails" in retrying.history[-1]["details"]["error"]
    status = client.status(job_id)
    assert (status.state, status.attempt, status.result, status.next_try_at) == (contract.JOB_SUCCEEDED, 2, "done", None)
    assert [e["state"] for e in status.history] == ["queued", "running", "retrying", "running", "succeeded"]


def test_a_dead_lettered_job_has_its_reason_and_wait_raises_job_failed(aws):
    # GIVEN a task that gives up, WHEN it runs
    client, job_id = dead_lettered_job(aws, "/poison", "bad input")
    # THEN the job is dead-lettered with the reason, and wait raises it
    status = client.status(job_id)
    assert status.state == contract.JOB_DEAD_LETTERED and "NonRetryableError: bad input" in status.reason
    with pytest.raises(JobFailedError, match="was dead-lettered: NonRetryableError: bad input") as raised:
        client.wait(job_id, timeout=0)
    assert raised.value.status.state == contract.JOB_DEAD_LETTERED and "bad input" in raised.value.reason
    # AND the DLQ copy keeps the job id, so a redrive runs the same job again
    [dead] = aws.dead_letters()
    assert dead["MessageAttributes"][contract.JOB_ATTRIBUTE]["StringValue"] == job_id


def test_a_redriven_dead_lettered_job_runs_again_and_can_succeed(aws):
    # GIVEN a dead-lettered job whose task is then fixed
    clock = Clock()
    tasks = Registry()
    fixed = []
    tasks.task("/fixme")(lambda t: "fixed" if fixed else (_ for _ in ()).throw(NonRetryableError("broken")))
    worker = worker_for(aws, tasks, clock)
    client = producer(aws, clock)
    job_id = client.send("/fixme", "{}", track=True)
    run_once(aws, worker)
    [dead] = aws.dead_letters()
    # WHEN its DLQ copy is sent back (as a redrive does) and runs
    fixed.append(True)
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=dead["Body"], MessageAttributes={
        k: v for k, v in dead["MessageAttributes"].items() if k != contract.FAILURE_ATTRIBUTE})
    clock.now += 5
    run_once(aws, worker)
    # THEN the job reopened and succeeded
    status = client.status(job_id)
    assert (status.state, status.result) == (contract.JOB_SUCCEEDED, "fixed")
    assert [e["state"] for e in status.history][-3:] == ["dead_lettered", "running", "succeeded"]


def test_a_cancelled_delayed_job_reads_cancelled_and_wait_raises(aws):
    # GIVEN a tracked cancellable reminder in the delay table
    clock = Clock()
    aws.create_delay_table()
    client = producer(aws, clock, delay_table="delay")
    job_id = client.send("/remind", "{}", delay=timedelta(hours=2), dedupe_key="remind-1", cancellable=True, track=True)
    assert client.status(job_id).state == contract.JOB_DELAYED
    # WHEN it is cancelled
    assert client.cancel("remind-1") is True
    # THEN its job reads cancelled, and wait says so
    assert client.status(job_id).state == contract.JOB_CANCELLED
    with pytest.raises(JobCancelledError, match="was cancelled"):
        client.wait(job_id, timeout=0)


def test_a_repeated_keyed_send_is_the_same_job_and_does_not_reset_it(aws):
    # GIVEN a keyed tracked job that already ran
    clock = Clock()
    aws.create_delay_table()
    worker = worker_for(aws, one_task("/report", lambda t: 7), clock)
    client = producer(aws, clock, delay_table="delay")
    first = client.send("/report", "{}", dedupe_key="report-9", track=True)
    run_once(aws, worker)
    # WHEN it is sent again with the same key
    again = client.send("/report", "{}", dedupe_key="report-9", track=True)
    # THEN it is the same job, still succeeded
    assert again == first and client.status(first).state == contract.JOB_SUCCEEDED


def test_a_delayed_job_reads_queued_once_its_due_time_has_passed(aws):
    # GIVEN a job sent two minutes ahead
    clock = Clock()
    client = producer(aws, clock)
    job_id = client.send("/later", "{}", delay=120, track=True)
    status = client.status(job_id)
    assert (status.state, status.due_at) == (contract.JOB_DELAYED, int(clock.now * 1000) + 120_000)
    # WHEN its due time passes, with no write by anyone
    clock.now += 121
    # THEN it reads queued
    assert client.status(job_id).state == contract.JOB_QUEUED


def test_a_tracked_send_from_a_tracked_task_records_its_parent(aws):
    # GIVEN a tracked task that sends a tracked follow-up
    clock = Clock()
    children = []
    tasks = Registry()
    tasks.task("/parent")(lambda t: children.append(producer(aws, clock).send("/child", "{}", track=True)))
    worker = worker_for(aws, tasks, clock)
    client = producer(aws, clock)
    parent = client.send("/parent", "{}", track=True)
    # WHEN it runs
    run_once(aws, worker)
    # THEN the follow-up's job names its parent, and the parent's own has none
    assert client.status(children[0]).parent == parent and client.status(parent).parent is None


def test_a_result_over_the_cap_is_kept_in_the_payload_bucket_and_read_back(aws):
    # GIVEN a worker with the payload bucket, a result cap of 1 KiB and a task returning 5 KB
    clock = Clock()
    big = "x" * 5000
    worker = worker_for(aws, one_task("/big", lambda t: {"text": big}), clock,
                        settings=Settings(job_result_max_bytes=1024), payloads=PayloadStore(aws.payload_bucket, aws.s3))
    client = producer(aws, clock, payload_bucket=aws.payload_bucket, s3=aws.s3)
    job_id = client.send("/big", "{}", track=True)
    # WHEN it runs
    run_once(aws, worker)
    # THEN the record points at results/<job id>.json, and status reads the result from there
    status = client.status(job_id)
    assert status.result_object == {"bucket": aws.payload_bucket, "key": f"results/{job_id}.json", "bytes": 5011}
    assert status.result == {"text": big}


def test_a_result_over_the_cap_without_a_bucket_is_recorded_as_dropped_and_the_task_succeeds(aws):
    # GIVEN a worker without a payload bucket and a result over the cap
    clock = Clock()
    worker = worker_for(aws, one_task("/big", lambda t: "y" * 3000), clock, settings=Settings(job_result_max_bytes=1024))
    client = producer(aws, clock)
    job_id = client.send("/big", "{}", track=True)
    # WHEN it runs
    response = run_once(aws, worker)
    # THEN it succeeded, its result dropped with the size and the reason
    status = client.status(job_id)
    assert response == {"batchItemFailures": []}
    assert (status.state, status.result) == (contract.JOB_SUCCEEDED, None)
    assert status.result_dropped == {"bytes": 3002, "reason": "3002 bytes is over job_result_max_bytes (1024) and there "
                                                              "is no payload bucket (large_payloads) to keep it"}


def test_a_result_that_is_not_json_is_recorded_as_dropped(aws):
    # GIVEN a task returning something JSON cannot hold
    clock = Clock()
    worker = worker_for(aws, one_task("/odd", lambda t: {1, 2}), clock)
    client = producer(aws, clock)
    job_id = client.send("/odd", "{}", track=True)
    # WHEN it runs
    run_once(aws, worker)
    # THEN it succeeded, saying why there is no result
    status = client.status(job_id)
    assert status.state == contract.JOB_SUCCEEDED and status.result_dropped["reason"].startswith("the result is not JSON (TypeError")


def test_an_older_change_written_late_never_overwrites_a_final_state(aws):
    # GIVEN a succeeded job
    clock = Clock()
    worker = worker_for(aws, one_task("/done", lambda t: 1), clock)
    client = producer(aws, clock)
    job_id = client.send("/done", "{}", track=True)
    clock.now += 10
    run_once(aws, worker)
    # WHEN an older retrying change, and a newer running one (a duplicate delivery), arrive late
    older = jobs.Transition(job_id, contract.JOB_RETRYING, int((clock.now - 5) * 1000), 3600, fields={"attempt": 1})
    newer = jobs.Transition(job_id, contract.JOB_RUNNING, int((clock.now + 5) * 1000), 3600)
    # THEN neither is written: succeeded is final
    assert jobs.apply(aws.dynamodb, aws.state_table, older) is False
    assert jobs.apply(aws.dynamodb, aws.state_table, newer) is False
    assert client.status(job_id).state == contract.JOB_SUCCEEDED


def test_a_full_history_keeps_the_state_current_and_counts_the_dropped_events(aws):
    # GIVEN a job whose history is full
    clock = Clock()
    client = producer(aws, clock)
    job_id = client.send("/busy", "{}", track=True)
    at = int(clock.now * 1000)
    for n in range(jobs.HISTORY_MAX_EVENTS - 1):
        assert jobs.apply(aws.dynamodb, aws.state_table, jobs.Transition(job_id, contract.JOB_RETRYING, at + n, 3600))
    # WHEN one more change comes
    assert jobs.apply(aws.dynamodb, aws.state_table, jobs.Transition(job_id, contract.JOB_RUNNING, at + 1000, 3600))
    # THEN the state is current, the history holds its cap and the extra event is counted
    status = client.status(job_id)
    assert (status.state, len(status.history), status.events_dropped) == (contract.JOB_RUNNING, jobs.HISTORY_MAX_EVENTS, 1)


def test_untracked_messages_make_no_dynamodb_call(aws):
    # GIVEN a worker whose DynamoDB calls are counted, and two untracked messages: one fails, one succeeds
    clock = Clock()
    calls: list[str] = []
    tasks = Registry()
    tasks.task("/plain")(lambda t: "ignored")
    tasks.task("/fails")(raise_(RuntimeError("retried")))
    worker = _worker_with(aws, clock, _Counting(aws.dynamodb, calls), tasks)
    Client(aws.queue_url, sqs=aws.sqs, clock=clock).send("/plain", "{}")
    Client(aws.queue_url, sqs=aws.sqs, clock=clock).send("/fails", "{}")
    # WHEN they run
    response = run_once(aws, worker)
    # THEN one was retried, and the worker made no DynamoDB call
    assert len(response["batchItemFailures"]) == 1 and calls == []


def test_a_message_not_sent_leaves_no_job_record(aws):
    # GIVEN a producer whose sends SQS refuses
    clock = Clock()
    client = Client(aws.queue_url, sqs=_Refusing(), dynamodb=aws.dynamodb, state_table=aws.state_table,
                    clock=clock, sleep=lambda s: None)
    # WHEN a tracked send fails
    with pytest.raises(SendError):
        client.send("/x", "{}", track=True)
    # THEN its first record was deleted: nobody was given its id
    assert job_items(aws) == []


def test_send_batch_writes_every_first_record_before_sending_and_returns_the_job_ids(aws):
    # GIVEN 30 messages, 20 tracked
    clock = Clock()
    client = producer(aws, clock)
    messages = [OutgoingMessage("/b", str(i), track=i % 3 != 0) for i in range(30)]
    # WHEN they are sent
    results = client.send_batch(messages)
    # THEN each tracked one has a job id and a queued record, the others none
    tracked = [r.job_id for r in results if r.job_id]
    assert len(tracked) == 20 and all(r.ok for r in results)
    assert sorted(i["pk"]["S"] for i in job_items(aws)) == sorted(f"job#{j}" for j in tracked)


def test_a_tracked_message_needs_one_attribute_for_its_job_id(aws):
    # GIVEN 9 attributes of the sender's own, which an untracked message may carry
    client = producer(aws, Clock())
    attributes = {f"a{i}": "v" for i in range(9)}
    client.send("/x", "{}", attributes=attributes)
    # WHEN it is tracked THEN it is refused, naming the job id's attribute
    with pytest.raises(MessageError, match=r"and one for the job id \(worker_tier.job: track=True\), so at most 8"):
        client.send("/x", "{}", attributes=attributes, track=True)


def test_status_of_an_unknown_job_raises_not_found_and_wait_times_out_on_a_queued_one(aws):
    clock = Clock()
    client = producer(aws, clock)
    with pytest.raises(JobNotFoundError, match=r"no job 0{32} in state table state"):
        client.status("0" * 32)
    with pytest.raises(MessageError, match="a job id is 32 lower-case hex digits"):
        client.status("nope")
    job_id = client.send("/slow", "{}", track=True)
    with pytest.raises(JobWaitTimeout, match="is still queued after 0 s") as raised:
        client.wait(job_id, timeout=0)
    assert isinstance(raised.value, TimeoutError) and raised.value.status.state == contract.JOB_QUEUED


def test_a_client_tracking_by_default_tracks_every_send_unless_told_not_to(aws):
    client = producer(aws, Clock(), track=True)
    job_id = client.send("/x", "{}")
    message_id = client.send("/x", "{}", track=False)
    assert client.status(job_id).state == contract.JOB_QUEUED
    assert len(job_items(aws)) == 1 and message_id != job_id


def test_the_container_worker_records_a_tracked_job_too(aws):
    # GIVEN the container worker and a tracked send, on the wall clock the container worker reads
    client = producer(aws, time.time)
    consumer = consumer_for(aws, one_task("/long", lambda t: json.loads(t.body)["n"] * 2))
    job_id = client.send("/long", {"n": 21}, track=True)
    # WHEN it runs the message
    thread = run_until(consumer, lambda: client.status(job_id).state == contract.JOB_SUCCEEDED)
    consumer.stopping.set()
    thread.join(10)
    # THEN the job succeeded with its result, run by this host's process
    status = client.status(job_id)
    assert status.result == 42 and set(status.worker) == {"host", "pid"}


class _Refusing:
    """An SQS client that refuses every send, as SQS does a queue that is gone."""

    def send_message_batch(self, **_):
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "AWS.SimpleQueueService.NonExistentQueue", "Message": "no such queue"},
                           "ResponseMetadata": {"HTTPStatusCode": 400}}, "SendMessageBatch")


class _Counting:
    """A DynamoDB client whose every call is recorded."""

    def __init__(self, inner, calls: list) -> None:
        self._inner, self._calls = inner, calls

    def __getattr__(self, name):
        attribute = getattr(self._inner, name)
        if callable(attribute):
            def call(*args, **kwargs):
                self._calls.append(name)
                return attribute(*args, **kwargs)
            return call
        return attribute


def _worker_with(aws, clock, dynamodb, tasks):
    from worker_tier.worker.batch import Worker

    return Worker(Settings(), queue_url=aws.queue_url, dead_letter_queue_url=aws.dead_letter_queue_url,
                  state_table=aws.state_table, registry=tasks, sqs=aws.sqs, dynamodb=dynamodb, clock=clock,
                  random=lambda: 0.999)


def test_a_job_sent_by_a_producer_whose_clock_is_ahead_of_the_workers_reads_succeeded_once_it_ran(aws):
    # GIVEN a producer whose clock is 2 s ahead of the worker's (NTP only bounds Lambda's own clock)
    worker_clock = Clock()
    producer_clock = Clock(worker_clock.now + 2)
    worker = worker_for(aws, one_task("/add", lambda t: 3), worker_clock)
    client = producer(aws, producer_clock)
    job_id = client.send("/add", "{}", track=True)
    # WHEN the worker runs it at once, and it succeeds
    response = run_once(aws, worker)
    # THEN its job reads succeeded with its result, not queued
    assert response == {"batchItemFailures": []}
    status = client.status(job_id)
    assert (status.state, status.result) == (contract.JOB_SUCCEEDED, 3)


def test_a_rescheduled_tracked_job_reads_delayed_until_its_new_due_time(aws):
    # GIVEN a tracked cancellable reminder due in 2 hours
    clock = Clock()
    aws.create_delay_table()
    client = producer(aws, clock, delay_table="delay")
    job_id = client.send("/remind", "{}", delay=timedelta(hours=2), dedupe_key="remind-2", cancellable=True, track=True)
    # WHEN it is rescheduled to 10 hours from now, and 3 hours pass
    assert client.reschedule("remind-2", delay=timedelta(hours=10)) is True
    new_due_ms = int(clock.now * 1000) + 10 * 3600 * 1000
    clock.now += 3 * 3600
    # THEN its job still reads delayed, due at the new time
    status = client.status(job_id)
    assert (status.state, status.due_at) == (contract.JOB_DELAYED, new_due_ms)


def test_a_retry_due_after_the_retention_keeps_its_job_record_until_then(aws):
    # GIVEN a task that asks to be retried in 10 days, on a worker whose long retries go through the delay table
    from worker_tier.core.errors import RetryLater

    clock = Clock()
    aws.create_delay_table()
    worker = worker_for(aws, one_task("/later", raise_(RetryLater(timedelta(days=10)))), clock, delay_table="delay")
    client = producer(aws, clock)
    job_id = client.send("/later", "{}", track=True)
    # WHEN it runs and is rescheduled
    run_once(aws, worker)
    status = client.status(job_id)
    # THEN its record lives until its next try plus the retention (7 days by default), not 7 days from now
    item = aws.dynamodb.get_item(TableName=aws.state_table, Key=jobs.job_key(job_id))["Item"]
    assert status.state == contract.JOB_RETRYING and status.next_try_at >= int(clock.now * 1000) + 10 * 86400 * 1000
    assert int(item[contract.STATE_TTL_ATTRIBUTE]["N"]) >= status.next_try_at // 1000 + client.job_retention


def test_a_late_change_refused_for_its_order_costs_one_write(aws):
    # GIVEN a succeeded job
    clock = Clock()
    worker = worker_for(aws, one_task("/done", lambda t: 1), clock)
    client = producer(aws, clock)
    job_id = client.send("/done", "{}", track=True)
    run_once(aws, worker)
    calls: list[str] = []
    # WHEN a duplicate delivery's running arrives later
    late = jobs.Transition(job_id, contract.JOB_RUNNING, int((clock.now + 5) * 1000), 3600, fields={"attempt": 2})
    assert jobs.apply(_Counting(aws.dynamodb, calls), aws.state_table, late) is False
    # THEN it was refused with one conditional write, not two
    assert calls == ["update_item"]


class _Killed(BaseException):
    """The Lambda sandbox ended mid-task (its timeout): nothing after the task's start runs."""


@pytest.mark.xfail(strict=True, reason="a task that times out on every attempt never reaches the worker's fates: the "
                   "redrive policy moves it to the DLQ without a reason and its job reads running for good (wait "
                   "times out), where it should read dead_lettered; docs/jobs.md's limits do not say so")
def test_a_job_whose_every_attempt_timed_out_does_not_read_running_once_the_redrive_policy_moved_it(aws, monkeypatch):
    # GIVEN a task whose every attempt is cut by the Lambda timeout (the invocation ends without any fate)
    clock = Clock()

    def hangs(task: Task):
        raise _Killed()

    worker = worker_for(aws, one_task("/hangs", hangs), clock)
    monkeypatch.setattr(worker, "_fail_safely", lambda record, task, invocation, error: (_ for _ in ()).throw(error))
    client = producer(aws, clock)
    job_id = client.send("/hangs", "{}", track=True)
    # WHEN each receive is cut, until SQS's redrive policy moves the message to the DLQ
    dead: list[dict] = []
    for _ in range(worker.settings.redrive_max_receive_count + 2):
        event = aws.receive_event(visibility=0)
        if event["Records"]:
            clock.now += 60
            with pytest.raises(_Killed):
                worker.handle(event, context())
        dead = aws.dead_letters()
        if dead:
            break
    assert dead, "the redrive policy moved the message"
    # THEN its job does not claim it is still running
    assert client.status(job_id).state == contract.JOB_DEAD_LETTERED



def test_a_delayed_send_whose_answer_was_lost_keeps_its_job_record(aws):
    # GIVEN a delay table that stores a tracked delayed message but whose answer is lost
    clock = Clock()
    aws.create_delay_table()
    client = Client(aws.queue_url, "delay", sqs=aws.sqs, dynamodb=_AnswerLost(aws.dynamodb, "delay"),
                    state_table=aws.state_table, clock=clock, sleep=lambda s: None)
    # WHEN the send fails on that lost answer
    with pytest.raises(SendError) as raised:
        client.send("/later", "{}", delay=timedelta(hours=1), track=True)
    # THEN the message is stored (the dispatcher will deliver it), so its job record is kept and the error names the job
    assert len(aws.dynamodb.scan(TableName="delay")["Items"]) == 1
    [record] = job_items(aws)
    assert record["pk"]["S"][len(contract.JOB_KEY_PREFIX):] in str(raised.value)


@pytest.mark.xfail(strict=True, reason="the parent is a context variable, which threads a task starts do not inherit "
                   "(ThreadPoolExecutor copies no context): follow-ups sent from a task's thread pool record no parent, "
                   "and nothing lets a task pass its job id as the parent itself")
def test_tracked_sends_from_a_tracked_tasks_thread_pool_record_its_parent(aws):
    # GIVEN a tracked task that fans out two tracked follow-ups from a thread pool
    from concurrent.futures import ThreadPoolExecutor

    clock = Clock()
    children: list[str] = []
    tasks = Registry()

    def fan_out(task: Task):
        with ThreadPoolExecutor(2) as pool:
            children.extend(pool.map(lambda n: producer(aws, clock).send("/child", str(n), track=True), range(2)))

    tasks.task("/fan-out")(fan_out)
    worker = worker_for(aws, tasks, clock)
    client = producer(aws, clock)
    parent = client.send("/fan-out", "{}", track=True)
    # WHEN it runs
    run_once(aws, worker)
    # THEN each follow-up names it as its parent
    assert [client.status(child).parent for child in children] == [parent, parent]


class _AnswerLost:
    """A DynamoDB client whose BatchWriteItem to ``table`` is applied, then answered by a read timeout."""

    def __init__(self, inner, table: str) -> None:
        self._inner, self._table = inner, table

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def batch_write_item(self, **kwargs):
        from botocore.exceptions import ReadTimeoutError

        response = self._inner.batch_write_item(**kwargs)
        if self._table in kwargs["RequestItems"]:
            raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")
        return response


def test_wait_on_a_job_whose_result_was_dropped_says_so_rather_than_returning_none(aws):
    # GIVEN a job that succeeded with a result over the cap and no payload bucket to keep it
    clock = Clock()
    worker = worker_for(aws, one_task("/big", lambda t: "y" * 3000), clock, settings=Settings(job_result_max_bytes=1024))
    client = producer(aws, clock)
    job_id = client.send("/big", "{}", track=True)
    run_once(aws, worker)
    # WHEN its result is awaited
    # THEN the wait raises, naming why the result is not there (not a silent None)
    with pytest.raises(Exception, match="3002 bytes is over job_result_max_bytes"):
        client.wait(job_id, timeout=0)


@pytest.mark.xfail(strict=True, reason="a redrive writes nothing to the job: until a worker takes the redriven message "
                   "(a backlog, flow control, a delay) its job reads dead_lettered and final, so a Client.wait started "
                   "after the redrive raises JobFailedError for a job that is about to run again")
def test_a_redriven_job_reads_queued_not_final_until_it_runs_again(aws):
    # GIVEN a dead-lettered job
    client, job_id = dead_lettered_job(aws, "/fixme", "broken")
    [dead] = aws.dead_letters()
    # WHEN its DLQ copy is sent back, as worker-tier redrive sends it (without its failure attribute), not run yet
    from worker_tier_cli.dead_letters import REDRIVE_DROPPED_ATTRIBUTES

    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=dead["Body"], MessageAttributes={
        k: v for k, v in dead["MessageAttributes"].items() if k not in REDRIVE_DROPPED_ATTRIBUTES})
    # THEN its job is not final: it is queued again, and a wait does not report it dead-lettered
    status = client.status(job_id)
    assert (status.state, status.final) == (contract.JOB_QUEUED, False)



def test_status_reads_a_kept_result_only_from_its_own_results_key(aws):
    # GIVEN an object only the operator can read, and a job record naming it (any producer may write a job# record)
    from worker_tier.producer.jobs import JobRecords

    clock = Clock()
    aws.s3.create_bucket(Bucket="private")
    aws.s3.put_object(Bucket="private", Key="config/secrets.json", Body=b'{"token": "hunter2"}')
    job_id = producer(aws, clock).send("/x", "{}", track=True)
    forged = jobs.Transition(job_id, contract.JOB_SUCCEEDED, int(clock.now * 1000) + 1, 3600, fields={
        "result_object": {"bucket": "private", "key": "config/secrets.json", "bytes": 20}})
    assert jobs.apply(aws.dynamodb, aws.state_table, forged)
    # WHEN the operator reads the job with their own credentials (as worker-tier job does)
    status = JobRecords(aws.state_table, aws.dynamodb, clock, s3=lambda: aws.s3).status(job_id)
    # THEN the object is not read: a kept result is only ever results/<job id>.json
    assert status.result is None
