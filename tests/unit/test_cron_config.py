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
        (_one(' - name: "a"\n   url: "a"\n   schedule: "* * * * *"\n'), "cron.yaml line 3, entry 'a': url must be a path starting with '/', got 'a'"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * *"\n'), "cron.yaml line 3, entry 'a': schedule '* * * *': schedule '* * * *' has 4 fields; standard cron has 5"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "61 * * * *"\n'), "cron.yaml line 3, entry 'a': schedule '61 * * * *': minute field: 61 is outside 0-59"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "0 0 * BOB *"\n'), "cron.yaml line 3, entry 'a': schedule '0 0 * BOB *': month field: 'BOB' is not a number or a name"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "*/0 * * * *"\n'), "cron.yaml line 3, entry 'a': schedule '*/0 * * * *': minute field: step '0' must be a whole number of at least 1"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n   timezone: "Mars/Olympus"\n'), "cron.yaml line 3, entry 'a': unknown timezone 'Mars/Olympus'; use an IANA name like 'Europe/Berlin'"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n   enabled: "no"\n'), "cron.yaml line 3, entry 'a': enabled must be true or false, got 'no'"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n   every: 5\n'), "cron.yaml line 3, entry 'a': unknown key 'every'; keys are name, url, schedule, timezone, body, enabled"),
        (_one(' - name: "a"\n   url: "/a"\n   schedule: "* * * * *"\n - name: "a"\n   url: "/b"\n   schedule: "0 * * * *"\n'), "cron.yaml line 6, entry 'a': duplicate name (first at line 3)"),
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
    text = 'version: 1\nshared: &shared {url: "/a", schedule: "@daily"}\ncron:\n - <<: *shared\n   name: "a"\n   url: "/b"\n'
    # WHEN parsed  THEN the explicit key wins, as YAML defines
    assert [(e.name, e.url, e.schedule) for e in parse(text)] == [("a", "/b", "@daily")]


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
