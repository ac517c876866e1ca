"""The work's pages: the board and its chart, lanes, work packages, a run (its slots and the
attempts' SVG timeline) and the supervisor's actions on them (close a run, add or reopen slots,
direct an attempt)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.cache import patch_cache_control, patch_vary_headers
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_http_methods, require_POST

from apikit.errors import GroundControlError
from dashboard import pages
from dashboard.charts import Bar, Mark, timeline_svg
from dashboard.cost_charts import cost_chart_svg
from dashboard.costs import lane_costs, run_costs
from dashboard.forms import (
    BoardFilterForm,
    BudgetForm,
    DirectiveForm,
    IntegrationForm,
    RunIdleForm,
    ScheduleForm,
    SlotReopenForm,
    SlotsAddForm,
    WorkspaceSwitchForm,
)
from dashboard.pages import STATES, AttemptRow, BoardFilters
from dashboard.views.base import (
    FINGERPRINT_HEADER,
    SESSION_WORKSPACE,
    actor_name,
    dashboard_view,
    page_number,
    query_string,
    redirect_back,
    render_page,
    show_refusal,
)
from fleet.attempts import services as attempt_services
from fleet.attempts.phases import tenure_phases, tenure_records
from fleet.models import Directive, PlanState
from fleet.plan import selectors as plan_selectors
from fleet.plan import services as plan_services
from hands.models import Membership, Role
from leases import handoffs
from leases.clock import db_now
from schedules import selectors as schedule_selectors


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


def _board_filters(request: HttpRequest) -> BoardFilters:
    return BoardFilters.read(request.GET, page=page_number(request))


@dashboard_view(replica=True)
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
            "board_url": f"{reverse('board')}?{query_string(query)}".rstrip("?"),
            "prev_query": query_string(query, page=data.filters.page - 1),
            "next_query": query_string(query, page=data.filters.page + 1),
            "poll_s": _poll_seconds(),
            "filter_query": query_string(data.filters.query(page=1)),
            "count_links": [
                (state, data.counts.get(state, 0), query_string(query, state=state, page=1))
                for state in STATES
            ],
        }
        template = "fleet/board.html#board" if request.htmx else "fleet/board.html"
        response = render_page(request, template, context)
    patch_vary_headers(response, ["HX-Request"])
    patch_cache_control(response, no_store=True)
    return response


@dashboard_view(replica=True)
def board_handoffs(request: HttpRequest, membership: Membership) -> HttpResponse:
    """The board's open handoff requests, loaded after the board and polled on their own (the
    board's fingerprint and query budget are the attempts'). A poll that sends the fingerprint
    it shows gets 204: an open request never changes what the panel says of it (its time ticks
    in the browser), so the panel is swapped only when one opens or ends, and a supervisor's
    click on Grant… is not lost to a swap of the same row between its press and release."""
    opened = handoffs.handoffs_open(workspace_id=membership.workspace_id)
    fingerprint = f"{membership.role}:" + ",".join(str(asked.request.pk) for asked in opened)
    if request.htmx and request.headers.get(FINGERPRINT_HEADER) == fingerprint:
        response = HttpResponse(status=204)
    else:
        context = {
            "loaded": True,
            "grant_next": reverse("board"),
            "handoffs": opened,
            "handoffs_fingerprint": fingerprint,
            "poll_s": _poll_seconds(),
        }
        response = render_page(request, "fleet/board.html#handoffs", context)
    patch_cache_control(response, no_store=True)
    return response


def _poll_seconds() -> float:
    return float(settings.GC_DASHBOARD_POLL_S)


@dashboard_view(replica=True)
def fleet_chart(request: HttpRequest, membership: Membership) -> HttpResponse:
    """The board's chart: the attempts of the board's page under the same filters, each bar in
    its phases from the record over the last hour. Loaded after the board and polled on its own
    (the board's query budget and fingerprint stay the table's). It draws the first page: the
    filter form it follows carries no page."""
    filters = BoardFilters.read(request.GET)
    chart = pages.board_chart(workspace_id=membership.workspace_id, filters=filters)
    shown = [f"lane {filters.lane}"] if filters.lane else []
    shown += [f"hand {filters.hand}"] if filters.hand else []
    shown += [f"{filters.state} now"] if filters.state else []
    svg = timeline_svg(
        _bars(chart.rows, now=chart.now, label=_board_label, href=_run_href),
        now=chart.now,
        since=chart.since,
        title="The board's attempts over the last hour"
        + (f" ({', '.join(shown)})" if shown else ""),
        ident="fleet-chart-svg",
    )
    context = {"chart_svg": mark_safe(svg), "loaded": True, "chart": chart}  # noqa: S308
    response = render_page(request, "fleet/board.html#chart", context)
    patch_cache_control(response, no_store=True)
    return response


def _board_label(row: AttemptRow) -> str:
    return f"{row.attempt.hand.name} · {row.attempt.run.title} #{row.attempt.slot.index}"


def _run_href(row: AttemptRow) -> str:
    return reverse("run", args=[row.attempt.run_id])


@dashboard_view(replica=True)
def lanes(request: HttpRequest, membership: Membership) -> HttpResponse:
    lane_list, counts = pages.lanes_page(workspace_id=membership.workspace_id)
    rows = [(lane, counts.get(lane.pk, {})) for lane in lane_list]
    return render_page(request, "fleet/lanes.html", {"rows": rows})


@dashboard_view(replica=True)
def lane_detail(request: HttpRequest, membership: Membership, slug: str) -> HttpResponse:
    lane, packages = pages.lane_page(workspace_id=membership.workspace_id, slug=slug)
    spend = lane_costs(lane=lane, now=db_now())
    chart = mark_safe(cost_chart_svg(spend.days, limit_usd=spend.daily_limit))  # noqa: S308 - escaped
    context = {
        "lane": lane,
        "packages": packages,
        "costs": spend,
        "cost_chart": chart,
        "budget_form": BudgetForm(),
        "schedules": schedule_selectors.lane_schedules(lane=lane),
        "integrations": schedule_selectors.lane_integrations(lane=lane),
        "schedule_form": ScheduleForm(),
        "integration_form": IntegrationForm(),
    }
    return render_page(request, "fleet/lane.html", context)


@dashboard_view(replica=True)
def work_package_detail(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    package, runs, counts = pages.work_package_page(
        workspace_id=membership.workspace_id, package_id=pk
    )
    rows = [(run, counts.get(run.pk, {})) for run in runs]
    return render_page(request, "fleet/work_package.html", {"package": package, "rows": rows})


def _bars(
    rows: list[AttemptRow],
    *,
    now: datetime,
    label: Callable[[AttemptRow], str],
    href: Callable[[AttemptRow], str],
) -> list[Bar]:
    """A bar per row, its phases from the record (`fleet.attempts.phases`: two queries whatever
    the rows), its reports and evidence as marks (prefetched)."""
    records = tenure_records([row.attempt for row in rows], now)
    bars = []
    for row in rows:
        attempt = row.attempt
        until = row.drawn_end or now
        phases = tenure_phases(
            records[attempt.pk], until=until, end=attempt.end, ended_at=attempt.ended_at
        )
        bars.append(
            Bar(
                label=label(row),
                start=attempt.claimed_at,
                end=row.drawn_end,
                state=row.state,
                phases=[(p.state, p.start, p.end) for p in phases],
                marks=_marks(row),
                href=href(row),
                detail=f"attempt {attempt.pk}, fence {attempt.fence}",
            )
        )
    return bars


def _marks(row: AttemptRow) -> list[Mark]:
    """The reports a bar marks (progress, blockers, notes) and its evidence, each in words."""
    marks = []
    for report in getattr(row.attempt, "marked_reports", ()):
        said = f"{report.kind.capitalize()} report"
        if report.percent is not None:
            said += f", {report.percent:.0f}%"
        if report.message:
            message = report.message if len(report.message) <= 200 else report.message[:199] + "…"
            said += f": {message}"
        marks.append(Mark(report.at, report.kind, said))
    for item in row.attempt.evidence.all():
        said = f"Evidence {item.kind} ({item.grade}): {item.url}"
        marks.append(Mark(item.at, "evidence", said + (f" — {item.note}" if item.note else "")))
    return marks


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
    # Oldest at the top.
    bars = _bars(list(reversed(rows)), now=now, label=label, href=href)
    svg = timeline_svg(bars, now=now, title=title, ident=ident)
    return {"timeline_svg": mark_safe(svg), "evidence": _evidence(rows)}  # noqa: S308


@dashboard_view(replica=True)
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
    spend = run_costs(
        run_id=page.run.pk, attempt_ids=[row.attempt.pk for row in page.rows], now=page.now
    )
    chart = cost_chart_svg(spend.days, ident=f"run-{page.run.pk}-cost-chart")
    context = {
        "page": page,
        "run": page.run,
        "costs": spend,
        "cost_chart": mark_safe(chart),  # noqa: S308 - the chart escapes its text
        "open_slots": sum(1 for cell in page.slots if cell.state == "open"),
        "done_slots": sum(1 for cell in page.slots if cell.state == "done"),
        "idle_form": RunIdleForm(
            initial={
                "progress_timeout_s": page.run.progress_timeout_s,
                "idle_directive": page.run.idle_directive,
            }
        ),
        **timeline,
    }
    return render_page(request, "fleet/run.html", context)


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
    run = plan_selectors.run_get(workspace_id=membership.workspace_id, run_id=pk)
    if request.method == "POST" and form.is_valid():
        try:
            messages.success(request, change(form.cleaned_data))
            return redirect("run", pk=pk)
        except GroundControlError as error:
            show_refusal(request, error)
    context = {
        "title": title.format(run=run.title),
        "explanation": explanation,
        "action": request.path,
        "button": button,
        "cancel": reverse("run", args=[pk]),
        "form": form,
    }
    return render_page(request, "fleet/confirm.html", context)


@dashboard_view(Role.SUPERVISOR)
@require_http_methods(["GET", "POST"])
def slot_reopen(request: HttpRequest, membership: Membership, pk: int, index: int) -> HttpResponse:
    """Reopen a done slot of a run, with a reason: it can be claimed again."""

    def change(data: dict[str, Any]) -> str:
        plan_services.slot_reopen(
            workspace_id=membership.workspace_id,
            run_id=pk,
            index=index,
            actor=actor_name(request),
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
        run = plan_services.run_add_slots(
            workspace_id=membership.workspace_id,
            run_id=pk,
            count=data["count"],
            actor=actor_name(request),
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
            plan_services.run_set_state(
                workspace_id=membership.workspace_id,
                run_id=pk,
                state=PlanState.CLOSED,
                actor=actor_name(request),
            )
            messages.success(request, f"Run {page.run.title} is closed: it takes no more claims.")
        except GroundControlError as error:
            show_refusal(request, error)
        return redirect("run", pk=pk)
    return render_page(
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
                attempt_services.attempt_set_directive(
                    workspace_id=membership.workspace_id,
                    attempt_id=pk,
                    directive=directive,
                    actor=actor_name(request),
                )
                messages.success(request, f"Attempt {pk} ({row.attempt.hand.name}): {directive}.")
            except GroundControlError as error:
                show_refusal(request, error)
        return redirect_back(request, default)
    return render_page(
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
