"""An independent evaluator of EventBridge cron expressions, written from AWS's documentation.

https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html#cron-based
Fields: minutes hours day-of-month month day-of-week year. Day-of-week 1-7 is SUN-SAT.
One of day-of-month and day-of-week is ``?``. ``a/n`` counts from a by n to the
field's end. It shares no code with worker_tier.periodic.cron_expression on purpose: the tests
compare the converter's output to croniter through this evaluator.
"""

from __future__ import annotations

from datetime import datetime

_MONTHS = {name: i + 1 for i, name in enumerate(["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"])}
_DAYS = {name: i + 1 for i, name in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
_SPECS = [(0, 59, {}), (0, 23, {}), (1, 31, {}), (1, 12, _MONTHS), (1, 7, _DAYS), (1970, 2199, {})]


class EventBridgeCron:
    """One parsed ``cron(...)`` expression."""

    def __init__(self, expression: str) -> None:
        if not (expression.startswith("cron(") and expression.endswith(")")):
            raise ValueError(f"not a cron() expression: {expression!r}")
        fields = expression[5:-1].split(" ")
        if len(fields) != 6:
            raise ValueError(f"EventBridge cron has 6 fields, got {len(fields)} in {expression!r}")
        if (fields[2] == "?") == (fields[4] == "?"):
            raise ValueError(f"exactly one of day-of-month and day-of-week must be '?': {expression!r}")
        self.sets = [None if text == "?" else _field(text, *spec) for text, spec in zip(fields, _SPECS, strict=True)]

    def matches(self, moment: datetime) -> bool:
        """True when the schedule fires at this minute."""
        minutes, hours, dom, months, dow, years = self.sets
        if moment.minute not in minutes or moment.hour not in hours or moment.month not in months:
            return False
        if moment.year not in years:
            return False
        if dom is not None:
            return moment.day in dom
        return moment.isoweekday() % 7 + 1 in dow


def _field(text: str, low: int, high: int, names: dict[str, int]) -> set[int]:
    values: set[int] = set()
    for element in text.split(","):
        base, _, step = element.partition("/")
        if base == "*":
            start, end = low, high
        elif "-" in base:
            a, b = base.split("-")
            start, end = _value(a, names), _value(b, names)
        else:
            start = _value(base, names)
            end = high if step else start
        if not (low <= start <= high and low <= end <= high and start <= end):
            raise ValueError(f"{element!r} is outside {low}-{high}")
        values.update(range(start, end + 1, int(step) if step else 1))
    return values


def _value(text: str, names: dict[str, int]) -> int:
    if text.upper() in names:
        return names[text.upper()]
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a number or name")
    return int(text)
