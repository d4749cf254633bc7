"""Schedules written in another cron dialect than cron.yaml's, named with the 5-field line they likely meant.

cron.yaml's schedule is standard 5-field cron (minute hour day-of-month month day-of-week), as EB's
documentation shows it. Three other dialects are easy to paste by mistake:

- EventBridge's ``cron(m h dom mon dow year)`` and ``rate(n unit)``, or its six fields without ``cron(...)``:
  its day-of-week counts 1-7 from Sunday (standard cron: 0-6) and one day field is ``?``;
- Quartz or Spring cron, whose first field is the seconds (``0 0 3 * * *`` is 03:00 daily there, but
  EB's parse-cron drops the 6th field and reads ``0 0 3 * *``: monthly); Quartz's day-of-week also counts
  1-7 from Sunday, and one of its day fields is ``?``;
- a 6th field as a year.

A ``?`` tells EventBridge's six fields from Quartz's: it is only ever in a day field, and those are the 3rd
and 5th in EventBridge's (the 4th and 6th are month and year) but the 4th and 6th in Quartz's (the 3rd and
5th are hour and month). ``problem`` says which, with the 5-field line only when it fires at the same
minutes as the likely reading; a schedule cron.yaml cannot say (more than once a minute, some years only)
gets no line to write.
"""

from __future__ import annotations

import re

from worker_tier.periodic.cron_expression import CronExpressionError, parse
from worker_tier.periodic.cron_yaml import show

STANDARD_FIELDS = "minute hour day-of-month month day-of-week"
EVENTBRIDGE_FIELDS = 6
_EVENTBRIDGE_FORM = re.compile(r"\s*(cron|rate)\s*\((.*)\)\s*", re.IGNORECASE | re.DOTALL)
_YEAR = re.compile(r"\d{4}(-\d{4})?")
_SECONDS = re.compile(r"[\d*/,-]+")
# A 6th field that reads as a seconds-first line's day-of-week (numbers, names, Quartz's L and #), not a stray word.
_DAY_OF_WEEK = re.compile(r"(\d|SUN|MON|TUE|WED|THU|FRI|SAT|L|#|[-,/*])+", re.IGNORECASE)
# EventBridge's only day-field characters that standard cron has no form for.
_EVENTBRIDGE_ONLY = re.compile(r"[LW#]", re.IGNORECASE)
# rate(n unit): the 5-field line for each unit, when n divides the next unit evenly (else the ticks would drift).
_RATE_UNITS = {"minute": (60, "*/{n} * * * *", "* * * * *"), "hour": (24, "0 */{n} * * *", "0 * * * *"),
               "day": (1, "", "0 0 * * *")}


def problem(schedule: str) -> str | None:
    """What is wrong with a schedule in another dialect, naming the 5-field line to write; None for any other schedule.

    Examples
    --------
    >>> problem("cron(0 3 * * ? *)")
    "cron(...) is EventBridge's syntax, not cron.yaml's (5 fields: minute hour day-of-month month day-of-week); write '0 3 * * *'"
    >>> problem("0 3 * * *") is None
    True
    """
    form = _EVENTBRIDGE_FORM.fullmatch(schedule)
    if form is not None:
        kind, inner = form[1].lower(), form[2]
        equivalent = _from_eventbridge(inner.split()) if kind == "cron" else _from_rate(inner)
        return f"{kind}(...) is EventBridge's syntax, not cron.yaml's (5 fields: {STANDARD_FIELDS}); {_advice(equivalent)}"
    fields = schedule.split()
    if len(fields) != EVENTBRIDGE_FIELDS or schedule.strip().startswith("@"):
        return None
    return f"has 6 fields, but cron.yaml's schedule has 5 ({STANDARD_FIELDS}); {_six_fields(fields)}"


def _six_fields(fields: list[str]) -> str:
    """The likely dialect of a 6-field schedule, and the 5-field line it meant."""
    if "?" in fields[2] or "?" in fields[4]:  # EventBridge's day fields; Quartz's hour and month never hold '?'
        return "these look like EventBridge's fields (the 6th is the year), " + _from_eventbridge_advice(fields)
    if "?" in fields[3] or "?" in fields[5]:  # Quartz's day fields; EventBridge's month and year never hold '?'
        return _seconds_first(fields, "Quartz cron, with its '?' day field")
    if _YEAR.fullmatch(fields[5]):
        return f"the 6th field {show(fields[5])} looks like a year (EventBridge's), " + _from_eventbridge_advice(fields)
    as_eb_reads_it = _standard(fields[:5])
    if _SECONDS.fullmatch(fields[0]) and (_standard(fields[1:]) or _DAY_OF_WEEK.fullmatch(fields[5])):
        seconds_first = _seconds_first(fields, "Quartz or Spring cron")
        return seconds_first + (f"; EB's parse-cron would drop the 6th field and run {show(as_eb_reads_it)}" if as_eb_reads_it else "")
    return f"EB's parse-cron ignores a 6th field; {_advice(as_eb_reads_it)}"


def _seconds_first(fields: list[str], dialect: str) -> str:
    """Advice for seconds-first fields: the 5-field line only when they fire once a minute at most."""
    second, rest = fields[0], [f.replace("?", "*") for f in fields[1:]]
    head = f"the first field {show(second)} looks like seconds ({dialect})"
    if not second.isdigit():
        return f"{head}: it fires more than once a minute, which cron.yaml cannot (once a minute at most); " + \
            _advice(None)
    quartz = "?" in fields[3] or "?" in fields[5]
    numbered_weekday = quartz and re.search(r"\d", rest[4]) is not None
    if numbered_weekday:  # Quartz counts 1-7 from Sunday, as EventBridge does (Spring, without '?', 0-7 as cron)
        rest[4] = _weekday_from_eventbridge(rest[4])
    notes = [f"ticks come at second 0, not {second}"] if int(second) else []
    notes += ["its day-of-week counts 1-7 from Sunday, cron.yaml's 0-6"] if numbered_weekday else []
    equivalent = _standard(rest)
    return f"{head}: then {_advice(equivalent)}" + (f" ({'; '.join(notes)})" if equivalent and notes else "")


def _from_eventbridge_advice(fields: list[str]) -> str:
    """Advice for EventBridge's six fields: the 5-field line, or none for a year (cron.yaml runs every year)."""
    if fields[5] != "*":
        return f"which cron.yaml has none of (it cannot run in some years only); {_advice(None)}"
    return _advice(_from_eventbridge(fields))


def _advice(equivalent: str | None) -> str:
    return f"write {show(equivalent)}" if equivalent else f"write it as 5 fields ({STANDARD_FIELDS})"


def _standard(fields: list[str]) -> str | None:
    """The fields as a 5-field line when standard cron parses them, else None."""
    line = " ".join(fields)
    try:
        parse(line)
    except CronExpressionError:
        return None
    return line


def _from_eventbridge(fields: list[str]) -> str | None:
    """EventBridge's 6 cron fields as a 5-field line (day-of-week 1-7 becomes 0-6), when every tick is the same."""
    if len(fields) != EVENTBRIDGE_FIELDS or fields[5] != "*":
        return None  # a year cron.yaml cannot say
    minute, hour, day, month, weekday = (f.replace("?", "*") for f in fields[:5])
    if _EVENTBRIDGE_ONLY.search(day) or _EVENTBRIDGE_ONLY.search(weekday):
        return None
    return _standard([minute, hour, day, month, _weekday_from_eventbridge(weekday)])


def _weekday_from_eventbridge(weekday: str) -> str:
    """EventBridge's day-of-week numbers (1 = Sunday) as standard cron's (0 = Sunday); names and steps stay."""
    def element(text: str) -> str:
        base, slash, step = text.partition("/")
        return re.sub(r"\d+", lambda n: str(int(n[0]) - 1), base) + slash + step

    return ",".join(element(e) for e in weekday.split(","))


def _from_rate(inner: str) -> str | None:
    """``rate(n unit)`` as a 5-field line when n divides the next unit evenly (so the ticks keep the same spacing)."""
    match = re.fullmatch(r"\s*(\d+)\s+(minute|hour|day)s?\s*", inner, re.IGNORECASE)
    if match is None:
        return None
    n, (per, every_n, every_one) = int(match[1]), _RATE_UNITS[match[2].lower()]
    if n == 1:
        return every_one
    return every_n.format(n=n) if n > 1 and per % n == 0 else None
