"""Times as a person reads them: relative to now ("in 7 days", "3 minutes ago") and absolute
("2030-01-01 10:20:36 UTC"), one rule for every sentence gctl says about a moment. `now` is the
caller's (gctl passes this machine's clock; tests pass a fixed one)."""

from __future__ import annotations

from datetime import UTC, datetime

# Below each bound, a moment is said in the unit beside it (rounded): 89 s is "89 s", 90 s is
# "2 minutes", 35 hours "35 hours", 36 hours "2 days".
_UNITS = ((90, 1, "s"), (90 * 60, 60, "minute"), (36 * 3600, 3600, "hour"), (None, 86_400, "day"))


def span(seconds: float) -> str:
    """A length of time, rounded to its unit: "40 s", "2 minutes", "7 days"."""
    seconds = abs(seconds)
    for bound, size, unit in _UNITS:
        if bound is None or seconds < bound:
            count = max(round(seconds / size), 1 if size > 1 else 0)
            if unit == "s":
                return f"{count} s"
            return f"{count} {unit}{'' if count == 1 else 's'}"
    raise AssertionError("unreachable: the last unit has no bound")


def relative(moment: datetime, now: datetime) -> str:
    """ "in 7 days" or "3 minutes ago" (a moment within a second of now: "now")."""
    seconds = (moment - now).total_seconds()
    if abs(seconds) < 1:
        return "now"
    return f"in {span(seconds)}" if seconds > 0 else f"{span(seconds)} ago"


def absolute(moment: datetime) -> str:
    """ "2030-01-01 10:20:36 UTC" """
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def now_utc() -> datetime:
    return datetime.now(UTC)
