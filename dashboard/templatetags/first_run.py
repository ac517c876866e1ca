"""`{% first_run_guide as guide %}`: the board's first-run guide (dashboard/first_run.py), read
from the board page's own context (its board, membership and request)."""

from __future__ import annotations

from django import template

from dashboard import first_run

register = template.Library()


@register.simple_tag(takes_context=True)
def first_run_guide(context: template.Context) -> first_run.FirstRun | None:
    board, membership, request = (context.get(name) for name in ("board", "membership", "request"))
    if board is None or membership is None or request is None:
        return None
    return first_run.first_run_guide(
        workspace_id=membership.workspace_id,
        board=board,
        site_url=request.build_absolute_uri("/"),
        memberships=len(context.get("memberships") or ()),
    )
