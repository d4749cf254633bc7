"""The ``worker-tier`` command line: ``status``, ``dlq list``, ``dlq show``, ``redrive``, ``send``, ``job``, ``cron next``,
``tail``.

Every read command prints a table for people and, with ``--json``, one JSON document for scripts; a
command that walks many messages shows a progress bar on a terminal (never with ``--json`` or piped).
"""

from __future__ import annotations

import sys
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, TypeVar

import click
from botocore.exceptions import BotoCoreError, ClientError

from worker_tier.core import contract, limits
from worker_tier.core.settings import DEFAULT_PAYLOAD_MAX_BYTES
from worker_tier.delays.cancellation import CANCELLABLE_MIN_DELAY_SECONDS
from worker_tier_cli import body as message_body
from worker_tier_cli import dead_letters, delayed, offloaded, redrive, report, status
from worker_tier_cli.cron import cron_group
from worker_tier_cli.redrive import POINTER_NOTE
from worker_tier_cli.output import emit_json, progress_bar, table
from worker_tier_cli.session import Runtime, Session, parse_time
from worker_tier_cli.tail import tail_command
from worker_tier_cli.ui.command import ui_command
from worker_tier_cli.target import OPTION_NAMES, STACK_OUTPUTS, STACK_VARIABLE, VARIABLES, WORKER_VARIABLE, TargetError

F = TypeVar("F", bound=Callable[..., Any])
EXIT_CODE_USAGE = 2  # click's own for usage errors; ours for a target that cannot be found or a refused message
# What a server without StartMessageMoveTask answers: moto's server a bare HTTP 500 (botocore's code "500", never
# an AWS error code), moto in-process NotImplementedError. Falling back is safe: the batch move loses nothing.
MOVE_TASK_UNAVAILABLE_CODES = frozenset({"UnsupportedOperation", "InvalidAction", "NotImplemented", "500"})
MOVE_TASK_FALLBACK_NOTE = "StartMessageMoveTask is not available at this endpoint; moving one batch at a time instead"
INTERRUPT_NOTE = "stopping after the batch in hand (Ctrl-C again stops at once)"
MOVE_TASK_LEFT_RUNNING = ("stopped following the move task; it keeps running on the SQS side (task handle {handle}): "
                          "aws sqs list-message-move-tasks to follow it, aws sqs cancel-message-move-task "
                          "--task-handle {handle} to stop it")
MOVE_TASK_ALREADY_RUNNING = ("a move task is already running on this DLQ (task handle {handle}), and SQS runs one at a "
                             "time: wait for it (aws sqs list-message-move-tasks), or stop it (aws sqs "
                             "cancel-message-move-task --task-handle {handle}), then run redrive again")
EXIT_CODE_INTERRUPTED = 130  # a shell's code for a run ended by SIGINT


class UsageFailure(click.ClickException):
    """A command that cannot run as asked: printed as ``Error: ...``, exit 2."""

    exit_code = EXIT_CODE_USAGE


def json_option(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")(command)


def _session() -> Session:
    session: Session = click.get_current_context().find_object(Session)  # type: ignore[assignment]
    return session


RESOURCE_NAMES = {
    "queue_url": "The work queue", "dlq_url": "The dead-letter queue", "state_table": "The state table",
    "delay_table": "The delay table", "container_queue_url": "The container worker's queue",
    "worker_log_group": "The worker's log group", "schedule_group": "The periodic tasks' schedule group",
    "payload_bucket": "The bucket large bodies are offloaded to",
    "high_queue_url": "The high priority level's queue", "low_queue_url": "The low priority level's queue",
}
# The options naming the deployment: accepted before the subcommand and after it (the later one wins).
# (flags, parameter name, help)
DEPLOYMENT_OPTIONS = (
    ("--endpoint-url", "endpoint_url", "AWS endpoint, e.g. the local environment's (default: AWS_ENDPOINT_URL)."),
    ("--region", "region", "AWS region (default: the AWS configuration's)."),
    ("--stack", "stack", f"The stack whose outputs name the queues and tables (or {STACK_VARIABLE}); with it the "
                         "WORKER_TIER_* variables are ignored. Default: the variables when set, else cdk.json's "
                         "context.worker_tier_stack, else WorkerTier."),
    ("--worker", "worker", f"The WorkerQueue construct id whose outputs to read, in a stack with several (or {WORKER_VARIABLE})."),
    *((OPTION_NAMES[resource], resource, f"{RESOURCE_NAMES[resource]} (or {VARIABLES[resource]}), instead of the stack's "
       f"{STACK_OUTPUTS[resource]} output.") for resource in STACK_OUTPUTS),
)


def _remember(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """A deployment option's value, onto the session's target (or its endpoint and region) when given."""
    if value is None:
        return
    session = ctx.find_object(Session)
    if session is None:  # the group's own options: the session is made from them in cli()
        ctx.meta.setdefault("worker_tier.deployment", {})[param.name] = value
    elif param.name in ("endpoint_url", "region"):
        setattr(session, str(param.name), value)
    else:
        session.target.give(str(param.name), value)


def deployment_options() -> list[click.Option]:
    """The deployment options, for the group and for each subcommand that reaches the deployment."""
    return [click.Option([flags, name], help=text, expose_value=False, callback=_remember)
            for flags, name, text in DEPLOYMENT_OPTIONS]


class _Group(click.Group):
    """Turns AWS and target errors into one-line messages instead of tracebacks."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TargetError as error:
            raise UsageFailure(str(error)) from error
        except (BotoCoreError, ClientError) as error:
            raise click.ClickException(str(error)) from error


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
def cli(ctx: click.Context, /) -> None:
    """Operate a Worker Tier deployment: its queues, its dead letters and the delay dispatcher.

    The deployment is named, first found wins, by options (before or after the subcommand), by --stack's
    outputs, by the WORKER_TIER_* variables (make run's banner prints them; Client.from_env() reads the same),
    else by the default stack's outputs. `python -m worker_tier worker` runs the container worker.
    """
    runtime = ctx.obj if isinstance(ctx.obj, Runtime) else Runtime()
    given = ctx.meta.pop("worker_tier.deployment", {})
    ctx.obj = Session.open(runtime, given.pop("endpoint_url", None), given.pop("region", None), given)


cli.add_command(delayed.delayed_group)  # ``delayed list`` and ``delayed cancel`` (worker_tier_cli.delayed)


# -- status -----------------------------------------------------------------------------------------


DEFAULT_WATCH_INTERVAL_SECONDS = 10.0


def _progress_shown(as_json: bool) -> bool:
    """Progress bars and styled tables: on a terminal, never with --json."""
    return _session().runtime.interactive() and not as_json


@cli.command("status")
@click.option("--watch", is_flag=True, help="Refresh until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=1), default=DEFAULT_WATCH_INTERVAL_SECONDS, show_default=True,
              help="Seconds between refreshes with --watch.")
@json_option
def status_command(watch: bool, interval: float, as_json: bool) -> None:
    """Queues (depth, in flight, delayed, oldest age), the DLQ, the delay table's backlog by hour, the delay
    dispatcher's watermark and lag, each periodic task's last and next tick, and the stack's alarms in ALARM.
    """
    session = _session()
    terminal = _progress_shown(as_json)
    try:
        while True:
            shown = report.gather(session)
            if as_json:
                emit_json(shown)
            else:
                if watch and terminal:
                    click.clear()
                if watch:
                    click.echo(f"{session.now():%Y-%m-%d %H:%M:%S} UTC (every {interval:g} s; Ctrl-C stops)")
                click.echo(report.render(shown, terminal))
            if not watch:
                return
            session.runtime.sleep(interval)
    except KeyboardInterrupt:
        click.echo("", err=True)


# -- dlq --------------------------------------------------------------------------------------------

PEEK_NOTE = (f"Reading does not consume the DLQ: messages are received with a {dead_letters.PEEK_VISIBILITY_SECONDS} s "
             "visibility timeout and released (visibility 0) before the command ends; only their receive count grows.")


@cli.group("dlq")
def dlq_group() -> None:
    """Dead-lettered messages and why they died."""


def _filter(path: str | None, error: str | None, since: str | None) -> dead_letters.Filter:
    try:
        when = parse_time(since, _session().now()) if since else None
    except ValueError as problem:
        raise click.BadParameter(str(problem), param_hint="--since") from None
    return dead_letters.Filter(path, error, when)


def filter_options(command: F) -> F:
    command = click.option("--since", help="Only those failed since: an ISO 8601 time or an age (30m, 2h, 7d).")(command)
    command = click.option("--error", "error_type", help="Only this error type (e.g. NonRetryableError).")(command)
    return click.option("--path", help="Only this task path (e.g. /resize).")(command)


@dlq_group.command("list", help="Dead letters grouped by path and error type, each group with a sample message id "
                   "(--json lists every id) for `dlq show`, and how many of its messages hold their body in S3 "
                   f"(OFFLOADED; `dlq show` reads it).\n\n{PEEK_NOTE}")
@filter_options
@click.option("--limit", type=click.IntRange(1), default=dead_letters.DEFAULT_PEEK_LIMIT, show_default=True,
              help="Read at most this many messages.")
@json_option
def dlq_list(path: str | None, error_type: str | None, since: str | None, limit: int, as_json: bool) -> None:
    session = _session()
    which = _filter(path, error_type, since)
    dlq_url = session.target.required("dlq_url")
    sqs, shown = session.client("sqs"), _progress_shown(as_json)
    total = min(limit, status.queue_counts(sqs, dlq_url)["visible"]) if shown else None
    with progress_bar(shown, "reading the DLQ", total) as advance, \
            dead_letters.peek(sqs, dlq_url, limit, session.runtime.wait_seconds, advance) as letters:
        dead, unjoined = dead_letters.join(letters)
        pointers = [m for m in dead if m.points_to is not None and which.matches(m)]
        groups = dead_letters.group([m for m in dead if which.matches(m) and m.points_to is None])
    if as_json:
        emit_json({"dlq_url": dlq_url, "read": len(dead), "limit": limit,
                   "reason_records_joined": sum(len(m.records) for m in dead),
                   "reason_records_unjoined": [m.message_id for m in unjoined],
                   "delay_pointers": [{"message_id": m.message_id, **(m.points_to or {})} for m in pointers],
                   "groups": [vars(g) for g in groups]})
        return
    rows = [(g.path, g.error_type, g.count, g.offloaded, g.first_failed_at, g.last_failed_at, g.message_ids[0],
             g.sample_reason) for g in groups]
    click.echo(table(("path", "error", "count", "offloaded", "first failed", "last failed", "sample id", "sample reason"),
                     rows))
    more = " (the limit: there may be more)" if len(letters) >= limit else ""
    click.echo(f"{sum(g.count for g in groups)} matching of {len(dead)} read{more} from {dlq_url}; all released")
    for pointer in pointers:
        click.echo(f"{pointer.message_id}: {POINTER_NOTE.format(**(pointer.points_to or {}))} (not counted)")
    if unjoined:
        click.echo(f"{len(unjoined)} reason record(s) whose message was not among those read (not counted): "
                   f"{', '.join(m.message_id for m in unjoined)}")


@dlq_group.command("show", help="One dead letter: its body, attributes and reason. An offloaded body (the message holds "
                   "an S3 pointer and ExtendedPayloadSize) is read from S3 with your credentials, from the deployment's "
                   f"payload bucket only when that is known.\n\n{PEEK_NOTE}")
@click.argument("message_id")
@click.option("--limit", type=click.IntRange(1), default=dead_letters.DEFAULT_PEEK_LIMIT, show_default=True,
              help="Read at most this many messages looking for it.")
@json_option
def dlq_show(message_id: str, limit: int, as_json: bool) -> None:
    session = _session()
    dlq_url = session.target.required("dlq_url")
    with dead_letters.peek(session.client("sqs"), dlq_url, limit, session.runtime.wait_seconds) as letters:
        dead, unjoined = dead_letters.join(letters)  # a message too large for its reason shows its record's
        found = next((m for m in [*dead, *unjoined] if m.message_id == message_id), None)
    if found is None:
        raise click.ClickException(f"message {message_id} is not among the {len(letters)} messages read from {dlq_url}")
    payload = _offloaded_body(session, found)
    shown = {"message_id": found.message_id, "path": found.path, "error_type": found.error_type,
             "reason": found.reason, "attributes": found.original_attributes(), "system_attributes": found.system,
             "body": found.body if payload is None else payload.body}
    if payload is not None:
        shown["payload"] = payload.as_json()
    if as_json:
        emit_json(shown)
        return
    for key in ("message_id", "path", "error_type"):
        click.echo(f"{key}: {shown[key]}")
    for key, value in found.reason.items():
        click.echo(f"reason.{key}: {value}")
    for name, value in found.original_attributes().items():
        click.echo(f"attribute {name}: {value.get('StringValue', value.get('BinaryValue'))}")
    for line in ["body:", found.body] if payload is None else payload.lines():
        click.echo(line)


def _offloaded_body(session: Session, letter: dead_letters.DeadLetter) -> offloaded.OffloadedBody | None:
    """An offloaded message's body, read from S3 (None for a message that holds its own body)."""
    if not letter.offloaded:
        return None
    return offloaded.read(letter.body, letter.attributes, session.target.optional("payload_bucket"),
                          session.client("s3"), session.runtime.sleep)


# -- redrive ----------------------------------------------------------------------------------------


@cli.command("redrive")
@filter_options
@click.option("--rate", type=click.IntRange(1), help="Messages per second (StartMessageMoveTask's limit; no filter only).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--resend-possibly-sent", is_flag=True,
              help="Move again the messages an earlier run named possibly sent (check the work queue first).")
@json_option
def redrive_command(path: str | None, error_type: str | None, since: str | None, rate: int | None, yes: bool,
                    resend_possibly_sent: bool, as_json: bool) -> None:
    """Move dead letters back to the work queue, without their reason (the receive count starts again).

    With a filter: one batch at a time, receive, send, and delete from the DLQ only what was sent, so no
    message is lost; it reports moved, skipped and failed. Without one: SQS's StartMessageMoveTask,
    followed to the end (where it is unavailable, as on moto's own server, the batch move).
    Asks first on a terminal; --yes skips the question. Ctrl-C stops after the batch in hand; a journal on this
    machine names what a stopped run sent, so a rerun sends nothing twice.
    """
    session = _session()
    which = _filter(path, error_type, since)
    queue_url, dlq_url = session.target.required("queue_url"), session.target.required("dlq_url")
    if session.runtime.interactive() and not yes:
        what = "all dead letters" if which.empty else "matching dead letters"
        click.confirm(f"Move {what} from {dlq_url} to {queue_url}?", abort=True)
    sqs = session.client("sqs")
    shown = _progress_shown(as_json)
    total = status.queue_counts(sqs, dlq_url)["visible"] if shown else None
    levels = redrive.priority_levels(session.target, queue_url)
    if which.empty and not levels.enabled:  # SQS's move task sends everything to one queue: no level would be kept
        task = _move_task(sqs, dlq_url, queue_url, rate, shown, session.runtime.sleep)
        if task is not None:
            _print_move_task(task, as_json)
            return
    elif rate is not None:
        click.echo(f"--rate {rate} does not apply: "
                   + ("a filter" if not which.empty else "priority levels (each letter goes back to its level's queue)")
                   + " needs the batch move, which sends as fast as SQS answers", err=True)
    try:
        journal = redrive.Journal.for_queue(session.runtime.state_dir, dlq_url, session.runtime.clock)
    except redrive.JournalError as error:
        raise click.ClickException(str(error)) from error
    with progress_bar(shown, "redriving", total) as advance:
        moved = redrive.move_batches(sqs, dlq_url, queue_url, which, session.runtime.wait_seconds,
                                     lambda so_far: advance(so_far.moved + so_far.skipped + so_far.failed, None,
                                                            _counts(so_far)), session.runtime.clock,
                                     session.runtime.sleep, journal, resend_possibly_sent,
                                     lambda: click.echo(INTERRUPT_NOTE, err=True),
                                     session.client("sqs", redrive.NO_RETRIES), levels if levels.enabled else None)
    _print_report(moved, "batches", as_json)
    if moved.stopped == redrive.INTERRUPTED:
        raise SystemExit(EXIT_CODE_INTERRUPTED)
    if moved.failed or moved.not_deleted or moved.possibly_sent or moved.stopped or moved.delay_pointers_kept:
        raise SystemExit(1)


def _move_task(sqs: Any, dlq_url: str, queue_url: str, rate: int | None, shown: bool,
               sleep: Callable[[float], None]) -> dict[str, Any] | None:
    """StartMessageMoveTask followed to its end with a progress bar; None when the endpoint has no move task (say so)."""
    try:
        handle = redrive.start_move_task(sqs, dlq_url, queue_url, rate)
    except (NotImplementedError, ClientError) as error:
        if isinstance(error, ClientError) and error.response.get("Error", {}).get("Code") not in MOVE_TASK_UNAVAILABLE_CODES:
            raise
        running = redrive.running_move_task(sqs, dlq_url)  # SQS answers a second task UnsupportedOperation too
        if running is not None:
            raise click.ClickException(MOVE_TASK_ALREADY_RUNNING.format(handle=running.get("TaskHandle", "?"))) from error
        click.echo(MOVE_TASK_FALLBACK_NOTE, err=True)
        return None
    try:
        with progress_bar(shown, "move task") as advance:
            return redrive.follow_move_task(sqs, dlq_url, handle, sleep, lambda task: advance(
                int(task.get("ApproximateNumberOfMessagesMoved", 0)), task.get("ApproximateNumberOfMessagesToMove")))
    except KeyboardInterrupt:
        click.echo(MOVE_TASK_LEFT_RUNNING.format(handle=handle), err=True)
        raise SystemExit(EXIT_CODE_INTERRUPTED) from None


def _print_move_task(task: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json({"method": "move_task", "task": task})
        return
    click.echo(f"move task {task.get('Status', '?')}: {task.get('ApproximateNumberOfMessagesMoved', 0)} moved"
               + (f" ({task['FailureReason']})" if task.get("FailureReason") else ""))


def _counts(report: redrive.MoveReport) -> str:
    return redrive.counts_line(report)


def _print_report(report: redrive.MoveReport, method: str, as_json: bool) -> None:
    if as_json:
        emit_json({"method": method, **vars(report)})
        return
    click.echo(_counts(report))
    for line in redrive.report_notes(report):
        click.echo(line, err=True)


# -- send -------------------------------------------------------------------------------------------


@cli.command("send")
@click.argument("path")
@click.argument("body")
@click.option("--delay", type=float, help="Seconds before it is due (beyond 15 minutes: through the delay table).")
@click.option("--at", "at_text", help="When it is due: an ISO 8601 time (UTC when it names no zone).")
@click.option("--attr", "attrs", multiple=True, metavar="NAME=VALUE", help="A String message attribute; repeatable.")
@click.option("--dedupe-key", help="At most one message per key is accepted.")
@click.option("--group", "group_id", help="The MessageGroupId (FIFO queues only, and required there).")
@click.option("--cancellable", is_flag=True,
              help="Keep it in the delay table so `delayed cancel KEY` can cancel it: KEY is --dedupe-key, else one "
                   f"made up and printed; due more than {CANCELLABLE_MIN_DELAY_SECONDS} s ahead; needs the state table.")
@click.option("--priority", type=click.Choice(contract.PRIORITY_LEVELS), default=contract.DEFAULT_PRIORITY,
              show_default=True, help="The level whose queue takes it (the priorities setting; docs/priorities.md).")
@click.option("--track", is_flag=True, help="Track it as a job (docs/jobs.md): prints its job id, for `worker-tier job ID`; "
                                            "needs the state table.")
@json_option
def send_command(path: str, body: str, delay: float | None, at_text: str | None, attrs: tuple[str, ...],
                 dedupe_key: str | None, group_id: str | None, cancellable: bool, priority: str, track: bool,
                 as_json: bool) -> None:
    """Send BODY to the task at PATH through worker_tier.Client, with its checks.

    BODY is the text to send, - to read it from stdin, or @PATH to read a file (@@TEXT sends @TEXT). A body
    SQS would refuse (not UTF-8, a character SQS does not carry, too large for the queue) is refused before
    anything is sent; with the deployment's payload bucket known (--payload-bucket, its variable, or the
    stack's PayloadBucketName output), a body too large for the queue goes to S3 and the queue carries a
    pointer, up to payload_max_bytes.
    """
    from worker_tier import Client, OutgoingMessage
    from worker_tier.core.errors import MessageError, MissingResourceError, SendError
    from worker_tier.producer.client import MESSAGE_ERROR_CODE

    session = _session()
    try:
        at = parse_time(at_text) if at_text else None
    except ValueError as problem:
        raise click.BadParameter(str(problem), param_hint="--at") from None
    attributes = dict(_attribute(a) for a in attrs)
    target, sqs = session.target, session.client("sqs")
    queue_url = target.required("queue_url")
    maximum = _maximum_message_size(sqs, queue_url)
    bucket = target.optional("payload_bucket")
    size = (message_body.SizeRule.offloaded(DEFAULT_PAYLOAD_MAX_BYTES, bucket) if bucket
            else message_body.SizeRule.queue(maximum or limits.SQS_MAX_MESSAGE_BYTES))
    try:
        text = message_body.read_body(body, getattr(sys.stdin, "buffer", None), size)
    except message_body.BodyError as error:
        raise UsageFailure(str(error)) from error
    _check_send_options(queue_url, group_id, cancellable, delay, at, session.now())
    dedupe_key = dedupe_key or (uuid.uuid4().hex if cancellable else None)  # `delayed cancel` finds it by its key
    state_table = target.required("state_table") if cancellable or track else None
    delay_table = target.required("delay_table") if cancellable else target.optional("delay_table")
    try:
        # A payload bucket, when one is known: the Client offloads a body too large for the queue there.
        offload: dict[str, Any] = {"payload_bucket": bucket, "s3": session.client("s3")} if bucket else {}
        levels = {level: url for level, field in contract.PRIORITY_QUEUE_FIELDS.items()
                  if priority == level and (url := target.optional(field))}
        client = Client(queue_url, delay_table, sqs=sqs, dynamodb=session.client("dynamodb"), clock=session.runtime.clock,
                        maximum_message_size=maximum, state_table=state_table, priority_queue_urls=levels, **offload)
        [sent] = client.send_batch([OutgoingMessage(path, text, delay, at, attributes or None, dedupe_key, group_id,
                                                    cancellable, priority, track)])
        if sent.code == MESSAGE_ERROR_CODE:
            raise MessageError(sent.error or "")
        if sent.message_id is None:
            raise SendError(f"the message for {path} was not sent ({sent.code}): {sent.error}", sent.code or "")
        message_id = sent.message_id
    except MissingResourceError as error:  # say how the command line names it: option, variable or stack output
        target.required(error.resource)
        raise UsageFailure(str(error)) from error
    except MessageError as error:
        raise UsageFailure(str(error)) from error
    except SendError as error:
        raise click.ClickException(str(error)) from error
    if as_json:
        emit_json({"message_id": message_id, "path": path, "queue_url": client.queue_url, "dedupe_key": dedupe_key,
                   "cancellable": cancellable, "job_id": sent.job_id})
    else:
        click.echo(f"sent {path} {message_id}" + (f" (cancel: worker-tier delayed cancel {dedupe_key})" if cancellable else "")
                   + (f" (job {sent.job_id}: worker-tier job {sent.job_id})" if sent.job_id else ""))


# -- job --------------------------------------------------------------------------------------------


@cli.command("job")
@click.argument("job_id")
@json_option
def job_command(job_id: str, as_json: bool) -> None:
    """A tracked job (send --track, Client.send(track=True)): its state, worker, result or reason, and history."""
    from worker_tier.core.errors import JobNotFoundError, MessageError
    from worker_tier_cli import job

    try:
        status = job.lookup(_session(), job_id)
    except MessageError as error:
        raise UsageFailure(str(error)) from error
    except JobNotFoundError as error:
        raise click.ClickException(str(error)) from error
    if as_json:
        emit_json(status.to_dict())
    else:
        click.echo(job.render(status, _progress_shown(as_json)))



def _maximum_message_size(sqs: Any, queue_url: str) -> int | None:
    """The queue's MaximumMessageSize, or None when it cannot be read (the Client then checks against SQS's largest)."""
    try:
        attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["MaximumMessageSize"])["Attributes"]
        return int(attributes["MaximumMessageSize"])
    except (BotoCoreError, ClientError, KeyError, ValueError):
        return None


def _check_send_options(queue_url: str, group_id: str | None, cancellable: bool, delay: float | None,
                        at: datetime | None, now: datetime) -> None:
    """UsageFailure, in the command line's own names, for options the queue or the cancel window cannot take."""
    if group_id is not None and not queue_url.endswith(".fifo"):
        raise UsageFailure(f"--group {group_id!r}: a MessageGroupId applies to FIFO queues only, and {queue_url} is a "
                           "standard queue; drop --group, or send to a FIFO queue (its URL ends in .fifo)")
    ahead = delay if delay is not None else ((at - now).total_seconds() if at is not None else 0)
    if cancellable and ahead <= CANCELLABLE_MIN_DELAY_SECONDS:
        given = "no --delay or --at" if delay is None and at is None else f"due in {ahead:g} s"
        raise UsageFailure(f"--cancellable with {given}: a cancellable message must be due more than "
                           f"{CANCELLABLE_MIN_DELAY_SECONDS} s ahead (the delay dispatcher takes it {CANCELLABLE_MIN_DELAY_SECONDS} s "
                           "before it is due, and it is cancellable only until then); give --delay or --at later than that")


def _attribute(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise click.BadParameter(f"expected NAME=VALUE, got {text!r}", param_hint="--attr")
    return name, value


# -- import-eb --------------------------------------------------------------------------------------


@cli.command("import-eb")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--cdk-json", type=click.Path(dir_okay=False, path_type=Path), default=Path("cdk.json"), show_default=True,
              help="The cdk.json whose context.worker_tier receives the settings (created when absent).")
@click.option("--dry-run", is_flag=True, help="Print the cdk.json it would write, and change nothing.")
def import_eb_command(path: Path, cdk_json: Path, dry_run: bool) -> None:
    """Import an EB worker environment's options: PATH is an app directory, a .config file or a saved configuration."""
    try:
        from worker_tier_cli import import_eb
    except ImportError as error:
        raise UsageFailure(f"import-eb needs the cdk extra ({error.name} is missing): pip install 'worker-tier[cdk,cli]'") from error
    try:
        code = import_eb.run(path, cdk_json, dry_run)
    except import_eb.EbImportError as error:
        raise click.ClickException(str(error)) from error
    if code:
        raise SystemExit(code)

cli.add_command(cron_group)
cli.add_command(tail_command)
cli.add_command(ui_command)
# Commands that never reach a deployment: cron next reads cron.yaml, import-eb writes cdk.json.
OFFLINE_COMMANDS = frozenset({"cron", "import-eb"})


def _with_deployment_options(group: click.Group) -> None:
    """The deployment options on the group and on every command under it, so they may follow the subcommand."""
    group.params.extend(deployment_options())
    pending = [command for name, command in group.commands.items() if name not in OFFLINE_COMMANDS]
    while pending:
        command = pending.pop()
        command.params.extend(deployment_options())  # a group's too: `dlq --dlq-url X list`
        if isinstance(command, click.Group):
            pending.extend(command.commands.values())


_with_deployment_options(cli)


def main(argv: list[str] | None = None, runtime: Runtime | None = None) -> int:
    """Run the command line; return its exit code."""
    try:
        cli.main(args=argv, prog_name="worker-tier", obj=runtime, standalone_mode=True)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0

