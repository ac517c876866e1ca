"""The supervisors' dashboard: thin views over `dashboard.pages` (reads) and the services (writes).

Every page needs a login and a membership of the current workspace; a viewer reads, a supervisor
acts on attempts, leases and runs, an admin manages hands, keys and members. Objects of another
workspace are a 404, as in the API. Each action goes through a service, which writes its event.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.views import LoginView, redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render, resolve_url
from django.urls import reverse
from django.utils.cache import patch_cache_control, patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_http_methods, require_POST

from dashboard import login_throttle, pages
from dashboard.charts import Bar, state_chart_svg, timeline_svg
from dashboard.forms import (
    BoardFilterForm,
    BreakLeaseForm,
    DirectiveForm,
    EventFilterForm,
    HandCreateForm,
    HandFilterForm,
    KeyIssueForm,
    LeaseFilterForm,
    MembershipForm,
    ReasonForm,
    RefusalFilterForm,
    SlotReopenForm,
    SlotsAddForm,
    WorkspaceSwitchForm,
)
from dashboard.pages import STATES, AttemptRow, BoardFilters
from fleet import selectors
from fleet import services as fleet_services
from fleet.models import Directive, Membership, PlanState, Role
from fleet.selectors import last_report_at
from leases import engine
from leases.clock import db_now
from leases.errors import GroundControlError, NotFound

SESSION_WORKSPACE = "gc_workspace_id"
FINGERPRINT_HEADER = "X-GC-Fingerprint"

View = Callable[..., HttpResponse]


def dashboard_view(minimum: str = Role.VIEWER) -> Callable[[View], View]:
    """Login, the current workspace's membership, and at least the `minimum` role.

    The view receives the membership; templates get it (and the switcher's list) through
    `_render`. A domain `NotFound` becomes a 404.
    """

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                if request.htmx:
                    # A poll after the session ended: send the whole tab to the login page
                    # instead of swapping the login form into the board.
                    response = HttpResponse(status=204)
                    response["HX-Redirect"] = resolve_url(settings.LOGIN_URL)
                    return response
                return redirect_to_login(request.get_full_path())
            memberships = pages.memberships_for(request.user)
            membership = pages.membership_pick(
                memberships, request.session.get(SESSION_WORKSPACE)
            )
            if membership is None:
                return render(request, "fleet/no_workspace.html", status=403)
            if not pages.role_allows(membership.role, minimum):
                raise PermissionDenied(f"this needs the {minimum} role")
            request.gc_memberships = memberships  # type: ignore[attr-defined]
            request.gc_membership = membership  # type: ignore[attr-defined]
            try:
                return view(request, membership, *args, **kwargs)
            except NotFound as error:
                raise Http404(error.message) from None

        return wrapper

    return decorate


def _render(
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
        **context,
    }
    return render(request, template, context, status=status)


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


def _back(request: HttpRequest, default: str) -> HttpResponseRedirect:
    """Redirect to the form's `next` when it is a local URL, else to `default`."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = default
    return HttpResponseRedirect(target or default)


def _refused(request: HttpRequest, error: GroundControlError) -> None:
    messages.error(request, f"Refused ({error.code}): {error.message}")


def _page(request: HttpRequest) -> int:
    try:
        return max(1, min(int(request.GET.get("page", "1")), 1_000_000))
    except ValueError:
        return 1


def _query(values: dict[str, Any], **changes: Any) -> str:
    merged = {**values, **changes}
    return urlencode({k: v for k, v in merged.items() if v not in ("", None, 1)})


# --- Workspace -----------------------------------------------------------------------------------


@require_POST
@dashboard_view()
def workspace_switch(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = WorkspaceSwitchForm(request.POST)
    ids = {m.workspace_id for m in request.gc_memberships}  # type: ignore[attr-defined]
    if form.is_valid() and form.cleaned_data["workspace"] in ids:
        request.session[SESSION_WORKSPACE] = form.cleaned_data["workspace"]
    else:
        messages.error(request, "You are not a member of that workspace.")
    return redirect("board")


# --- The board -----------------------------------------------------------------------------------


def _board_filters(request: HttpRequest) -> BoardFilters:
    state = request.GET.get("state", "")
    return BoardFilters(
        lane=request.GET.get("lane", "")[:100],
        state=state if state in STATES else "",
        hand=request.GET.get("hand", "")[:200],
        page=_page(request),
    )


@dashboard_view()
def board(request: HttpRequest, membership: Membership) -> HttpResponse:
    """The fleet board. An HTMX poll that sends the fingerprint it shows gets 204 (nothing to
    swap) when nothing changed, else only the board fragment."""
    data = pages.board(workspace_id=membership.workspace_id, filters=_board_filters(request))
    if request.htmx and request.headers.get(FINGERPRINT_HEADER) == data.fingerprint:
        response = HttpResponse(status=204)
    else:
        query = data.filters.query()
        context = {
            "board": data,
            "form": BoardFilterForm(initial=query, lanes=data.lanes),
            "board_url": f"{reverse('board')}?{_query(query)}".rstrip("?"),
            "prev_query": _query(query, page=data.filters.page - 1),
            "next_query": _query(query, page=data.filters.page + 1),
            "poll_s": _poll_seconds(),
            "count_links": [
                (state, data.counts.get(state, 0), _query(query, state=state, page=1))
                for state in STATES
            ],
        }
        if request.htmx:
            template = "fleet/board.html#board"
        else:
            template = "fleet/board.html"
            svg = state_chart_svg(
                pages.samples(workspace_id=membership.workspace_id), now=data.now
            )
            context["chart_svg"] = mark_safe(svg)  # noqa: S308
        response = _render(request, template, context)
    patch_vary_headers(response, ["HX-Request"])
    patch_cache_control(response, no_store=True)
    return response


def _poll_seconds() -> float:
    return float(settings.GC_DASHBOARD_POLL_S)


@dashboard_view()
def fleet_chart(request: HttpRequest, membership: Membership) -> HttpResponse:
    now = db_now()
    svg = state_chart_svg(pages.samples(workspace_id=membership.workspace_id), now=now)
    return _render(request, "fleet/board.html#chart", {"chart_svg": mark_safe(svg)})  # noqa: S308


# --- Lanes, work packages, runs ------------------------------------------------------------------


@dashboard_view()
def lanes(request: HttpRequest, membership: Membership) -> HttpResponse:
    lane_list, counts = pages.lanes_page(workspace_id=membership.workspace_id)
    rows = [(lane, counts.get(lane.pk, {})) for lane in lane_list]
    return _render(request, "fleet/lanes.html", {"rows": rows})


@dashboard_view()
def lane_detail(request: HttpRequest, membership: Membership, slug: str) -> HttpResponse:
    lane, packages = pages.lane_page(workspace_id=membership.workspace_id, slug=slug)
    return _render(request, "fleet/lane.html", {"lane": lane, "packages": packages})


@dashboard_view()
def work_package_detail(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    package, runs, counts = pages.work_package_page(
        workspace_id=membership.workspace_id, package_id=pk
    )
    rows = [(run, counts.get(run.pk, {})) for run in runs]
    return _render(request, "fleet/work_package.html", {"package": package, "rows": rows})


def _bars(
    rows: list[AttemptRow], label: Callable[[AttemptRow], str], href: Callable[[AttemptRow], str]
) -> list[Bar]:
    bars = []
    for row in reversed(rows):  # oldest at the top
        attempt = row.attempt
        bars.append(
            Bar(
                label=label(row),
                start=attempt.claimed_at,
                end=row.drawn_end,
                state=row.state,
                ticks=_ticks(row),
                markers=[(item.at, item.kind) for item in attempt.evidence.all()],
                href=href(row),
                detail=f"attempt {attempt.pk}, fence {attempt.fence}",
            )
        )
    return bars


def _ticks(row: AttemptRow) -> list[datetime]:
    """The latest reports, and the latest heartbeat (a bare one is on record once a minute)."""
    ticks = [report.at for report in row.attempt.latest_reports]
    latest = last_report_at(row.attempt, row.lease)
    if latest is not None and latest not in ticks:
        ticks.append(latest)
    return ticks


def _evidence(rows: list[AttemptRow]) -> list[tuple[AttemptRow, Any]]:
    """Every piece of evidence of the attempts shown (prefetched: no query here)."""
    return [(row, item) for row in rows for item in row.attempt.evidence.all()]


def _timeline_context(
    rows: list[AttemptRow],
    *,
    now: datetime,
    title: str,
    ident: str,
    label: Callable[[AttemptRow], str],
    href: Callable[[AttemptRow], str],
) -> dict[str, Any]:
    """The timeline picture and the evidence list of a page's attempts."""
    svg = timeline_svg(_bars(rows, label=label, href=href), now=now, title=title, ident=ident)
    return {"timeline_svg": mark_safe(svg), "evidence": _evidence(rows)}  # noqa: S308


@dashboard_view()
def run_detail(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    page = pages.run_page(workspace_id=membership.workspace_id, run_id=pk)
    timeline = _timeline_context(
        page.rows,
        now=page.now,
        title=f"Timeline of run {page.run.title}",
        ident=f"run-{page.run.pk}-timeline",
        label=lambda row: f"{row.attempt.hand.name} · slot {row.attempt.slot.index}",
        href=lambda row: reverse("hand", args=[row.attempt.hand_id]),
    )
    context = {
        "page": page,
        "run": page.run,
        "open_slots": sum(1 for cell in page.slots if cell.state == "open"),
        "done_slots": sum(1 for cell in page.slots if cell.state == "done"),
        **timeline,
    }
    return _render(request, "fleet/run.html", context)


def _confirm_run_change(
    request: HttpRequest,
    membership: Membership,
    *,
    pk: int,
    form: Any,
    change: Callable[[Any], str],
    title: str,
    explanation: str,
    button: str,
) -> HttpResponse:
    """A supervisor's change to a run, asked first with its form; `change` makes it through a
    service with the cleaned data and says what it did."""
    run = selectors.run_get(workspace_id=membership.workspace_id, run_id=pk)
    if request.method == "POST" and form.is_valid():
        try:
            messages.success(request, change(form.cleaned_data))
            return redirect("run", pk=pk)
        except GroundControlError as error:
            _refused(request, error)
    context = {
        "title": title.format(run=run.title),
        "explanation": explanation,
        "action": request.path,
        "button": button,
        "cancel": reverse("run", args=[pk]),
        "form": form,
    }
    return _render(request, "fleet/confirm.html", context)


@dashboard_view(Role.SUPERVISOR)
@require_http_methods(["GET", "POST"])
def slot_reopen(request: HttpRequest, membership: Membership, pk: int, index: int) -> HttpResponse:
    """Reopen a done slot of a run, with a reason: it can be claimed again."""

    def change(data: dict[str, Any]) -> str:
        fleet_services.slot_reopen(
            workspace_id=membership.workspace_id,
            run_id=pk,
            index=index,
            actor=_actor(request),
            reason=data["reason"],
        )
        return f"Slot {index} is open again."

    return _confirm_run_change(
        request,
        membership,
        pk=pk,
        form=SlotReopenForm(request.POST or None),
        change=change,
        title=f"Reopen slot {index} of run {{run}}?",
        explanation="Its work was finished. Reopened, the slot can be claimed again (at the "
        "next fence); the finished attempt and its evidence stay on record, and a done run is "
        "open again.",
        button="Reopen the slot",
    )


@dashboard_view(Role.SUPERVISOR)
@require_http_methods(["GET", "POST"])
def run_add_slots(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    """Add open slots to an open or done run, with a reason."""

    def change(data: dict[str, Any]) -> str:
        run = fleet_services.run_add_slots(
            workspace_id=membership.workspace_id,
            run_id=pk,
            count=data["count"],
            actor=_actor(request),
            reason=data["reason"],
        )
        return f"Run {run.title} has {run.slot_count} slots now."

    return _confirm_run_change(
        request,
        membership,
        pk=pk,
        form=SlotsAddForm(request.POST or None),
        change=change,
        title="Add slots to run {run}?",
        explanation="New slots are open at once. A done run is open again.",
        button="Add the slots",
    )


@dashboard_view(Role.SUPERVISOR)
@require_http_methods(["GET", "POST"])
def run_close(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    page = pages.run_page(workspace_id=membership.workspace_id, run_id=pk)
    if request.method == "POST":
        try:
            fleet_services.run_set_state(
                workspace_id=membership.workspace_id,
                run_id=pk,
                state=PlanState.CLOSED,
                actor=_actor(request),
            )
            messages.success(request, f"Run {page.run.title} is closed: it takes no more claims.")
        except GroundControlError as error:
            _refused(request, error)
        return redirect("run", pk=pk)
    return _render(
        request,
        "fleet/confirm.html",
        {
            "title": f"Close run {page.run.title}?",
            "explanation": "A closed run takes no more claims. Attempts already running go on.",
            "action": reverse("run-close", args=[pk]),
            "button": "Close the run",
            "cancel": reverse("run", args=[pk]),
            "form": None,
        },
    )


# --- Attempts ------------------------------------------------------------------------------------


@dashboard_view(Role.SUPERVISOR)
@require_http_methods(["GET", "POST"])
def attempt_directive(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    """Pause and resume act at once; stop asks first (GET shows the confirmation)."""
    row = pages.attempt_row(workspace_id=membership.workspace_id, attempt_id=pk)
    default = reverse("run", args=[row.attempt.run_id])
    if request.method == "POST":
        form = DirectiveForm(request.POST)
        if form.is_valid():
            directive = form.cleaned_data["directive"]
            try:
                fleet_services.attempt_set_directive(
                    workspace_id=membership.workspace_id,
                    attempt_id=pk,
                    directive=directive,
                    actor=_actor(request),
                )
                messages.success(request, f"Attempt {pk} ({row.attempt.hand.name}): {directive}.")
            except GroundControlError as error:
                _refused(request, error)
        return _back(request, default)
    return _render(
        request,
        "fleet/confirm.html",
        {
            "title": f"Stop attempt {pk} of {row.attempt.hand.name}?",
            "explanation": "The hand reads the stop directive in its next heartbeat's answer and "
            "should release its slot. Its lease stays until it does or it is lost.",
            "action": reverse("attempt-directive", args=[pk]),
            "button": "Stop the attempt",
            "hidden": {"directive": Directive.STOP, "next": request.GET.get("next", default)},
            "cancel": request.GET.get("next", default),
            "form": None,
        },
    )


# --- Hands and keys ------------------------------------------------------------------------------


@dashboard_view()
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
                hand, created = fleet_services.hand_create(
                    workspace=membership.workspace,
                    name=create_form.cleaned_data["name"],
                    lane=create_form.cleaned_data["lane"],
                )
                messages.success(request, f"Hand {hand.name} {'created' if created else 'exists'}.")
                return redirect("hand", pk=hand.pk)
            except GroundControlError as error:
                _refused(request, error)
    filters = HandFilterForm(request.GET)
    query = filters.cleaned_data.get("q", "") if filters.is_valid() else ""
    page = _page(request)
    hand_list, has_next = pages.hands_list(
        workspace_id=membership.workspace_id, query=query, page=page
    )
    return _render(
        request,
        "fleet/hands.html",
        {
            "hands": hand_list,
            "filters": filters,
            "create_form": create_form,
            "page": page,
            "has_next": has_next,
            "prev_query": _query({"q": query}, page=page - 1),
            "next_query": _query({"q": query}, page=page + 1),
        },
    )


@dashboard_view()
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
    return _render(request, "fleet/hand.html", {"page": page, "hand": page.hand, **timeline})


@dashboard_view(Role.ADMIN)
@require_http_methods(["GET", "POST"])
def key_issue(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    page = pages.hand_page(workspace_id=membership.workspace_id, hand_id=pk)
    form = KeyIssueForm(request.POST or None, workspace_id=membership.workspace_id)
    if request.method == "POST" and form.is_valid():
        try:
            issued = fleet_services.key_issue(
                hand=page.hand,
                scopes=form.cleaned_data["scopes"],
                actor=_actor(request),
                expires_in_s=form.cleaned_data["expires_in_s"],
                lane=form.cleaned_data["lane"],
            )
        except GroundControlError as error:
            _refused(request, error)
        else:
            # The plaintext is in this response only: never stored, never cached.
            response = _render(
                request, "fleet/key_issued.html", {"hand": page.hand, "issued": issued}
            )
            patch_cache_control(response, no_store=True)
            return response
    return _render(request, "fleet/key_issue.html", {"hand": page.hand, "form": form})


@dashboard_view(Role.ADMIN)
@require_http_methods(["GET", "POST"])
def key_revoke(request: HttpRequest, membership: Membership, prefix: str) -> HttpResponse:
    key = pages.key_get(workspace_id=membership.workspace_id, prefix=prefix)
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            fleet_services.key_revoke(
                workspace_id=membership.workspace_id,
                prefix=prefix,
                actor=_actor(request),
                reason=form.cleaned_data["reason"],
            )
            messages.success(request, f"Key {prefix} of {key.hand.name} is revoked.")
        except GroundControlError as error:
            _refused(request, error)
        return redirect("hand", pk=key.hand_id)
    return _render(
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


# --- Leases, refusals, events, members -----------------------------------------------------------


def _filtered_list(
    request: HttpRequest,
    membership: Membership,
    form_class: type[Any],
    select: Callable[..., pages.Paged],
    template: str,
) -> HttpResponse:
    """A list page: its filter form from the query string, one page of the selector's rows,
    and the query strings of the previous and next pages (filters kept)."""
    form = form_class(request.GET)
    values = form.cleaned_data if form.is_valid() else {}
    query = {name: values.get(name) or "" for name in form.fields if name != "page"}
    paged = select(workspace_id=membership.workspace_id, page=_page(request), **query)
    return _render(
        request,
        template,
        {
            "form": form,
            "paged": paged,
            "prev_query": _query(query, page=paged.page - 1),
            "next_query": _query(query, page=paged.page + 1),
        },
    )


@dashboard_view()
def leases(request: HttpRequest, membership: Membership) -> HttpResponse:
    return _filtered_list(
        request, membership, LeaseFilterForm, pages.resource_leases, "fleet/leases.html"
    )


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
            lease = fleet_services.lease_break(
                workspace_id=membership.workspace_id,
                resource=resource,
                actor=_actor(request),
                reason=form.cleaned_data["reason"],
            )
            messages.success(
                request, f"The lease on {resource} is broken; its fence is now {lease.fence}."
            )
            return _back(request, default)
        except GroundControlError as error:
            _refused(request, error)
    resource = request.POST.get("resource") or request.GET.get("resource", "")
    current = engine.read(workspace_id=membership.workspace_id, resource=resource[:512])
    return _render(
        request,
        "fleet/lease_break.html",
        {
            "form": form,
            "lease": current,
            "resource": resource,
            "next": request.POST.get("next") or request.GET.get("next") or default,
        },
    )


@dashboard_view()
def refusals(request: HttpRequest, membership: Membership) -> HttpResponse:
    return _filtered_list(
        request, membership, RefusalFilterForm, pages.refusals_list, "fleet/refusals.html"
    )


@dashboard_view()
def events(request: HttpRequest, membership: Membership) -> HttpResponse:
    return _filtered_list(
        request, membership, EventFilterForm, pages.events_list, "fleet/events.html"
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
                fleet_services.membership_set(
                    workspace=membership.workspace, user=user, role=form.cleaned_data["role"]
                )
                messages.success(
                    request, f"{user.get_username()} is a {form.cleaned_data['role']}."
                )
                return redirect("members")
            except GroundControlError as error:
                _refused(request, error)
    return _render(
        request,
        "fleet/members.html",
        {
            "members": pages.members_list(workspace_id=membership.workspace_id),
            "form": form,
        },
    )


class ThrottledLoginView(LoginView):
    """Django's login, slowed after repeated failures (dashboard.login_throttle): while a wait is
    running the form answers 429 without checking the password at all."""

    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        wait = login_throttle.login_wait_s(
            username=request.POST.get("username", ""), address=_client_address(request)
        )
        if wait > 0:
            form = self.get_form()
            form.errors.clear()
            context = self.get_context_data(form=form, throttled_s=int(wait) + 1)
            return self.render_to_response(context, status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        login_throttle.login_failed(
            username=self.request.POST.get("username", ""),
            address=_client_address(self.request),
        )
        return super().form_invalid(form)

    def form_valid(self, form: Any) -> HttpResponse:
        login_throttle.login_succeeded(username=form.get_user().get_username())
        return super().form_valid(form)


def _client_address(request: HttpRequest) -> str:
    # REMOTE_ADDR only: a client-supplied X-Forwarded-For would let anyone pick a fresh address
    # per try. Behind a proxy REMOTE_ADDR is the proxy's (docs/deploy.md).
    return request.META.get("REMOTE_ADDR", "")
