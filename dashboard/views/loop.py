"""The supervisor's loop on the pages: a run's idle settings, a lane's budgets (create, change)
and its cost. Each action validates its form and calls the service the API calls."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from apikit.errors import GroundControlError
from dashboard.forms import BudgetForm, RunIdleForm
from dashboard.views.base import actor_name, dashboard_view, show_refusal
from fleet.costs import budgets as budget_services
from fleet.plan import selectors as plan_selectors
from fleet.plan import services as plan_services
from hands.models import Membership, Role
from hands.selectors import lane_get


def _form_errors(request: HttpRequest, form: BudgetForm | RunIdleForm) -> None:
    for field, errors in form.errors.items():
        messages.error(request, f"{field}: {' '.join(errors)}")


@require_POST
@dashboard_view(Role.SUPERVISOR)
def run_idle(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    run = plan_selectors.run_get(workspace_id=membership.workspace_id, run_id=pk)
    form = RunIdleForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return redirect("run", pk=run.pk)
    try:
        plan_services.run_set_idle(
            workspace_id=membership.workspace_id,
            run_id=run.pk,
            actor=actor_name(request),
            **form.cleaned_data,
        )
        messages.success(request, "The run's idle settings are saved (new claims take them).")
    except GroundControlError as error:
        show_refusal(request, error)
    return redirect("run", pk=run.pk)


@require_POST
@dashboard_view(Role.SUPERVISOR)
def budget_save(request: HttpRequest, membership: Membership, slug: str) -> HttpResponse:
    """Create the lane's budget for the form's period, or change the one there is."""
    lane = lane_get(workspace_id=membership.workspace_id, slug=slug)
    form = BudgetForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return redirect("lane", slug=lane.slug)
    data = form.cleaned_data
    existing = lane.budgets.filter(period=data["period"]).first()
    try:
        if existing is None:
            budget_services.budget_create(lane=lane, **data)
            messages.success(request, f"Lane {lane.slug} has a {data['period']} budget.")
        else:
            budget_services.budget_update(
                workspace_id=membership.workspace_id,
                budget_id=existing.pk,
                action=data["action"],
                limit_usd=data["limit_usd"],
                limit_tokens=data["limit_tokens"],
            )
            messages.success(request, f"Lane {lane.slug}'s {data['period']} budget is changed.")
    except GroundControlError as error:
        show_refusal(request, error)
    return redirect("lane", slug=lane.slug)
