"""The worker's middleware pipeline against moto: each hook is called where docs/middleware.md says, and a hook that
raises never loses a message nor skips its fate."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.aws_world import AwsWorld
from tests.support.strict_sqs import StrictSQS
from tests.support.worker_world import dead_letter_sends, failure_ids, one_task, raise_, reason_of, send, worker_for
from worker_tier import Client, MiddlewareError, NonRetryableError, Task, TaskRegistrationError
from worker_tier.core.contract import FAILURE_ATTRIBUTE
from worker_tier.core.envelope import Envelope
from worker_tier.pipeline.middleware import Middleware, load
from worker_tier.worker.registry import Registry


class Recorder(Middleware):
    """Writes each hook it sees, with the message's path, to a shared list."""

    def __init__(self, name: str, seen: list[str]) -> None:
        self.name, self.seen = name, seen

    def before_batch(self, batch: Any) -> None:
        self.seen.append(f"{self.name}.before_batch({len(batch.records)})")

    def after_batch(self, batch: Any) -> None:
        self.seen.append(f"{self.name}.after_batch")

    def before_task(self, batch: Any, task: Task) -> None:
        self.seen.append(f"{self.name}.before_task {task.path}")

    def around_task(self, batch: Any, task: Task, call_next: Any) -> None:
        self.seen.append(f"{self.name}.around_task {task.path} >")
        try:
            call_next(batch, task)
        finally:
            self.seen.append(f"{self.name}.around_task {task.path} <")

    def after_task(self, batch: Any, task: Task, outcome: Any) -> None:
        error = type(outcome.error).__name__ if outcome.error is not None else None
        self.seen.append(f"{self.name}.after_task {task.path} {outcome.status} {error}")

    def on_dead_letter(self, batch: Any, task: Task, error: BaseException) -> None:
        self.seen.append(f"{self.name}.on_dead_letter {task.path} {error}")


def run(aws: AwsWorld, tasks: Registry, middleware: list[Middleware], **options: Any) -> set[str]:
    worker = worker_for(aws, tasks, middleware=middleware, **options)
    return failure_ids(worker.handle(aws.receive_event(), None))


def test_the_hooks_run_in_order_around_each_message_and_the_batch(aws):
    # GIVEN two middleware, a task that succeeds and one that fails
    seen: list[str] = []
    tasks = one_task("/ok", lambda t: seen.append("task /ok"))
    tasks.task("/boom")(lambda t: (_ for _ in ()).throw(RuntimeError("boom")))
    send(aws, "/ok")
    # WHEN a batch of the first runs
    run(aws, tasks, [Recorder("a", seen), Recorder("b", seen)])
    # THEN the batch hooks pair up in reverse, and the task hooks nest with the first middleware outermost
    assert seen == [
        "a.before_batch(1)", "b.before_batch(1)",
        "a.before_task /ok", "b.before_task /ok",
        "a.around_task /ok >", "b.around_task /ok >", "task /ok", "b.around_task /ok <", "a.around_task /ok <",
        "a.after_task /ok succeeded None", "b.after_task /ok succeeded None",
        "b.after_batch", "a.after_batch",
    ]


def test_after_task_hears_each_fate_with_its_error_and_on_dead_letter_hears_the_dead_letter(aws):
    # GIVEN a task that fails (retried) and one that refuses (dead-lettered)
    seen: list[str] = []
    tasks = one_task("/boom", lambda t: (_ for _ in ()).throw(RuntimeError("boom")))

    @tasks.task("/refuse")
    def refuse(task: Task) -> None:
        raise NonRetryableError("no")

    send(aws, "/boom")
    send(aws, "/refuse")
    # WHEN the batch runs
    run(aws, tasks, [Recorder("a", seen)])
    # THEN after_task hears both fates with their errors, and on_dead_letter the dead-lettered one first
    told = [line for line in seen if "after_task" in line or "dead_letter" in line]
    assert sorted(told) == sorted([
        "a.after_task /boom retrying RuntimeError",
        "a.on_dead_letter /refuse no",
        "a.after_task /refuse dead_lettered NonRetryableError",
    ])
    assert told.index("a.on_dead_letter /refuse no") < told.index("a.after_task /refuse dead_lettered NonRetryableError")


class Raising(Middleware):
    """Raises in the one hook it is given."""

    def __init__(self, hook: str) -> None:
        self.hook = hook

    def _raise(self, *args: Any) -> None:
        raise RuntimeError(f"{self.hook} broke")


def raising(hook: str) -> Middleware:
    return type(f"Raising_{hook}", (Raising,), {hook: Raising._raise})(hook)


@pytest.mark.parametrize("hook", ["before_task", "around_task"])
def test_a_before_task_or_around_task_that_raises_is_the_message_failure_and_retries_it(aws, hook):
    # GIVEN a middleware whose hook raises
    ran: list[str] = []
    send(aws, "/ok")
    # WHEN a message runs
    failed = run(aws, one_task("/ok", lambda t: ran.append(t.message_id)), [raising(hook)])
    # THEN the task did not run, and the message is retried with a backoff (not lost, not deleted)
    assert len(failed) == 1 and ran == []
    [change] = aws.params("ChangeMessageVisibilityBatch")[-1]["Entries"]
    assert change["VisibilityTimeout"] > 0


def test_a_before_task_that_raises_on_the_last_receive_dead_letters_the_message_with_its_error(aws):
    # GIVEN a middleware whose before_task raises, and a message on its last receive
    send(aws, "/ok")
    # WHEN it runs
    failed = run(aws, one_task("/ok", lambda t: None), [raising("before_task")], settings_values={"max_retries": 1})
    # THEN it is dead-lettered with the middleware's error as its reason
    assert failed == set()
    [dead] = dead_letter_sends(aws)
    assert (reason_of(dead)["error_type"], reason_of(dead)["error_message"]) == ("RuntimeError", "before_task broke")


def test_a_before_batch_that_raises_fails_every_message_of_the_batch(aws):
    # GIVEN two messages and a middleware whose before_batch raises
    send(aws, "/ok")
    send(aws, "/ok")
    ran: list[str] = []
    # WHEN the batch runs
    failed = run(aws, one_task("/ok", lambda t: ran.append(t.message_id)), [raising("before_batch")])
    # THEN no task ran and both messages are reported failed, each with a backoff
    assert len(failed) == 2 and ran == []
    assert [e["VisibilityTimeout"] > 0 for e in aws.params("ChangeMessageVisibilityBatch")[-1]["Entries"]] == [True, True]


@pytest.mark.parametrize("hook", ["after_task", "after_batch", "on_dead_letter"])
def test_hooks_after_a_fate_that_raise_are_logged_and_the_fate_stands(aws, hook):
    # GIVEN a middleware whose hook raises, a task that succeeds and one that is dead-lettered
    tasks = one_task("/ok", lambda t: None)

    @tasks.task("/refuse")
    def refuse(task: Task) -> None:
        raise NonRetryableError("no")

    send(aws, "/ok")
    send(aws, "/refuse")
    # WHEN the batch runs
    failed = run(aws, tasks, [raising(hook)])
    # THEN neither is reported failed: one succeeded, the other is in the DLQ
    assert failed == set()
    assert len(dead_letter_sends(aws)) == 1


class Stamp(Middleware):
    """Adds a message attribute to every send."""

    def on_send(self, message: Envelope) -> None:
        message.attributes["stamp"] = {"DataType": "String", "StringValue": "stamped"}


def test_on_send_sees_a_tasks_follow_up_and_not_the_dead_letter_copy(aws):
    # GIVEN a task that sends a follow-up, then refuses
    tasks = Registry()

    @tasks.task("/work")
    def work(task: Task) -> None:
        Client(aws.queue_url, sqs=aws.sqs).send("/next", "{}")
        raise NonRetryableError("no")

    send(aws, "/work")
    # WHEN it runs with a middleware that stamps every send
    run(aws, tasks, [Stamp()])
    # THEN the follow-up carries the stamp, and the dead-letter copy goes as it came
    [follow_up] = [e for p in aws.params("SendMessageBatch") for e in p["Entries"]]
    assert follow_up["MessageAttributes"]["stamp"]["StringValue"] == "stamped"
    [copy] = dead_letter_sends(aws)
    assert "stamp" not in copy["MessageAttributes"]
    # AND a send outside any worker does not go through it
    Client(aws.queue_url, sqs=aws.sqs).send("/later", "{}")
    assert "stamp" not in aws.params("SendMessageBatch")[-1]["Entries"][0]["MessageAttributes"]


def test_a_tasks_own_middleware_runs_for_its_messages_only_inside_the_workers(aws):
    # GIVEN a worker middleware, and a task with its own
    seen: list[str] = []
    tasks = Registry()
    tasks.task("/mine", middleware=[Recorder("own", seen)])(lambda t: seen.append("task /mine"))
    tasks.task("/other")(lambda t: seen.append("task /other"))
    send(aws, "/mine")
    send(aws, "/other")
    # WHEN both run
    run(aws, tasks, [Recorder("w", seen)])
    # THEN the task's own middleware wraps only its task, inside the worker's
    mine = [line for line in seen if "/mine" in line]
    assert mine == [
        "w.before_task /mine", "own.before_task /mine",
        "w.around_task /mine >", "own.around_task /mine >", "task /mine", "own.around_task /mine <", "w.around_task /mine <",
        "w.after_task /mine succeeded None", "own.after_task /mine succeeded None",
    ]
    assert not [line for line in seen if line.startswith("own.") and "/other" in line]
    assert "own.before_batch(2)" not in seen


class EleventhAttribute(Middleware):
    """Breaks every message it sees: SQS refuses an 11th attribute."""

    def on_send(self, message: Envelope) -> None:
        for n in range(11):
            message.attributes[f"extra{n}"] = {"DataType": "String", "StringValue": "x"}


def test_an_on_send_that_breaks_messages_keeps_none_from_the_dead_letter_queue(aws):
    # GIVEN a task that refuses its message, under a middleware whose on_send SQS would refuse
    aws.sqs = StrictSQS(aws.sqs)
    tasks = one_task("/refuse", raise_(NonRetryableError("order 42 is gone")))
    send(aws, "/refuse")
    # WHEN the worker runs it
    failed = run(aws, tasks, [EleventhAttribute()])
    # THEN the message is in the DLQ all the same, with its reason
    assert failed == set()
    [copy] = dead_letter_sends(aws)
    assert "order 42 is gone" in copy["MessageAttributes"][FAILURE_ATTRIBUTE]["StringValue"]


class NeedsArguments(Middleware):
    def __init__(self, limit: int) -> None:
        self.limit = limit


def test_a_middleware_class_that_cannot_be_built_without_arguments_is_refused_in_one_line():
    # GIVEN a middleware class whose constructor needs an argument WHEN a task names it
    with pytest.raises(TaskRegistrationError) as refused:
        Registry().task("/x", middleware=[NeedsArguments])(lambda t: None)
    # THEN the error names it, what went wrong and the fix, on one line
    text = str(refused.value)
    assert "NeedsArguments()" in text and "no arguments" in text and "\n" not in text


def test_a_middleware_module_that_raises_on_import_is_refused_naming_the_reference(tmp_path, monkeypatch):
    # GIVEN a module that raises as it is imported
    (tmp_path / "broken_middleware.py").write_text("raise NameError('oops at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # WHEN the middleware setting names it THEN the error names the reference and the module's error
    with pytest.raises(MiddlewareError, match=r"middleware 'broken_middleware:Thing' could not be loaded \(NameError: oops at import\)"):
        load(["broken_middleware:Thing"])


class LegacyPaths(Middleware):
    """Routes an old path to its new one, as a before_task hook may: before routing (docs/middleware.md)."""

    def before_task(self, batch: Any, task: Task) -> None:
        if task.path == "/old":
            task.path = "/new"


def test_a_before_task_that_changes_the_tasks_path_routes_the_message_by_its_new_path(aws):
    # GIVEN a task at /new only, and a middleware that moves /old to /new before routing
    ran: list[str] = []
    tasks = one_task("/new", lambda t: ran.append(t.path))
    send(aws, "/old")
    # WHEN a message sent to /old runs
    failed = run(aws, tasks, [LegacyPaths()])
    # THEN the task at /new runs it
    assert failed == set()
    assert ran == ["/new"]
