"""Cost and budgets over REST: totals per lane, run, hand or attempt (`GET /costs`), and the
lanes' budgets (list, create, update). Money is a decimal string, never a float."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apikit.errors import ValidationFailed
from apikit.inputs import StrictIntegerField, choice_param, text_param, valid
from apikit.openapi import error_responses
from fleet.costs import budgets as budget_services
from fleet.costs import spend
from fleet.models import BudgetAction, BudgetPeriod
from hands import selectors as hand_selectors
from hands.views import MAX_NAME, PLAN, PLAN_READ, HandAPIView
from leases.clock import db_now

MONEY = {"max_digits": 14, "decimal_places": spend.COST_PLACES}


_money = spend.money_text


def _time_param(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name, "")
    if raw == "":
        return None
    try:
        at = datetime.fromisoformat(raw.replace("Z", "+00:00"))
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
    cost_usd = serializers.CharField(help_text="A decimal string, US dollars.")


class CostRowOut(SpendOut):
    id = serializers.IntegerField(help_text="The lane's, run's, hand's or attempt's id.")
    name = serializers.CharField(
        help_text="The lane's slug, the run's title, the hand's name (an attempt: its hand's)."
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
        return Response(
            {
                "by": by,
                "since": since,
                "until": until,
                "total": total,
                "rows": [
                    {
                        "id": r["id"],
                        "name": r["name"],
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
    limit_usd = serializers.CharField(allow_null=True)
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
    limit_usd = serializers.DecimalField(required=False, allow_null=True, **MONEY)
    limit_tokens = StrictIntegerField(required=False, allow_null=True, min_value=1)


class BudgetPatchIn(serializers.Serializer):
    action = serializers.ChoiceField(choices=BudgetAction.choices, required=False)
    limit_usd = serializers.DecimalField(required=False, allow_null=True, **MONEY)
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
