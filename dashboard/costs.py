"""What the pages show of cost, in a fixed number of queries: a lane's totals today and this week,
its budgets in their current periods and its spend per day for the chart; a run's and a hand's
totals with each shown attempt's, and the run's spend per day. Every sum is
`fleet.costs.spend`'s."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from fleet.costs import spend
from fleet.costs.spend import BudgetStatus, Spend
from fleet.models import BudgetPeriod
from hands.models import Lane

CHART_DAYS = 14


@dataclass(frozen=True)
class LaneCosts:
    today: Spend
    week: Spend
    days: list[tuple[object, Spend]]  # (date, spend), oldest first, CHART_DAYS of them
    budgets: list[BudgetStatus]

    @property
    def daily_limit(self) -> object:
        return next(
            (s.budget.limit_usd for s in self.budgets if s.budget.period == BudgetPeriod.DAY),
            None,
        )


def _chart_start(now: datetime) -> date:
    return (now - timedelta(days=CHART_DAYS - 1)).date()


def _chart_days(by_day: dict[date, Spend], first: date) -> list[tuple[date, Spend]]:
    """CHART_DAYS days from `first`, oldest first, a day without costed reports at zero."""
    days = [first + timedelta(days=i) for i in range(CHART_DAYS)]
    return [(day, by_day.get(day, Spend())) for day in days]


def lane_costs(*, lane: Lane, now: datetime) -> LaneCosts:
    """The lane's cost at the database time `now`: three queries (the days, the budgets with
    their spend and hits are `spend.budgets_status`'s)."""
    first = _chart_start(now)
    days = _chart_days(spend.lane_daily(lane_id=lane.pk, since=first), first)
    week_start, _ = spend.period_bounds(BudgetPeriod.WEEK, now)
    week = [day_spend for day, day_spend in days if day >= week_start.date()]
    budgets = list(spend.budgets_list(workspace_id=lane.workspace_id).filter(lane=lane))
    return LaneCosts(
        today=days[-1][1],
        week=spend.spend_total(week),
        days=days,
        budgets=spend.budgets_status(budgets, now),
    )


@dataclass(frozen=True)
class AttemptsCosts:
    """A run's or a hand's total and the total of each attempt its page shows."""

    total: Spend
    by_attempt: dict[int, Spend]
    days: list[tuple[date, Spend]]  # the run's chart (CHART_DAYS, oldest first); none for a hand


def run_costs(*, run_id: int, attempt_ids: Iterable[int], now: datetime) -> AttemptsCosts:
    """Two queries: the run's spend per UTC day over its life (the total is their sum, the chart
    the latest CHART_DAYS of them) and the shown attempts' totals."""
    by_day = spend.run_daily(run_id=run_id)
    return AttemptsCosts(
        total=spend.spend_total(by_day.values()),
        by_attempt=spend.attempts_spend(attempt_ids=set(attempt_ids)),
        days=_chart_days(by_day, _chart_start(now)),
    )


def hand_costs(*, hand_id: int, attempt_ids: Iterable[int]) -> AttemptsCosts:
    """Two queries: the hand's total and the shown attempts' totals."""
    return AttemptsCosts(
        total=spend.hand_spend(hand_id=hand_id),
        by_attempt=spend.attempts_spend(attempt_ids=set(attempt_ids)),
        days=[],
    )
