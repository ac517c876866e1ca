"""A schedule's periods, one definition for the beat job, the API and the dashboard: a cron
expression of five fields (minute hour day-of-month month day-of-week) read by croniter in UTC,
the periods it names, and the period's date key and its substitution into a template.

A period is the instant the expression names (`0 6 * * *`: each day at 06:00 UTC). Its date key
(`2030-01-02T06:00Z`) names it in the record of tries; a template's `{date}` is its UTC date
(`2030-01-02`) and `{time}` its time (`0600`)."""

from __future__ import annotations

import re
from collections import deque
from datetime import UTC, datetime, timedelta

from croniter import CroniterError, croniter

from apikit.errors import ValidationFailed

MAX_CRON_LENGTH = 100
# The beat job makes at most this many periods of one schedule in one go: after an outage (or a
# schedule that was switched off) only the latest MAX_CATCH_UP periods are made, the older ones
# skipped, so an every-minute schedule down for a day does not flood the lane.
MAX_CATCH_UP = 24
# How many next periods pages and listings show.
PLANNED = 5
# The shortest time between two periods of one schedule. Each period makes a package and its runs
# with their slots (a lease row each), so a schedule that fires every minute is a planner of its
# own: six of them once kept the shared job busy for most of every minute.
MIN_PERIOD_S = 300
# Firings looked at to tell whether an expression can fire twice on one UTC day (two on one day
# are always consecutive, so a day's second firing is within this many of its first).
_SAME_DAY_HORIZON = 64
PLACEHOLDERS = ("{date}", "{time}")
_BRACES = re.compile(r"\{[^{}]*\}|[{}]")


def validate_cron(value: object) -> str:
    """A five-field cron expression (or a nickname such as @daily) that croniter reads and that
    fires at least once."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_CRON_LENGTH:
        raise ValidationFailed(
            f"cron must be a cron expression of at most {MAX_CRON_LENGTH} characters",
            fields={"cron": ["A cron expression such as '0 6 * * *' (UTC)."]},
        )
    expression = " ".join(value.split())
    fields = expression.split(" ")
    # croniter's `R` (a random value) would name other periods each time it is read.
    random = any(
        part.upper() == "R" or part.upper().startswith("R(")
        for field in fields
        for part in field.split(",")
    )
    if (
        random
        or not (len(fields) == 5 or (len(fields) == 1 and expression.startswith("@")))
        or not croniter.is_valid(expression)
    ):
        raise ValidationFailed(
            f"cron {value!r} is not a cron expression of five fields (minute hour day-of-month "
            "month day-of-week, in UTC)",
            fields={"cron": ["Five fields: minute hour day-of-month month day-of-week (UTC)."]},
        )
    try:
        next_period(expression, datetime(2000, 1, 1, tzinfo=UTC))
    except CroniterError:
        raise ValidationFailed(
            f"cron {value!r} never fires", fields={"cron": ["It names no instant."]}
        ) from None
    validate_period(expression)
    return expression


def validate_period(cron: str) -> None:
    """Two periods of `cron` are at least MIN_PERIOD_S apart: the beat job judges a stored
    schedule by this rule too (`schedules.jobs`), so one written before it makes nothing."""
    gap = shortest_gap_s(cron)
    if gap < MIN_PERIOD_S:
        raise ValidationFailed(
            f"cron {cron!r} fires {gap // 60} minute(s) apart; a schedule's periods must be at "
            f"least {MIN_PERIOD_S // 60} minutes apart",
            fields={"cron": [f"Periods at least {MIN_PERIOD_S // 60} minutes apart."]},
        )


def shortest_gap_s(cron: str) -> int:
    """The shortest time between two consecutive periods, in seconds, from the minutes and hours
    the expression names, as if every day fired (a day's last period and the next day's first
    count as consecutive). Never longer than the truth: exact when two days in a row fire,
    shorter otherwise (so an expression of some days only may be refused for a gap across
    midnight it never has). Periods are whole minutes in UTC (no seconds field, no DST)."""
    minutes, hours = (
        _expanded(field, size)
        for field, size in zip(croniter(cron).expanded[:2], (60, 24), strict=True)
    )
    times = sorted(hour * 60 + minute for hour in hours for minute in minutes)
    day = 24 * 60
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    gaps.append(times[0] + day - times[-1])
    return min(gaps) * 60


def _expanded(values: list[object], size: int) -> list[int]:
    # croniter writes an unrestricted field as ['*'].
    return list(range(size)) if values == ["*"] else sorted({int(str(v)) for v in values})


def fires_twice_a_day(cron: str) -> bool:
    times = croniter(cron, datetime(2000, 1, 1, tzinfo=UTC))
    previous = None
    for _ in range(_SAME_DAY_HORIZON):
        period = times.get_next(datetime)
        if previous is not None and period.date() == previous.date():
            return True
        previous = period
    return False


def next_period(cron: str, after: datetime) -> datetime:
    """The first period strictly after `after`."""
    return _utc(croniter(cron, after.astimezone(UTC)).get_next(datetime))


def planned(cron: str, after: datetime, count: int = PLANNED) -> list[datetime]:
    """The next `count` periods strictly after `after`."""
    times = croniter(cron, after.astimezone(UTC))
    return [_utc(times.get_next(datetime)) for _ in range(count)]


def due_periods(cron: str, *, after: datetime, now: datetime) -> tuple[list[datetime], bool]:
    """The periods in (after, now], oldest first, at most the latest MAX_CATCH_UP of them; and
    whether older ones were left out. Counted back from now, so an old `after` costs nothing."""
    # croniter works in whole seconds and get_prev is strict: from the next whole second, the
    # first previous period is the latest one at or before now.
    times = croniter(cron, now.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=1))
    found: deque[datetime] = deque()
    skipped = False
    while True:
        period = _utc(times.get_prev(datetime))
        if period <= after:
            break
        if len(found) == MAX_CATCH_UP:
            skipped = True
            break
        found.appendleft(period)
    return list(found), skipped


def date_key(period: datetime) -> str:
    return period.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")


def render(pattern: str, period: datetime) -> str:
    at = period.astimezone(UTC)
    return pattern.replace("{date}", at.strftime("%Y-%m-%d")).replace("{time}", at.strftime("%H%M"))


def validate_pattern(value: object, *, field: str, cron: str, key: bool) -> str:
    """A template for a package's key or title: only `{date}` and `{time}` in braces. A key
    names its period: it has `{date}`, and `{time}` too when the expression can fire twice on
    one UTC day (else two periods would make one key, and the second would be no package)."""
    if not isinstance(value, str) or not value:
        raise ValidationFailed(f"{field} is required", fields={field: ["Required."]})
    unknown = [m for m in _BRACES.findall(value) if m not in PLACEHOLDERS]
    if unknown:
        raise ValidationFailed(
            f"{field} may substitute only {{date}} and {{time}} (found {unknown[0]!r})",
            fields={field: ["Only {date} and {time} in braces."]},
        )
    if key and "{date}" not in value:
        raise ValidationFailed(
            f"{field} must contain {{date}}, so that each period has a key of its own",
            fields={field: ["Must contain {date}."]},
        )
    if key and "{time}" not in value and fires_twice_a_day(cron):
        raise ValidationFailed(
            f"{field} must contain {{time}} too: {cron!r} can fire twice on one day",
            fields={field: ["Must contain {time}: the schedule fires more than once a day."]},
        )
    return value


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
