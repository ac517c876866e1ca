"""The first-run guide: what the board of a new workspace shows instead of an empty table.

A workspace with no run yet (so no attempt either) has nothing for the board to draw; its board
says, in three steps, how an agent gets onto it: mint a hand's key, claim with `gctl run`, watch.
The guide is gone from the first run on. It is asked only when the board is empty and
unfiltered, so a board with attempts pays nothing for it; an empty one pays one query.
"""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.pages import Board
from fleet.models import Run


@dataclass(frozen=True)
class FirstRun:
    site_url: str  # the dashboard's own address, for GC_URL
    other_workspaces: bool  # the user may switch to another (scripts/run's `demo`)


def workspace_is_new(*, workspace_id: int) -> bool:
    """True while the workspace has no run (an attempt is always on a run's slot)."""
    return not Run.objects.filter(workspace_id=workspace_id).exists()


def first_run_guide(
    *, workspace_id: int, board: Board, site_url: str, memberships: int
) -> FirstRun | None:
    """The guide for an empty, unfiltered board of a workspace with no run, else None."""
    filters = board.filters
    if board.total or filters.lane or filters.state or filters.hand:
        return None
    if not workspace_is_new(workspace_id=workspace_id):
        return None
    return FirstRun(site_url=site_url.rstrip("/"), other_workspaces=memberships > 1)
