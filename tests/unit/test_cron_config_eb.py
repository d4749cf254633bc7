"""cron.yaml as EB's sqsd reads it: each file EB accepts deploys with EB's meaning (and a warning), or fails naming why."""

from datetime import datetime, timezone

import pytest

from worker_tier.core.errors import CronConfigError
from worker_tier.periodic.cron_config import load, parse
from worker_tier.periodic.cron_preview import render


def _one(entry: str) -> str:
    return f"version: 1\ncron:\n{entry}"


def test_a_description_is_ignored_as_eb_ignores_it_with_a_warning():
    # GIVEN an entry with a key EB ignores
    text = _one(" - name: backup\n   url: /backup\n   schedule: '0 3 * * *'\n   description: nightly backup\n")
    # WHEN parsed
    [entry] = parse(text)
    # THEN it deploys as if the key were absent, and synth will say the key was ignored
    assert (entry.name, entry.url, entry.schedule, entry.expressions) == ("backup", "/backup", "0 3 * * *", ("cron(0 3 * * ? *)",))
    assert entry.warnings == (
        "ignored key(s) 'description', as EB ignores them (Worker Tier reads name, url, schedule, timezone, body, enabled, priority)",
    )


def test_an_entry_eb_reads_as_written_has_no_warning():
    [entry] = parse(_one(" - name: backup\n   url: /backup\n   schedule: '0 3 * * *'\n"))
    assert entry.warnings == ()


def test_a_url_without_a_leading_slash_deploys_to_the_path_eb_posts_to():
    # GIVEN a url written without its '/'
    [entry] = parse(_one(" - name: backup\n   url: tasks/backup\n   schedule: '@daily'\n"))
    # WHEN parsed  THEN the tick goes to '/tasks/backup', as EB's HTTP client posts it, and synth says so
    assert entry.url == "/tasks/backup"
    assert entry.warnings == (
        "url 'tasks/backup' has no leading '/': EB posts it to '/tasks/backup' (its HTTP client adds the '/'), and so "
        "does Worker Tier, whose ticks carry '/tasks/backup' in beanstalk.sqsd.path (EB's carry 'tasks/backup'); "
        "write url: '/tasks/backup' to silence this warning",
    )


@pytest.mark.parametrize("written, name", [("42", "42"), ("0", "0"), ("-7", "-7")])
def test_a_plain_decimal_name_is_its_digits_as_on_eb(written, name):
    # GIVEN a name written as a plain number  WHEN parsed  THEN the name is its digits, without a warning
    [entry] = parse(_one(f" - name: {written}\n   url: /a\n   schedule: '@hourly'\n"))
    assert (entry.name, entry.warnings) == (name, ())


@pytest.mark.parametrize(
    "written, message",
    [
        ("0x1F", "name 0x1F is read by YAML as the integer 31"),
        ("0755", "name 0755 is read by YAML as the integer 493"),
        ("1_000", "name 1_000 is read by YAML as the integer 1000"),
        ("-0", "name -0 is read by YAML as the integer 0"),
        ("1.5", "name 1.5 is read by YAML as the number 1.5"),
        ("yes", "name True is read by YAML as the boolean True"),
    ],
)
def test_a_name_yaml_reads_as_another_value_is_refused_with_how_to_quote_it(written, message):
    # GIVEN a name YAML turns into a value whose text differs from what was written (or may differ on EB)
    text = _one(f" - name: {written}\n   url: /a\n   schedule: '@hourly'\n")
    # WHEN parsed  THEN synth stops, saying what YAML read and how to quote it
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value).startswith(f"cron.yaml line 3, entry {written if written != 'yes' else 'True'}: {message}, not as the text written")
    assert "quote it: name: \"" in str(error.value)


def test_of_entries_sharing_a_name_the_last_deploys_with_a_warning():
    # GIVEN three entries, two named 'report' (EB keeps the last one, silently)
    text = _one(
        " - {name: report, url: /old, schedule: '0 1 * * *'}\n"
        " - {name: other, url: /other, schedule: '@daily'}\n"
        " - {name: report, url: /new, schedule: '0 2 * * *'}\n"
    )
    # WHEN parsed
    entries = parse(text)
    # THEN the last 'report' deploys, and synth names the line of the one it replaces
    assert [(e.name, e.url, e.line) for e in entries] == [("other", "/other", 4), ("report", "/new", 5)]
    assert entries[1].warnings == (
        "replaces the entry(ies) of the same name at line(s) 3: EB keeps only the last entry of a name, and so does "
        "Worker Tier, so those do not deploy; remove or rename them to silence this warning",
    )


def test_a_number_and_a_string_naming_two_entries_alike_are_refused():
    # GIVEN 42 and '42': two names on EB (its entries are keyed by the YAML value), one name here
    text = _one(" - {name: 42, url: /a, schedule: '@daily'}\n - {name: '42', url: /b, schedule: '@hourly'}\n")
    # WHEN parsed  THEN synth stops, saying what EB would have done
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value) == (
        "cron.yaml line 4, entry '42': named like the entry at line 3, one as a number and one as a string; EB would "
        "run both (42 and '42' are two names there), Worker Tier cannot (a tick is claimed by name): rename one"
    )


@pytest.mark.parametrize(
    "schedule, mistake",
    [
        ("0 0 3 * * *", "the first field '0' looks like seconds (Quartz or Spring cron): then write '0 3 * * *'; EB's "
                        "parse-cron would drop the 6th field and run '0 0 3 * *'"),
        ("0 12 * * MON 2030", "the 6th field '2030' looks like a year (EventBridge's), which cron.yaml has none of "
                              "(it cannot run in some years only); write it as 5 fields (minute hour day-of-month month "
                              "day-of-week)"),
        ("0 3 * * ? *", "these look like EventBridge's fields (the 6th is the year), write '0 3 * * *'"),
        ("0 12 * * MON banana", "EB's parse-cron ignores a 6th field; write '0 12 * * MON'"),
    ],
)
def test_a_six_field_schedule_is_refused_naming_the_likely_dialect_and_the_5_field_line(schedule, mistake):
    # GIVEN a schedule with 6 fields: EB documents 5, and its parse-cron silently drops the 6th, so Quartz's
    # daily 03:00 (seconds first) would run monthly
    text = _one(f" - name: a\n   url: /a\n   schedule: '{schedule}'\n")
    # WHEN parsed  THEN it is refused, naming the likely mistake and the 5-field line to write
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value) == (f"cron.yaml line 3, entry 'a': schedule '{schedule}' has 6 fields, but cron.yaml's "
                                f"schedule has 5 (minute hour day-of-month month day-of-week); {mistake}")


def test_one_entry_may_carry_several_warnings():
    [entry] = parse(_one(" - name: a\n   url: a\n   schedule: '* * * * *'\n   description: x\n"))
    assert [w.split(" ")[0] for w in entry.warnings] == ["ignored", "url"]


@pytest.mark.parametrize(
    "text, message",
    [
        (_one(" - name: a\n   url: /a\n   schedule: @daily\n"),
         "cron.yaml line 5: not valid YAML: while scanning for the next token: found character '@' that cannot start any token"),
        (_one(" - name: a\n   url: /a\n   schedule: '0 0 12 * * ? *'\n"),
         "cron.yaml line 3, entry 'a': schedule '0 0 12 * * ? *': schedule '0 0 12 * * ? *' has 7 fields"),
        ("cron: []\n", "cron.yaml line 1: 'version: 1' is missing"),
        ("version: 2\ncron: []\n", "cron.yaml line 1: 'version' must be 1, got 2"),
        ("# version: 1\n", "cron.yaml line 1: the file has no content"),
        (_one(" \u2013 name: a\n   url: /a\n   schedule: '@daily'\n"), "cron.yaml line 4: not valid YAML"),
        (_one(" - name: a\n   url: /a\n   schedule: \u201c0 * * * *\u201d\n"),
         "cron.yaml line 3, entry 'a': schedule '\u201c0 * * * *\u201d': minute field: '\u201c0' is not a value, range or step"),
    ],
)
def test_what_eb_refuses_is_still_refused_with_a_line(text, message):
    # GIVEN a file EB's sqsd refuses (an unquoted '@', 7 Quartz fields, no or another version, all comments,
    # a typographic dash or quotes)  WHEN parsed  THEN synth stops too, naming a line
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value).startswith(message)


def test_a_character_yaml_refuses_is_named_with_its_line():
    # GIVEN a control character on line 4 (PyYAML's reader error has no mark, only an offset)
    text = _one(" - name: a\n   url: /a\x07\n   schedule: '@daily'\n")
    # WHEN parsed  THEN the error names line 4 and the character
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value) == (
        "cron.yaml line 4: not valid YAML: character #x0007 is not allowed in YAML (special characters are not "
        "allowed); remove it"
    )


EB_WORKER_CRON = """\
version: 1
cron:
 - name: "update-hourly"
   url: "update/hourly"
   schedule: "0 * * * *"
   description: "refresh the hourly feeds"
 - name: 2
   url: "/cleanup/"
   schedule: "*/5 * * * *"
 - name: "update-hourly"
   url: "/update/hourly/"
   schedule: "5 * * * *"
"""


def test_a_file_written_for_eb_loads_with_every_difference_warned(tmp_path):
    # GIVEN a cron.yaml as EB worker apps write them, with each thing EB accepts and Worker Tier used to refuse
    path = tmp_path / "cron.yaml"
    path.write_text(EB_WORKER_CRON)
    # WHEN loaded
    entries = load(path)
    # THEN it deploys what EB runs: the numeric name, and the last 'update-hourly' (the first one's warnings go with it)
    assert [(e.name, e.url, e.schedule, e.line) for e in entries] == [
        ("2", "/cleanup/", "*/5 * * * *", 7),
        ("update-hourly", "/update/hourly/", "5 * * * *", 10),
    ]
    assert entries[0].warnings == ()
    assert entries[1].warnings[0].startswith("replaces the entry(ies) of the same name at line(s) 3")


def test_the_preview_shows_the_schedule_that_deploys_and_each_warning():
    # GIVEN an entry with a url without '/'  WHEN previewed (make cron-next)
    entries = parse(_one(" - name: a\n   url: a\n   schedule: '0 12 * * *'\n"))
    lines = render(entries, datetime(2026, 1, 1, tzinfo=timezone.utc), count=1).splitlines()
    # THEN the schedule that deploys, its next run, and the warning
    assert lines == [
        "a  '0 12 * * *' (UTC) -> /a",
        "  EventBridge: cron(0 12 * * ? *)",
        f"  warning: {entries[0].warnings[0]}",
        "  2026-01-01 12:00 UTC   2026-01-01 12:00 UTC",
    ]


@pytest.mark.parametrize(
    "schedule, eb, ours",
    [
        ("0 0 *,5 * MON", "every day", "MON"),
        ("0 0 1-31 * */2", "every day", "SUN,TUE,THU,SAT"),
    ],
)
def test_day_fields_parse_cron_reads_otherwise_are_refused(schedule, eb, ours):
    # GIVEN day fields where parse-cron (only a bare '*' is "any day") and standard cron disagree
    text = _one(f" - name: a\n   url: /a\n   schedule: '{schedule}'\n")
    # WHEN parsed  THEN synth stops with both readings
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value) == (
        f"cron.yaml line 3, entry 'a': schedule '{schedule}': EB's parse-cron reads its day fields differently: it runs "
        f"on {eb}, Worker Tier (standard cron) on {ours}; write a bare '*' in a day field that should not restrict the "
        "day, and no '*' in one that should"
    )


@pytest.mark.parametrize("schedule", ["0 6 1 * MON", "0 0 */1 * 1", "@weekly", "0 0 1,15 * *", "0 0 * * 0,7", "0 0 * * *"])
def test_day_fields_both_read_alike_deploy(schedule):
    [entry] = parse(_one(f" - name: a\n   url: /a\n   schedule: '{schedule}'\n"))
    assert entry.warnings == ()
