"""Cost and tokens (issue 22, part 4): what reports said the work cost, summed on read.

Reports are the one record (`Report.tokens_in`, `tokens_out`, `cost_usd`: what the work cost since
the hand's last report); totals per attempt, run, hand and lane are sums over them, never a
second counter that could disagree. A heartbeat carries no cost and pays nothing for it: the
sums read only costed reports, through their partial index `report_cost_idx` (by time), and a
budget's period (a UTC day or ISO week) is a range of it. A report whose cost a supervisor voided
(fleet/costs/voids.py) keeps its figures, which every sum leaves out (`COUNTED`) and shows apart
(`voided_usd`, `voided_tokens`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import BigIntegerField, DecimalField, F, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce, TruncDate

from fleet.models import Budget, BudgetHit, BudgetPeriod, Report

# Bounds of one report's figures: what the work cost since the hand's last report. Tokens: far
# above any real call, low enough that sums never overflow. Dollars: a thousand is over ten
# million output tokens of the dearest model, since the last report; a hand that spends more
# reports more often. Less would refuse real work; a hundred thousand (as before) let one report,
# mistaken or hostile, stop a lane's budget for its whole period. A report that still does so
# wrongly is voided by a supervisor (fleet/costs/voids.py), which lifts the hit it caused.
MAX_TOKENS = 10**9
MAX_COST_USD = Decimal("1000")
COST_PLACES = 6
COSTED = Q(cost_usd__gt=0) | Q(tokens_in__gt=0) | Q(tokens_out__gt=0)
# What a sum counts of the costed reports: not those a supervisor voided.
COUNTED = Q(voided_at=None)
GROUPS = {"lane": "attempt__lane", "run": "attempt__run", "hand": "attempt__hand"}
GROUPS["attempt"] = "attempt"


_PLACES = Decimal(1).scaleb(-COST_PLACES)


def money_text(value: Decimal | None) -> str | None:
    """Money as the contract writes it: a decimal string with 6 places (never a float)."""
    return None if value is None else str(Decimal(value).quantize(_PLACES))


@dataclass(frozen=True)
class Spend:
    """What reports cost (voided ones left out), and apart, what voided reports had said."""

    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: Decimal = Decimal(0)
    voided_usd: Decimal = Decimal(0)
    voided_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    @property
    def voided(self) -> bool:
        return bool(self.voided_usd or self.voided_tokens)

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            tokens_in=self.tokens_in + other.tokens_in,
            tokens_out=self.tokens_out + other.tokens_out,
            cost_usd=self.cost_usd + other.cost_usd,
            voided_usd=self.voided_usd + other.voided_usd,
            voided_tokens=self.voided_tokens + other.voided_tokens,
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
        voided_usd=Decimal(values.get("voided_usd") or 0),
        voided_tokens=values.get("voided_tokens") or 0,
    )


# Every sum of every read, over costed reports: what was voided, and what counts (in this order:
# an annotation named as a column hides the column from the annotations after it).
_SUMS = {
    "voided_usd": Sum("cost_usd", filter=~COUNTED),
    "voided_tokens": Sum(F("tokens_in") + F("tokens_out"), filter=~COUNTED),
    "tokens_in": Sum("tokens_in", filter=COUNTED),
    "tokens_out": Sum("tokens_out", filter=COUNTED),
    "cost_usd": Sum("cost_usd", filter=COUNTED),
}


def period_spend(*, lane: Any, start: Any, end: Any) -> tuple[Any, Any]:
    """A lane's spend in [start, end), dollars and tokens, as two expressions (each a
    sub-select with lane_spend's rows and sums) for a statement that judges budgets
    (`fleet.costs.voids`); `lane`, `start` and `end` are values or OuterRefs."""
    reports = (
        Report.objects.filter(COSTED, at__gte=start, at__lt=end, attempt__lane_id=lane)
        .order_by()
        .values("attempt__lane_id")
    )
    usd = Subquery(reports.annotate(usd=_SUMS["cost_usd"]).values("usd"))
    tokens = Subquery(
        reports.annotate(tokens=_SUMS["tokens_in"] + _SUMS["tokens_out"]).values("tokens")
    )
    return (
        Coalesce(usd, Value(Decimal(0)), output_field=DecimalField()),
        Coalesce(tokens, Value(0), output_field=BigIntegerField()),
    )


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
        # A group whose every report was voided sums to NULL: last, not first.
        .order_by(
            F("cost_usd").desc(nulls_last=True), f"{group}_id" if by != "attempt" else "attempt_id"
        )[:limit]
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


def cost_reports(
    *,
    workspace_id: int,
    lane_id: int | None = None,
    lane_slug: str = "",
    run_id: int | None = None,
    attempt_id: int | None = None,
) -> Any:
    """The workspace's costed reports (a lane-limited caller's: its lane's), voided ones too,
    with the attempt's hand and lane their answer names; the caller orders and pages them."""
    reports = Report.objects.filter(COSTED, workspace_id=workspace_id).in_lane(lane_id)
    if lane_slug:
        reports = reports.filter(attempt__lane__slug=lane_slug)
    if run_id is not None:
        reports = reports.filter(attempt__run_id=run_id)
    if attempt_id is not None:
        reports = reports.filter(attempt_id=attempt_id)
    return reports.select_related("attempt__hand", "attempt__lane")
