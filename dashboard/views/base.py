"""What every dashboard page shares: login and a membership of the current workspace with at
least the page's role (`dashboard_view`), rendering (full page or its HTMX partial), the actor's
name, redirects back, refusals as messages, and list paging."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.utils.http import url_has_allowed_host_and_scheme

from apikit import reads
from apikit.errors import GroundControlError, NotFound
from dashboard import pages
from dashboard.pages import STATES
from hands.models import Membership, Role

SESSION_WORKSPACE = "gc_workspace_id"


FINGERPRINT_HEADER = "X-GC-Fingerprint"


View = Callable[..., HttpResponse]


def dashboard_view(minimum: str = Role.VIEWER, *, replica: bool = False) -> Callable[[View], View]:
    """Login, the current workspace's membership, and at least the `minimum` role.

    The view receives the membership; templates get it (and the switcher's list) through
    `render_page`. A domain `NotFound` becomes a 404. A page that only shows rows says
    `replica=True`: its GETs read the replica when it is fresh enough (apikit/reads.py), after
    the login and membership were read on the primary, and the page says how old its data is.
    """

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            # The membership and every action read the primary; a page that only shows rows
            # opts in to the replica for its GETs, below.
            with reads.primary():
                return guarded(request, *args, **kwargs)

        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                if request.htmx:
                    # A poll after the session ended: send the whole tab to the login page
                    # instead of swapping the login form into the board.
                    response = HttpResponse(status=204)
                    response["HX-Redirect"] = resolve_url(settings.LOGIN_URL)
                    return response
                return redirect_to_login(request.get_full_path())
            memberships = pages.memberships_for(request.user)
            membership = pages.membership_pick(memberships, request.session.get(SESSION_WORKSPACE))
            if membership is None:
                return render(request, "fleet/no_workspace.html", status=403)
            if not pages.role_allows(membership.role, minimum):
                raise PermissionDenied(f"this needs the {minimum} role")
            request.gc_memberships = memberships  # type: ignore[attr-defined]
            request.gc_membership = membership  # type: ignore[attr-defined]
            try:
                if replica and request.method in ("GET", "HEAD") and reads.replica_configured():
                    with reads.replica_reads() as freshness:
                        # Shown only where a replica could have served the page.
                        request.gc_freshness = freshness  # type: ignore[attr-defined]
                        return view(request, membership, *args, **kwargs)
                return view(request, membership, *args, **kwargs)
            except NotFound as error:
                raise Http404(error.message) from None

        return wrapper

    return decorate


def render_page(
    request: HttpRequest, template: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    membership: Membership = request.gc_membership  # type: ignore[attr-defined]
    context = {
        "membership": membership,
        "memberships": request.gc_memberships,  # type: ignore[attr-defined]
        "workspace": membership.workspace,
        "can_act": pages.role_allows(membership.role, Role.SUPERVISOR),
        "can_manage": pages.role_allows(membership.role, Role.ADMIN),
        "states": STATES,
        "freshness": getattr(request, "gc_freshness", None),
        **context,
    }
    return render(request, template, context, status=status)


def actor_name(request: HttpRequest) -> str:
    return request.user.get_username()


def redirect_back(request: HttpRequest, default: str) -> HttpResponseRedirect:
    """Redirect to the form's `next` when it is a local URL, else to `default`."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = default
    return HttpResponseRedirect(target or default)


def show_refusal(request: HttpRequest, error: GroundControlError) -> None:
    messages.error(request, f"Refused ({error.code}): {error.message}")


def page_number(request: HttpRequest) -> int:
    try:
        return max(1, min(int(request.GET.get("page", "1")), 1_000_000))
    except ValueError:
        return 1


def query_string(values: dict[str, Any], **changes: Any) -> str:
    merged = {**values, **changes}
    return urlencode({k: v for k, v in merged.items() if v not in ("", None, 1)})


def filtered_list(
    request: HttpRequest,
    membership: Membership,
    form_class: type[Any],
    select: Callable[..., pages.Paged],
    template: str,
    extra: dict[str, Any] | None = None,
) -> HttpResponse:
    """A list page: its filter form from the query string, one page of the selector's rows,
    and the query strings of the previous and next pages (filters kept), with `extra` in the
    context. An HTMX poll of the page (`template` with a `records` partial) gets that partial
    only, so the list updates in place."""
    form = form_class(request.GET)
    values = form.cleaned_data if form.is_valid() else {}
    query = {name: values.get(name) or "" for name in form.fields if name != "page"}
    paged = select(workspace_id=membership.workspace_id, page=page_number(request), **query)
    return render_page(
        request,
        template,
        {
            "form": form,
            "paged": paged,
            "prev_query": query_string(query, page=paged.page - 1),
            "next_query": query_string(query, page=paged.page + 1),
            "page_url": f"{request.path}?{query_string(query, page=paged.page)}",
            "poll_s": float(settings.GC_DASHBOARD_POLL_S),
            **(extra or {}),
        },
    )
