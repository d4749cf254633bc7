"""cron.yaml: EB's format as is, the extensions, and every validation error with its message."""

import pytest

from worker_tier.core.errors import CronConfigError
from worker_tier.periodic.cron_config import check_sendable, load, parse

EB_EXAMPLE = """\
version: 1
cron:
 - name: "backup-job"
   url: "/backup"
   schedule: "0 */12 * * *"
 - name: "nightly"
   url: "/nightly"
   schedule: "0 23 * * *"
"""


def test_eb_example_parses_unchanged():
    # GIVEN EB's documented cron.yaml  WHEN parsed
    entries = parse(EB_EXAMPLE)
    # THEN both entries, UTC, EB's body, enabled, with their lines
    assert [(e.name, e.url, e.schedule, e.timezone, e.body, e.enabled, e.line) for e in entries] == [
        ("backup-job", "/backup", "0 */12 * * *", "UTC", "elasticbeanstalk scheduled job", True, 3),
        ("nightly", "/nightly", "0 23 * * *", "UTC", "elasticbeanstalk scheduled job", True, 6),
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
        ("version: 2\ncron: []\n", "cron.yaml line 1: 'version' must be 1, got 2"),
        ("# EB worker\nversion: true\ncron: []\n", "cron.yaml line 2: 'version' must be 1, got True"),
        ("cron: []\n", "cron.yaml line 1: 'version: 1' is missing"),
        ("version: 1\n", "cron.yaml line 1: 'cron' is missing; it must be a list of entries"),
        ("version: 1\n\ncron: {}\n", "cron.yaml line 3: 'cron' must be a list of entries, got a mapping"),
        ("# header\n- a\n", "cron.yaml line 2: must be a mapping with 'version: 1' and a 'cron' list, got a list"),
        ("version: 1\ncron: [\n", "cron.yaml line 3: not valid YAML: while parsing a flow node: expected the node content"),
        (_one(' - url: "/a"\n   schedule: "* * * * *"\n'), "cron.yaml line 3, entry 1: 'name' is required and must be a non-empty string"),
        (_one(' - name: "a"\n   schedule: "* * * * *"\n'), "cron.yaml line 3, entry 'a': 'url' is required and must be a non-empty string"),
        (_one(' - name: "a"\n   url: "/a"\n'), "cron.yaml line 3, entry 'a': 'schedule' is required and must be a non-empty string"),
        (_one(' - name: "a"\n   url: "http://x/a"\n   schedule: "* * * * *"\n'), "cron.yaml line 3, entry 'a': url must be a path starting with '/', got 'http://x/a'; EB posts every tick to its own instance, never to another host, so write the path alone, like '/backup'"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * *"\n'), "cron.yaml line 3, entry 'a': schedule '* * * *': schedule '* * * *' has 4 fields; standard cron has 5"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "61 * * * *"\n'), "cron.yaml line 3, entry 'a': schedule '61 * * * *': minute field: 61 is outside 0-59"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "0 0 * BOB *"\n'), "cron.yaml line 3, entry 'a': schedule '0 0 * BOB *': month field: 'BOB' is not a number or a name"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "*/0 * * * *"\n'), "cron.yaml line 3, entry 'a': schedule '*/0 * * * *': minute field: step '0' must be a whole number of at least 1"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n   timezone: "Mars/Olympus"\n'), "cron.yaml line 3, entry 'a': unknown timezone 'Mars/Olympus'; use an IANA name like 'Europe/Berlin'"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n   enabled: "no"\n'), "cron.yaml line 3, entry 'a': enabled must be true or false, got 'no'"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n   enable: false\n'), "cron.yaml line 3, entry 'a': unknown key 'enable'; did you mean 'enabled'? EB would ignore 'enable', and so would Worker Tier, so write 'enabled' (keys are name, url, schedule, timezone, body, enabled, priority), or remove it"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "0 0 12 * * ? *"\n'), "cron.yaml line 3, entry 'a': schedule '0 0 12 * * ? *': schedule '0 0 12 * * ? *' has 7 fields; standard cron has 5"),
        (
            _one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n - just a string\n'),
            "cron.yaml line 6, entry 2: must be a mapping with name, url and schedule, got 'just a string'",
        ),
    ],
)
def test_every_error_names_line_entry_and_problem(text, message):
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            _one(' - name: "backup"\n   url: "/backup"\n   schedule: "0 0 * * *"\n   schedule: "* * * * *"\n'),
            "cron.yaml line 6, entry 'backup': duplicate key 'schedule' (first at line 5); "
            "YAML would keep only the last one, so remove or rename one",
        ),
        (
            _one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n') + 'cron:\n - name: "b"\n   url: "/b"\n   schedule: "@daily"\n',
            "cron.yaml line 6: duplicate key 'cron' (first at line 2); YAML would keep only the last one, so remove or rename one",
        ),
        (
            "version: 1\nversion: 1\ncron: []\n",
            "cron.yaml line 2: duplicate key 'version' (first at line 1); YAML would keep only the last one, so remove or rename one",
        ),
    ],
)
def test_a_repeated_key_names_both_lines(text, message):
    # GIVEN a cron.yaml that repeats a key (YAML alone would keep the last one, silently)
    # WHEN parsed  THEN synth stops, naming both lines
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value) == message


def test_a_merge_key_may_be_overridden():
    # GIVEN an entry that takes shared keys from an anchor and overrides one (not a repeat)
    text = 'version: 1\ncron:\n - &shared {name: "a", url: "/a", schedule: "@daily"}\n - <<: *shared\n   name: "b"\n   url: "/b"\n'
    # WHEN parsed  THEN the explicit key wins, as YAML defines
    assert [(e.name, e.url, e.schedule) for e in parse(text)] == [("a", "/a", "@daily"), ("b", "/b", "@daily")]


NIGHTLY_AND_OFTEN = """\
version: 1
cron:
 - &nightly {name: nightly, url: /nightly, schedule: "0 3 * * *"}
 - &often {name: often, url: /often, schedule: "* * * * *", body: often}
"""


@pytest.mark.parametrize(
    "merges, message",
    [
        (  # formerly: the first '<<' was replaced silently
            "   <<: *nightly\n   <<: *often\n",
            "cron.yaml line 8, entry 'backup': a second '<<' merge key (first at line 7); YAML would let this one's keys "
            "replace the first's silently, so merge them in one: '<<: [*first, *second]'",
        ),
        (  # YAML keeps the first source's schedule silently
            "   <<: [*nightly, *often]\n",
            "cron.yaml line 7, entry 'backup': the merged mappings both define 'name' (lines 3 and 4); YAML would keep "
            "the first silently, so define it in one of them",
        ),
    ],
)
def test_merges_that_would_drop_a_key_silently_are_refused_naming_both_lines(merges, message):
    # GIVEN an entry that merges two anchored entries
    text = NIGHTLY_AND_OFTEN + " - name: backup\n   url: /backup\n" + merges
    # WHEN parsed  THEN synth stops, naming both lines
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value) == message


def test_merge_sources_with_different_keys_merge():
    # GIVEN one '<<' over two mappings that share no key
    text = (
        'version: 1\ncron:\n - &when {name: a, url: /a, schedule: "@daily"}\n'
        ' - {name: b, url: /b, schedule: "@hourly", enabled: false, body: x}\n'
        ' - <<: [{schedule: "@weekly"}, {body: y}]\n   name: c\n   url: /c\n'
    )
    # WHEN parsed  THEN the entry has both sources' keys
    assert [(e.name, e.schedule, e.body) for e in parse(text)][2] == ("c", "@weekly", "y")


def test_an_unknown_top_level_key_is_refused_with_its_line():
    # GIVEN a cron.yaml with a key EB does not define (formerly: it was ignored silently)
    text = "version: 1\ncron: []\nschedules: []\n"
    # WHEN parsed  THEN synth stops, naming the key and its line
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value) == (
        "cron.yaml line 3: unknown top-level key 'schedules'; a cron.yaml has only 'version' and 'cron'. EB would "
        "ignore it; Worker Tier refuses it so that entries listed outside 'cron' are not dropped: move them under "
        "'cron', or remove the key"
    )


def _alias_levels(levels: int) -> str:
    """A cron.yaml whose entry name is a list of lists of lists, each level 10 aliases of the one below."""
    lines = ["version: 1", "cron:", " - {name: a, url: /a, schedule: '@daily', enabled: &l0 [x, x, x, x, x, x, x, x, x, x]}"]
    for level in range(1, levels):
        lines.append(f" - {{name: b{level}, url: /b, schedule: '@daily', enabled: &l{level} [" + ", ".join([f"*l{level - 1}"] * 10) + "]}")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_expands():
    # GIVEN a few hundred bytes whose aliases expand to millions of nodes (formerly: 40 s, then MemoryError)
    text = _alias_levels(7)
    assert len(text) < 1000
    # WHEN parsed  THEN synth stops at the value that expands too far
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value) == (
        "cron.yaml line 7: with its aliases expanded this value has more than 100000 YAML nodes; "
        "a cron.yaml needs far fewer, so use fewer or smaller aliases"
    )


def test_an_error_shows_a_large_value_in_short():
    # GIVEN an entry whose value is a large list, built from aliases within the node limit
    text = _alias_levels(4)
    # WHEN parsed  THEN the error shows the value's first items, not its whole repr
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value) == "cron.yaml line 3, entry 'a': enabled must be true or false, got ['x', 'x', 'x', 'x', ...]"
    assert len(str(_alias_levels(4))) < 1000


def test_a_recursive_alias_is_refused():
    with pytest.raises(CronConfigError) as error:
        parse("version: 1\ncron: &entries\n - *entries\n")
    assert str(error.value) == "cron.yaml line 2: an alias refers to a node that contains it; cron.yaml values must be finite"


def test_a_value_nested_past_the_loaders_recursion_limit_is_refused():
    # GIVEN 2,000 nested lists on line 3 (PyYAML's composer recurses once per level: a bare RecursionError)
    text = "version: 1\ncron:\n  " + "[" * 2000 + "]" * 2000 + "\n"
    # WHEN parsed  THEN a CronConfigError says why, with the line
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value) == (
        "cron.yaml line 3: values are nested more than 100 deep; a cron.yaml needs only a list of flat mappings"
    )


def test_a_very_long_integer_is_refused_with_its_line():
    # GIVEN a name written as a 5,000-digit number (int() refuses past 4,300 digits with a bare ValueError)
    text = _one(" - {name: " + "1" * 5000 + ", url: /a, schedule: '@daily'}\n")
    # WHEN parsed  THEN a CronConfigError names the line
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value) == (
        "cron.yaml line 3: the number '" + "1" * 56 + "... has 5000 characters; cron.yaml takes at most 100 "
        "(quote it if it is a name)"
    )


@pytest.mark.parametrize(
    "schedule, message",
    [
        ("0 0 30 2 *", "never fires: its earliest day-of-month is 30, and none of its months (FEB) has that many days (February counts 29)"),
        ("0 0 31 4,6,9,11 *", "never fires: its earliest day-of-month is 31, and none of its months (APR, JUN, SEP, NOV) has that many days (February counts 29)"),
        ("0 0 * * 7-7", "day-of-week field: range '7-7' starts and ends at 7; write the single value 7 (croniter, which previews schedules, reads an equal range as the whole field)"),
        ("0" * 4400 + "5 * * * *", "minute field: number '00000000000000000000000000000000000...' has 4401 digits; cron numbers have at most 4"),
    ],
)
def test_a_schedule_that_never_fires_or_croniter_reads_differently_fails_synth(schedule, message):
    # GIVEN an entry whose schedule never fires, or which the preview would read differently
    text = _one(f" - name: a\n   url: /a\n   schedule: '{schedule}'\n")
    # WHEN parsed  THEN synth stops, naming the entry and the rule, with a long schedule shortened
    with pytest.raises(CronConfigError) as error:
        parse(text)
    shown = repr(schedule) if len(repr(schedule)) <= 60 else repr(schedule)[:57] + "..."
    assert str(error.value) == f"cron.yaml line 3, entry 'a': schedule {shown}: {message}"


@pytest.mark.parametrize(
    "schedule, advice",
    [
        ("cron(0 3 * * ? *)", "write '0 3 * * *'"),
        ("cron(0/15 9-17 ? * 2-6 *)", "write '0/15 9-17 * * 1-5'"),  # EventBridge's MON-FRI are 2-6, standard cron's 1-5
        ("cron(0 12 ? * MON#1 *)", "write it as 5 fields (minute hour day-of-month month day-of-week)"),
        ("cron(0 12 * * ? 2030)", "write it as 5 fields (minute hour day-of-month month day-of-week)"),
        ("rate(5 minutes)", "write '*/5 * * * *'"),
        ("rate(1 hour)", "write '0 * * * *'"),
        ("rate(7 minutes)", "write it as 5 fields (minute hour day-of-month month day-of-week)"),
    ],
)
def test_an_eventbridge_schedule_is_refused_with_its_5_field_equivalent(schedule, advice):
    # GIVEN an entry whose schedule is EventBridge's cron(...) or rate(...), as a CDK or console user would write it
    text = _one(f" - name: a\n   url: /a\n   schedule: '{schedule}'\n")
    # WHEN parsed  THEN synth says it is EventBridge's syntax, with the 5-field line when one fires the same
    with pytest.raises(CronConfigError) as error:
        parse(text)
    kind = schedule.partition("(")[0]
    assert str(error.value) == (f"cron.yaml line 3, entry 'a': schedule {schedule!r} {kind}(...) is EventBridge's "
                                f"syntax, not cron.yaml's (5 fields: minute hour day-of-month month day-of-week); {advice}")


def test_a_file_that_is_not_utf8_is_refused_naming_the_line_and_byte(tmp_path):
    # GIVEN a cron.yaml saved as Latin-1 (formerly: a bare UnicodeDecodeError)
    path = tmp_path / "cron.yaml"
    path.write_bytes("version: 1\ncron:\n - {name: caf\u00e9-report, url: /a, schedule: '@daily'}\n".encode("latin-1"))
    # WHEN loaded  THEN a CronConfigError names the file, the line and the byte
    with pytest.raises(CronConfigError) as error:
        load(path)
    assert str(error.value) == "cron.yaml line 3: byte 0xE9 at column 14 (offset 30) is not UTF-8; save the file as UTF-8"


def test_a_utf8_file_with_a_byte_order_mark_loads(tmp_path):
    # GIVEN a cron.yaml saved as UTF-8 with a BOM (as some Windows editors do)
    path = tmp_path / "cron.yaml"
    path.write_bytes("version: 1\ncron:\n - {name: caf\u00e9, url: /a, schedule: '@daily'}\n".encode("utf-8-sig"))
    # WHEN loaded  THEN its entry, with the name decoded
    assert [e.name for e in load(path)] == ["caf\u00e9"]


def test_the_size_check_uses_the_queues_maximum_message_size():
    # GIVEN an entry with a 300,000-byte body, which fits SQS's 1 MiB but not a 256 KiB queue
    [entry] = parse(_one(" - name: big\n   url: /big\n   schedule: '@daily'\n   body: " + "x" * 300_000 + "\n"))
    check_sendable([entry], fifo=False)
    # WHEN checked against a queue whose MaximumMessageSize is 262,144 bytes  THEN it is refused with both sizes
    with pytest.raises(CronConfigError) as error:
        check_sendable([entry], fifo=False, maximum_message_size=262_144)
    assert str(error.value) == (
        "cron.yaml line 3, entry 'big': body would fail every tick: the tick message is 300120 bytes with its "
        "attributes; the queue's MaximumMessageSize is 262144 bytes"
    )


def test_a_tick_too_large_for_the_queue_passes_when_the_payload_bucket_takes_it():
    # GIVEN an entry with a 300,000-byte body, over a 256 KiB queue's maximum
    [entry] = parse(_one(" - name: big\n   url: /big\n   schedule: '@daily'\n   body: " + "x" * 300_000 + "\n"))
    # WHEN checked for a stack with the payload bucket  THEN it passes: the periodic-task function offloads its body
    check_sendable([entry], fifo=False, maximum_message_size=262_144, large_payloads=True)
    # AND the other checks still hold: a FIFO name SQS refuses as a group id is refused whatever the bucket
    [bad] = parse(_one(" - name: 'a b'\n   url: /big\n   schedule: '@daily'\n"))
    with pytest.raises(CronConfigError):
        check_sendable([bad], fifo=True, large_payloads=True)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            _one(' - name: "a"\n   url: "/a"\n   schedule: "*/\u00b2 * * * *"\n'),
            "cron.yaml line 3, entry 'a': schedule '*/\u00b2 * * * *': minute field: step '\u00b2' must be a whole number of at least 1",
        ),
        (  # an Arabic-Indic 3: int() reads it, cron never meant it
            _one(' - name: "a"\n   url: "/a"\n   schedule: "0 */\u0663 * * *"\n'),
            "cron.yaml line 3, entry 'a': schedule '0 */\u0663 * * *': hour field: step '\u0663' must be a whole number of at least 1",
        ),
        (
            "version: 1\ncron:\n# - name: \"a\"\n#   url: \"/a\"\n#   schedule: \"* * * * *\"\n",
            "cron.yaml line 2: 'cron' has no entries (are they all commented out?); "
            "list at least one entry, or write 'cron: []' for none",
        ),
        (
            "# version: 1\n# cron: []\n",
            "cron.yaml line 1: the file has no content (empty, or every line a comment); "
            "it must be a mapping with 'version: 1' and a 'cron' list",
        ),
    ],
)
def test_errors_that_had_no_context_name_line_and_entry(text, message):
    # GIVEN a Unicode digit in a schedule, or entries all commented out
    # WHEN parsed  THEN a CronConfigError with the line and entry, not a bare ValueError or a type name
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value).startswith(message)


NUL_BODY = _one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n   body: "x\\0y"\n')


@pytest.mark.parametrize(
    "name, message",
    [
        ("nightly report", "MessageGroupId 'nightly report' is not allowed"),
        ("caf\u00e9", "MessageGroupId 'caf\u00e9' is not allowed"),
        ("n" * 129, "MessageGroupId '" + "n" * 56 + "... is not allowed"),
    ],
)
def test_on_fifo_a_name_sqs_refuses_as_group_id_fails_synth(name, message):
    # GIVEN a name SQS refuses as a MessageGroupId, which a FIFO tick uses
    text = _one(f' - name: "{name}"\n   url: "/a"\n   schedule: "* * * * *"\n')
    # WHEN parsed for a standard queue  THEN it is fine there
    assert [e.name for e in parse(text)] == [name]
    # WHEN parsed for a FIFO queue  THEN synth stops, naming the line, the entry and SQS's rule
    with pytest.raises(CronConfigError) as error:
        parse(text, fifo=True)
    assert str(error.value).startswith("cron.yaml line 3, entry ")
    assert ": name (the MessageGroupId on a FIFO queue) would fail every tick: " + message in str(error.value)
    assert str(error.value).endswith("SQS takes 1 to 128 ASCII letters, digits and punctuation (no spaces)")


def test_a_body_sqs_refuses_fails_synth():
    # GIVEN a body with NUL  WHEN parsed  THEN synth stops with the character and SQS's rule
    with pytest.raises(CronConfigError) as error:
        parse(NUL_BODY)
    assert str(error.value).startswith(
        "cron.yaml line 3, entry 'a': body would fail every tick: body has character '\\x00' (U+0000) at offset 1, "
        "which SQS does not allow"
    )


def test_a_url_or_name_sqs_refuses_as_an_attribute_value_fails_synth():
    # GIVEN a url with a control character (it travels as the beanstalk.sqsd.path String attribute)
    text = _one(' - name: "a"\n   url: "/a\\x01"\n   schedule: "* * * * *"\n')
    # WHEN parsed  THEN synth stops, naming the field and the attribute's rule
    with pytest.raises(CronConfigError) as error:
        parse(text)
    assert str(error.value).startswith(
        "cron.yaml line 3, entry 'a': url would fail every tick: attribute 'beanstalk.sqsd.path' value has character '\\x01'"
    )


def test_a_cron_file_that_does_not_exist_is_refused_naming_the_resolved_path(tmp_path):
    # GIVEN a path with a typo, relative to a directory that has only cron.yaml (formerly: it deployed no periodic task)
    (tmp_path / "cron.yaml").write_text("version: 1\ncron: []\n")
    path = tmp_path / "sub" / ".." / "cron.yml"
    # WHEN loaded  THEN a CronConfigError names the path as given and as resolved
    with pytest.raises(CronConfigError) as error:
        load(path)
    assert str(error.value) == (f"cron file {str(path)!r} (resolved to {str(tmp_path / 'cron.yml')!r}) does not exist or "
                                "is not a file; pass the path of your cron.yaml, absolute or relative to the current directory")


def test_a_missing_cron_file_may_be_optional(tmp_path):
    # GIVEN no cron.yaml  WHEN loaded as optional (the local environment's default)  THEN it has no entries
    assert load(tmp_path / "cron.yaml", missing_ok=True) == []


def test_a_directory_is_no_cron_file_even_when_optional(tmp_path):
    # GIVEN a directory where cron.yaml should be  WHEN loaded as optional  THEN it is still refused
    (tmp_path / "cron.yaml").mkdir()
    with pytest.raises(CronConfigError, match=r"does not exist or is not a file"):
        load(tmp_path / "cron.yaml", missing_ok=True)


_ANY_5_FIELDS = "write it as 5 fields (minute hour day-of-month month day-of-week)"


@pytest.mark.parametrize(
    "schedule, false_line, advice",
    [
        # Quartz's '?' is in its 4th or 6th field (day-of-month, day-of-week); EventBridge's are the 3rd and 5th
        ("0 0 12 * * ?", "'0 0 12 * *'", "(Quartz cron, with its '?' day field): then write '0 12 * * *'"),
        ("0 0 12 ? * MON-FRI", "'0 0 12 * MON-FRI'", "then write '0 12 * * MON-FRI'"),
        # Quartz counts day-of-week 1-7 from Sunday: its 2-6 is Monday to Friday
        ("0 0 12 ? * 2-6", "'0 12 * * 2-6'", "then write '0 12 * * 1-5' (its day-of-week counts 1-7 from Sunday"),
        # more than once a minute: no 5-field line fires as often
        ("*/10 * * * * *", "write '* * * * *'", f"it fires more than once a minute, which cron.yaml cannot (once a "
                                                f"minute at most); {_ANY_5_FIELDS}"),
        ("* * * * * ?", "write '* * * * *'", "it fires more than once a minute"),
        ("0/15 0 3 * * *", "write '0 3 * * *'", "it fires more than once a minute"),
        ("0-30 0 3 * * *", "write '0-30 0 3 * *'", "it fires more than once a minute"),
        # Spring's day-of-week with '#': seconds first, though standard cron cannot say the rest
        ("0 0 12 * * MON#2", "write '0 0 12 * *'", f"looks like seconds (Quartz or Spring cron): then {_ANY_5_FIELDS}"),
        # a year: dropping it would run every year
        ("0 12 * * MON 2030", "write '0 12 * * MON'", f"which cron.yaml has none of (it cannot run in some years only)"
                                                      f"; {_ANY_5_FIELDS}"),
        ("0 3 ? * MON 2030", "write '0 3 * * MON'", "which cron.yaml has none of (it cannot run in some years only)"),
    ],
)
def test_a_six_field_schedule_is_not_rewritten_as_a_line_that_fires_differently(schedule, false_line, advice):
    # GIVEN a 6-field schedule in Quartz/Spring (second minute hour day-of-month month day-of-week) or EventBridge
    # (minute hour day-of-month month day-of-week year) form
    from worker_tier.core.errors import CronConfigError
    from worker_tier.periodic.cron_config import parse

    document = f'version: 1\ncron:\n - name: "noon"\n   url: "/x"\n   schedule: "{schedule}"\n'
    # WHEN cron.yaml holds it THEN it is refused, and the 5-field line it names fires as the likely reading does
    # (Quartz's daily noon '0 0 12 * * ?' is not '0 0 12 * *', midnight on the 12th of each month: a '?' in the 6th
    # field is never a year), or none is named when cron.yaml cannot say it
    with pytest.raises(CronConfigError) as refused:
        parse(document)
    assert false_line not in str(refused.value), str(refused.value)
    assert advice in str(refused.value), str(refused.value)
