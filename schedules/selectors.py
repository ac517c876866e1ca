"""The schedules' reads for pages: a lane's schedules with their next planned times and their
latest try, in two queries whatever their number."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import OuterRef, Subquery

from hands.models import Lane
from schedules.models import GitHubIntegration, Schedule, ScheduleTry
from schedules.presenters import planned_times

MAX_LISTED = 100


@dataclass(frozen=True)
class ScheduleRow:
    schedule: Schedule
    planned: list[datetime]
    last_outcome: str | None
    last_date_key: str | None
    last_error: str | None


def lane_schedules(*, lane: Lane) -> list[ScheduleRow]:
    latest = ScheduleTry.objects.filter(schedule=OuterRef("pk")).order_by("-id")
    rows = (
        Schedule.objects.filter(lane=lane)
        .annotate(
            last_outcome=Subquery(latest.values("outcome")[:1]),
            last_date_key=Subquery(latest.values("date_key")[:1]),
            last_error=Subquery(latest.values("error")[:1]),
        )
        .order_by("id")[:MAX_LISTED]
    )
    return [
        ScheduleRow(
            schedule=row,
            planned=planned_times(row),
            last_outcome=row.last_outcome,
            last_date_key=row.last_date_key,
            last_error=row.last_error or None,
        )
        for row in rows
    ]


def lane_integrations(*, lane: Lane) -> list[GitHubIntegration]:
    return list(GitHubIntegration.objects.filter(lane=lane).order_by("id")[:MAX_LISTED])
