"""Cost and tokens (issue 22, part 4): what reports said the work cost, summed on read.

Reports are the one record (`Report.tokens_in`, `tokens_out`, `cost_usd`: what the work cost since
the hand's last report); totals per attempt, run, hand and lane are sums over them, never a
second counter that could disagree. A heartbeat carries no cost and pays nothing for it: the
sums read only costed reports, through their partial index `report_cost_idx` (by time), and a
budget's period (a UTC day or ISO week) is a range of it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Q, Sum
from django.db.models.functions import TruncDate

from fleet.models import Budget, BudgetHit, BudgetPeriod, Report

# Bounds of one report's figures: far above any real call, low enough that sums never overflow.
MAX_TOKENS = 10**9
MAX_COST_USD = Decimal("100000")
COST_PLACES = 6
COSTED = Q(cost_usd__gt=0) | Q(tokens_in__gt=0) | Q(tokens_out__gt=0)
GROUPS = {"lane": "attempt__lane", "run": "attempt__run", "hand": "attempt__hand"}
GROUPS["attempt"] = "attempt"


_PLACES = Decimal(1).scaleb(-COST_PLACES)


def money_text(value: Decimal | None) -> str | None:
    """Money as the contract writes it: a decimal string with 6 places (never a float)."""
    return None if value is None else str(Decimal(value).quantize(_PLACES))


@dataclass(frozen=True)
class Spend:
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: Decimal = Decimal(0)

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            tokens_in=self.tokens_in + other.tokens_in,
            tokens_out=self.tokens_out + other.tokens_out,
            cost_usd=self.cost_usd + other.cost_usd,
        )


def spend_total(spends: Iterable[Spend]) -> Spend:
    """Spends added up (a week's days, a run's days): the same sums the database would make."""
    return sum(spends, Spend())


def budget_notice_now(notice: object, until: datetime | None, now: datetime) -> Any:
    """The budget notice an attempt carries, while its period lasts at the database time `now`
    (a new period lifts it)."""
    if notice is None or until is None or now >= until:
        return None
    # A raw cursor may hand jsonb over as text.
    return json.loads(notice) if isinstance(notice, str | bytes) else notice


def period_bounds(period: str, at: datetime) -> tuple[datetime, datetime]:
    """The UTC day or ISO week (from Monday 00:00) holding the database time `at`."""
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == BudgetPeriod.DAY:
        return day, day + timedelta(days=1)
    start = day - timedelta(days=day.weekday())
    return start, start + timedelta(days=7)


def _spend(values: dict[str, Any]) -> Spend:
    return Spend(
        tokens_in=values.get("tokens_in") or 0,
        tokens_out=values.get("tokens_out") or 0,
        cost_usd=Decimal(values.get("cost_usd") or 0),
    )


_SUMS = {
    "tokens_in": Sum("tokens_in"),
    "tokens_out": Sum("tokens_out"),
    "cost_usd": Sum("cost_usd"),
}


def lane_spend(*, lane_id: int, start: datetime, end: datetime) -> Spend:
    """What the lane's reports cost in [start, end)."""
    return _spend(
        Report.objects.filter(
            COSTED, at__gte=start, at__lt=end, attempt__lane_id=lane_id
        ).aggregate(**_SUMS)
    )


def attempt_spend(*, attempt_id: int) -> Spend:
    return _spend(Report.objects.filter(COSTED, attempt_id=attempt_id).aggregate(**_SUMS))


def hand_spend(*, hand_id: int) -> Spend:
    """What the hand's reports cost, over all its attempts (one aggregate)."""
    return _spend(Report.objects.filter(COSTED, attempt__hand_id=hand_id).aggregate(**_SUMS))


def attempts_spend(*, attempt_ids: Collection[int]) -> dict[int, Spend]:
    """Each attempt's total, for the attempts given (one grouped query; an attempt whose reports
    carried no cost is absent)."""
    if not attempt_ids:
        return {}
    rows = (
        Report.objects.filter(COSTED, attempt_id__in=list(attempt_ids))
        .values("attempt_id")
        .annotate(**_SUMS)
        .order_by()
    )
    return {row["attempt_id"]: _spend(row) for row in rows}


def costs_by(
    *,
    workspace_id: int,
    by: str,
    since: datetime | None = None,
    until: datetime | None = None,
    lane_id: int | None = None,
    limit: int = 500,
) -> list[dict[str, Any]]:
    """Totals per lane, run, hand or attempt of the workspace, largest cost first: one grouped
    query, with the group's name (a lane's slug, a run's title, a hand's name)."""
    group = GROUPS[by]
    reports = Report.objects.filter(COSTED, attempt__workspace_id=workspace_id)
    if since is not None:
        reports = reports.filter(at__gte=since)
    if until is not None:
        reports = reports.filter(at__lt=until)
    reports = reports.in_lane(lane_id)
    names = {
        "lane": "attempt__lane__slug",
        "run": "attempt__run__title",
        "hand": "attempt__hand__name",
        "attempt": "attempt__hand__name",
    }
    rows = (
        reports.values(f"{group}_id" if by != "attempt" else "attempt_id", names[by])
        .annotate(**_SUMS)
        .order_by("-cost_usd", f"{group}_id" if by != "attempt" else "attempt_id")[:limit]
    )
    key = f"{group}_id" if by != "attempt" else "attempt_id"
    return [
        {
            "id": row[key],
            "name": row[names[by]],
            "tokens_in": row["tokens_in"] or 0,
            "tokens_out": row["tokens_out"] or 0,
            "cost_usd": Decimal(row["cost_usd"] or 0),
        }
        for row in rows
    ]


def _daily(reports: Any) -> dict[date, Spend]:
    rows = (
        reports.annotate(day=TruncDate("at", tzinfo=UTC))
        .values("day")
        .annotate(**_SUMS)
        .order_by("day")
    )
    return {row["day"]: _spend(row) for row in rows}


def lane_daily(*, lane_id: int, since: date) -> dict[date, Spend]:
    """A lane's spend per UTC day from `since`, for its chart (one grouped query)."""
    start = datetime(since.year, since.month, since.day, tzinfo=UTC)
    return _daily(Report.objects.filter(COSTED, at__gte=start, attempt__lane_id=lane_id))


def run_daily(*, run_id: int) -> dict[date, Spend]:
    """A run's spend per UTC day over its whole life (one grouped query): the days add up to
    its total, and the latest of them are its chart."""
    return _daily(Report.objects.filter(COSTED, attempt__run_id=run_id))


@dataclass(frozen=True)
class BudgetStatus:
    """A budget in its current period: what the lane has spent, and whether it was reached."""

    budget: Budget
    period_start: datetime
    period_end: datetime
    spent: Spend
    reached_at: datetime | None


def budgets_list(*, workspace_id: int, lane_id: int | None = None, lane_slug: str = "") -> Any:
    budgets = Budget.objects.filter(workspace_id=workspace_id).in_lane(lane_id)
    budgets = budgets.select_related("lane")
    if lane_slug:
        budgets = budgets.filter(lane__slug=lane_slug)
    return budgets.order_by("lane__slug", "period")


def budgets_status(budgets: list[Budget], now: datetime) -> list[BudgetStatus]:
    """Each budget's current period at the database time `now`: one grouped query per period
    kind for the spend and one for the hits, however many budgets."""
    bounds = {period.value: period_bounds(period.value, now) for period in BudgetPeriod}
    spent: dict[tuple[str, int], Spend] = {}
    for period, (start, end) in bounds.items():
        lanes = {b.lane_id for b in budgets if b.period == period}
        if not lanes:
            continue
        rows = (
            Report.objects.filter(COSTED, at__gte=start, at__lt=end, attempt__lane_id__in=lanes)
            .values("attempt__lane_id")
            .annotate(**_SUMS)
            .order_by()
        )
        for row in rows:
            spent[(period, row["attempt__lane_id"])] = _spend(row)
    hits = {
        (hit.budget_id, hit.period_start): hit.at
        for hit in BudgetHit.objects.filter(
            workspace_id__in={b.workspace_id for b in budgets},
            budget__in=[b.pk for b in budgets],
            period_start__in=[start for start, _ in bounds.values()],
        )
    }
    return [
        BudgetStatus(
            budget=b,
            period_start=bounds[b.period][0],
            period_end=bounds[b.period][1],
            spent=spent.get((b.period, b.lane_id), Spend()),
            reached_at=hits.get((b.pk, bounds[b.period][0])),
        )
        for b in budgets
    ]
