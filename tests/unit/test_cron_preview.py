"""The next-runs preview a person checks before deploying."""

from datetime import datetime, timezone

from worker_tier.periodic.cron_config import parse
from worker_tier.periodic.cron_preview import main, render

ENTRIES = parse(
    'version: 1\ncron:\n - name: "berlin-morning"\n   url: "/m"\n   schedule: "30 7 * * MON-FRI"\n'
    '   timezone: "Europe/Berlin"\n'
)


def test_preview_lists_next_runs_in_utc_and_local_time_across_dst():
    # GIVEN a weekday 07:30 Berlin schedule, the Thursday before summer time ends (2026-10-25)
    now = datetime(2026, 10, 22, 12, 0, tzinfo=timezone.utc)
    # WHEN previewed
    text = render(ENTRIES, now, count=3)
    # THEN the UTC time shifts by an hour when Berlin leaves summer time; local time stays 07:30
    assert text.splitlines() == [
        "berlin-morning  '30 7 * * MON-FRI' (Europe/Berlin) -> /m",
        "  EventBridge: cron(30 7 ? * MON-FRI *)",
        "  2026-10-23 05:30 UTC   2026-10-23 07:30 CEST",
        "  2026-10-26 06:30 UTC   2026-10-26 07:30 CET",
        "  2026-10-27 06:30 UTC   2026-10-27 07:30 CET",
    ]


def test_preview_of_a_bad_file_prints_the_error(tmp_path, capsys):
    bad = tmp_path / "cron.yaml"
    bad.write_text("version: 3\ncron: []\n")
    assert main([str(bad)]) == 1
    assert capsys.readouterr().err.strip() == "cron.yaml line 1: 'version' must be 1, got 3"


def test_preview_of_a_schedule_that_never_fires_prints_the_error(tmp_path, capsys):
    # GIVEN a healthy entry and one on 30 February (formerly: croniter raised CroniterBadDateError)
    path = tmp_path / "cron.yaml"
    path.write_text(
        "version: 1\ncron:\n - {name: ok, url: /ok, schedule: '* * * * *'}\n"
        " - {name: feb30, url: /x, schedule: '0 0 30 2 *'}\n"
    )
    # WHEN previewed  THEN it exits 1 with the entry and the rule, not a traceback
    assert main([str(path)]) == 1
    assert capsys.readouterr().err.strip() == (
        "cron.yaml line 4, entry 'feb30': schedule '0 0 30 2 *': never fires: its earliest day-of-month is 30, "
        "and none of its months (FEB) has that many days (February counts 29)"
    )
