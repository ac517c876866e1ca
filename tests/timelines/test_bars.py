"""The pages' bars: a lost attempt drawn live, late, stalled then lost at the right x positions,
its reports and evidence marked with words, and the board's chart showing the attempts the
board's filters select, for a constant number of queries."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from evidence.services import attempt_finish
from fleet.attempts import reports as report_services
from fleet.models import Run, WorkPackage
from fleet.plan import services as plan_services
from hands import services as hand_services
from leases import clock
from ops import jobs as ops_jobs

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_notifications")]

SVG = "{http://www.w3.org/2000/svg}"
# timeline_svg's geometry: labels to the left of x 230, bars across the 718 units after it.
LEFT, WIDTH = 230, 960 - 230 - 12


def svg_of(html: str, ident: str) -> ET.Element:
    start = html.index("<svg", html.index(f'id="{ident}"'))
    return ET.fromstring(html[start : html.index("</svg>", start) + 6])


def phase_rects(root: ET.Element) -> list[tuple[str, float, float]]:
    return [
        (r.get("data-phase"), float(r.get("x")), float(r.get("x")) + float(r.get("width")))
        for r in root.iter(f"{SVG}rect")
        if r.get("class") == "phase"
    ]


def test_a_lost_attempt_is_drawn_live_late_stalled_then_lost_at_its_instants(
    workspace_admin_client, owner, make_run, claim, frozen_clock
):
    run = make_run(heartbeat_interval_s=100, grace_s=60, slots=1)
    attempt_id = claim(owner, run).attempt.pk
    clock.advance(50)
    report_services.attempt_report(
        hand=owner,
        attempt_id=attempt_id,
        fence=1,
        kind="blocker",
        process_id="host:1",
        message="the <migration> lock is held",
    )
    clock.advance(250)  # late at 150, stalled at 180, lost at 210, swept at 300
    ops_jobs.leases_sweep()
    html = workspace_admin_client.get(f"/runs/{run.pk}/").content.decode()
    root = svg_of(html, "run-timeline")

    def x(seconds: float) -> float:  # the picture spans the claim to now (300 s)
        return round(LEFT + seconds / 300 * WIDTH, 1)

    assert phase_rects(root) == [
        ("live", x(0), x(150)),
        ("late", x(150), x(180)),
        ("stalled", x(180), x(210)),
        ("lost", x(210), x(300)),
    ]
    cap = next(r for r in root.iter(f"{SVG}rect") if r.get("class") == "cap")
    assert cap.get("data-state") == "lost"
    assert "ended lost at 12:05:00 UTC" in cap.find(f"{SVG}title").text
    blocker = next(p for p in root.iter(f"{SVG}path") if p.get("data-mark") == "blocker")
    words = blocker.find(f"{SVG}title").text
    assert words.startswith("Blocker report: the <migration> lock is held, 12:00:50 UTC (4 min")
    assert "&lt;migration&gt;" in html and "<migration>" not in html.replace(
        "&lt;migration&gt;", ""
    )


def test_evidence_sits_on_the_bar_with_its_link_in_words(
    workspace_admin_client, owner, one_slot, claim
):
    # The clock runs: evidence is stamped by the database's own now().
    attempt_id = claim(owner, one_slot).attempt.pk
    url = "https://example.com/" + "very-long-path/" * 20 + "pull/7"
    attempt_finish(
        hand=owner,
        attempt_id=attempt_id,
        fence=1,
        process_id="host:1",
        evidence=[{"kind": "pull_request", "url": url}],
    )
    html = workspace_admin_client.get(f"/runs/{one_slot.pk}/").content.decode()
    root = svg_of(html, "run-timeline")
    mark = next(p for p in root.iter(f"{SVG}path") if p.get("data-mark") == "evidence")
    assert url in mark.find(f"{SVG}title").text  # the whole link, never cut
    evidence = html.split('<ul class="evidence">')[1].split("</ul>")[0]
    assert f'title="{url}"' in evidence and f">{url}</a>" in evidence
    assert f'<a href="{url}" class="evidence-url"' in evidence


@pytest.fixture
def two_lanes(workspace, owner, teammate, make_run, claim, frozen_clock, lane):  # noqa: ANN001
    """hand-a live in rewalk; hand-b late in rewalk and live in payments."""
    other, _ = hand_services.lane_create(workspace=workspace, slug="payments", name="Payments")
    quick = make_run(heartbeat_interval_s=10, grace_s=60, slots=1, title="Quick")
    claim(teammate, quick)
    clock.advance(20)  # hand-b's tenure on Quick is late
    claim(owner, make_run(heartbeat_interval_s=100, grace_s=60, slots=1, title="Slow"))
    package, _ = plan_services.work_package_create(lane=other, key="pay", title="Pay")
    paying = plan_services.run_create(
        work_package=package, title="Pay", brief="b", slots=1, heartbeat_interval_s=100
    )
    claim(teammate, Run.objects.get(pk=paying.pk))
    assert WorkPackage.objects.count() == 3
    return other


def chart_bars(client, query: str = "") -> list[str]:  # noqa: ANN001
    response = client.get(f"/chart/{query}", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    root = svg_of(response.content.decode(), "fleet-chart")
    labels = [t for t in root.iter(f"{SVG}text") if t.get("class") == "label"]
    return [t.find(f"{SVG}title").text for t in labels]


def board_rows(client, query: str = "") -> list[str]:  # noqa: ANN001
    html = client.get(f"/{query}").content.decode()
    return [part.split('"')[0] for part in html.split('data-hand="')[1:]]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["hand-b · Pay #0", "hand-b · Quick #0", "hand-a · Slow #0"]),
        ("?lane=payments", ["hand-b · Pay #0"]),
        ("?lane=rewalk", ["hand-b · Quick #0", "hand-a · Slow #0"]),
        ("?state=late", ["hand-b · Quick #0"]),
        ("?hand=hand-a", ["hand-a · Slow #0"]),
        ("?hand=hand-b&lane=rewalk", ["hand-b · Quick #0"]),
        ("?state=finished", []),
    ],
)
def test_the_boards_chart_follows_its_lane_state_and_hand_filters(
    workspace_admin_client, two_lanes, query, expected
):
    bars = chart_bars(workspace_admin_client, query)
    assert bars == expected
    # The same attempts as the board's table, in the same order.
    assert [bar.split(" · ")[0] for bar in bars] == board_rows(workspace_admin_client, query)


def test_the_board_loads_its_chart_with_the_filter_form_it_follows(
    workspace_admin_client, two_lanes
):
    html = workspace_admin_client.get("/?lane=payments").content.decode()
    chart = html.split('id="fleet-chart"')[1].split(">")[0]
    assert 'hx-get="/chart/"' in chart and 'hx-include="form.filters"' in chart
    assert "change from:form.filters" in chart
    assert 'href="/chart/?lane=payments"' in html  # without JavaScript: a link to the picture


def test_the_boards_chart_costs_the_same_queries_for_10_and_100_attempts(
    workspace_admin_client, make_fleet, frozen_clock
):
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            response = workspace_admin_client.get("/chart/", HTTP_HX_REQUEST="true")
        assert response.status_code == 200
        return len(queries)

    make_fleet(10, now=frozen_clock)
    small = count()
    make_fleet(90, now=frozen_clock)
    large = count()
    assert large == small
    # session, user, memberships, the time, the rows, their evidence, their reports, the
    # renewals' gaps, the sweep's events
    assert small <= 9, small
