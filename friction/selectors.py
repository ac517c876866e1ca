"""Reading friction reports: the list (newest first, with their linked refusals), the minutes
lost per week and lane (the dashboard's chart), and the Markdown export."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.db.models import Prefetch, QuerySet, Sum
from django.db.models.functions import TruncDate

from friction.models import FrictionRefusal, FrictionReport

# The export's bound: the newest reports that match, at most this many.
EXPORT_LIMIT = 1000
CHART_WEEKS = 12
NO_LANE = "(no lane)"


def friction_list(
    *,
    workspace_id: int,
    lane_id: int | None = None,
    lane_slug: str = "",
    since: datetime | None = None,
) -> QuerySet[FrictionReport]:
    """The workspace's reports (a lane-limited caller's: its lane's), unordered: the caller
    pages them newest first. Two queries a page whatever its size: the rows with their lane,
    run and attempt, and their refusals."""
    reports = (
        FrictionReport.objects.filter(workspace_id=workspace_id)
        .in_lane(lane_id)
        .select_related("lane", "run", "attempt")
        .prefetch_related(Prefetch("refusals", queryset=FrictionRefusal.objects.order_by("id")))
    )
    if lane_slug:
        reports = reports.filter(lane__slug=lane_slug)
    if since is not None:
        reports = reports.filter(at__gte=since)
    return reports


def week_of(day: date) -> date:
    """The Monday a day's week starts on (ISO weeks)."""
    return day - timedelta(days=day.weekday())


@dataclass(frozen=True)
class WeeklyMinutes:
    """Minutes lost per lane per week, the weeks oldest first (every week of the window, zero
    or not), the lanes by the minutes they lost, most first."""

    weeks: list[date]
    lanes: list[str]
    minutes: dict[tuple[str, date], int]

    def total(self, lane: str) -> int:
        return sum(self.minutes.get((lane, week), 0) for week in self.weeks)


def friction_weekly(
    *, workspace_id: int, now: datetime, weeks: int = CHART_WEEKS, lane_id: int | None = None
) -> WeeklyMinutes:
    """The last `weeks` weeks up to `now` (the database's time), in one query: minutes summed
    per lane and day in SQL (a day truncates the same on every database), folded into weeks
    here."""
    first = week_of(now.astimezone(UTC).date()) - timedelta(weeks=weeks - 1)
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    rows = FrictionReport.objects.filter(workspace_id=workspace_id, at__gte=start).in_lane(lane_id)
    per_day = (
        rows.annotate(day=TruncDate("at", tzinfo=UTC))
        .values("lane__slug", "day")
        .annotate(minutes=Sum("minutes"))
        .order_by()
    )
    minutes: dict[tuple[str, date], int] = {}
    for row in per_day:
        key = (row["lane__slug"] or NO_LANE, week_of(row["day"]))
        minutes[key] = minutes.get(key, 0) + int(row["minutes"] or 0)
    all_weeks = [first + timedelta(weeks=i) for i in range(weeks)]
    lanes = sorted({lane for lane, _ in minutes}, key=lambda lane: (-_sum(minutes, lane), lane))
    return WeeklyMinutes(weeks=all_weeks, lanes=lanes, minutes=minutes)


def _sum(minutes: dict[tuple[str, date], int], lane: str) -> int:
    return sum(value for (name, _), value in minutes.items() if name == lane)


# What a hand wrote, made inert for an issue tracker that renders what is pasted (issue 33,
# item 9b: links, images and @mentions passed through):
# - HTML, and `<url>` autolinks: `&`, `<` and `>` as entities;
# - Markdown's own syntax: a backslash before each character that opens some (CommonMark renders
#   any escaped ASCII punctuation as itself): links and images (`[`, `]`, `!`), code (`` ` ``),
#   emphasis and strikethrough (`*`, `_`, `~`), the table's `|`, and the backslash;
# - what trackers find in the rendered text, where no escape is left: @mentions (and e-mail
#   addresses), #references, bare links (`scheme://`, `www.`): a zero-width space after the `@`,
#   the `#`, the `:` of `://` and the `www` (`&#8203;`, as Dependabot writes the mentions it
#   must not send), so the text reads the same and links, pings and references nothing.
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_SYNTAX = frozenset("\\`*_~[]!|")
_BREAK = "&#8203;"
_BROKEN_AFTER = frozenset("@#")
_WWW = re.compile(r"(www)(\.)", re.IGNORECASE)


def _cell(text: str) -> str:
    """Text for one Markdown table cell: one line, inert (`_ENTITIES`, `_SYNTAX`, `_BREAK`)."""
    cell = "".join(
        _ENTITIES.get(c)
        or (f"\\{c}" if c in _SYNTAX else f"{c}{_BREAK}" if c in _BROKEN_AFTER else c)
        for c in " ".join(text.split())
    )
    return _WWW.sub(rf"\1{_BREAK}\2", cell.replace("://", f":{_BREAK}//"))


def friction_markdown(reports: Iterable[FrictionReport], *, title: str) -> str:
    """The reports as Markdown to paste into an issue tracker: a table (when, lane, who, minutes,
    what hit, what instead, the refused calls with their codes and times) and the total."""
    lines = [
        f"## {_cell(title)}",
        "",
        "| When (UTC) | Lane | Run | Attempt | Filed by | Minutes | What got in the way | "
        "What they did instead | Refused calls |",
        "| --- | --- | --- | --- | --- | ---: | --- | --- | --- |",
    ]
    total = count = 0
    for report in reports:
        count += 1
        total += report.minutes
        refused = "<br>".join(
            f"`{link.code}` at {link.at.astimezone(UTC):%Y-%m-%d %H:%M:%S} "
            f"({_cell(link.method)} {_cell(link.path)}, request {_cell(link.request_id)})"
            for link in report.refusals.all()
        )
        lines.append(
            "| "
            + " | ".join(
                [
                    f"{report.at.astimezone(UTC):%Y-%m-%d %H:%M}",
                    _cell(report.lane.slug) if report.lane else "",
                    str(report.run_id or ""),
                    str(report.attempt_id or ""),
                    _cell(report.hand),
                    str(report.minutes),
                    _cell(report.what),
                    _cell(report.instead),
                    refused,
                ]
            )
            + " |"
        )
    lines += ["", f"{count} report{'' if count == 1 else 's'}, {total} minutes lost.", ""]
    return "\n".join(lines)
