"""cron.yaml: EB's format as is, the extensions, and every validation error with its message."""

import pytest

from infra.cron_config import CronConfigError, parse

EB_EXAMPLE = """\
version: 1
cron:
 - name: "backup-job"
   url: "/backup"
   schedule: "0 */12 * * *"
 - name: "audit"
   url: "/audit"
   schedule: "0 23 * * *"
"""


def test_eb_example_parses_unchanged():
    # GIVEN EB's documented cron.yaml  WHEN parsed
    entries = parse(EB_EXAMPLE)
    # THEN both entries, UTC, EB's body, enabled, with their lines
    assert [(e.name, e.url, e.schedule, e.timezone, e.body, e.enabled, e.line) for e in entries] == [
        ("backup-job", "/backup", "0 */12 * * *", "UTC", "elasticbeanstalk scheduled job", True, 3),
        ("audit", "/audit", "0 23 * * *", "UTC", "elasticbeanstalk scheduled job", True, 6),
    ]
    assert entries[0].expressions == ("cron(0 0,12 * * ? *)",)


def test_extensions():
    entries = parse(
        'version: 1\ncron:\n - name: "r"\n   url: "/r"\n   schedule: "0 9 * * MON"\n'
        '   timezone: "America/New_York"\n   body: "{\\"kind\\": \\"weekly\\"}"\n   enabled: false\n'
    )
    assert (entries[0].timezone, entries[0].body, entries[0].enabled) == ("America/New_York", '{"kind": "weekly"}', False)


def _one(entry: str) -> str:
    return f"version: 1\ncron:\n{entry}"


@pytest.mark.parametrize(
    "text, message",
    [
        ("version: 2\ncron: []\n", "cron.yaml: 'version' must be 1, got 2"),
        ("cron: []\n", "cron.yaml: 'version' must be 1, got None"),
        ("version: 1\ncron: {}\n", "cron.yaml: 'cron' must be a list of entries, got dict"),
        ("- a\n", "cron.yaml: must be a mapping with 'version: 1' and a 'cron' list"),
        ("version: 1\ncron: [\n", "cron.yaml: not valid YAML"),
        (_one(' - url: "/a"\n   schedule: "* * * * *"\n'), "cron.yaml line 3, entry 1: 'name' is required and must be a non-empty string"),
        (_one(' - name: "a"\n   schedule: "* * * * *"\n'), "cron.yaml line 3, entry 'a': 'url' is required and must be a non-empty string"),
        (_one(' - name: "a"\n   url: "/a"\n'), "cron.yaml line 3, entry 'a': 'schedule' is required and must be a non-empty string"),
        (_one(' - name: "a"\n   url: "a"\n   schedule: "* * * * *"\n'), "cron.yaml line 3, entry 'a': url must be a path starting with '/', got 'a'"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * *"\n'), "cron.yaml line 3, entry 'a': schedule '* * * *': schedule '* * * *' has 4 fields; standard cron has 5"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "61 * * * *"\n'), "cron.yaml line 3, entry 'a': schedule '61 * * * *': minute field: 61 is outside 0-59"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "0 0 * BOB *"\n'), "cron.yaml line 3, entry 'a': schedule '0 0 * BOB *': month field: 'BOB' is not a number or a name"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "*/0 * * * *"\n'), "cron.yaml line 3, entry 'a': schedule '*/0 * * * *': minute field: step '0' must be a whole number of at least 1"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n   timezone: "Mars/Olympus"\n'), "cron.yaml line 3, entry 'a': unknown timezone 'Mars/Olympus'; use an IANA name like 'Europe/Berlin'"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n   enabled: "no"\n'), "cron.yaml line 3, entry 'a': enabled must be true or false, got 'no'"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n   every: 5\n'), "cron.yaml line 3, entry 'a': unknown key 'every'; keys are name, url, schedule, timezone, body, enabled"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n - name: "a"\n   url: "/b"\n   schedule: "0 * * * *"\n'), "cron.yaml line 6, entry 'a': duplicate name (first at line 3)"),
        (_one(" - just a string\n"), "cron.yaml: entry 1 must be a mapping with name, url and schedule"),
    ],
)
def test_every_error_names_line_entry_and_problem(text, message):
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value).startswith(message)
