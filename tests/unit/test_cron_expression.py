"""Standard cron → EventBridge: the union of the emitted expressions fires exactly when croniter says.

For each expression, over the whole of 2028 (a leap year), the firing instants are
compared as (days on which it fires) × (minutes of the day at which it fires): both
standard cron and EventBridge cron choose the day from the day fields and the
minute from the minute and hour fields independently, so two schedules with the
same day set and the same minute set fire at the same instants. Croniter supplies
one side; the independent evaluator in tests/support/eventbridge_cron.py the other. A
sample of whole instants is compared directly as well.
"""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timedelta

import pytest
from croniter import croniter

from worker_tier.periodic.cron_expression import CronExpressionError, to_eventbridge
from tests.support.eventbridge_cron import EventBridgeCron

YEAR = 2028
YEAR_START = datetime(YEAR, 1, 1)
DAYS = [YEAR_START + timedelta(days=n) for n in range(366)]
MINUTES = range(24 * 60)

HAND_PICKED = [
    # Elastic Beanstalk documentation examples and common EB cron.yaml lines
    "0 */12 * * *", "0 23 * * *", "*/10 * * * *", "0 0 * * *", "0 0 * * 0", "30 2 * * 1-5", "0 9 1 * *",
    # macros
    "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly",
    # every field form
    "* * * * *", "*/15 * * * *", "5-59/10 * * * *", "0,30 * * * *", "15 10 * * *", "0 9-17 * * *",
    "0 9-17/2 * * *", "0 */3 * * *", "0 0 */2 * *", "0 0 1-15 * *", "0 0 1,15 * *", "0 0 * */3 *",
    "0 0 * 1-6 *", "0 0 * JAN,JUL *", "0 0 * jan-mar *", "0 0 * * MON-FRI", "0 0 * * MON-FRI/2",
    "0 0 * * */2", "0 0 * * 1/2", "0 0 * * SUN", "0 0 * * 7", "0 0 * * 0,7", "0 0 * * 5-7", "0 0 * * sat,sun",
    "0 12 * * 6,0", "0 0 * * 0-6",
    # both day fields restricted: either matches
    "0 0 1 * 1", "0 0 13 * FRI", "0 0 1,15 * 3", "0 0 */2 * 1", "0 0 1 * */2", "0 0 28-31 * 1",
    "30 6 1-7 * MON", "0 0 1 * 0-6", "0 0 31 * SUN",
    # edges
    "0 0 29 2 *", "59 23 31 12 *", "0 0 31 * *", "0 0 30 * *", "59 23 * * *", "0 0 1 1 *", "0 12 29 2 1",
    "1-58/3 */7 * * *", "0,1,2,3,4,5,6,7,8,9 * * * *", "7 7 7 7 *", "0 0 1 */2 *", "*/59 */23 * * *",
    # croniter's unrestricted day fields: '*' as a list element, or the whole range when the
    # other day field's text has a '*'
    "0 0 *,5 * SUN", "0 0 1 * *,2", "0 7 */1 * 4-7,*/3", "0 0 1 * 0-6,1", "0 0 1-31 * */2", "0 0 */2 * 0-6",
    "0 0 */1 * 1", "0 0 1 * */1", "0 0 *,1 * *,2", "0 0 1-31 * 1", "0 0 15 * 0-7",
    # day-of-week 7/n starts at Sunday as 0/n does
    "0 0 * * 7/2", "0 0 * * 7/1", "0 0 1 * 7/3", "0 0 * * 7/7",
    # both day fields restricted, the day-of-month half never fires
    "0 0 30 2 MON", "0 0 31 4,6,9,11 */2",
]


def _generated() -> list[str]:
    minutes = ["0", "*/5", "15,45", "10-20", "*/20", "3-59/15"]
    hours = ["*", "0", "8-18", "*/6", "1,13"]
    days = [("*", "*"), ("1", "*"), ("*", "1-5"), ("15", "FRI"), ("*/3", "*"), ("*", "SAT,SUN"), ("10-20", "0")]
    months = ["*", "*/2", "MAR-OCT"]
    combos = itertools.product(minutes, hours, days, months)
    return [f"{m} {h} {dom} {mon} {dow}" for i, (m, h, (dom, dow), mon) in enumerate(combos) if i % 4 == 0]


CORPUS = list(dict.fromkeys(HAND_PICKED + _generated()))


def test_corpus_has_at_least_200_expressions():
    assert len(CORPUS) >= 200


def _croniter_sets(expression: str) -> tuple[datetime, set[int], set[int]]:
    """Croniter's first instant of the year, the days it fires on, and the minutes of the day it fires at."""
    first = croniter(expression, YEAR_START - timedelta(minutes=1)).get_next(datetime)
    day = first.replace(hour=0, minute=0)
    minutes: set[int] = set()
    times = croniter(expression, day - timedelta(minutes=1))
    while (moment := times.get_next(datetime)) < day + timedelta(days=1):
        minutes.add(moment.hour * 60 + moment.minute)
    # The same day fields at one fixed time: croniter steps straight from day to day.
    fields, _ = croniter.expand(expression)
    dom, month, dow = (",".join(str(v) for v in values) for values in fields[2:])
    days: set[int] = set()
    dates = croniter(f"{first.minute} {first.hour} {dom} {month} {dow}", YEAR_START - timedelta(minutes=1))
    while (moment := dates.get_next(datetime)).year == YEAR:
        days.add((moment - YEAR_START).days)
    return first, days, minutes


def _firing_sets(matches, first: datetime) -> tuple[set[int], set[int]]:
    """Days of the year it fires on (tested at first's minute), minutes it fires at (on first's day)."""
    day = first.replace(hour=0, minute=0)
    minute = first.hour * 60 + first.minute
    minutes = {m for m in MINUTES if matches(day + timedelta(minutes=m))}
    days = {n for n, d in enumerate(DAYS) if matches(d + timedelta(minutes=minute))}
    return days, minutes


@pytest.mark.parametrize("expression", CORPUS)
def test_union_of_eventbridge_expressions_fires_exactly_as_croniter(expression):
    # GIVEN a standard cron expression  WHEN converted
    converted = [EventBridgeCron(e) for e in to_eventbridge(expression)]

    def eventbridge(moment: datetime) -> bool:
        return any(c.matches(moment) for c in converted)

    def standard(moment: datetime) -> bool:
        return croniter.match(expression, moment)

    # THEN both fire at croniter's first instant of the year, and on the same days and minutes of the day
    first, days, minutes = _croniter_sets(expression)
    assert first.year == YEAR and eventbridge(first)
    assert _firing_sets(eventbridge, first) == (days, minutes)
    # AND whole instants agree on a sample
    rng = random.Random(expression)
    for _ in range(40):
        moment = YEAR_START + timedelta(minutes=rng.randrange(366 * 24 * 60))
        assert eventbridge(moment) == standard(moment), moment


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("*/15 9-17 * * MON-FRI", ["cron(0/15 9-17 ? * MON-FRI *)"]),
        ("0 0 1 * 1", ["cron(0 0 1 * ? *)", "cron(0 0 ? * MON *)"]),
        ("0 0 * * 0,7", ["cron(0 0 ? * SUN *)"]),
        ("@hourly", ["cron(0 * * * ? *)"]),
        ("5-59/10 * * * *", ["cron(5/10 * * * ? *)"]),
        ("0 0 * * 5-7", ["cron(0 0 ? * SUN,FRI,SAT *)"]),
        ("0 0 *,5 * SUN", ["cron(0 0 ? * SUN *)"]),
        ("0 0 1 * *,2", ["cron(0 0 1 * ? *)"]),
        ("0 7 */1 * 4-7,*/3", ["cron(0 7 ? * SUN,WED-SAT *)"]),
        ("0 0 * * 7/2", ["cron(0 0 ? * SUN,TUE,THU,SAT *)"]),
        ("0 0 30 2 MON", ["cron(0 0 ? 2 MON *)"]),
    ],
)
def test_conversion_output(expression, expected):
    assert to_eventbridge(expression) == expected


@pytest.mark.parametrize(
    "expression, message",
    [
        ("* * * *", "schedule '* * * *' has 4 fields; standard cron has 5 (minute hour day-of-month month day-of-week)"),
        ("* * * * * *", "schedule '* * * * * *' has 6 fields; standard cron has 5 (minute hour day-of-month month day-of-week)"),
        ("60 * * * *", "minute field: 60 is outside 0-59"),
        ("* 24 * * *", "hour field: 24 is outside 0-23"),
        ("* * 0 * *", "day-of-month field: 0 is outside 1-31"),
        ("* * * 13 *", "month field: 13 is outside 1-12"),
        ("* * * * 8", "day-of-week field: 8 is outside 0-7"),
        ("* * * FOO *", "month field: 'FOO' is not a number or a name (JAN, FEB, MAR, APR, MAY, JUN, JUL, AUG, SEP, OCT, NOV, DEC)"),
        ("* * * * FUN", "day-of-week field: 'FUN' is not a number or a name (SUN, MON, TUE, WED, THU, FRI, SAT)"),
        ("*/0 * * * *", "minute field: step '0' must be a whole number of at least 1"),
        ("*/x * * * *", "minute field: step 'x' must be a whole number of at least 1"),
        ("*/\u00b2 * * * *", "minute field: step '\u00b2' must be a whole number of at least 1"),  # int() refuses it
        ("0 1/\u0663 * * *", "hour field: step '\u0663' must be a whole number of at least 1"),  # int() reads it as 3
        ("5-1 * * * *", "minute field: range '5-1' runs backwards (5 > 1)"),
        ("1//2 * * * *", "minute field: '1//2' is not a value, range or step"),
        ("@reboot", "unknown macro '@reboot'; use one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"),
        # formerly: a number past int()'s 4,300 digits raised a bare ValueError
        ("0" * 4400 + "5 * * * *", "minute field: number '00000000000000000000000000000000000...' has 4401 digits; cron numbers have at most 4"),
        ("*/" + "0" * 4400 + "5 * * * *", "minute field: number '00000000000000000000000000000000000...' has 4401 digits; cron numbers have at most 4"),
        ("0 0 * * " + "0" * 4400 + "1-3", "day-of-week field: number '00000000000000000000000000000000000...' has 4401 digits; cron numbers have at most 4"),
        # formerly: schedules that never fire
        ("0 0 30 2 *", "never fires: its earliest day-of-month is 30, and none of its months (FEB) has that many days (February counts 29)"),
        ("0 0 31 4,6,9,11 *", "never fires: its earliest day-of-month is 31, and none of its months (APR, JUN, SEP, NOV) has that many days (February counts 29)"),
        ("0 0 31 2 *", "never fires: its earliest day-of-month is 31, and none of its months (FEB) has that many days (February counts 29)"),
        ("0 0 30,31 FEB *", "never fires: its earliest day-of-month is 30, and none of its months (FEB) has that many days (February counts 29)"),
        # croniter reads an equal range as the whole field, so a preview would disagree with the deployed schedule
        ("5-5 * * * *", "minute field: range '5-5' starts and ends at 5; write the single value 5 (croniter, which previews schedules, reads an equal range as the whole field)"),
        ("0 0 * * MON-MON", "day-of-week field: range 'MON-MON' starts and ends at 1; write the single value 1 (croniter, which previews schedules, reads an equal range as the whole field)"),
    ],
)
def test_bad_expressions_are_refused_with_the_field_and_rule(expression, message):
    with pytest.raises(CronExpressionError) as error:
        to_eventbridge(expression)
    assert str(error.value) == message


@pytest.mark.parametrize("expression", ["0 0 29 2 *", "0 0 30 1,2 *", "0 0 31 2-3 *", "0 0 30 2 1", "0 0 31 4 5"])
def test_a_schedule_with_some_day_that_exists_is_accepted(expression):
    # GIVEN a day-of-month that exists in one of the months (29 February in leap years), or a day-of-week that fires
    # WHEN converted  THEN it is accepted, and croniter finds its next run
    assert to_eventbridge(expression)
    assert croniter(expression, YEAR_START).get_next(datetime).year <= YEAR + 4


def test_evaluator_reads_documented_examples():
    # AWS's documented example: 10:15 UTC every day
    assert EventBridgeCron("cron(15 10 * * ? *)").matches(datetime(2028, 3, 1, 10, 15))
    # 6:00 PM Monday through Friday
    friday = EventBridgeCron("cron(0 18 ? * MON-FRI *)")
    assert friday.matches(datetime(2028, 3, 3, 18, 0)) and not friday.matches(datetime(2028, 3, 4, 18, 0))
    # every 10 minutes, Monday to Friday
    assert EventBridgeCron("cron(0/10 * ? * MON-FRI *)").matches(datetime(2028, 3, 1, 7, 50))
