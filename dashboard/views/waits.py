"""Runs that wait for runs, on the pages: a new run of a work package (its priority and what it
waits for), and the board's list of the runs that wait, loaded after the board and polled on its
own (the board's fingerprint and query budget stay the attempts'). The run page's part is a
template tag (`dashboard.templatetags.waits`)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_http_methods

from apikit.errors import GroundControlError, ValidationFailed
from dashboard.forms import RunCreateForm
from dashboard.pages import BoardFilters
from dashboard.views.base import dashboard_view, render_page, show_refusal
from fleet.models import Run
from fleet.plan import dependencies
from fleet.plan import selectors as plan_selectors
from fleet.plan import services as plan_services
from hands.models import Membership, Role

# The board lists this many waiting runs (the ready queue's order), and says how many more.
BOARD_WAITING = 20
# A new run may pick, from its package, this many of the newest runs to wait for.
PICKABLE_RUNS = 200


@dashboard_view(Role.SUPERVISOR)
@require_http_methods(["GET", "POST"])
def run_create(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    """A new run of work package `pk`: the form, then the run-create service the API calls."""
    package = plan_selectors.work_package_get(
        workspace_id=membership.workspace_id, work_package_id=pk
    )
    choices = [
        (run.pk, f"{run.title} (run {run.pk}, {run.state})")
        for run in Run.objects.filter(work_package=package).order_by("-pk")[:PICKABLE_RUNS]
    ]
    form = RunCreateForm(request.POST or None, runs=choices)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            run = plan_services.run_create(
                work_package=package,
                title=data["title"],
                brief=data["brief"],
                slots=data["slots"],
                priority=data["priority"],
                depends_on=form.dependencies(),
            )
        except ValidationFailed as error:
            # Shown on the field the service names (`depends_on`: the ids typed, or picked).
            said = error.fields.get("fields") or {}
            for field, problems in said.items():
                name = "other_runs" if field == "depends_on" else field
                form.add_error(name if name in form.fields else None, " ".join(problems))
            if not said:
                form.add_error(None, error.message)
        except GroundControlError as error:
            show_refusal(request, error)
            return redirect("work-package", pk=package.pk)
        else:
            named = len(form.dependencies())
            waits = f", waiting for {named} run{'s' if named > 1 else ''}" if named else ""
            messages.success(request, f"Run {run.title} is planned{waits}.")
            return redirect("run", pk=run.pk)
    return render_page(request, "fleet/run_new.html", {"package": package, "form": form})


@dashboard_view(replica=True)
def board_waits(request: HttpRequest, membership: Membership) -> HttpResponse:
    """The open runs that wait for runs not done, under the board's lane filter: each with what
    it waits for (linked, with their states). Two queries."""
    filters = BoardFilters.read(request.GET)
    runs, total = plan_selectors.waiting_runs(
        workspace_id=membership.workspace_id, lane_slug=filters.lane, limit=BOARD_WAITING
    )
    rows = [(run, dependencies.waiting_for(dependencies.from_rows(run) or [])) for run in runs]
    context = {
        "loaded": True,
        "waiting_rows": rows,
        "waiting_more": total - len(rows),
        "poll_s": float(settings.GC_DASHBOARD_POLL_S),
    }
    response = render_page(request, "fleet/_board_waits.html", context)
    patch_cache_control(response, no_store=True)
    return response
