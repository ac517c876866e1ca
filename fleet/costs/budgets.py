"""Lane budgets (issue 22, part 4): a limit on what a lane's reports cost per UTC day or ISO
week, and what reaching it does.

The report that takes the lane's spend for the period to or over a limit, in its own
transaction: takes the budget's row lock (so concurrent costed reports in the lane are judged
one after another, each seeing the others' committed reports), inserts the period's `BudgetHit`
(unique per budget and period: once, however many reports cross together), sets the directive of
the lane's open attempts to the budget's action in one conditional UPDATE (pause moves only
`continue`; stop moves anything: never weakening a stop) with the notice every later answer to
those hands carries until the period ends, and writes one `budget` event (its webhook kind).
While the hit lasts, claims in the lane are refused (`budget_reached`). A new period lifts both;
a pause the budget set is lifted by a supervisor's directive, as any other.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Case, F, Value, When

from apikit.errors import NotFound, ValidationFailed
from fleet.costs.spend import (
    MAX_TOKENS,
    Spend,
    lane_spend,
    money_text,
    period_bounds,
)
from fleet.errors import BudgetReached
from fleet.models import Attempt, Budget, BudgetAction, BudgetHit, BudgetPeriod, Directive
from hands.models import Lane
from hands.selectors import lane_slug
from leases.audit import record_event
from leases.clock import now_expression
from leases.models import EventKind
from leases.services import validate_choice

BUDGET_ACTOR = "budget"
# A budget's limit_usd, at most: a sum of many reports, so not one report's ceiling.
MAX_LIMIT_USD = Decimal(10) ** 8


def _iso(instant: datetime) -> str:
    """A time as every answer writes it (UTC, with Z)."""
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _money(value: Decimal | None) -> str | None:
    return None if value is None else f"{value.quantize(Decimal('0.01'))}"


def budget_message(
    *,
    lane: str,
    period: str,
    spent: Spend,
    limit_usd: Decimal | None,
    limit_tokens: int | None,
    action: str,
) -> str:
    """What every answer to an affected hand says, e.g. "lane docs has spent its daily budget
    ($5.00 of $5.00): pause"."""
    word = "daily" if period == BudgetPeriod.DAY else "weekly"
    parts = []
    if limit_usd is not None:
        parts.append(f"${_money(spent.cost_usd)} of ${_money(limit_usd)}")
    if limit_tokens is not None:
        parts.append(f"{spent.tokens} of {limit_tokens} tokens")
    return f"lane {lane} has spent its {word} budget ({', '.join(parts)}): {action}"


def _validate_limits(limit_usd: object, limit_tokens: object) -> tuple[Decimal | None, int | None]:
    if limit_usd is not None and (
        not isinstance(limit_usd, Decimal)
        or not limit_usd.is_finite()
        or not Decimal(0) < limit_usd <= MAX_LIMIT_USD
        or limit_usd.as_tuple().exponent < -6  # type: ignore[operator]
    ):
        raise ValidationFailed(
            "limit_usd must be a positive amount with at most 6 decimal places",
            fields={"limit_usd": ["A positive decimal, at most 6 places."]},
        )
    if limit_tokens is not None and (
        isinstance(limit_tokens, bool)
        or not isinstance(limit_tokens, int)
        or not 0 < limit_tokens <= MAX_TOKENS * 1000
    ):
        raise ValidationFailed(
            "limit_tokens must be a positive whole number",
            fields={"limit_tokens": ["A positive integer."]},
        )
    if limit_usd is None and limit_tokens is None:
        raise ValidationFailed(
            "a budget needs limit_usd, limit_tokens or both",
            fields={"limit_usd": ["Give limit_usd or limit_tokens."]},
        )
    return limit_usd, limit_tokens


def budget_create(
    *,
    lane: Lane,
    period: str,
    action: str,
    limit_usd: Decimal | None = None,
    limit_tokens: int | None = None,
) -> Budget:
    """A lane's budget for a period (one per lane and period: `validation_error` for a second)."""
    validate_choice(period, field="period", choices=[p.value for p in BudgetPeriod])
    validate_choice(action, field="action", choices=[a.value for a in BudgetAction])
    limit_usd, limit_tokens = _validate_limits(limit_usd, limit_tokens)
    try:
        with transaction.atomic():
            return Budget.objects.create(
                workspace_id=lane.workspace_id,
                lane=lane,
                period=period,
                action=action,
                limit_usd=limit_usd,
                limit_tokens=limit_tokens,
            )
    except IntegrityError:
        raise ValidationFailed(
            f"lane {lane.slug!r} already has a {period} budget: update it",
            fields={"period": ["One budget per lane and period."]},
        ) from None


def budget_update(
    *, workspace_id: int, budget_id: int, lane_id: int | None = None, **changes: Any
) -> Budget:
    """Change a budget's limits or action. The current period's hit, if any, is lifted with its
    notices (the next costed report judges the new limits); directives already set stay, for a
    supervisor to lift."""
    budget = budget_get(workspace_id=workspace_id, budget_id=budget_id, lane_id=lane_id)
    action = changes.get("action", budget.action)
    validate_choice(action, field="action", choices=[a.value for a in BudgetAction])
    limit_usd, limit_tokens = _validate_limits(
        changes.get("limit_usd", budget.limit_usd), changes.get("limit_tokens", budget.limit_tokens)
    )
    with transaction.atomic():
        if not Budget.objects.filter(pk=budget.pk).update(
            action=action, limit_usd=limit_usd, limit_tokens=limit_tokens
        ):
            raise NotFound(f"no budget {budget_id}")
        BudgetHit.objects.filter(workspace_id=budget.workspace_id, budget=budget).delete()
        Attempt.objects.filter(
            lane_id=budget.lane_id, end=None, budget_notice__budget=budget.pk
        ).update(budget_notice=None, budget_until=None)
    budget.refresh_from_db()
    return budget


def budget_get(*, workspace_id: int, budget_id: int, lane_id: int | None = None) -> Budget:
    budgets = Budget.objects.filter(workspace_id=workspace_id).in_lane(lane_id)
    try:
        return budgets.select_related("lane").get(pk=budget_id)
    except Budget.DoesNotExist:
        raise NotFound(f"no budget {budget_id}") from None


def _reached(budget: Budget, spent: Spend) -> bool:
    return (budget.limit_usd is not None and spent.cost_usd >= budget.limit_usd) or (
        budget.limit_tokens is not None and spent.tokens >= budget.limit_tokens
    )


def budgets_lock(*, workspace_id: int, lane_id: int) -> list[Budget]:
    """The lane's budgets, locked for the rest of the transaction, in id order: costed reports in
    one lane are judged one after another; two lanes' never wait on each other."""
    budgets = Budget.objects.filter(workspace_id=workspace_id, lane_id=lane_id)
    return list(budgets.order_by("pk").select_for_update())


def budgets_enforce(
    *, workspace_id: int, lane_id: int, at: datetime, actor: str, attempt_id: int
) -> int:
    """After a costed report of `attempt_id` (by the hand `actor`) in the lane at the database
    time `at`, inside its transaction: act on every budget of the lane it took to its limit.
    How many budgets it reached."""
    reached = 0
    for budget in budgets_lock(workspace_id=workspace_id, lane_id=lane_id):
        start, end = period_bounds(budget.period, at)
        hits = BudgetHit.objects.filter(workspace_id=workspace_id, budget=budget)
        if hits.filter(period_start=start).exists():
            continue
        spent = lane_spend(lane_id=lane_id, start=start, end=end)
        if not _reached(budget, spent):
            continue
        try:
            with transaction.atomic():  # a savepoint: the unique key decides, once
                BudgetHit.objects.create(
                    workspace_id=workspace_id,
                    budget=budget,
                    period_start=start,
                    period_end=end,
                    at=at,
                    spent_usd=spent.cost_usd,
                    spent_tokens=spent.tokens,
                )
        except IntegrityError:
            continue
        reached += 1
        _act(
            budget, spent, start, end, at,
            workspace_id=workspace_id, actor=actor, attempt_id=attempt_id,
        )  # fmt: skip
    return reached


def _act(
    budget: Budget,
    spent: Spend,
    start: datetime,
    end: datetime,
    at: datetime,
    *,
    workspace_id: int,
    actor: str,
    attempt_id: int,
) -> None:
    lane = lane_slug(workspace_id=budget.workspace_id, lane_id=budget.lane_id)
    message = budget_message(
        lane=lane,
        period=budget.period,
        spent=spent,
        limit_usd=budget.limit_usd,
        limit_tokens=budget.limit_tokens,
        action=budget.action,
    )
    notice = {
        "budget": budget.pk,
        "lane": lane,
        "period": budget.period,
        "period_start": _iso(start),
        "period_end": _iso(end),
        "spent_usd": money_text(spent.cost_usd),
        "limit_usd": money_text(budget.limit_usd),
        "spent_tokens": spent.tokens,
        "limit_tokens": budget.limit_tokens,
        "action": budget.action,
        "message": message,
    }
    directive: Any = Value(Directive.STOP.value)
    if budget.action == BudgetAction.PAUSE:
        directive = Case(
            When(directive=Directive.CONTINUE, then=Value(Directive.PAUSE.value)),
            default=F("directive"),
        )
    open_attempts = Attempt.objects.filter(lane_id=budget.lane_id, end=None)
    affected = sorted(open_attempts.values_list("pk", flat=True))
    open_attempts.update(directive=directive, budget_notice=notice, budget_until=end)
    record_event(
        workspace_id=workspace_id,
        kind=EventKind.BUDGET,
        at=at,
        actor=actor,
        # The hand and attempt whose report reached it: a lane-limited supervisor sees it too.
        hand=actor,
        attempt_id=attempt_id,
        data={**notice, "attempts": affected},
    )


def refuse_over_budget(*, workspace_id: int, lane_id: int) -> None:
    """`budget_reached` for a claim in a lane whose budget for the current period is reached.
    Inside the claim's transaction it takes the lane's budget locks first (none: no budget, no
    lock), so a claim and the report that reaches a budget are one after the other: the claim
    sees the hit and is refused, or its attempt is open when the report stamps the lane's."""
    budgets_lock(workspace_id=workspace_id, lane_id=lane_id)
    hit = (
        BudgetHit.objects.filter(
            workspace_id=workspace_id,
            budget__workspace_id=workspace_id,
            budget__lane_id=lane_id,
            period_end__gt=now_expression(),
        )
        .select_related("budget")
        .order_by("period_end")
        .first()
    )
    if hit is None:
        return
    budget = hit.budget
    message = budget_message(
        lane=lane_slug(workspace_id=workspace_id, lane_id=lane_id),
        period=budget.period,
        spent=Spend(cost_usd=hit.spent_usd, tokens_in=hit.spent_tokens),
        limit_usd=budget.limit_usd,
        limit_tokens=budget.limit_tokens,
        action=budget.action,
    )
    raise BudgetReached(
        f"{message}; claims in the lane wait for the next period (from {_iso(hit.period_end)})",
        lane=lane_slug(workspace_id=workspace_id, lane_id=lane_id),
        period=budget.period,
        period_end=_iso(hit.period_end),
        action=budget.action,
    )
