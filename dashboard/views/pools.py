"""The pools page: every pool of the workspace, each member with its lease's state, holder,
fence and the countdown of its window."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from dashboard.pages import LIST_PAGE_SIZE
from dashboard.views.base import dashboard_view, page_number, query_string, render_page
from hands.models import Membership
from pools import selectors as pool_selectors


@dashboard_view(replica=True)
def pools(request: HttpRequest, membership: Membership) -> HttpResponse:
    """One page of pools by name; three queries whatever the pools and members (the pools, the
    database's clock, every member's lease)."""
    page = page_number(request)
    offset = (page - 1) * LIST_PAGE_SIZE
    rows = list(
        pool_selectors.pools_list(workspace_id=membership.workspace_id).order_by("name")[
            offset : offset + LIST_PAGE_SIZE + 1
        ]
    )
    views = pool_selectors.pool_views(rows[:LIST_PAGE_SIZE])
    return render_page(
        request,
        "fleet/pools.html",
        {
            "pools": [
                {
                    "view": view,
                    "members": [
                        {
                            "member": pool_selectors.member_of(view.pool, lease.resource),
                            "lease": lease,
                        }
                        for lease in view.leases
                    ],
                }
                for view in views
            ],
            "page": page,
            "has_next": len(rows) > LIST_PAGE_SIZE,
            "prev_query": query_string({}, page=page - 1),
            "next_query": query_string({}, page=page + 1),
        },
    )
