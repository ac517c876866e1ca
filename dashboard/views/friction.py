"""The friction page: reports listed by lane (newest first within each), minutes lost per week
and lane as a chart, and the Markdown and JSON downloads of what is shown."""

from __future__ import annotations

import json

from django import forms
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import F
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control

from dashboard.charts import friction_chart_svg
from dashboard.pages import LIST_PAGE_SIZE
from dashboard.views.base import dashboard_view, page_number, query_string, render_page
from friction import selectors as friction_selectors
from friction.api import friction_json
from hands.models import Lane, Membership
from leases.clock import db_now
from leases.services import MAX_NAME_LENGTH


class FrictionFilterForm(forms.Form):
    lane = forms.ChoiceField(required=False)

    def __init__(self, *args: object, lanes: list[Lane], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["lane"].choices = [("", "every lane"), *((x.slug, x.name) for x in lanes)]


def _lane(request: HttpRequest, membership: Membership) -> tuple[FrictionFilterForm, str]:
    """The filter form and the lane it picked ('' for every lane; an unknown one is invalid)."""
    lanes = list(Lane.objects.filter(workspace_id=membership.workspace_id).order_by("slug"))
    form = FrictionFilterForm(request.GET, lanes=lanes)
    slug = form.cleaned_data.get("lane", "") if form.is_valid() else ""
    return form, slug[:MAX_NAME_LENGTH]


@dashboard_view()
def friction(request: HttpRequest, membership: Membership) -> HttpResponse:
    """Five queries whatever the reports (the lanes, the time, the week's sums, a page of
    reports, their refusals)."""
    form, lane = _lane(request, membership)
    page = page_number(request)
    offset = (page - 1) * LIST_PAGE_SIZE
    reports = friction_selectors.friction_list(
        workspace_id=membership.workspace_id, lane_slug=lane
    ).order_by(F("lane__slug").asc(nulls_last=True), "-id")
    rows = list(reports[offset : offset + LIST_PAGE_SIZE + 1])
    weekly = friction_selectors.friction_weekly(workspace_id=membership.workspace_id, now=db_now())
    query = {"lane": lane}
    return render_page(
        request,
        "fleet/friction.html",
        {
            "form": form,
            "reports": rows[:LIST_PAGE_SIZE],
            "chart": friction_chart_svg(weekly.weeks, weekly.lanes, weekly.minutes),
            "lane_totals": [(name, weekly.total(name)) for name in weekly.lanes],
            "page": page,
            "has_next": len(rows) > LIST_PAGE_SIZE,
            "prev_query": query_string(query, page=page - 1),
            "next_query": query_string(query, page=page + 1),
            "export_query": query_string(query),
        },
    )


@dashboard_view()
def friction_export(request: HttpRequest, membership: Membership, fmt: str) -> HttpResponse:
    """The reports the page's filter shows (the newest `EXPORT_LIMIT`), as a download."""
    _, lane = _lane(request, membership)
    rows = list(
        friction_selectors.friction_list(
            workspace_id=membership.workspace_id, lane_slug=lane
        ).order_by("-id")[: friction_selectors.EXPORT_LIMIT]
    )
    if fmt not in ("md", "json"):
        raise Http404("the downloads are friction.md and friction.json")
    if fmt == "md":
        title = f"Friction reports ({lane or 'every lane'})"
        response = HttpResponse(
            friction_selectors.friction_markdown(rows, title=title),
            content_type="text/markdown; charset=utf-8",
        )
    else:
        response = HttpResponse(
            json.dumps([friction_json(r) for r in rows], cls=DjangoJSONEncoder, indent=2),
            content_type="application/json",
        )
    response["Content-Disposition"] = f'attachment; filename="friction.{fmt}"'
    patch_cache_control(response, no_store=True)
    return response
