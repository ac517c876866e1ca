"""The people's pages: hands and their keys (issued once, revoked now), members, and the login
(throttled per user and address)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.views import LoginView
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_http_methods

from apikit.clients import client_address
from apikit.errors import GroundControlError
from dashboard import login_throttle, pages
from dashboard.costs import hand_costs
from dashboard.forms import (
    HandCapabilitiesForm,
    HandCreateForm,
    HandFilterForm,
    KeyIssueForm,
    MembershipForm,
    ReasonForm,
)
from dashboard.views.base import (
    actor_name,
    dashboard_view,
    page_number,
    query_string,
    render_page,
    show_refusal,
)
from dashboard.views.work import _timeline_context
from hands import services as hand_services
from hands.models import Membership, Role


@dashboard_view(replica=True)
@require_http_methods(["GET", "POST"])
def hands(request: HttpRequest, membership: Membership) -> HttpResponse:
    create_form = HandCreateForm(
        request.POST or None, workspace_id=membership.workspace_id, prefix="new"
    )
    if request.method == "POST":
        if not pages.role_allows(membership.role, Role.ADMIN):
            raise PermissionDenied("creating hands needs the admin role")
        if create_form.is_valid():
            try:
                hand, created = hand_services.hand_create(
                    workspace=membership.workspace,
                    name=create_form.cleaned_data["name"],
                    lane=create_form.cleaned_data["lane"],
                    capabilities=create_form.cleaned_data["capabilities"],
                )
                messages.success(request, f"Hand {hand.name} {'created' if created else 'exists'}.")
                return redirect("hand", pk=hand.pk)
            except GroundControlError as error:
                show_refusal(request, error)
    filters = HandFilterForm(request.GET)
    query = filters.cleaned_data.get("q", "") if filters.is_valid() else ""
    page = page_number(request)
    hand_list, has_next = pages.hands_list(
        workspace_id=membership.workspace_id, query=query, page=page
    )
    return render_page(
        request,
        "fleet/hands.html",
        {
            "hands": hand_list,
            "filters": filters,
            "create_form": create_form,
            "page": page,
            "has_next": has_next,
            "prev_query": query_string({"q": query}, page=page - 1),
            "next_query": query_string({"q": query}, page=page + 1),
        },
    )


@dashboard_view(replica=True)
def hand_detail(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    page = pages.hand_page(workspace_id=membership.workspace_id, hand_id=pk)
    timeline = _timeline_context(
        page.rows,
        now=page.now,
        title=f"Timeline of hand {page.hand.name}",
        ident=f"hand-{page.hand.pk}-timeline",
        label=lambda row: f"{row.attempt.run.title} · slot {row.attempt.slot.index}",
        href=lambda row: reverse("run", args=[row.attempt.run_id]),
    )
    form = HandCapabilitiesForm(initial={"capabilities": ", ".join(page.hand.capabilities)})
    spend = hand_costs(hand_id=page.hand.pk, attempt_ids=[row.attempt.pk for row in page.rows])
    context = {
        "page": page,
        "hand": page.hand,
        "capabilities_form": form,
        "costs": spend,
        **timeline,
    }
    return render_page(request, "fleet/hand.html", context)


@dashboard_view(Role.ADMIN)
@require_http_methods(["POST"])
def hand_capabilities(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    """Set what a hand can do: its next claim is judged by it."""
    page = pages.hand_page(workspace_id=membership.workspace_id, hand_id=pk)
    form = HandCapabilitiesForm(request.POST)
    if form.is_valid():
        hand = hand_services.hand_set_capabilities(
            workspace_id=membership.workspace_id,
            name=page.hand.name,
            capabilities=form.cleaned_data["capabilities"],
        )
        shown = ", ".join(hand.capabilities) or "none"
        messages.success(request, f"Hand {hand.name} now has capabilities: {shown}.")
    else:
        messages.error(request, f"Refused: {' '.join(form.errors.get('capabilities', []))}")
    return redirect("hand", pk=pk)


@dashboard_view(Role.ADMIN)
@require_http_methods(["GET", "POST"])
def key_issue(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    page = pages.hand_page(workspace_id=membership.workspace_id, hand_id=pk)
    form = KeyIssueForm(request.POST or None, workspace_id=membership.workspace_id)
    if request.method == "POST" and form.is_valid():
        try:
            issued = hand_services.key_issue(
                hand=page.hand,
                scopes=form.cleaned_data["scopes"],
                actor=actor_name(request),
                expires_in_s=form.cleaned_data["expires_in_s"],
                lane=form.cleaned_data["lane"],
            )
        except GroundControlError as error:
            show_refusal(request, error)
        else:
            # The plaintext is in this response only: never stored, never cached.
            response = render_page(
                request, "fleet/key_issued.html", {"hand": page.hand, "issued": issued}
            )
            patch_cache_control(response, no_store=True)
            return response
    return render_page(request, "fleet/key_issue.html", {"hand": page.hand, "form": form})


@dashboard_view(Role.ADMIN)
@require_http_methods(["GET", "POST"])
def key_revoke(request: HttpRequest, membership: Membership, prefix: str) -> HttpResponse:
    key = pages.key_get(workspace_id=membership.workspace_id, prefix=prefix)
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            hand_services.key_revoke(
                workspace_id=membership.workspace_id,
                prefix=prefix,
                actor=actor_name(request),
                reason=form.cleaned_data["reason"],
            )
            messages.success(request, f"Key {prefix} of {key.hand.name} is revoked.")
        except GroundControlError as error:
            show_refusal(request, error)
        return redirect("hand", pk=key.hand_id)
    return render_page(
        request,
        "fleet/confirm.html",
        {
            "title": f"Revoke key {prefix} of {key.hand.name}?",
            "explanation": (
                "The key's very next call is refused (key_revoked). This cannot be undone."
            ),
            "action": reverse("key-revoke", args=[prefix]),
            "button": "Revoke the key",
            "cancel": reverse("hand", args=[key.hand_id]),
            "form": form,
        },
    )


@dashboard_view(Role.ADMIN)
@require_http_methods(["GET", "POST"])
def members(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = MembershipForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = get_user_model().objects.filter(username=form.cleaned_data["username"]).first()
        if user is None:
            form.add_error("username", "No user with that name.")
        elif user.pk == request.user.pk and form.cleaned_data["role"] != Role.ADMIN:
            form.add_error("role", "You cannot lower your own role.")
        else:
            try:
                hand_services.membership_set(
                    workspace=membership.workspace, user=user, role=form.cleaned_data["role"]
                )
                messages.success(
                    request, f"{user.get_username()} is a {form.cleaned_data['role']}."
                )
                return redirect("members")
            except GroundControlError as error:
                show_refusal(request, error)
    return render_page(
        request,
        "fleet/members.html",
        {
            "members": pages.members_list(workspace_id=membership.workspace_id),
            "form": form,
        },
    )


class ThrottledLoginView(LoginView):
    """Django's login, slowed after repeated failures and capped (dashboard.login_throttle):
    while a wait is running, or once a window is full, the form answers 429 without checking the
    password at all. The try takes its places in the windows before the check, atomically."""

    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        username = request.POST.get("username", "")
        address = client_address(request)
        wait = login_throttle.login_wait_s(username=username, address=address)
        if wait <= 0:
            wait = login_throttle.login_attempt(username=username, address=address)
        if wait > 0:
            # An unbound form: a bound one's errors would run its clean, checking the password.
            form = self.get_form_class()(request, initial={"username": username})
            context = self.get_context_data(form=form, throttled_s=int(wait) + 1)
            return self.render_to_response(context, status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        login_throttle.login_failed(
            username=self.request.POST.get("username", ""),
            address=client_address(self.request),
        )
        return super().form_invalid(form)

    def form_valid(self, form: Any) -> HttpResponse:
        # The username as typed: the one the try was counted under.
        login_throttle.login_succeeded(
            username=self.request.POST.get("username", ""),
            address=client_address(self.request),
        )
        return super().form_valid(form)
