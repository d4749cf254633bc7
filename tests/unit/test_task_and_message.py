"""Task fields from a real-shaped Lambda SQS event, and the dead-letter wire format."""

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from worker_tier import MalformedBodyError, Task
from worker_tier.core.errors import TaskRegistrationError
from worker_tier.core.envelope import dead_letter_attributes
from worker_tier.core.message import failure_reason
from worker_tier.core.contract import FAILURE_ATTRIBUTE
from worker_tier.worker.idempotency import record_key
from worker_tier.worker.registry import MAX_IDEMPOTENT_PATH_BYTES, Registry

EVENT = json.loads((Path(__file__).parent.parent / "events" / "sqs_eb_scheduled.json").read_text())


def test_task_carries_sqsd_header_fields():
    # GIVEN an EB periodic-task record  WHEN turned into a Task
    task = Task.from_record(EVENT["Records"][0], default_path="/", content_type="application/json")
    # THEN every sqsd header has its field
    assert task.message_id == "059f36b4-87a3-44ab-83d2-661975830a7d"
    assert task.path == "/backup"
    assert task.receive_count == 2
    assert task.sent_at == datetime(2018, 12, 17, 21, 37, 29, 183000, tzinfo=timezone.utc)
    assert task.first_received_at == datetime(2018, 12, 17, 21, 37, 29, 185000, tzinfo=timezone.utc)
    assert task.queue == "my-queue"
    assert task.sender_id == "AIDAIENQZJOLO23YVJ4VO"
    assert task.task_name == "backup-job"
    assert task.scheduled_at == datetime(2018, 12, 17, 21, 37, tzinfo=timezone.utc)
    assert task.content_type == "application/json"
    # Binary attributes are dropped, as sqsd drops them
    assert dict(task.attributes) == {
        "beanstalk.sqsd.path": "/backup",
        "beanstalk.sqsd.task_name": "backup-job",
        "beanstalk.sqsd.scheduled_time": "2018-12-17 21:37:00 UTC",
        "retries": "3",
    }
    assert task.remaining_seconds() is None


def test_record_without_path_routes_to_default_path():
    task = Task.from_record(EVENT["Records"][1], default_path="/jobs", content_type="text/plain")
    assert (task.path, task.task_name, task.scheduled_at, task.content_type) == ("/jobs", None, None, "text/plain")
    assert task.json() == {"bucket": "photos", "key": "cat.jpg"}


def test_json_of_a_non_json_body_says_so():
    task = Task(message_id="m1", path="/x", body="hello")
    with pytest.raises(MalformedBodyError) as error:
        task.json()
    assert str(error.value) == (
        "message m1 for /x has a body that is not JSON (Expecting value: line 1 column 1 (char 0)); body starts 'hello'"
    )


def test_failure_reason_fields_and_truncation():
    reason = failure_reason(
        RuntimeError("é" * 2000), attempts=4, path="/x", failed_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    )
    assert reason["error_type"] == "RuntimeError"
    assert len(reason["error_message"].encode()) <= 1024
    assert reason["error_message"].endswith("...")
    assert (reason["attempts"], reason["path"], reason["failed_at"]) == (4, "/x", "2026-01-02T03:04:05.000Z")


def test_dead_letter_attributes_keep_routing_and_reason_first_and_name_the_dropped():
    # GIVEN a message with the three sqsd attributes and eight of its own (11 in all)
    original = {f"a{i}": {"DataType": "String", "StringValue": str(i)} for i in range(8)}
    for name in ("beanstalk.sqsd.path", "beanstalk.sqsd.task_name", "beanstalk.sqsd.scheduled_time"):
        original[name] = {"DataType": "String", "StringValue": "v"}
    # WHEN the reason is added
    attributes = dead_letter_attributes(original, {"error_type": "E"})
    # THEN 10 attributes: 3 routing, the reason, 6 own; the 2 dropped are named
    assert len(attributes) == 10
    assert {"beanstalk.sqsd.path", "beanstalk.sqsd.task_name", "beanstalk.sqsd.scheduled_time"} <= set(attributes)
    assert json.loads(attributes[FAILURE_ATTRIBUTE]["StringValue"]) == {"error_type": "E", "dropped_attributes": ["a6", "a7"]}


@pytest.mark.parametrize(
    "path, options, message",
    [
        ("x", {}, "task path must be a string starting with '/', got 'x'"),
        ("/x", {"retries": 3}, "@task('/x') got unknown option 'retries'; options are: parser, idempotent, idempotency_key, idempotency_expiry, heartbeat, container, middleware, rate_limit, rate_key, rate_burst, concurrency, concurrency_key"),
        ("/x", {"rate_limit": "100 per second"}, "rate_limit for '/x' is '100 per second', not a rate; write '<count>/<unit>' such as '100/s', '5/m', '1000/h' or '3/10s' (units s, m, h, d)"),
        ("/x", {"rate_limit": "0/s"}, "rate_limit for '/x' is '0/s': a rate must be from 1 a year to 1,000 a second (one state-table item takes at most 1,000 writes a second); for more, add a rate_key, which gives each key its own"),
        ("/x", {"rate_limit": "5/s", "rate_burst": 0}, "rate_burst 0 with rate_limit for '/x' '5/s' must be a whole number from 1 to 100000 (how many messages may run at once before the rate spaces them)"),
        ("/x", {"rate_burst": 5}, "rate_burst for '/x' needs rate_limit (such as rate_limit='100/s')"),
        ("/x", {"concurrency": 0}, "concurrency for '/x' must be a whole number from 1 to 100 (messages run at once per key), got 0"),
        ("/x", {"concurrency": True}, "concurrency for '/x' must be a whole number from 1 to 100 (messages run at once per key), got True"),
        ("/x", {"rate_key": "customer"}, "rate_key for '/x' needs rate_limit: a key groups messages under a limit"),
        ("/x", {"concurrency": 2, "concurrency_key": ""}, "concurrency_key for '/x' must be a JMESPath into the JSON body or a callable of the Task, got ''"),
        ("/x", {"rate_limit": "5/s", "rate_key": "customer[", }, "rate_key 'customer[' for '/x' is not a JMESPath expression (Invalid jmespath expression: Incomplete expression: \"customer[\" ^): write a path into the JSON body such as 'customer.id', or pass a callable of the Task"),
        ("/x", {"idempotency_key": "id"}, "idempotency_key for '/x' needs idempotent=True"),
        ("/x", {"idempotent": True, "idempotency_expiry": 0}, "idempotency_expiry for '/x' must be a positive number of seconds, got 0"),
        ("/x", {"parser": "json"}, "parser for '/x' must be callable, got 'json'"),
    ],
)
def test_bad_registrations_are_refused(path, options, message):
    with pytest.raises(TaskRegistrationError) as error:
        Registry().task(path, **options)(lambda t: None)
    assert str(error.value) == message


def test_a_rate_per_millisecond_is_refused_not_read_as_per_minute():
    # GIVEN a rate written per millisecond, a unit the limiter does not offer  WHEN registered
    # THEN it is refused naming the value and the units (today it registers as 100 a minute, 60,000 times slower)
    with pytest.raises(TaskRegistrationError, match="'100/ms'"):
        Registry().task("/x", rate_limit="100/ms")(lambda t: None)


@pytest.mark.parametrize("rate", ["1/" + "9" * 400 + "s", "1/" + "9" * 30 + "d"])
def test_a_rate_too_slow_for_the_limiter_to_store_is_refused_at_registration(rate):
    # GIVEN a rate so slow that its interval is not a finite number of microseconds DynamoDB can store  WHEN registered
    # THEN it is refused at registration, not on every message at run time (each then fails as an attempt, to the DLQ)
    with pytest.raises(TaskRegistrationError, match="rate_limit"):
        Registry().task("/x", rate_limit=rate)(lambda t: None)


def test_an_idempotent_path_too_long_for_its_record_key_is_refused_at_registration():
    # GIVEN the longest idempotent path whose record key fits DynamoDB's 2,048-byte partition key, and one a byte longer
    longest = "/" + "p" * (MAX_IDEMPOTENT_PATH_BYTES - 1)
    registry = Registry()
    # WHEN each is registered as an idempotent task (and the longer one as a plain task)
    registry.task(longest, idempotent=True)(lambda t: None)
    registry.task(longest + "p")(lambda t: None)
    with pytest.raises(TaskRegistrationError) as error:
        registry.task(longest + "q", idempotent=True)(lambda t: None)
    # THEN the longest makes a key of exactly 2,048 bytes, and the longer is refused in one line naming the rule and the fix
    assert len(record_key(longest, {"path": longest, "key": "k" * 10_000}).encode()) == 2048
    assert str(error.value) == (
        f"idempotent task path '/{'p' * 39}'... is 2004 bytes of UTF-8; its state-table key (idempotency#<path>#<32-hex hash>) "
        "must fit DynamoDB's 2048-byte partition key, so an idempotent path may be at most 2003 bytes: shorten the path"
    )


def test_a_second_handler_for_a_path_is_refused():
    registry = Registry()

    def first(task): ...

    def second(task): ...

    registry.task("/x")(first)
    with pytest.raises(TaskRegistrationError, match=r"path '/x' is already registered to .*first; cannot register .*second too"):
        registry.task("/x")(second)


def test_a_negative_attempts_attribute_cannot_reset_the_retry_count():
    # GIVEN a message from a producer outside the Client that carries worker_tier.attempts = -100
    record = {"messageId": "m", "body": "b", "attributes": {"ApproximateReceiveCount": "3"},
              "messageAttributes": {"worker_tier.attempts": {"dataType": "String", "stringValue": "-100"}}}
    # WHEN its receive count is read  THEN the attribute adds nothing, so max_retries still bounds it
    assert Task.from_record(record, default_path="/", content_type="application/json").receive_count == 3


def test_a_rate_faster_than_one_state_table_item_can_be_written_is_refused_at_registration():
    # GIVEN a rate of 5,000 a second: 5,000 conditional writes a second on one item, which DynamoDB's per-partition
    # limit (1,000 write units a second) refuses  WHEN registered
    # THEN it is refused, naming the value, the rule and the fix (a lower rate, or rate_key to spread it)
    with pytest.raises(TaskRegistrationError, match="'5000/s'"):
        Registry().task("/x", rate_limit="5000/s")(lambda t: None)
