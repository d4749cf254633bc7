"""`send --track` and `worker-tier job ID`: a tracked job's state, result and history, as text and as JSON."""

from __future__ import annotations


from tests.cli.deployment import NOW, parsed
from worker_tier.core import contract, jobs


def run_job(deployment, job_id: str, result) -> None:
    """The job's running and succeeded changes, as a worker writes them, a second after the send."""
    at = int(NOW.timestamp() * 1000) + 1000
    jobs.apply(deployment.dynamodb, deployment.state_table, jobs.Transition(
        job_id, contract.JOB_RUNNING, at, 3600, fields={"attempt": 1, "worker": {"function": "fn"}}))
    jobs.apply(deployment.dynamodb, deployment.state_table, jobs.Transition(
        job_id, contract.JOB_SUCCEEDED, at + 500, 3600, fields={"result": result}))


def test_send_track_prints_the_job_id_and_the_job_reads_queued(deployment):
    # WHEN a message is sent with --track
    sent = parsed(deployment.run("send", "/report", "{}", "--track", "--json"))
    # THEN its job id is printed, and the job reads queued
    shown = parsed(deployment.run("job", sent["job_id"], "--json"))
    assert (shown["job_id"], shown["state"], shown["path"], shown["final"]) == (sent["job_id"], "queued", "/report", False)
    [got] = deployment.drain(deployment.queue_url)
    assert got["MessageAttributes"][contract.JOB_ATTRIBUTE]["StringValue"] == sent["job_id"]


def test_send_track_for_people_names_the_command_that_shows_the_job(deployment):
    result = deployment.run("send", "/report", "{}", "--track")
    job_id = result.stdout.split("(job ")[1].split(":")[0]
    assert result.exit_code == 0 and f"worker-tier job {job_id}" in result.stdout


def test_job_shows_a_succeeded_job_with_its_result_and_history(deployment):
    # GIVEN a tracked job that ran and returned a result
    job_id = parsed(deployment.run("send", "/add", "[1, 2]", "--track", "--json"))["job_id"]
    run_job(deployment, job_id, '{"sum": 3}')
    # WHEN it is shown
    text = deployment.run("job", job_id)
    shown = parsed(deployment.run("job", job_id, "--json"))
    # THEN the text has its state, worker, result and each change; the JSON has the result decoded
    assert text.exit_code == 0
    assert "state     succeeded (final)" in text.stdout and 'result    {"sum": 3}' in text.stdout
    assert "worker    function=fn" in text.stdout
    assert [line.split()[3] for line in text.stdout.splitlines()[-3:]] == ["queued", "running", "succeeded"]
    assert shown["result"] == {"sum": 3} and [e["state"] for e in shown["history"]] == ["queued", "running", "succeeded"]


def test_job_of_an_unknown_id_says_so_and_exits_1(deployment):
    result = deployment.run("job", "0" * 32)
    assert result.exit_code == 1 and f"no job {'0' * 32} in state table state" in result.stderr


def test_job_of_something_that_is_no_job_id_is_a_usage_error(deployment):
    result = deployment.run("job", "not-a-job")
    assert result.exit_code == 2 and "a job id is 32 lower-case hex digits" in result.stderr


def test_send_track_without_the_state_table_names_its_option(deployment):
    result = deployment.run("send", "/x", "{}", "--track", state=False)
    assert result.exit_code == 2 and "--state-table" in result.stderr




def test_job_shows_a_reason_with_terminal_escapes_escaped(deployment):
    # GIVEN a job dead-lettered with an error text carrying terminal escape sequences
    job_id = parsed(deployment.run("send", "/parse", "{}", "--track", "--json"))["job_id"]
    at = int(NOW.timestamp() * 1000) + 1000
    hostile = "ValueError: bad row \x1b]0;owned\x07\x1b[2J\x1b[1;31mdone\x1b[0m"
    jobs.apply(deployment.dynamodb, deployment.state_table, jobs.Transition(job_id, contract.JOB_RUNNING, at, 3600))
    jobs.apply(deployment.dynamodb, deployment.state_table, jobs.Transition(
        job_id, contract.JOB_DEAD_LETTERED, at + 500, 3600, fields={"reason": hostile}, details={"reason": hostile}))
    # WHEN it is shown as text
    text = deployment.run("job", job_id)
    # THEN no escape character reaches the terminal
    assert text.exit_code == 0 and "bad row" in text.stdout
    assert "\x1b" not in text.stdout and "\x07" not in text.stdout

