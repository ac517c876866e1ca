"""The friction page (issue 22.1): reports listed by lane with their linked refusals, the
minutes lost per week as a chart, the downloads, who sees what, and its query budget."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from friction import services as friction_services
from friction.models import FrictionReport
from hands import services as hand_services
from hands.models import Hand, HandKey, Workspace
from leases import clock
from leases.models import Refusal

pytestmark = pytest.mark.django_db


def refusal(workspace: Workspace, hand: Hand, request_id: str, code: str = "lease_held") -> None:
    Refusal.objects.create(
        workspace_id=workspace.pk,
        hand=hand.name,
        code=code,
        method="POST",
        path="/api/v1/leases/acquire",
        request_id=request_id,
        message="held",
    )


def supervisor_key(hand: Hand) -> HandKey:
    return hand_services.key_issue(hand=hand, scopes=["supervise"], actor="test").key


def file(hand: Hand, **fields: Any) -> FrictionReport:
    return friction_services.friction_file(hand=hand, key=supervisor_key(hand), **fields)


def test_it_lists_reports_by_lane_with_their_refusals_and_the_chart(
    workspace_admin_client: Any, workspace: Workspace, lane: Any, owner: Hand
) -> None:
    hand_services.lane_create(workspace=workspace, slug="payments", name="Payments")
    refusal(workspace, owner, "req-held")
    file(
        owner,
        what="lock <b>held</b>",
        instead="docs",
        minutes=12,
        lane="rewalk",
        refusals=["req-held"],
    )
    file(owner, what="slow CI", minutes=5, lane="payments")
    file(owner, what="no lane at all", minutes=1)
    html = workspace_admin_client.get("/friction/").content.decode()
    assert "lock &lt;b&gt;held&lt;/b&gt;" in html and "<b>held</b>" not in html
    assert "<code>lease_held</code>" in html and 'data-request-id="req-held"' in html
    assert html.index("Payments") < html.index("Rewalk") < html.index("No lane")
    assert "<svg" in html and 'class="chart"' in html
    assert 'data-lane="rewalk" data-minutes="12"' in html
    assert 'data-lane-total="rewalk">rewalk: 12 min' in html
    assert 'href="/friction/export.md"' in html and 'href="/friction/export.json"' in html
    assert 'aria-current="page">Friction</a>' in html


def test_the_lane_filter_and_the_downloads(
    viewer_client: Any, workspace: Workspace, lane: Any, owner: Hand
) -> None:
    hand_services.lane_create(workspace=workspace, slug="payments", name="Payments")
    refusal(workspace, owner, "req-1", code="stale_fence")
    file(owner, what="fence | moved", minutes=3, lane="rewalk", refusals=["req-1"])
    file(owner, what="payments were slow", minutes=4, lane="payments")
    html = viewer_client.get("/friction/?lane=rewalk").content.decode()
    assert "fence | moved" in html and "payments were slow" not in html
    assert 'href="/friction/export.md?lane=rewalk"' in html
    markdown = viewer_client.get("/friction/export.md?lane=rewalk")
    assert markdown["Content-Type"].startswith("text/markdown")
    assert 'filename="friction.md"' in markdown["Content-Disposition"]
    text = markdown.content.decode()
    assert "fence \\| moved" in text and "`stale_fence`" in text and "payments" not in text
    exported = json.loads(viewer_client.get("/friction/export.json").content)
    assert {r["what"] for r in exported} == {"fence | moved", "payments were slow"}
    assert viewer_client.get("/friction/export.html").status_code == 404


def test_another_workspaces_reports_are_not_shown(
    outsider_client: Any, workspace_admin_client: Any, owner: Hand
) -> None:
    file(owner, what="ours only", minutes=2)
    assert "ours only" not in outsider_client.get("/friction/").content.decode()
    assert json.loads(outsider_client.get("/friction/export.json").content) == []
    assert "ours only" in workspace_admin_client.get("/friction/").content.decode()


def test_the_chart_sums_minutes_per_week(
    workspace_admin_client: Any, owner: Hand, lane: Any, frozen_clock: Any
) -> None:
    file(owner, what="a", minutes=10, lane="rewalk")
    clock.advance(3600)
    file(owner, what="b", minutes=5, lane="rewalk")
    clock.advance(7 * 86_400)
    file(owner, what="c", minutes=2, lane="rewalk")
    html = workspace_admin_client.get("/friction/").content.decode()
    assert 'data-lane="rewalk" data-minutes="15"' in html
    assert 'data-lane="rewalk" data-minutes="2"' in html
    assert "rewalk: 17 min" in html
    clock.advance(12 * 7 * 86_400)  # past the chart's twelve weeks
    assert (
        "No friction reported in these weeks."
        in workspace_admin_client.get("/friction/").content.decode()
    )


def test_the_page_costs_the_same_queries_with_few_and_many_reports(
    workspace_admin_client: Any, workspace: Workspace, lane: Any, owner: Hand
) -> None:
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert workspace_admin_client.get("/friction/").status_code == 200
        return len(queries)

    for i in range(2):
        refusal(workspace, owner, f"few-{i}")
        file(owner, what="few", minutes=1, lane="rewalk", refusals=[f"few-{i}"])
    few = count()
    for i in range(40):
        refusal(workspace, owner, f"many-{i}")
        file(
            owner, what="many", minutes=1, lane="rewalk" if i % 2 else None, refusals=[f"many-{i}"]
        )
    assert count() == few <= 10
