"""A supervisor voids a report's cost (issue 33, item 3): a cost said wrongly, by mistake or by a
hostile hand, no longer counts, and a budget hit it caused is lifted.

The report keeps its figures and says it was voided (`Report.voided_at`, `voided_by`,
`voided_key`, `void_reason`); every sum leaves it out (`fleet.costs.spend.COUNTED`). In one
transaction, after the lane's budget locks (so the void and the lane's costed reports are judged
one after another, as costed reports are among themselves: fleet/costs/budgets.py):

1. one conditional UPDATE voids the report if it is not voided yet; its row count says whether
   this call voided it (a repeat, or a void that lost the race, voids nothing and lifts nothing);
2. one statement lifts every hit of the lane's budgets in the period that holds the report
   whose lane spend, without the voided reports, no longer reaches the budget's limit: it
   deletes the hit and clears the notice it gave the lane's open attempts. A hit that the other
   reports still justify stays. Claims in the lane are then taken again; a directive the hit set
   stays for a supervisor to lift, as when a budget is changed (`budget_update`);
3. one event `cost_voided` says who voided what and why (not the budgets lifted: the event is
   the report's hand's too, and that hand may be of another lane than the run's budgets).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import F, OuterRef, Q

from apikit.context import current_call
from apikit.errors import NotFound
from apikit.retries import retried
from fleet.costs.budgets import budgets_lock
from fleet.costs.spend import COSTED, period_spend
from fleet.models import Attempt, BudgetHit, Report
from leases.audit import record_event, refusals_recorded
from leases.clock import db_now, now_expression
from leases.models import EventKind
from leases.services import validate_reason


@dataclass(frozen=True)
class Voided:
    """A void's outcome: the report as it stands, whether this call voided it, and the budgets
    whose hit it lifted (their ids, ascending)."""

    report: Report
    voided: bool
    lifted: list[int]


def cost_report_get(*, workspace_id: int, report_id: int, lane_id: int | None = None) -> Report:
    """One costed report of the workspace (of the lane, for a lane-limited caller)."""
    reports = Report.objects.filter(COSTED, workspace_id=workspace_id).in_lane(lane_id)
    try:
        return reports.select_related("attempt__hand", "attempt__lane").get(pk=report_id)
    except Report.DoesNotExist:
        raise NotFound(f"no costed report {report_id} in this workspace") from None


def hits_lift_sql(*, workspace_id: int, lane_id: int, at: datetime) -> tuple[str, list[object]]:
    """The statement that lifts the lane's budget hits of the periods holding `at` that the
    lane's spend (voided reports left out) no longer reaches, and clears their notices; it
    answers the lifted budgets' ids. "Not reached" is `budgets._reached` turned round, over
    `spend.period_spend`: the sums every read of spend makes."""
    usd, tokens = period_spend(
        lane=OuterRef("budget__lane_id"), start=OuterRef("period_start"), end=OuterRef("period_end")
    )
    below = (
        BudgetHit.objects.filter(
            workspace_id=workspace_id,
            budget__workspace_id=workspace_id,
            budget__lane_id=lane_id,
            period_start__lte=at,
            period_end__gt=at,
        )
        .alias(counted_usd=usd, counted_tokens=tokens)
        .filter(
            Q(budget__limit_usd=None) | Q(counted_usd__lt=F("budget__limit_usd")),
            Q(budget__limit_tokens=None) | Q(counted_tokens__lt=F("budget__limit_tokens")),
        )
        .values("id")
    )
    below_sql, below_params = below.query.sql_with_params()
    quote = connection.ops.quote_name
    hits, attempts = BudgetHit._meta.db_table, Attempt._meta.db_table
    sql = (
        f"WITH lifted AS (DELETE FROM {hits} WHERE workspace_id = %s AND id IN ({below_sql}) "
        "RETURNING budget_id, period_end), "
        # The notice each open attempt of the lane carries for a lifted hit (budgets._act).
        f"cleared AS (UPDATE {attempts} SET budget_notice = NULL, budget_until = NULL "
        f"FROM lifted WHERE {attempts}.workspace_id = %s AND {attempts}.lane_id = %s "
        f"AND {attempts}.{quote('end')} IS NULL "
        f"AND {attempts}.budget_notice -> 'budget' = to_jsonb(lifted.budget_id) "
        f"AND {attempts}.budget_until = lifted.period_end RETURNING {attempts}.id) "
        "SELECT budget_id FROM lifted ORDER BY budget_id"
    )
    return sql, [workspace_id, *below_params, workspace_id, lane_id]


def hits_lift(*, workspace_id: int, lane_id: int, at: datetime) -> list[int]:
    """Run `hits_lift_sql` (inside the transaction that holds the lane's budget locks)."""
    sql, params = hits_lift_sql(workspace_id=workspace_id, lane_id=lane_id, at=at)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [budget_id for (budget_id,) in cursor.fetchall()]


@refusals_recorded
@retried
def report_void(
    *,
    workspace_id: int,
    report_id: int,
    reason: str,
    actor: str,
    lane_id: int | None = None,
) -> Voided:
    """Void a costed report's cost, by the supervisor hand `actor` (see the module): the report
    voided at the database's time with `reason`, and the budget hits it caused lifted. A repeat
    changes nothing and answers the report as the first void left it."""
    reason = validate_reason(reason, field="reason", required=True)
    report = cost_report_get(workspace_id=workspace_id, report_id=report_id, lane_id=lane_id)
    with transaction.atomic():
        budgets_lock(workspace_id=workspace_id, lane_id=report.attempt.lane_id)
        voided = Report.objects.filter(
            pk=report.pk, workspace_id=workspace_id, voided_at=None
        ).update(
            voided_at=now_expression(),
            voided_by=actor,
            voided_key=current_call().key_prefix[:32],
            void_reason=reason,
        )
        lifted = (
            hits_lift(workspace_id=workspace_id, lane_id=report.attempt.lane_id, at=report.at)
            if voided
            else []
        )
        if voided:
            record_event(
                workspace_id=workspace_id,
                kind=EventKind.COST_VOIDED,
                at=db_now(),
                actor=actor,
                hand=report.attempt.hand.name,
                attempt_id=report.attempt_id,
                data={
                    "report": report.pk,
                    "run": report.attempt.run_id,
                    "cost_usd": str(report.cost_usd),
                    "tokens_in": report.tokens_in,
                    "tokens_out": report.tokens_out,
                    "reason": reason,
                },
            )
    report.refresh_from_db(fields=["voided_at", "voided_by", "voided_key", "void_reason"])
    return Voided(report=report, voided=bool(voided), lifted=lifted)
