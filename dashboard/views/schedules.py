"""A lane's schedules on its page: create one, switch it off or on, delete it."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from apikit.errors import GroundControlError
from dashboard.forms import ScheduleForm
from dashboard.views.base import actor_name, dashboard_view, show_refusal
from hands.models import Membership, Role
from hands.selectors import lane_get
from schedules import services as schedule_services


@require_POST
@dashboard_view(Role.SUPERVISOR)
def schedule_create(request: HttpRequest, membership: Membership, slug: str) -> HttpResponse:
    lane = lane_get(workspace_id=membership.workspace_id, slug=slug)
    form = ScheduleForm(request.POST)
    if not form.is_valid():
        for field, errors in form.errors.items():
            messages.error(request, f"Refused (validation_error): {field}: {' '.join(errors)}")
        return redirect("lane", slug=lane.slug)
    try:
        schedule = schedule_services.schedule_create(
            lane=lane, actor=actor_name(request), **form.cleaned_data
        )
    except GroundControlError as error:
        show_refusal(request, error)
    else:
        messages.success(request, f"Schedule {schedule.cron} makes {schedule.key_pattern}.")
    return redirect("lane", slug=lane.slug)


@require_POST
@dashboard_view(Role.SUPERVISOR)
def schedule_switch(
    request: HttpRequest, membership: Membership, slug: str, pk: int
) -> HttpResponse:
    lane = lane_get(workspace_id=membership.workspace_id, slug=slug)
    active = request.POST.get("active") == "on"
    try:
        schedule_services.schedule_update(lane=lane, schedule_id=pk, changes={"active": active})
    except GroundControlError as error:
        show_refusal(request, error)
    else:
        messages.success(request, f"Schedule {pk} is {'on' if active else 'off'}.")
    return redirect("lane", slug=lane.slug)


@require_POST
@dashboard_view(Role.SUPERVISOR)
def schedule_delete(
    request: HttpRequest, membership: Membership, slug: str, pk: int
) -> HttpResponse:
    lane = lane_get(workspace_id=membership.workspace_id, slug=slug)
    try:
        schedule_services.schedule_delete(lane=lane, schedule_id=pk)
    except GroundControlError as error:
        show_refusal(request, error)
    else:
        messages.success(request, f"Schedule {pk} is deleted; the packages it made stay.")
    return redirect("lane", slug=lane.slug)
