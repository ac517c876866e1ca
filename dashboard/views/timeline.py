"""A run's record on its page (`fleet/_run_timeline.html`, loaded by HTMX): every entry of its
timeline (`fleet.timeline`) with human times, a scrubber over the run's span that replays the
board's state for the run at the chosen moment (rendered here, swapped in by HTMX), and the
whole timeline as JSON Lines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from apikit.errors import ValidationFailed
from apikit.inputs import whole_number
from dashboard.views.base import dashboard_view, render_page
from fleet import timeline
from fleet.plan import selectors as plan_selectors
from hands.models import Membership
from leases.clock import db_now

# The entries the page lists at first; the rest a page at a time ("Show more").
PAGE_ENTRIES = 200


def _scope(membership: Membership, pk: int) -> timeline.TimelineScope:
    run = plan_selectors.run_get(workspace_id=membership.workspace_id, run_id=pk)
    return timeline.timeline_scope(run)


def _moment(request: HttpRequest, start: datetime, end: datetime) -> datetime:
    """The scrubber's `t` (seconds since the epoch, in ASCII digits), within the run's span;
    the span's end when absent or unreadable."""
    raw = whole_number(request.GET.get("t", "") or "")
    # Clamped as a number first: a moment past year 9999 is no datetime at all.
    if raw is None or raw >= _seconds(end):
        return end
    if raw <= _seconds(start):
        return start
    return datetime.fromtimestamp(raw, tz=UTC)


def _seconds(at: datetime) -> int:
    return int(at.timestamp())


def _replay_context(scope: timeline.TimelineScope, at: datetime, now: datetime) -> dict:
    """The board at `at`, each time in it as seconds since the run's creation, and the page's
    database time (`now`: how long ago `at` was, in the one time tag)."""
    created = scope.run.created_at
    state = timeline.run_state_at(scope, at, now=now)

    def offset(moment: datetime | None) -> float | None:
        return None if moment is None else (moment - created).total_seconds()

    return {
        "state": state,
        "slots": [
            (
                slot,
                offset(slot.deadline),
                offset(slot.last_report.at if slot.last_report else None),
            )
            for slot in state.slots
        ],
        "since_start": offset(at),
        "now": now,
    }


@dashboard_view(replica=True)
def run_timeline(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    """The record's fragment: the scrubber with the board at its end, and the entries."""
    scope = _scope(membership, pk)
    now = db_now()
    start, end = timeline.run_span(scope, now)
    try:
        raw = request.GET.get("cursor", "")
        after = timeline.position_from_cursor(raw) if raw else None
    except ValidationFailed:
        after = None  # a cursor this page never gave out: from the start
    entries, next_position = timeline.timeline_page(scope, after=after, limit=PAGE_ENTRIES)
    at = _moment(request, start, end)
    context = {
        "run": scope.run,
        "entries": [(e, (e.at - scope.run.created_at).total_seconds()) for e in entries],
        "next_cursor": next_position.cursor() if next_position else "",
        "more_only": after is not None,
        "span_start": _seconds(start),
        "span_end": _seconds(end) + (1 if end.microsecond else 0),
        "t": _seconds(at),
        **_replay_context(scope, at, now),
    }
    template = "fleet/_run_entries.html" if after is not None else "fleet/_run_record.html"
    return render_page(request, template, context)


@dashboard_view(replica=True)
def run_replay(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    """The board's state for the run at the scrubber's `t`."""
    scope = _scope(membership, pk)
    now = db_now()
    start, end = timeline.run_span(scope, now)
    at = _moment(request, start, end)
    context = {"run": scope.run, **_replay_context(scope, at, now)}
    return render_page(request, "fleet/_run_replay.html", context)


@dashboard_view(replica=True)
def run_timeline_jsonl(request: HttpRequest, membership: Membership, pk: int) -> HttpResponse:
    """Every entry, one JSON object a line (as `GET /runs/{id}/timeline?format=jsonl`)."""
    scope = _scope(membership, pk)

    def lines() -> Iterator[bytes]:
        for page in timeline.timeline_all(scope):
            yield b"".join(
                json.dumps(entry.json(), separators=(",", ":")).encode() + b"\n" for entry in page
            )

    response = StreamingHttpResponse(lines(), content_type="application/jsonl")
    response["Content-Disposition"] = f'attachment; filename="run-{pk}-timeline.jsonl"'
    return response
