"""Standard 5-field cron → EventBridge 6-field cron, exactly, or a clear error.

Written by hand because no maintained library converts between the two; croniter
(used by the tests and the local environment) only evaluates standard cron.

The differences handled here:

- Day of week: cron numbers 0-7 (0 and 7 are Sunday) or names; EventBridge 1-7 = SUN-SAT.
  Weekdays are emitted as names, so numbering cannot be confused.
- EventBridge needs ``?`` in day-of-month or day-of-week. When standard cron restricts
  both, a day matches if *either* matches; no single EventBridge expression says
  that, so two are emitted whose union is exact. "Restricted" follows croniter (which
  ``make cron-next`` and the local environment run): a day field is unrestricted when
  ``*`` is one of its list elements, or when it covers its whole range and the *other*
  day field's text contains a ``*``; any other field is restricted (so ``*/2`` is, unlike
  Vixie cron). ``0 0 *,5 * SUN`` is therefore Sundays only, and ``0 0 1-31 * */2``
  every other weekday.
- Day-of-week ``7/n`` starts at Sunday as ``0/n`` does (croniter's reading).
- Refused rather than guessed: an equal range ``a-a`` (croniter reads it as the whole
  field), a number longer than ``MAX_NUMBER_DIGITS``, and a schedule that never fires
  (day-of-month 30 in February only): EventBridge would accept it and stay silent.
- Steps, ranges and lists are normalised to sets and re-emitted as ``*``, ``a/n``
  (from a to the field's end) or a list of ranges and values, forms EventBridge
  documents: https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html#cron-based
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable
from worker_tier.core.errors import ConfigurationError

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
WEEKDAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# https://docs.aws.amazon.com/scheduler/latest/APIReference/API_CreateSchedule.html (ScheduleExpression)
MAX_EXPRESSION_CHARS = 256
# No field value or useful step needs more digits (the largest value is 59); int() refuses past 4,300.
MAX_NUMBER_DIGITS = 4
# The most days each month can have (29 February counts: croniter and EventBridge fire on it in leap years).
MONTH_MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class CronExpressionError(ConfigurationError):
    """A cron expression is malformed or cannot be expressed in EventBridge."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    names_start: int = 0
    step_high: int | None = None  # where ``*/n`` and ``a/n`` stop, when not at ``high``


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, tuple(MONTH_NAMES), 1),
    # 7 is Sunday written as a number; a step never reaches it (croniter: "1/2" is MON,WED,FRI).
    _Field("day-of-week", 0, 7, tuple(WEEKDAY_NAMES), 0, step_high=6),
)
_TOKEN = re.compile(r"(?P<base>\*|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)?)(?:/(?P<step>[^/]*))?")


@dataclass(frozen=True)
class ParsedCron:
    """The value sets of a standard cron expression, and which day fields were restricted."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday
    dom_restricted: bool
    dow_restricted: bool


def parse(expression: str) -> ParsedCron:
    """Parse a 5-field cron expression or @macro; CronExpressionError says which field is wrong and why."""
    text = expression.strip()
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise CronExpressionError(f"unknown macro {text!r}; use one of {', '.join(MACROS)}")
        text = MACROS[text.lower()]
    parts = text.split()
    if len(parts) != 5:
        raise CronExpressionError(
            f"schedule {expression!r} has {len(parts)} fields; standard cron has 5 (minute hour day-of-month month day-of-week)"
        )
    sets = [_parse_field(part, field) for part, field in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(day % 7 for day in sets[4])
    dom_restricted = not _unrestricted(parts[2], len(sets[2]) == _FIELDS[2].high, parts[4])
    dow_restricted = not _unrestricted(parts[4], len(weekdays) == len(WEEKDAY_NAMES), parts[2])
    parsed = ParsedCron(sets[0], sets[1], sets[2], sets[3], weekdays, dom_restricted, dow_restricted)
    if dom_restricted and not dow_restricted and not _days_of_month_occur(parsed):
        raise CronExpressionError(f"never fires: {_missing_days(parsed)}")
    return parsed


def _unrestricted(text: str, covers_range: bool, other_text: str) -> bool:
    """croniter's rule for a day field that does not restrict the day (see the module docstring)."""
    return "*" in text.split(",") or (covers_range and "*" in other_text)


def _days_of_month_occur(parsed: ParsedCron) -> bool:
    """Whether some chosen month has some chosen day of the month."""
    return min(parsed.days_of_month) <= max(MONTH_MAX_DAYS[month - 1] for month in parsed.months)


def _missing_days(parsed: ParsedCron) -> str:
    """Why no (day, month) pair exists, naming the day and the months."""
    months = ", ".join(MONTH_NAMES[month - 1] for month in sorted(parsed.months))
    return (
        f"its earliest day-of-month is {min(parsed.days_of_month)}, and none of its months ({months}) has that "
        "many days (February counts 29)"
    )


def to_eventbridge(expression: str) -> list[str]:
    """EventBridge ``cron(...)`` expressions whose union fires exactly when ``expression`` does.

    Examples
    --------
    >>> to_eventbridge("*/15 9-17 * * MON-FRI")
    ['cron(0/15 9-17 ? * MON-FRI *)']
    >>> to_eventbridge("0 0 1 * 1")
    ['cron(0 0 1 * ? *)', 'cron(0 0 ? * MON *)']
    """
    parsed = parse(expression)
    minute = _emit(parsed.minutes, _FIELDS[0])
    hour = _emit(parsed.hours, _FIELDS[1])
    month = _emit(parsed.months, _FIELDS[3])
    dom = _emit(parsed.days_of_month, _FIELDS[2])
    dow = _emit_weekdays(parsed.weekdays)
    if parsed.dom_restricted and parsed.dow_restricted and _days_of_month_occur(parsed):
        day_pairs = [(dom, "?"), ("?", dow)]
    elif parsed.dom_restricted and parsed.dow_restricted:
        day_pairs = [("?", dow)]  # the day-of-month half never fires: the union is the day-of-week half
    elif parsed.dow_restricted:
        day_pairs = [("?", dow)]
    else:
        day_pairs = [(dom, "?")]
    expressions = [f"cron({minute} {hour} {d} {month} {w} *)" for d, w in day_pairs]
    for converted in expressions:
        if len(converted) > MAX_EXPRESSION_CHARS:
            raise CronExpressionError(
                f"schedule {expression!r} becomes {converted!r}, {len(converted)} characters; "
                f"EventBridge allows {MAX_EXPRESSION_CHARS}"
            )
    return expressions


def _parse_field(text: str, field: _Field) -> frozenset[int]:
    """One field's comma-separated elements as a set of values."""
    values: set[int] = set()
    for element in text.split(","):
        values |= _parse_element(element, field)
    return frozenset(values)


def _parse_element(element: str, field: _Field) -> set[int]:
    """``*``, ``a``, ``a-b``, each optionally ``/step``."""
    match = _TOKEN.fullmatch(element)
    if not match:
        raise CronExpressionError(f"{field.name} field: {_shown(element)} is not a value, range or step")
    base, step_text = match.group("base"), match.group("step")
    step = _step(step_text, field) if step_text is not None else 1
    step_high = field.high if field.step_high is None else field.step_high
    if base == "*":
        low, high = field.low, step_high if step_text is not None else field.high
    elif "-" in base:
        low, high = (_value(v, field) for v in base.split("-"))
        if low > high:
            raise CronExpressionError(f"{field.name} field: range {_shown(base)} runs backwards ({low} > {high})")
        if low == high:
            raise CronExpressionError(
                f"{field.name} field: range {_shown(base)} starts and ends at {low}; write the single value {low} "
                "(croniter, which previews schedules, reads an equal range as the whole field)"
            )
    else:
        low = _value(base, field)
        if step_text is not None and low > step_high:
            low = field.low  # day-of-week "7/n": Sunday written as 7 starts where "0/n" does (croniter's reading)
        high = step_high if step_text is not None else low  # "a/n" runs from a to the field's end
    return set(range(low, high + 1, step))


def _is_number(text: str, field: _Field) -> bool:
    """ASCII digits only (``str.isdigit`` also accepts '²'), at most ``MAX_NUMBER_DIGITS`` of them."""
    if not (text.isascii() and text.isdigit()):
        return False
    if len(text) > MAX_NUMBER_DIGITS:
        raise CronExpressionError(
            f"{field.name} field: number {_shown(text)} has {len(text)} digits; cron numbers have at most {MAX_NUMBER_DIGITS}"
        )
    return True


def _step(text: str, field: _Field) -> int:
    if not _is_number(text, field) or int(text) < 1:
        raise CronExpressionError(f"{field.name} field: step {_shown(text)} must be a whole number of at least 1")
    return int(text)


def _value(text: str, field: _Field) -> int:
    """A number or name, checked against the field's range."""
    if _is_number(text, field):
        value = int(text)
    elif text.upper() in field.names:
        return field.names.index(text.upper()) + field.names_start
    else:
        known = f" or a name ({', '.join(field.names)})" if field.names else ""
        raise CronExpressionError(f"{field.name} field: {_shown(text)} is not a number{known}")
    if not field.low <= value <= field.high:
        raise CronExpressionError(f"{field.name} field: {value} is outside {field.low}-{field.high}")
    return value


def _emit(values: frozenset[int], field: _Field) -> str:
    """A value set in EventBridge syntax: ``*``, ``a/n`` to the end, or ranges and values."""
    ordered = sorted(values)
    if ordered == list(range(field.low, field.high + 1)):
        return "*"
    if len(ordered) > 2:
        step = ordered[1] - ordered[0]
        progression = list(range(ordered[0], field.high + 1, step))
        if step > 1 and ordered == progression:
            return f"{ordered[0]}/{step}"
    return ",".join(_runs(ordered, str))


def _emit_weekdays(weekdays: frozenset[int]) -> str:
    """Weekdays (0 = Sunday) as EventBridge names: ``*`` for all, else names and name ranges."""
    if len(weekdays) == 7:
        return "*"
    return ",".join(_runs(sorted(weekdays), lambda day: WEEKDAY_NAMES[day]))


def _runs(ordered: list[int], label: Callable[[int], str]) -> list[str]:
    """Consecutive values as ``a-b`` (three or more) or single values."""
    runs: list[str] = []
    start = previous = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == previous + 1:
            previous = value
            continue
        if previous - start >= 2:
            runs.append(f"{label(start)}-{label(previous)}")
        else:
            runs.extend(label(v) for v in range(start, previous + 1))
        if value is not None:
            start = previous = value
    return runs


def _shown(text: str, limit: int = 40) -> str:
    """A piece of the expression's repr, shortened for an error message."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"
