"""Cost and budgets over REST: totals per lane, run, hand or attempt (`GET /costs`), the costed
reports themselves and a supervisor's void of one (`/costs/reports`), and the lanes' budgets
(list, create, update). Money is a decimal string, never a float."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apikit.api import paginated
from apikit.concealing import CONCEALED, concealed
from apikit.errors import ValidationFailed
from apikit.inputs import (
    PAGE_PARAMS,
    StrictDecimalField,
    StrictIntegerField,
    choice_param,
    text_param,
    valid,
)
from apikit.openapi import error_responses
from apikit.reads import REPLICA_HEADERS, replica_list
from fleet.api.records import int_param
from fleet.costs import budgets as budget_services
from fleet.costs import spend, voids
from fleet.models import BudgetAction, BudgetPeriod, Report
from hands import selectors as hand_selectors
from hands.views import MAX_NAME, PLAN, PLAN_READ, SUPERVISE, HandAPIView, reason_field
from leases.clock import db_now

MONEY = {"max_digits": 14, "decimal_places": spend.COST_PLACES}
# A sum of any number of reports: wider than one report's figure.
TOTAL = {"max_digits": 24, "decimal_places": spend.COST_PLACES}


_money = spend.money_text


def _time_param(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name, "")
    if raw == "":
        return None
    try:
        # ASCII only, as every number the API reads (`apikit.inputs`).
        at = datetime.fromisoformat(raw.replace("Z", "+00:00")) if raw.isascii() else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise ValidationFailed(
            f"{name} must be an ISO 8601 time with a zone",
            fields={name: ["An ISO 8601 time with a zone (2030-01-01T00:00:00Z)."]},
        )
    return at


class SpendOut(serializers.Serializer):
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    cost_usd = serializers.DecimalField(
        **TOTAL, coerce_to_string=True, help_text="A decimal string, US dollars."
    )


class CostRowOut(SpendOut):
    id = serializers.IntegerField(help_text="The lane's, run's, hand's or attempt's id.")
    name = serializers.CharField(
        allow_null=True,
        help_text="The lane's slug, the run's title, the hand's name (an attempt: its hand's). "
        f"A hand's: {CONCEALED}",
    )


class CostsOut(serializers.Serializer):
    by = serializers.ChoiceField(choices=list(spend.GROUPS))
    since = serializers.DateTimeField(allow_null=True)
    until = serializers.DateTimeField(allow_null=True)
    total = SpendOut()
    rows = CostRowOut(many=True, help_text="Largest cost first; at most 500.")


def _spend_json(tokens_in: int, tokens_out: int, cost_usd: Decimal) -> dict[str, Any]:
    return {"tokens_in": tokens_in, "tokens_out": tokens_out, "cost_usd": _money(cost_usd)}


class CostsApi(HandAPIView):
    """What reports said the work cost, summed per lane, run, hand or attempt."""

    required_scope = PLAN_READ

    @extend_schema(
        tags=["supervisor"],
        parameters=[
            OpenApiParameter("by", str, enum=list(spend.GROUPS), description="Default lane."),
            OpenApiParameter("since", str, description="ISO 8601 time: reports at or after."),
            OpenApiParameter("until", str, description="ISO 8601 time: reports before."),
            OpenApiParameter("lane", str, description="A lane's slug: only its reports."),
        ],
        responses={
            200: CostsOut,
            **error_responses("scope_denied", "not_found", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        by = choice_param(request, "by", list(spend.GROUPS)) or "lane"
        since, until = _time_param(request, "since"), _time_param(request, "until")
        lane_id = self.lane_id
        slug = text_param(request, "lane", max_length=MAX_NAME)
        if slug:
            lane_id = hand_selectors.lane_get(
                workspace_id=self.workspace_id, slug=slug, lane_id=self.lane_id
            ).pk
        rows = spend.costs_by(
            workspace_id=self.workspace_id, by=by, since=since, until=until, lane_id=lane_id
        )
        total = _spend_json(
            sum(r["tokens_in"] for r in rows),
            sum(r["tokens_out"] for r in rows),
            sum((r["cost_usd"] for r in rows), Decimal(0)),
        )
        # By hand or attempt, a row's name is a hand's: another lane's is concealed.
        hidden = concealed(r["name"] for r in rows) if by in ("hand", "attempt") else frozenset()
        return Response(
            {
                "by": by,
                "since": since,
                "until": until,
                "total": total,
                "rows": [
                    {
                        "id": r["id"],
                        "name": None if r["name"] in hidden else r["name"],
                        **_spend_json(r["tokens_in"], r["tokens_out"], r["cost_usd"]),
                    }
                    for r in rows
                ],
            }
        )


class BudgetOut(serializers.Serializer):
    id = serializers.IntegerField()
    lane = serializers.CharField()
    period = serializers.ChoiceField(choices=BudgetPeriod.choices)
    limit_usd = serializers.DecimalField(
        **MONEY, coerce_to_string=True, allow_null=True, help_text="A decimal string, US dollars."
    )
    limit_tokens = serializers.IntegerField(allow_null=True)
    action = serializers.ChoiceField(choices=BudgetAction.choices)
    period_start = serializers.DateTimeField(help_text="The current period (UTC).")
    period_end = serializers.DateTimeField()
    spent = SpendOut(help_text="What the lane's reports cost in the current period.")
    reached_at = serializers.DateTimeField(
        allow_null=True, help_text="When a report reached the limit in this period."
    )


class BudgetIn(serializers.Serializer):
    lane = serializers.SlugField(max_length=100)
    period = serializers.ChoiceField(choices=BudgetPeriod.choices)
    action = serializers.ChoiceField(choices=BudgetAction.choices)
    limit_usd = StrictDecimalField(required=False, allow_null=True, **MONEY)
    limit_tokens = StrictIntegerField(required=False, allow_null=True, min_value=1)


class BudgetPatchIn(serializers.Serializer):
    action = serializers.ChoiceField(choices=BudgetAction.choices, required=False)
    limit_usd = StrictDecimalField(required=False, allow_null=True, **MONEY)
    limit_tokens = StrictIntegerField(required=False, allow_null=True, min_value=1)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError("give action, limit_usd or limit_tokens")
        return attrs


def budget_json(status: spend.BudgetStatus) -> dict[str, Any]:
    budget, spent = status.budget, status.spent
    return {
        "id": budget.pk,
        "lane": budget.lane.slug,
        "period": budget.period,
        "limit_usd": _money(budget.limit_usd),
        "limit_tokens": budget.limit_tokens,
        "action": budget.action,
        "period_start": status.period_start,
        "period_end": status.period_end,
        "spent": _spend_json(spent.tokens_in, spent.tokens_out, spent.cost_usd),
        "reached_at": status.reached_at,
    }


def _one(budget_id: int, workspace_id: int) -> dict[str, Any]:
    budget = budget_services.budget_get(workspace_id=workspace_id, budget_id=budget_id)
    return budget_json(spend.budgets_status([budget], db_now())[0])


class BudgetsApi(HandAPIView):
    """The lanes' budgets, each in its current period."""

    required_scope = {"GET": PLAN_READ, "POST": PLAN}

    @extend_schema(
        tags=["plan"],
        parameters=[OpenApiParameter("lane", str, description="A lane's slug.")],
        responses={
            200: BudgetOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        budgets = list(
            spend.budgets_list(
                workspace_id=self.workspace_id,
                lane_id=self.lane_id,
                lane_slug=text_param(request, "lane", max_length=MAX_NAME),
            )[:500]
        )
        return Response([budget_json(s) for s in spend.budgets_status(budgets, db_now())])

    @extend_schema(
        tags=["plan"],
        request=BudgetIn,
        description="One budget per lane and period; the limit is limit_usd, limit_tokens "
        "(in + out) or both, reached when either is.",
        responses={201: BudgetOut, **error_responses("scope_denied", "not_found", body=True)},
    )
    def post(self, request: Request) -> Response:
        data = valid(BudgetIn, request)
        lane = hand_selectors.lane_get(
            workspace_id=self.workspace_id, slug=data["lane"], lane_id=self.lane_id
        )
        budget = budget_services.budget_create(
            lane=lane,
            period=data["period"],
            action=data["action"],
            limit_usd=data.get("limit_usd"),
            limit_tokens=data.get("limit_tokens"),
        )
        return Response(_one(budget.pk, self.workspace_id), status=201)


class BudgetApi(HandAPIView):
    """One budget; PATCH its limits or action (lifting the current period's hit)."""

    required_scope = {"GET": PLAN_READ, "PATCH": PLAN}

    @extend_schema(
        tags=["plan"], responses={200: BudgetOut, **error_responses("scope_denied", "not_found")}
    )
    def get(self, request: Request, budget_id: int) -> Response:
        budget_services.budget_get(
            workspace_id=self.workspace_id, budget_id=budget_id, lane_id=self.lane_id
        )
        return Response(_one(budget_id, self.workspace_id))

    @extend_schema(
        tags=["plan"],
        request=BudgetPatchIn,
        responses={200: BudgetOut, **error_responses("scope_denied", "not_found", body=True)},
    )
    def patch(self, request: Request, budget_id: int) -> Response:
        data = valid(BudgetPatchIn, request)
        budget_services.budget_update(
            workspace_id=self.workspace_id, budget_id=budget_id, lane_id=self.lane_id, **data
        )
        return Response(_one(budget_id, self.workspace_id))


# --- Costed reports, and a supervisor's void of one (fleet/costs/voids.py) ----------------------


class VoidOut(serializers.Serializer):
    at = serializers.DateTimeField(help_text="When it was voided (the database's time).")
    actor = serializers.CharField(
        allow_null=True, help_text=f"The hand that voided it. {CONCEALED}"
    )
    actor_key = serializers.CharField(
        allow_null=True, help_text="The prefix of its key (null from the dashboard or admin)."
    )
    reason = serializers.CharField()


class CostReportOut(serializers.Serializer):
    id = serializers.IntegerField()
    attempt = serializers.IntegerField()
    run = serializers.IntegerField()
    lane = serializers.CharField(help_text="The lane's slug.")
    hand = serializers.CharField(allow_null=True, help_text=f"The reporting hand. {CONCEALED}")
    kind = serializers.CharField()
    at = serializers.DateTimeField()
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    cost_usd = serializers.DecimalField(
        **MONEY, coerce_to_string=True, help_text="A decimal string, US dollars, as reported."
    )
    voided = VoidOut(
        allow_null=True,
        help_text="Set once a supervisor voided its cost: no total or budget counts it.",
    )


def cost_report_json(report: Report) -> dict[str, Any]:
    attempt = report.attempt
    return {
        "id": report.pk,
        "attempt": attempt.pk,
        "run": attempt.run_id,
        "lane": attempt.lane.slug,
        "hand": attempt.hand.name,
        "kind": report.kind,
        "at": report.at,
        "tokens_in": report.tokens_in,
        "tokens_out": report.tokens_out,
        "cost_usd": _money(report.cost_usd),
        "voided": None
        if report.voided_at is None
        else {
            "at": report.voided_at,
            "actor": report.voided_by or None,
            "actor_key": report.voided_key or None,
            "reason": report.void_reason,
        },
    }


class CostReportsApi(HandAPIView):
    """The costed reports (voided ones too), newest first."""

    required_scope = PLAN_READ

    @extend_schema(
        tags=["supervisor"],
        parameters=[
            OpenApiParameter("lane", str, description="A lane's slug: only its reports."),
            OpenApiParameter("run", int, description="A run's id: only its attempts' reports."),
            OpenApiParameter("attempt", int, description="An attempt's id: only its reports."),
            *PAGE_PARAMS,
            *REPLICA_HEADERS,
        ],
        responses={
            200: CostReportOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    @replica_list
    def get(self, request: Request) -> Response:
        reports = spend.cost_reports(
            workspace_id=self.workspace_id,
            lane_id=self.lane_id,
            lane_slug=text_param(request, "lane", max_length=MAX_NAME),
            run_id=int_param(request, "run"),
            attempt_id=int_param(request, "attempt"),
        )
        return paginated(request, reports, lambda rows: [cost_report_json(r) for r in rows])


class ReportVoidIn(serializers.Serializer):
    reason = reason_field(help_text="Why the cost is voided (kept with the report).")


class ReportVoidOut(serializers.Serializer):
    report = CostReportOut()
    voided = serializers.BooleanField(
        help_text="Whether this call voided it; false when it was voided already (a repeat "
        "changes nothing: `report.voided` is the first void)."
    )
    lifted = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="The budgets whose hit in the report's period this void lifted: the lane's "
        "spend without the voided reports no longer reaches their limit.",
    )


class ReportVoidApi(HandAPIView):
    """Void a costed report's cost, lifting a budget hit it caused."""

    required_scope = SUPERVISE

    @extend_schema(
        tags=["supervisor"],
        request=ReportVoidIn,
        description="The report's cost (dollars and tokens) no longer counts in any total or "
        "budget; its figures stay on record, marked voided with who, when and why. In the same "
        "transaction every hit of the lane's budgets in the report's period that the lane's "
        "spend no longer reaches is lifted: claims in the lane are taken again and the notice "
        "leaves its attempts' answers (a directive the hit set stays, for a supervisor to "
        "lift). A repeat answers 200 and changes nothing.",
        responses={
            200: ReportVoidOut,
            **error_responses("scope_denied", "not_found", body=True),
        },
    )
    def post(self, request: Request, report_id: int) -> Response:
        data = valid(ReportVoidIn, request)
        outcome = voids.report_void(
            workspace_id=self.workspace_id,
            report_id=report_id,
            reason=data["reason"],
            actor=self.hand.name,
            lane_id=self.lane_id,
        )
        return Response(
            {
                "report": cost_report_json(outcome.report),
                "voided": outcome.voided,
                "lifted": outcome.lifted,
            }
        )
