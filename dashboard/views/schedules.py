"""A lane's schedules on its page: create one, switch it off or on, delete it; and its GitHub
integrations: create one (its secret shown once), delete one; an admin's doing, since its
secret attests CI's grade."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_POST

from apikit.errors import GroundControlError
from dashboard.forms import IntegrationForm, ScheduleForm
from dashboard.views.base import actor_name, dashboard_view, render_page, show_refusal
from hands.models import Membership, Role
from hands.selectors import lane_get
from schedules import github
from schedules import services as schedule_services
from schedules.presenters import DELIVERY_PATH


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


@require_POST
@dashboard_view(Role.ADMIN)
def integration_create(request: HttpRequest, membership: Membership, slug: str) -> HttpResponse:
    lane = lane_get(workspace_id=membership.workspace_id, slug=slug)
    form = IntegrationForm(request.POST)
    if not form.is_valid():
        for field, errors in form.errors.items():
            messages.error(request, f"Refused (validation_error): {field}: {' '.join(errors)}")
        return redirect("lane", slug=lane.slug)
    try:
        issued = github.integration_create(
            lane=lane,
            repository=form.cleaned_data["repository"],
            label=form.cleaned_data["label"],
            actor=actor_name(request),
        )
    except GroundControlError as error:
        show_refusal(request, error)
        return redirect("lane", slug=lane.slug)
    path = DELIVERY_PATH.format(id=issued.integration.pk)
    # The secret is in this response only: never shown again, never cached.
    response = render_page(
        request,
        "fleet/integration_created.html",
        {
            "lane": lane,
            "issued": issued,
            "delivery_path": path,
            "payload_url": request.build_absolute_uri(path),
        },
    )
    patch_cache_control(response, no_store=True)
    return response


@require_POST
@dashboard_view(Role.ADMIN)
def integration_delete(
    request: HttpRequest, membership: Membership, slug: str, pk: int
) -> HttpResponse:
    lane = lane_get(workspace_id=membership.workspace_id, slug=slug)
    try:
        github.integration_delete(lane=lane, integration_id=pk)
    except GroundControlError as error:
        show_refusal(request, error)
    else:
        messages.success(
            request, f"GitHub integration {pk} is deleted; its deliveries are refused from now."
        )
    return redirect("lane", slug=lane.slug)
