"""What a lane's page shows of cost: totals today, this week and in all, its budgets in their
current periods, and the spend per day for the chart, in a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from fleet import costs
from fleet.costs import BudgetStatus, Spend
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


def lane_costs(*, lane: Lane, now: datetime) -> LaneCosts:
    """The lane's cost at the database time `now`: three queries (the days, the budgets with
    their spend and hits are `costs.budgets_status`'s)."""
    first = (now - timedelta(days=CHART_DAYS - 1)).date()
    by_day = costs.lane_daily(lane_id=lane.pk, since=first)
    days = [(first + timedelta(days=i), by_day.get(first + timedelta(days=i), Spend())) for i in
            range(CHART_DAYS)]  # fmt: skip
    week_start, _ = costs.period_bounds(BudgetPeriod.WEEK, now)
    week = [spend for day, spend in by_day.items() if day >= week_start.date()]
    budgets = list(costs.budgets_list(workspace_id=lane.workspace_id).filter(lane=lane))
    return LaneCosts(
        today=days[-1][1],
        week=Spend(
            tokens_in=sum(s.tokens_in for s in week),
            tokens_out=sum(s.tokens_out for s in week),
            cost_usd=sum((s.cost_usd for s in week), costs.Spend().cost_usd),
        ),
        days=days,
        budgets=costs.budgets_status(budgets, now),
    )
