"""The delay scheduler against in-memory DynamoDB and SQS: dispatch, catch-up, lease, cursors, dead letters, shards."""

from __future__ import annotations

import json
import math

import pytest

from tests.support.dispatcher import DLQ, QUEUE, START, CountingDynamoDB, SlowSQS, World
from tests.support.fakes import FakeSQS
from tests.support.strict_sqs import StrictSQS
from worker_tier import OutgoingMessage
from worker_tier.delays.delay import BUCKET_SECONDS, CANCELLABLE_SHARD, DISPATCH_HORIZON_SECONDS, MAX_SHARDS, DelayedMessage, DelayStore, bucket_key, shard_of, sort_key
from worker_tier.core.contract import FAILURE_ATTRIBUTE, PATH_ATTRIBUTE
from worker_tier.core.errors import SettingsError
from worker_tier.core.retry import BATCH_ENTRIES
from worker_tier.delays.minute import DISPATCH_THREADS, DISPATCHER_CONNECT_TIMEOUT_SECONDS, DISPATCHER_READ_TIMEOUT_SECONDS
from worker_tier.delays.dispatcher import MAX_HORIZON_SECONDS, SCAN_UNFINISHED, START_LOOKBACK_SECONDS, DelayDispatcher
from worker_tier.delays.minute import DISPATCHER_CALL_SECONDS, SEND_FLOOR_MS, RUN_MARGIN_MS, TIME_RUNNING_OUT
from worker_tier.delays.dispatch_state import (
    FINISHED_MS_ATTRIBUTE,
    LEASE_SECONDS,
    MINUTE_KEY_PREFIX,
    MINUTE_RECORD_RETENTION_SECONDS,
    SCAN_KEY,
    STARTED_MS_ATTRIBUTE,
    WATERMARK_KEY,
    minute_key,
)

RUN_TIMEOUT_SECONDS = 60


@pytest.fixture
def world() -> World:
    return World()


def _bodies(entries: list[dict]) -> list[str]:
    return [entry["MessageBody"] for entry in entries]


def _reason(entry: dict) -> dict:
    return json.loads(entry["MessageAttributes"][FAILURE_ATTRIBUTE]["StringValue"])


def test_each_message_is_sent_once_never_early_with_its_attributes(world):
    # GIVEN messages due over the next hour, and a run every minute
    ids = [world.client.send("/x", f"m{n}", delay=901 + n * 37, attributes={"n": n}) for n in range(90)]
    scheduler = world.scheduler()
    # WHEN the scheduler runs every minute for 75 minutes
    for _ in range(75):
        scheduler.run()
        world.now += BUCKET_SECONDS
    # THEN every message went out once, visible exactly at its due second, with its path and attributes
    assert len(world.sqs.sent) == 90
    for n, entry in enumerate(sorted(world.sqs.sent, key=lambda e: int(e["MessageAttributes"]["n"]["StringValue"]))):
        assert entry["visible_at"] == START + 901 + n * 37
        assert entry["MessageAttributes"]["beanstalk.sqsd.path"]["StringValue"] == "/x"
        assert entry["MessageBody"] == f"m{n}"
        assert 0 <= entry["DelaySeconds"] <= 900
    assert len(set(ids)) == 90


def test_catch_up_after_an_outage_sends_late_messages_at_once(world):
    # GIVEN a scheduler that ran once, then nothing for two hours
    for n in range(20):
        world.client.send("/x", f"m{n}", delay=1000 + n * 60)
    world.scheduler().run()
    world.now += 2 * 3600
    # WHEN it runs again
    report = world.scheduler().run()
    # THEN everything overdue goes out with no delay, and the lateness is recorded
    assert len(world.sqs.sent) == 20
    assert all(e["DelaySeconds"] == 0 for e in world.sqs.sent)
    assert report.max_lateness_s == pytest.approx(2 * 3600 - 1000)
    assert report.lag_s < BUCKET_SECONDS


def test_a_transient_refusal_stops_the_run_and_the_next_run_resumes_from_the_cursor(world):
    # GIVEN two messages of one minute and one shard, and SQS failing the later one on its side every time
    world.store("id-fine", "fine", 1000)
    world.store("id-stubborn", "stubborn", 1001)
    refusing = FakeSQS(fail=lambda call, entry: ("ServiceUnavailable", False) if entry["MessageBody"] == "stubborn" else None,
                       clock=lambda: world.now)
    world.now += 200
    # WHEN a run dispatches the minute
    report = world.scheduler(refusing).run()
    # THEN the run stops there, the minute is not passed, and the shard's cursor keeps what was accepted
    bucket = int((START + 1000) // 60)
    assert report.stopped == (f"minute {bucket}: SQS did not accept 1 messages after {BATCH_ENTRIES.attempts} attempts; "
                              "last: ServiceUnavailable: ServiceUnavailable (fake)")
    assert report.watermark == bucket
    assert _bodies(refusing.sent) == ["fine"]
    assert world.watermark()["cursors"]["M"]["0"]["S"].endswith("#id-fine")
    # WHEN SQS recovers  THEN only the refused one goes out, and the minute is passed
    assert world.scheduler().run().watermark > bucket
    assert _bodies(world.sqs.sent) == ["stubborn"]


def test_a_cursor_follows_the_stored_order_even_when_an_item_sort_key_disagrees_with_its_due_time(world):
    # GIVEN in one shard an item stored before another by sort key but due after it, and SQS failing it for now
    later = world.store("id-later", "due-later", 1010)
    odd = {**later.to_item(), "sk": {"S": sort_key(later.due_ms - 20_000, "id-later")}}
    world.dynamodb.delete_item(TableName="delay", Key={"pk": later.key["pk"], "sk": later.key["sk"]})
    world.dynamodb.put_item(TableName="delay", Item=odd)
    world.store("id-sooner", "due-sooner", 1000)
    failing = FakeSQS(fail=lambda call, entry: ("ServiceUnavailable", False) if entry["MessageBody"] == "due-later" else None,
                      clock=lambda: world.now)
    world.now += 200
    # WHEN a run sends the sooner one and stops on the other
    assert world.scheduler(failing).run().stopped.endswith(
        f"SQS did not accept 1 messages after {BATCH_ENTRIES.attempts} attempts; last: ServiceUnavailable: ServiceUnavailable (fake)")
    # THEN the cursor did not pass the unsent item, and the next run delivers it (the sooner one again: a duplicate
    # of the round the run stopped in)
    assert "cursors" not in world.watermark() or world.watermark()["cursors"]["M"] == {}
    world.scheduler().run()
    assert _bodies(failing.sent) == ["due-sooner"] and sorted(_bodies(world.sqs.sent)) == ["due-later", "due-sooner"]


def test_a_poison_message_goes_to_the_dlq_with_a_reason_and_the_minute_completes(world):
    # GIVEN a stored message whose attribute SQS refuses (NUL), between two good ones, and a strict SQS
    world.store("id-a", "before", 1000, shard=3)
    world.store("id-poison", "poison", 1001, {"note": {"DataType": "String", "StringValue": "a\x00b"},
                                              "tenant": {"DataType": "String", "StringValue": "acme"}}, shard=3)
    world.store("id-b", "after", 1002, shard=3)
    strict = StrictSQS(world.sqs)
    world.now += 200
    # WHEN the scheduler runs
    report = world.scheduler(strict).run()
    # THEN the good ones are delivered, the minute is passed, and the poison one is in the DLQ with a reason
    assert _bodies(world.sqs.by_queue[QUEUE]) == ["before", "after"]
    assert report.watermark > int((START + 1000) // 60) and report.stopped == ""
    assert (report.sent, report.dead_lettered) == (2, 1)
    [dead] = world.sqs.by_queue[DLQ]
    assert dead["MessageBody"] == "poison"
    assert "note" not in dead["MessageAttributes"]
    assert dead["MessageAttributes"]["tenant"]["StringValue"] == "acme"
    reason = _reason(dead)
    assert reason["error_type"] == "DispatchRefusedError"
    assert reason["error_message"].startswith("the work queue refused delayed message id-poison at dispatch: InvalidParameterValue")
    assert (reason["attempts"], reason["path"]) == (0, "/x")
    assert reason["refused_attributes"]["note"].startswith("attribute 'note' value has character '\\x00' (U+0000) at offset 1")


def test_a_message_the_dlq_refuses_too_leaves_a_pointer_and_stays_in_the_table(world):
    # GIVEN queues whose MaximumMessageSize is 4 KiB, and a stored body over it, beside a small one
    big = "x" * 5000
    stored = world.store("id-big", big, 1000, shard=1)
    world.store("id-small", "small", 1000, shard=2)
    strict = StrictSQS(world.sqs, maximum_message_size=4096)
    world.now += 200
    # WHEN the scheduler runs
    report = world.scheduler(strict).run()
    # THEN the small one is delivered, the minute is passed, and the DLQ holds a pointer to the big one's item
    assert _bodies(world.sqs.by_queue[QUEUE]) == ["small"]
    assert report.watermark > stored.bucket and report.dead_lettered == 1
    [pointer] = world.sqs.by_queue[DLQ]
    body = json.loads(pointer["MessageBody"])
    assert (body["pk"], body["sk"], body["message_id"]) == (bucket_key(stored.bucket, 1), stored.key["sk"]["S"], "id-big")
    assert body["body_head"] == "x" * 1024
    assert body["reason"] == _reason(pointer)
    assert "BatchRequestTooLong" in body["reason"]["error_message"] or "shorter than 4096" in body["reason"]["error_message"]
    assert body["reason"]["copy_refused"].startswith("the dead-letter queue refused the full copy (")
    assert body["reason"]["copy_refused"].endswith("is kept in delay table delay under this pk and sk until its TTL (expiration)")
    assert (stored.key["pk"]["S"], stored.key["sk"]["S"]) in world.dynamodb.tables["delay"]


def test_a_dlq_that_fails_transiently_stops_the_run_without_losing_the_message(world):
    # GIVEN a poison message, and a DLQ failing on its side
    world.store("id-poison", "poison", 1000, {"n": {"DataType": "Number", "StringValue": "1e999"}})
    dlq_down = [True]

    def fail(call, entry):
        if FAILURE_ATTRIBUTE in entry["MessageAttributes"]:
            return ("ServiceUnavailable", False) if dlq_down[0] else None
        return None

    strict = StrictSQS(FakeSQS(fail=fail, clock=lambda: world.now))
    world.now += 200
    # WHEN a run meets it
    report = world.scheduler(strict).run()
    # THEN the run stops on that minute, naming the DLQ, the message and both refusals
    bucket = int((START + 1000) // 60)
    assert report.watermark == bucket
    assert report.stopped.startswith(f"dead-letter queue {DLQ} did not take message id-poison (refused by the work queue: InvalidParameterValue")
    assert report.stopped.endswith(f"after {BATCH_ENTRIES.attempts} attempts; last: ServiceUnavailable: ServiceUnavailable (fake)")
    # WHEN the DLQ recovers  THEN the next run dead-letters it and passes the minute
    dlq_down[0] = False
    report = world.scheduler(strict).run()
    assert report.dead_lettered == 1 and report.watermark > bucket
    assert _reason(strict.inner.by_queue[DLQ][0])["refused_attributes"]["n"].startswith("attribute 'n' has Number value '1e999'")


def test_items_that_are_not_messages_go_to_the_dlq_as_pointers_and_the_minute_completes(world):
    # GIVEN a good message, and two items of its minute no producer writes: attributes not JSON, and no body
    good = world.store("id-good", "good", 1000, shard=2)
    pk = good.key["pk"]["S"]
    broken = {**good.to_item(), "sk": {"S": good.key["sk"]["S"][:-4] + "zzzz"}, "attributes": {"S": "{not json"}}
    bodyless = {k: v for k, v in good.to_item().items() if k != "body"} | {"sk": {"S": "2" + good.key["sk"]["S"][1:]}}
    world.dynamodb.put_item(TableName="delay", Item=broken)
    world.dynamodb.put_item(TableName="delay", Item=bodyless)
    world.now += 200
    # WHEN the scheduler runs
    report = world.scheduler(StrictSQS(world.sqs)).run()
    # THEN the good one is delivered, the minute is passed, and each bad item has a pointer with a reason
    assert _bodies(world.sqs.by_queue[QUEUE]) == ["good"]
    assert report.watermark > good.bucket and report.dead_lettered == 2
    pointers = sorted((json.loads(e["MessageBody"]) for e in world.sqs.by_queue[DLQ]), key=lambda b: b["sk"])
    assert [(p["pk"], p["sk"]) for p in pointers] == [(pk, broken["sk"]["S"]), (pk, bodyless["sk"]["S"])]
    assert [p["reason"]["error_type"] for p in pointers] == ["UnreadableItemError"] * 2
    assert pointers[0]["reason"]["error_message"].startswith(f"delay-table item {pk} / {broken['sk']['S']} is not a delayed message (JSONDecodeError")
    assert pointers[1]["reason"]["error_message"].startswith(f"delay-table item {pk} / {bodyless['sk']['S']} is not a delayed message (KeyError: 'body' (a message item has id, due_ms, body and attributes))")
    assert pointers[0]["reason"]["error_message"].endswith("it is kept in delay table delay until its TTL (expiration)")
    assert _reason(world.sqs.by_queue[DLQ][0])["error_type"] == "UnreadableItemError"


def test_batches_stay_within_sqs_total_size(world):
    # GIVEN ten 200 KB messages due in the same second (2 MB together), and a strict SQS
    for n in range(10):
        world.store(f"id-{n}", f"{n}" + "b" * 200_000, 1000)
    world.now += 200
    # WHEN the scheduler runs  THEN every one is delivered, in calls of at most 1 MiB
    report = world.scheduler(StrictSQS(world.sqs)).run()
    assert (report.sent, report.dead_lettered, report.stopped) == (10, 0, "")
    assert world.sqs.count("SendMessageBatch") == 2


def test_a_minute_larger_than_one_run_finishes_over_runs_with_bounded_memory(world):
    # GIVEN 40,000 messages due in one minute over 8 shards, 20 ms per SendMessageBatch, a 60 s invocation
    world.sqs = SlowSQS(world, 0.020)
    world.dynamodb = CountingDynamoDB(world.sqs)
    world.dynamodb.create_table("delay", "pk", "sk")
    world.dynamodb.create_table("state", "pk")
    world.dynamodb.page_size = 500
    scheduler = world.scheduler()
    scheduler.run()  # deployed before the messages: the first watermark is now
    DelayStore("delay", world.dynamodb).put_many(
        DelayedMessage(f"id-{n}", int((START + 960) * 1000) + n, f"m{n}", {}, shard_of(f"id-{n}", 8)) for n in range(40_000)
    )
    bucket = int((START + 960) // 60)
    world.now += 200
    # WHEN a run starts every minute, each stopping before its timeout
    runs = []
    while not runs or runs[-1].watermark <= bucket:
        deadline = world.now + RUN_TIMEOUT_SECONDS
        world.dynamodb.new_run()
        runs.append(scheduler.run(remaining_ms=lambda deadline=deadline: (deadline - world.now) * 1000))
        # the time is checked before each wave of DISPATCH_THREADS batches (here sent one after another)
        assert world.now <= deadline - RUN_MARGIN_MS / 1000 + 0.020 * DISPATCH_THREADS
        world.now = deadline
    # THEN it takes more than one run, every message goes out exactly once, and a run held at most a page per shard
    assert [r.stopped for r in runs[:-1]] == ["invocation time running out"] * (len(runs) - 1) and len(runs) >= 2
    assert sorted(_bodies(world.sqs.sent)) == sorted(f"m{n}" for n in range(40_000))
    assert world.dynamodb.max_outstanding <= 8 * world.dynamodb.page_size


@pytest.mark.parametrize("producer_shards", [[8], [4], [1], [MAX_SHARDS], [8, 4], [4, MAX_SHARDS, 1]])
def test_whatever_shard_count_producers_used_every_message_is_dispatched(world, producer_shards):
    # GIVEN producers writing the same minutes with these shard counts (a setting changed between them)
    bodies = []
    for shards in producer_shards:
        batch = [f"s{shards}-{n}" for n in range(100)]
        world.producer(shards).send_batch([OutgoingMessage("/x", body, delay=1000 + n % 7) for n, body in enumerate(batch)])
        bodies += batch
    # WHEN the scheduler runs past them
    world.now += 400
    world.scheduler().run()
    # THEN every message is delivered
    assert sorted(_bodies(world.sqs.sent)) == sorted(bodies)


def test_parallel_queries_read_every_shard(world):
    # GIVEN a producer spreading over every shard, and a scheduler querying shards on its thread pool
    world.producer(MAX_SHARDS).send_batch([OutgoingMessage("/x", f"m{n}", delay=1000 + n % 50) for n in range(640)])
    world.dynamodb.page_size = 3
    world.now += 400
    scheduler = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=world.sqs, dynamodb=world.dynamodb,
                               clock=lambda: world.now, sleep=lambda s: None)
    # WHEN it runs  THEN every message is delivered once
    assert scheduler.run().stopped == ""
    assert sorted(_bodies(world.sqs.sent)) == sorted(f"m{n}" for n in range(640))


def test_the_minute_record_is_written_once_before_the_first_query_with_the_first_start_time(world):
    # GIVEN a minute with more messages than one run sends, and a log of the state writes and Queries
    world.scheduler().run()
    world.producer(8).send_batch([OutgoingMessage("/x", f"m{n}", delay=1000) for n in range(300)])
    bucket = int((START + 1000) // 60)
    calls = []

    def log(operation, params):
        key = params.get("Item") or {"pk": (params.get("ExpressionAttributeValues") or {}).get(":pk", {})}
        calls.append((operation, key["pk"].get("S")))

    world.dynamodb.fault = log
    world.dynamodb.page_size = 10
    world.now += 200
    first_start = world.now
    sends = iter(range(10_000))
    # WHEN one run runs low on time part-way through the minute, and a second run finishes it a minute later
    world.scheduler().run(remaining_ms=lambda: 60_000 if next(sends) < 4 else 0)
    world.now += 60
    world.scheduler().run()
    # THEN the record holds the first run's start and expires three days after the minute
    record = world.dynamodb.tables["state"][(minute_key(bucket),)]
    assert record[STARTED_MS_ATTRIBUTE] == {"N": str(int(first_start * 1000))}
    assert record["expiration"] == {"N": str(bucket * 60 + MINUTE_RECORD_RETENTION_SECONDS)}
    # and, once every shard was read, when the minute was finished (by the second run)
    assert record[FINISHED_MS_ATTRIBUTE] == {"N": str(int((first_start + 60) * 1000))}
    assert minute_key(bucket) == f"{MINUTE_KEY_PREFIX}{bucket}" == f"scheduler#minute#{bucket}"
    # and it was put before the minute's first Query
    first_query = next(i for i, (operation, pk) in enumerate(calls) if operation == "Query" and pk.startswith(f"b#{bucket}#"))
    assert ("PutItem", minute_key(bucket)) in calls[:first_query]
    assert sorted(_bodies(world.sqs.sent)) == sorted(f"m{n}" for n in range(300))


def test_a_run_that_stops_mid_minute_saves_cursors_and_resends_nothing(world):
    # GIVEN 200 messages in one minute over 4 shards, pages of 10
    world.scheduler().run()
    world.producer(4).send_batch([OutgoingMessage("/x", f"m{n}", delay=1000 + n / 100) for n in range(200)])
    world.dynamodb.page_size = 10
    world.now += 200
    budget = iter(range(10_000))
    # WHEN a run runs low on time part-way through
    report = world.scheduler().run(remaining_ms=lambda: 60_000 if next(budget) < 8 else 0)
    # THEN it stopped inside the minute with cursors saved, and the next run sends only the rest
    assert report.stopped == "invocation time running out" and 0 < len(world.sqs.sent) < 200
    assert world.watermark()["cursors"]["M"]
    world.scheduler().run()
    assert sorted(_bodies(world.sqs.sent)) == sorted(f"m{n}" for n in range(200))


class _ReversedPool:
    """Executor.map that runs the calls last to first (as threads may finish them), results in order."""

    def map(self, call, items):
        items = list(items)
        return [result for _, result in sorted((i, call(item)) for i, item in reversed(list(enumerate(items))))]


def test_batches_in_flight_together_move_the_cursors_only_over_what_was_handled(world):
    # GIVEN 400 messages in one minute over 4 shards, and SQS failing every attempt at one early message
    world.scheduler().run()
    world.producer(4).send_batch([OutgoingMessage("/x", f"m{n:03d}", delay=1000 + n / 100) for n in range(400)])
    world.now += 200
    failing = FakeSQS(fail=lambda call, entry: ("ServiceUnavailable", False) if entry["MessageBody"] == "m005" else None,
                      clock=lambda: world.now)
    # WHEN a run sends its batches in flight together, later batches going before earlier ones
    scheduler = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=failing, dynamodb=world.dynamodb,
                                clock=lambda: world.now, sleep=lambda s: None, pool=_ReversedPool())
    report = scheduler.run()
    # THEN it stops on the failure, later batches were sent, and no cursor passed the failed message
    assert report.stopped == (f"minute {int((START + 1000) // 60)}: SQS did not accept 1 messages after {BATCH_ENTRIES.attempts} "
                              "attempts; last: ServiceUnavailable: ServiceUnavailable (fake)")
    assert "m005" not in _bodies(failing.sent) and len(failing.sent) > 10
    # WHEN SQS recovers  THEN the next run sends the rest: nothing lost
    world.scheduler().run()
    assert set(_bodies(failing.sent)) | set(_bodies(world.sqs.sent)) == {f"m{n:03d}" for n in range(400)}
    assert "m005" in _bodies(world.sqs.sent)


def test_a_thread_pool_run_delivers_a_minute_larger_than_a_round_once(world):
    # GIVEN 2,000 messages in one minute over every shard: more than one round of pages
    world.scheduler().run()
    world.producer(MAX_SHARDS).send_batch([OutgoingMessage("/x", f"m{n}", delay=1000 + n / 100) for n in range(2000)])
    world.now += 200
    # WHEN a run sends on its thread pool
    scheduler = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=world.sqs, dynamodb=world.dynamodb,
                                clock=lambda: world.now, sleep=lambda s: None)
    # THEN every message is delivered exactly once, none early
    assert scheduler.run().stopped == ""
    assert sorted(_bodies(world.sqs.sent)) == sorted(f"m{n}" for n in range(2000))
    assert all(entry["visible_at"] >= START + 1000 for entry in world.sqs.sent)


def test_a_second_run_while_one_holds_the_lease_does_nothing(world):
    # GIVEN a due message and another holder of the lease
    world.client.send("/x", "m", delay=950)
    world.now += 100
    assert world.scheduler()._acquire("someone-else")
    world.now += 50
    # WHEN a run starts  THEN it does nothing
    assert world.scheduler().run().ran is False
    assert world.sqs.sent == []
    # WHEN the lease expires  THEN a crashed holder does not block for ever
    world.now += LEASE_SECONDS + 1
    assert world.scheduler().run().sent == 1


def test_run_stops_taking_minutes_when_time_runs_low(world):
    # GIVEN ten minutes with one message each, an hour overdue
    for n in range(10):
        world.client.send("/x", f"m{n}", delay=1000 + n * 60)
    world.scheduler().run()
    world.now += 3600
    # WHEN a run has time for only a few checks
    checks = iter(range(10_000))
    report = world.scheduler().run(remaining_ms=lambda: 60_000 if next(checks) < 9 else 5_000)
    # THEN it stops with the reason, having passed some minutes; the rest goes next time and nothing is lost
    assert report.stopped == "invocation time running out"
    assert 0 < len(world.sqs.sent) < 10
    world.scheduler().run()
    assert sorted(_bodies(world.sqs.sent)) == [f"m{n}" for n in range(10)]


def test_queries_are_paginated_and_throttling_is_retried(world):
    # GIVEN 250 messages due in the same minute, pages of 7 items, and Query throttled on every 3rd call
    world.client.send_batch([OutgoingMessage("/x", str(n), delay=1000) for n in range(250)])
    world.dynamodb.page_size = 7
    queries = [0]

    def throttle(operation, params):
        if operation == "Query":
            queries[0] += 1
            return "ProvisionedThroughputExceededException" if queries[0] % 3 == 0 else None
        return None

    world.dynamodb.fault = throttle
    world.now += 200
    # WHEN the scheduler runs  THEN every message goes out
    world.scheduler().run()
    assert sorted(int(e["MessageBody"]) for e in world.sqs.sent) == list(range(250))


def test_watermark_moved_by_another_run_stops_this_one(world):
    # GIVEN another run that moves the watermark while this one dispatches a minute
    world.client.send("/x", "m", delay=1000)
    world.now += 200
    bucket = int((START + 1000) // 60)

    def interloper(operation, params):
        if operation == "PutItem" and params["Item"]["pk"]["S"] == WATERMARK_KEY:
            world.dynamodb.tables["state"][(WATERMARK_KEY,)] = {"pk": {"S": WATERMARK_KEY}, "bucket": {"N": "5"}}
        return None

    scheduler = world.scheduler()
    scheduler.run()  # the first run sets the watermark
    world.dynamodb.fault = interloper
    world.now += 60
    world.client.send("/x", "m2", delay=1000)
    world.now += 200
    # WHEN this run tries to move it
    report = scheduler.run()
    # THEN it stops, reporting the lost lease with the minute, instead of raising out of the handler
    assert report.ran and report.stopped.startswith("watermark moved by another run while dispatching minute ")
    assert bucket > 5


def test_horizon_leaves_room_for_sqs_delay_and_clock_skew():
    assert DISPATCH_HORIZON_SECONDS == 840


# -- the delay path's edge cases ------------------------------------------------------------


def _store_item(world: World, message: DelayedMessage, **overrides) -> dict:
    """Put an item as no current producer would (hand-written, or an old version), beside the good ones."""
    item = {**message.to_item(), **overrides}
    world.dynamodb.put_item(TableName="delay", Item=item)
    return item


def test_a_due_ms_beyond_the_sort_keys_range_is_a_pointer_not_a_crash(world):
    # GIVEN a good message and, in its minute, an item whose due_ms time.gmtime cannot convert
    good = world.store("id-good", "good", 1000, shard=1)
    _store_item(world, good, id={"S": "id-huge"}, sk={"S": good.key["sk"]["S"] + "x"}, due_ms={"N": str(10**17)})
    world.now += 200
    # WHEN the scheduler runs
    report = world.scheduler().run()
    # THEN it completes the minute, sends the good one, and the DLQ has a pointer naming the value and the rule
    assert _bodies(world.sqs.by_queue[QUEUE]) == ["good"] and report.watermark > good.bucket
    [pointer] = [json.loads(e["MessageBody"]) for e in world.sqs.by_queue[DLQ]]
    assert f"due_ms {10**17} is out of range: a due time is whole epoch milliseconds 0..9999999999999" in (
        pointer["reason"]["error_message"])


def test_an_attribute_with_an_extra_key_is_a_pointer_and_its_batch_mate_is_sent(world):
    # GIVEN a good message and one whose stored attribute has a key SQS's API does not take (botocore refuses it)
    good = world.store("id-good", "good", 1000, shard=1)
    odd = DelayedMessage("id-odd", good.due_ms + 1, "odd", {"n": {"DataType": "String", "StringValue": "a", "stringValue": "a"}}, 1)
    DelayStore("delay", world.dynamodb).put_many([odd])
    world.now += 200
    # WHEN the scheduler runs
    report = world.scheduler().run()
    # THEN the good one goes out, and the odd one is a pointer naming the attribute and the shape SQS takes
    assert _bodies(world.sqs.by_queue[QUEUE]) == ["good"] and report.stopped == ""
    [pointer] = [json.loads(e["MessageBody"]) for e in world.sqs.by_queue[DLQ]]
    assert pointer["sk"] == odd.key["sk"]["S"]
    assert (
        "attribute 'n' is {'DataType': 'String', 'StringValue': 'a', 'stringValue': 'a'}; an SQS message attribute "
        "has exactly DataType (a string) and StringValue (a string) or BinaryValue (bytes)"
    ) in pointer["reason"]["error_message"]


class ParamCheckingSQS(FakeSQS):
    """A FakeSQS whose client refuses, before sending, any call holding the body ``bad`` (as botocore's checks do)."""

    def send_message_batch(self, QueueUrl, Entries):
        if any(entry["MessageBody"] == "bad" for entry in Entries):
            from botocore.exceptions import ParamValidationError
            raise ParamValidationError(report="Unknown parameter in MessageAttributes.n: \"stringValue\"")
        return super().send_message_batch(QueueUrl, Entries)


def test_a_client_side_parameter_error_dead_letters_that_message_and_sends_the_rest(world):
    # GIVEN two messages in one minute, one of which the SQS client refuses before sending
    world.store("id-a", "good", 1000, shard=1)
    world.store("id-b", "bad", 1001, shard=1)
    sqs = ParamCheckingSQS(clock=lambda: world.now)
    world.now += 200
    # WHEN the scheduler runs
    report = world.scheduler(sqs).run()
    # THEN the good one is sent, the refused one is dead-lettered with botocore's reason, and the minute completes
    assert _bodies(sqs.by_queue[QUEUE]) == ["good"] and report.stopped == ""
    assert (report.sent, report.dead_lettered) == (1, 1)
    [dead] = [json.loads(e["MessageBody"]) for e in sqs.by_queue[DLQ]]
    assert "ParamValidationError: Parameter validation failed:\nUnknown parameter in MessageAttributes.n" in (
        dead["reason"]["error_message"])


def test_an_item_due_after_its_pks_minute_is_refiled_into_its_due_minute_not_sent_early(world):
    # GIVEN an item filed under the minute due in 1000 s but due a week later
    week_ms = 7 * 24 * 3600 * 1000
    message = world.store("id-far", "far", 1000, shard=5)
    far = DelayedMessage("id-far", message.due_ms + week_ms, "far", message.attributes, 5)
    _store_item(world, far, pk=message.key["pk"])
    world.dynamodb.delete_item(TableName="delay", Key=message.key)
    world.now += 200
    # WHEN the scheduler passes that minute
    report = world.scheduler().run()
    # THEN nothing is sent: the item now sits in its due minute, same shard and sort key, and the odd copy is gone
    assert world.sqs.by_queue.get(QUEUE, []) == [] and report.refiled == 1
    assert report.watermark > message.bucket
    assert (bucket_key(far.bucket, 5), far.key["sk"]["S"]) in world.dynamodb.tables["delay"]
    assert (message.key["pk"]["S"], far.key["sk"]["S"]) not in world.dynamodb.tables["delay"]


def test_a_watermark_far_ahead_of_the_clock_is_not_trusted_or_moved(world):
    # GIVEN a watermark ten days ahead of the clock
    ahead = int(START // 60) + 10 * 24 * 60
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": WATERMARK_KEY}, "bucket": {"N": str(ahead)}})
    # WHEN the scheduler runs
    report = world.scheduler().run()
    # THEN it reports how far ahead it is, and leaves it where it is
    last = math.floor((START + DISPATCH_HORIZON_SECONDS) / BUCKET_SECONDS) - 1
    assert report.watermark_ahead_s == (ahead - last - 1) * BUCKET_SECONDS
    assert report.stopped.startswith(f"watermark minute {ahead} is {(ahead - last - 1) * 60} s past the horizon")
    assert world.watermark()["bucket"] == {"N": str(ahead)}


def test_a_first_run_ignores_keys_it_cannot_parse_and_never_starts_before_the_lookback(world):
    # GIVEN a fresh table holding a good message, a key naming no minute, and a 1970 key
    good = world.store("id-good", "good", 1000, shard=0)
    for pk in ("b#x#0", "b#0#0"):
        _store_item(world, good, pk={"S": pk})
    world.now += 200
    # WHEN the scheduler runs for the first time
    report = world.scheduler().run()
    # THEN it delivers the good one, having started no earlier than the lookback allows
    assert _bodies(world.sqs.by_queue[QUEUE]) == ["good"] and report.stopped == ""
    started = sorted(int(k.removeprefix(MINUTE_KEY_PREFIX)) for (k,) in world.dynamodb.tables["state"] if k.startswith(MINUTE_KEY_PREFIX))
    assert started[0] == math.floor((world.now - START_LOOKBACK_SECONDS) / BUCKET_SECONDS)


def test_the_first_runs_scan_stops_in_time_and_the_next_run_resumes_it(world):
    # GIVEN a fresh table of 250 items in three pages, an old one last in scan order, and little time per run
    world.dynamodb.page_size = 100
    for index in range(250):
        world.store(f"id-{index:03d}", f"m{index}", 1000 + index, shard=index % MAX_SHARDS)
    old = DelayedMessage("id-old", int((START - 3600) * 1000), "old", {PATH_ATTRIBUTE: {"DataType": "String", "StringValue": "/x"}}, 15)
    DelayStore("delay", world.dynamodb).put_many([old])
    # WHEN a run has time for two Scan pages
    report = world.scheduler().run(lambda: 0 if world.dynamodb.count("Scan") >= 2 else RUN_MARGIN_MS + 1)
    # THEN it stops without a watermark, saving where the Scan stopped and the earliest minute so far
    assert report.stopped == SCAN_UNFINISHED and (WATERMARK_KEY,) not in world.dynamodb.tables["state"]
    assert (SCAN_KEY,) in world.dynamodb.tables["state"]
    scans_before = world.dynamodb.count("Scan")
    # WHEN the next run has time
    report = world.scheduler().run()
    # THEN it resumes from there (one page more), starts at the old item's minute, and delivers it
    assert world.dynamodb.count("Scan") == scans_before + 1 and (SCAN_KEY,) not in world.dynamodb.tables["state"]
    assert "old" in _bodies(world.sqs.by_queue[QUEUE]) and report.stopped == ""


def test_a_deleted_watermark_restarts_after_the_last_finished_minute_and_resends_nothing(world):
    # GIVEN an hour of messages, all dispatched
    for minute in range(60):
        world.store(f"id-{minute}", f"m{minute}", 1000 + 60 * minute)
    for _ in range(80):
        world.now += 60
        world.scheduler().run()
    sent = len(world.sqs.by_queue[QUEUE])
    assert sent == 60
    # WHEN the watermark item is deleted and the scheduler runs again
    world.dynamodb.delete_item(TableName="state", Key={"pk": {"S": WATERMARK_KEY}})
    world.now += 60
    report = world.scheduler().run()
    # THEN nothing is sent twice
    assert len(world.sqs.by_queue[QUEUE]) == sent and report.stopped == ""


@pytest.mark.parametrize("watermark", [
    {"bucket": {"S": "30000016"}},
    {"bucket": {"N": "30000016"}, "cursors": {"M": {"0": {"N": "5"}}}},
])
def test_a_corrupt_watermark_is_reported_and_replaced_from_the_minute_records(world, watermark):
    # GIVEN a dispatched message, then a watermark item the scheduler never writes
    world.store("id-1", "first", 1000)
    world.now += 200
    world.scheduler().run()
    world.dynamodb.put_item(TableName="state", Item={"pk": {"S": WATERMARK_KEY}, **watermark})
    world.store("id-2", "second", 1000)
    world.now += 300
    # WHEN the scheduler runs
    report = world.scheduler().run()
    # THEN it reports what was wrong, restarts after the last finished minute, and sends only the new message
    assert report.state_unreadable.startswith("watermark item {")
    assert "it needs bucket as a number and cursors as a map of shard to string sort key" in report.state_unreadable
    assert _bodies(world.sqs.by_queue[QUEUE]) == ["first", "second"]
    assert world.watermark()["bucket"]["N"] == str(report.watermark)


def test_a_minute_record_gets_its_ttl_when_finished_not_when_started(world):
    # GIVEN a running scheduler, and a minute larger than one run
    world.scheduler().run()
    for index in range(150):
        world.store(f"id-{index:03d}", f"m{index}", 1000 + index / 1000)
    world.now += 200
    bucket = int((START + 1000) // 60)
    # WHEN a run stops inside it  THEN its record has no TTL (the safety net needs it while it is the watermark's)
    world.scheduler().run(lambda: 0 if len(world.sqs.sent) >= 40 else RUN_MARGIN_MS + 1)
    assert world.watermark()["bucket"]["N"] == str(bucket)
    assert "expiration" not in world.dynamodb.tables["state"][(minute_key(bucket),)]
    # WHEN a later run finishes it  THEN the TTL is set, from the minute
    world.scheduler().run()
    record = world.dynamodb.tables["state"][(minute_key(bucket),)]
    assert record["expiration"] == {"N": str(bucket * 60 + MINUTE_RECORD_RETENTION_SECONDS)}


def test_a_round_of_unreadable_items_longer_than_a_run_makes_progress_and_repeats_no_pointer(world):
    # GIVEN a minute of 300 unreadable items over 3 shards, then a good message, and runs with time for 100 pointers
    world.scheduler().run()
    good = world.store("id-good", "good", 1000 + 60, shard=0)
    for shard in range(3):
        for index in range(100):
            bad = DelayedMessage(f"bad-{shard}-{index:03d}", good.due_ms - 60_000 + index, "x", {}, shard)
            _store_item(world, bad, attributes={"S": "{not json"})
    world.now += 300
    runs = []
    # WHEN runs each stop once they have sent 100 more pointers, until one finishes
    for _ in range(5):
        budget = len(world.sqs.by_queue.get(DLQ, [])) + 100
        runs.append(world.scheduler().run(lambda budget=budget: 0 if len(world.sqs.by_queue.get(DLQ, [])) >= budget else RUN_MARGIN_MS + 1))
        if runs[-1].stopped == "":
            break
        world.now += 60
    # THEN each item got exactly one pointer, the minute passed, and the good message went out
    pointers = [json.loads(e["MessageBody"])["sk"] for e in world.sqs.by_queue[DLQ]]
    assert len(pointers) == len(set(pointers)) == 300
    assert [r.stopped for r in runs[:3]] == [TIME_RUNNING_OUT] * 3 and runs[-1].stopped == ""
    assert _bodies(world.sqs.by_queue[QUEUE]) == ["good"]


def test_a_refile_dynamodb_refuses_for_good_goes_to_the_dlq_and_the_minute_goes_on(world):
    # GIVEN an item due a week after its pk's minute, whose copy DynamoDB refuses for what it is, beside a good message

    week_ms = 7 * 24 * 3600 * 1000
    odd = world.store("id-odd", "odd", 1000, shard=5)
    far = DelayedMessage("id-odd", odd.due_ms + week_ms, "odd", odd.attributes, 5)
    _store_item(world, far, pk=odd.key["pk"])
    world.dynamodb.delete_item(TableName="delay", Key=odd.key)
    world.store("id-good", "good", 1000, shard=2)
    world.dynamodb.fault = lambda operation, params: (
        "ValidationException" if operation == "PutItem" and params.get("TableName") == "delay" else None
    )
    world.now += 200
    # WHEN the scheduler passes that minute
    report = world.scheduler().run()
    # THEN the good message is sent, the odd one is a pointer in the DLQ with the reason, and the minute is done
    assert _bodies(world.sqs.by_queue.get(QUEUE, [])) == ["good"]
    [pointer] = world.sqs.by_queue[DLQ]
    assert "moving it there was refused: ValidationException" in pointer["MessageBody"]
    assert report.watermark > odd.bucket and report.dead_lettered == 1


def test_a_minute_it_refiled_into_is_queried_consistently(world):
    # GIVEN an item filed a minute early (due in the next minute), and a log of the scheduler's Queries
    queries = []
    query = world.dynamodb.query

    def logged(**request):
        queries.append(request)
        return query(**request)

    world.dynamodb.query = logged
    early = world.store("id-early", "early", 1000, shard=1)
    later = DelayedMessage("id-early", early.due_ms + 60_000, "early", early.attributes, 1)
    _store_item(world, later, pk=early.key["pk"])
    world.dynamodb.delete_item(TableName="delay", Key=early.key)
    world.now += 260
    # WHEN it refiles the item into its due minute and then reads that minute in the same run
    world.scheduler().run()
    # THEN that minute's Queries are consistent (a Query right after the copy cannot miss it), and others are not
    # (but the cancellable shard's, which are always: worker_tier.delays.cancellation)
    pks = {q["ExpressionAttributeValues"][":pk"]["S"] for q in queries if q.get("ConsistentRead")}
    consistent = {pk for pk in pks if not pk.endswith(f"#{CANCELLABLE_SHARD}")}
    assert consistent and all(pk.startswith(f"b#{later.bucket}#") for pk in consistent)
    assert len(world.sqs.by_queue[QUEUE]) == 1


def test_a_refiled_copy_keeps_its_ttl_past_its_due_time(world):
    # GIVEN an item due a week after its pk's minute, whose TTL was set from the pk's minute (too short for it)
    week_ms = 7 * 24 * 3600 * 1000
    odd = world.store("id-ttl", "ttl", 1000, shard=3)
    far = DelayedMessage("id-ttl", odd.due_ms + week_ms, "ttl", odd.attributes, 3)
    item = far.to_item()
    item["pk"] = odd.key["pk"]
    item["expiration"] = {"N": str(odd.due_ms // 1000 + 3600)}
    world.dynamodb.put_item(TableName="delay", Item=item)
    world.dynamodb.delete_item(TableName="delay", Key=odd.key)
    world.now += 200
    # WHEN it is refiled
    world.scheduler().run()
    # THEN the copy's TTL is at least its due time plus the producer's retention
    copy = world.dynamodb.tables["delay"][(bucket_key(far.bucket, 3), far.key["sk"]["S"])]
    assert int(copy["expiration"]["N"]) >= far.due_ms // 1000 + 6 * 3600


def test_every_error_of_the_delay_path_is_a_worker_tier_error():
    # GIVEN the exception classes the dispatcher, delivery and the safety net raise
    from worker_tier.delays import delay_recovery, delivery
    from worker_tier.core.errors import LeaseLostError, StateError, WorkerTierError

    raised = [LeaseLostError, StateError, delivery.DispatchIncompleteError,
              delivery.DispatchRefusedError, delay_recovery.StreamRecordError, delay_recovery.SendRefusedError,
              delay_recovery._StoppedError]
    # WHEN a caller catches WorkerTierError
    # THEN each of them is caught
    assert [error.__name__ for error in raised if not issubclass(error, WorkerTierError)] == []


def test_every_answer_of_a_wave_is_taken_in_before_its_failure_stops_the_run(world):
    # GIVEN a wave of two batches: shard 0's (due first) failing at a0 every time, shard 1's accepted but for b5,
    # which SQS refuses for a sender fault
    world.scheduler().run()
    for n in range(10):
        world.store(f"a{n}", f"a{n}", 1000 + n / 100, shard=0)
        world.store(f"b{n}", f"b{n}", 1001 + n / 100, shard=1)

    def fail(call, entry):
        if entry["MessageBody"] == "a0":
            return ("ServiceUnavailable", False)
        if entry["MessageBody"] == "b5" and FAILURE_ATTRIBUTE not in entry["MessageAttributes"]:
            return ("InvalidParameterValue", True)
        return None

    failing = FakeSQS(fail=fail, clock=lambda: world.now)
    world.now += 200
    # WHEN a run sends the wave and stops on a0
    report = world.scheduler(failing).run()
    # THEN the later batch was taken in: counted, its refusal dead-lettered, its shard's cursor past it
    assert report.stopped.startswith(f"minute {int((START + 1000) // 60)}: SQS did not accept 1 messages")
    assert (report.sent, report.dead_lettered) == (18, 1)
    assert _bodies(failing.by_queue[DLQ]) == ["b5"]
    assert world.watermark()["cursors"]["M"]["1"]["S"].endswith("#b9") and "0" not in world.watermark()["cursors"]["M"]
    # WHEN SQS recovers  THEN only shard 0's messages go again: nothing of the batch that was taken in
    world.scheduler().run()
    assert sorted(_bodies(world.sqs.sent)) == [f"a{n}" for n in range(10)]


class _RaisingSQS(FakeSQS):
    """FakeSQS whose SendMessageBatch raises ``error`` from call ``from_call`` on."""

    def __init__(self, error: Exception, from_call: int, clock) -> None:
        super().__init__(clock=clock)
        self.error, self.from_call = error, from_call

    def send_message_batch(self, QueueUrl, Entries):
        if len(self.calls) + 1 >= self.from_call:
            self.calls.append(("SendMessageBatch", {"QueueUrl": QueueUrl, "Entries": Entries}))
            raise self.error
        return super().send_message_batch(QueueUrl=QueueUrl, Entries=Entries)


def test_a_stop_names_the_last_error_sqs_gave(world):
    # GIVEN SQS refusing every call with an access error (the queue's KMS key is not usable)
    from botocore.exceptions import ClientError
    world.store("m", "m", 1000)
    denied = ClientError({"Error": {"Code": "KMS.AccessDeniedException", "Message": "key policy denies kms:GenerateDataKey"}},
                         "SendMessageBatch")
    sqs = _RaisingSQS(denied, 1, clock=lambda: world.now)
    world.now += 200
    # WHEN a run meets it
    report = world.scheduler(sqs).run()
    # THEN the stop says how often it tried and what SQS said last
    assert report.stopped == (f"minute {int((START + 1000) // 60)}: SQS did not accept 1 messages after {BATCH_ENTRIES.attempts} "
                              "attempts; last: KMS.AccessDeniedException: An error occurred (KMS.AccessDeniedException) when "
                              "calling the SendMessageBatch operation: key policy denies kms:GenerateDataKey")


def test_an_error_of_our_own_code_is_not_retried_it_propagates_with_the_cursors_saved(world):
    # GIVEN a round of two batches in one shard, and the second call raising a TypeError (a bug, not SQS)
    world.scheduler().run()
    for n in range(20):
        world.store(f"m{n:02d}", f"m{n:02d}", 1000 + n / 100)
    sqs = _RaisingSQS(TypeError("unhashable type: 'dict'"), 2, clock=lambda: world.now)
    world.now += 200
    # WHEN a run meets it
    with pytest.raises(TypeError, match="unhashable type: 'dict'"):
        world.scheduler(sqs).run()
    # THEN it was called once, never retried; the first batch's cursor is saved, and the lease is free
    assert sqs.count("SendMessageBatch") == 2
    assert world.watermark()["cursors"]["M"]["0"]["S"].endswith("#m09")
    assert world.scheduler().run().ran


@pytest.mark.parametrize("horizon", [0, -60, MAX_HORIZON_SECONDS + 1, 3600, 120.5, True])
def test_a_horizon_outside_sqs_delay_range_is_refused_at_construction(world, horizon):
    # GIVEN a horizon SQS cannot delay a message for (a message would be visible early)
    # WHEN a dispatcher is made with it  THEN it is refused, naming the value and the rule
    with pytest.raises(SettingsError) as raised:
        DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=world.sqs, dynamodb=world.dynamodb,
                        horizon_seconds=horizon)
    assert str(raised.value) == (f"delay horizon {horizon!r} is not allowed: the horizon is whole seconds 1..{MAX_HORIZON_SECONDS} "
                                 "(SQS's maximum DelaySeconds); beyond it a message would be visible before it is due")


def test_the_largest_horizon_never_shows_a_message_early(world):
    # GIVEN the largest horizon allowed
    scheduler = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=world.sqs, dynamodb=world.dynamodb,
                                clock=lambda: world.now, sleep=lambda s: None, parallel=False, horizon_seconds=MAX_HORIZON_SECONDS)
    scheduler.run()
    world.store("m", "m", MAX_HORIZON_SECONDS + 60)
    # WHEN runs go on every minute until it is sent
    while not world.sqs.sent:
        world.now += BUCKET_SECONDS
        scheduler.run()
    # THEN it becomes visible at its due second, not before
    assert world.sqs.sent[0]["visible_at"] == START + MAX_HORIZON_SECONDS + 60


def test_a_retried_batch_gets_its_delay_from_the_clock_at_the_retry(world):
    # GIVEN a message due in 100 s, and SQS failing its first attempt; each pause before a retry takes 5 s
    world.store("m", "m", 100)
    first = [True]

    def fail(call, entry):
        if first[0]:
            first[0] = False
            return ("ServiceUnavailable", False)
        return None

    sqs = FakeSQS(fail=fail, clock=lambda: world.now)

    def sleep(seconds):
        world.now += 5

    scheduler = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=sqs, dynamodb=world.dynamodb,
                                clock=lambda: world.now, sleep=sleep, parallel=False)
    # WHEN a run sends it
    scheduler.run()
    # THEN it is visible at its due second, not 5 s after
    assert _bodies(sqs.sent) == ["m"] and sqs.sent[0]["visible_at"] == START + 100


def test_a_run_that_stops_is_logged_as_trouble_and_one_that_finds_the_lease_held_is_not():
    # GIVEN reports of runs that stopped, finished, or did not start
    from worker_tier.delays.minute import RunReport
    from worker_tier.handlers.dispatcher import is_trouble
    # WHEN the handler decides how to log them  THEN a stopped run is a WARNING, the others are not
    assert is_trouble(RunReport(stopped="minute 1: SQS did not accept 1 messages after 8 attempts; last: X: y"))
    assert is_trouble(RunReport(stopped=TIME_RUNNING_OUT))
    assert not is_trouble(RunReport())
    assert not is_trouble(RunReport(ran=False, stopped="another run holds the lease"))


def test_the_dispatcher_clients_bound_every_call_within_the_stop_margin(monkeypatch):
    # GIVEN the dispatcher's own clients (a region, as Lambda sets one)
    from worker_tier.delays.dispatcher import _pooled_client
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for service in ("sqs", "dynamodb"):
        # WHEN one is made
        config = _pooled_client(service)().meta.config
        # THEN one attempt of at most DISPATCHER_CALL_SECONDS, with a connection per thread
        assert (config.connect_timeout, config.read_timeout) == (DISPATCHER_CONNECT_TIMEOUT_SECONDS, DISPATCHER_READ_TIMEOUT_SECONDS)
        assert config.retries["total_max_attempts"] == 1 and config.max_pool_connections == DISPATCH_THREADS
    # AND a wave started at the margin ends its sends with a cursor write's worst call left
    assert DISPATCHER_CALL_SECONDS == DISPATCHER_CONNECT_TIMEOUT_SECONDS + DISPATCHER_READ_TIMEOUT_SECONDS
    assert SEND_FLOOR_MS - DISPATCHER_CALL_SECONDS * 1000 >= DISPATCHER_CALL_SECONDS * 1000
    assert SEND_FLOOR_MS + BATCH_ENTRIES.cap_seconds * 1000 <= RUN_MARGIN_MS


def test_a_failing_wave_stops_retrying_while_a_cursor_write_still_fits(world):
    # GIVEN a wave started with just over the margin left, SQS failing every call, each call taking 1 s
    world.scheduler().run()
    world.store("m", "m", 1000)
    world.now += 200
    deadline = world.now + RUN_MARGIN_MS / 1000 + 1
    left_at_calls = []

    def fail(call, entry):
        left_at_calls.append(deadline - world.now)
        world.now += 1
        return ("ServiceUnavailable", False)

    def sleep(seconds):
        world.now += seconds

    scheduler = DelayDispatcher("delay", "state", QUEUE, dead_letter_queue_url=DLQ, sqs=FakeSQS(fail=fail, clock=lambda: world.now),
                                dynamodb=world.dynamodb, clock=lambda: world.now, sleep=sleep, parallel=False)
    # WHEN the run sends it
    report = scheduler.run(remaining_ms=lambda: int((deadline - world.now) * 1000))
    # THEN it stops for time: every call started with the floor left, and the sends ended with a call's worth to spare
    assert report.stopped == TIME_RUNNING_OUT
    assert 1 < len(left_at_calls) < BATCH_ENTRIES.attempts
    assert min(left_at_calls) >= SEND_FLOOR_MS / 1000
    assert deadline - world.now >= DISPATCHER_CALL_SECONDS
