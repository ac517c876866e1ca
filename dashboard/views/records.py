"""The records' pages: who holds what (and breaking a lease, granting a handoff), refusals and
events."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.cache import patch_cache_control, patch_vary_headers
from django.views.decorators.http import require_http_methods

from apikit.errors import GroundControlError
from dashboard import lease_tree, pages
from dashboard.forms import (
    BreakLeaseForm,
    EventFilterForm,
    GrantHandoffForm,
    LeaseFilterForm,
    RefusalFilterForm,
)
from dashboard.views.base import (
    actor_name,
    dashboard_view,
    filtered_list,
    query_string,
    redirect_back,
    render_page,
    show_refusal,
)
from fleet.attempts import handoffs as handoff_services
from fleet.attempts import services as attempt_services
from hands.models import Membership, Role
from leases import engine, handoffs
from leases.audit import KEPT_PER_KEY_MINUTE


@dashboard_view(replica=True)
def leases(request: HttpRequest, membership: Membership) -> HttpResponse:
    """Who holds what, as the tree of names (`dashboard.lease_tree`): held nodes and what they
    cover, shared holders, the waiters with their places, the handoff requests on each tenure,
    and the slots apart. An HTMX poll gets the `records` partial only, so it updates in place
    (the browser keeps each directory folded or unfolded as the supervisor left it)."""
    form = LeaseFilterForm(request.GET)
    values = form.cleaned_data if form.is_valid() else {}
    query = {"prefix": values.get("prefix") or "", "holder": values.get("holder") or ""}
    tree = lease_tree.lease_tree(workspace_id=membership.workspace_id, **query)
    template = "fleet/leases.html#records" if request.htmx else "fleet/leases.html"
    response = render_page(
        request,
        template,
        {
            "form": form,
            "tree": tree,
            "now": tree.now,
            "line": tree.line,
            "handoffs": tree.handoffs,
            "filtered": any(query.values()),
            "page_url": f"{request.path}?{query_string(query)}".rstrip("?"),
            "poll_s": float(settings.GC_DASHBOARD_POLL_S),
        },
    )
    patch_vary_headers(response, ["HX-Request"])
    patch_cache_control(response, no_store=True)
    return response


@dashboard_view(Role.SUPERVISOR)
@require_http_methods(["GET", "POST"])
def lease_break(request: HttpRequest, membership: Membership) -> HttpResponse:
    """Break any lease (a resource's or a slot's) with a reason; the confirmation shows who
    holds it now."""
    form = BreakLeaseForm(request.POST or None, initial={"resource": request.GET.get("resource")})
    default = reverse("leases")
    if request.method == "POST" and form.is_valid():
        resource = form.cleaned_data["resource"]
        try:
            lease = attempt_services.lease_break(
                workspace_id=membership.workspace_id,
                resource=resource,
                actor=actor_name(request),
                reason=form.cleaned_data["reason"],
            )
            messages.success(
                request, f"The lease on {resource} is broken; its fence is now {lease.fence}."
            )
            return redirect_back(request, default)
        except GroundControlError as error:
            show_refusal(request, error)
    resource = request.POST.get("resource") or request.GET.get("resource", "")
    current = engine.read(workspace_id=membership.workspace_id, resource=resource[:512])
    return render_page(
        request,
        "fleet/lease_break.html",
        {
            "form": form,
            "lease": current,
            "resource": resource,
            "next": request.POST.get("next") or request.GET.get("next") or default,
        },
    )


@dashboard_view(Role.SUPERVISOR)
@require_http_methods(["GET", "POST"])
def handoff_grant(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    """Grant an open handoff request: the lease is broken (as `lease_break` does) and the
    request marked granted in one transaction; the confirmation shows who asks and why."""
    form = GrantHandoffForm(request.POST or None)
    default = reverse("leases")
    if request.method == "POST" and form.is_valid():
        try:
            view, lease = handoff_services.handoff_grant(
                workspace_id=membership.workspace_id,
                handoff_id=pk,
                actor=actor_name(request),
                reason=form.cleaned_data["reason"],
            )
            messages.success(
                request,
                f"Granted: the lease on {view.request.resource} is broken (its fence is now "
                f"{lease.fence}); {view.request.asker} may take it.",
            )
            return redirect_back(request, default)
        except GroundControlError as error:
            show_refusal(request, error)
    found = handoffs.handoff_find(workspace_id=membership.workspace_id, handoff_id=pk)
    if found is None:
        raise Http404("no such handoff request")
    return render_page(
        request,
        "fleet/handoff_grant.html",
        {
            "form": form,
            "handoff": handoffs.handoff_view(found),
            "next": request.POST.get("next") or request.GET.get("next") or default,
        },
    )


@dashboard_view(replica=True)
def refusals(request: HttpRequest, membership: Membership) -> HttpResponse:
    """The refusals kept, newest first; above them, the keys whose refusals a flood left
    counted only (`pages.refusals_counted`)."""
    return filtered_list(
        request,
        membership,
        RefusalFilterForm,
        pages.refusals_list,
        "fleet/refusals.html",
        extra={
            "counted": pages.refusals_counted(workspace_id=membership.workspace_id),
            "counted_hours": pages.COUNTED_HOURS,
            "kept_per_minute": KEPT_PER_KEY_MINUTE,
        },
    )


@dashboard_view(replica=True)
def events(request: HttpRequest, membership: Membership) -> HttpResponse:
    return filtered_list(
        request, membership, EventFilterForm, pages.events_list, "fleet/events.html"
    )
