"""Attempt bars in real Chromium: the board's chart draws a lost attempt live, late, stalled then
lost, a recovered late gap, reports and evidence as marks with words on hover, follows the
board's filters without a reload, and keeps every evidence chip whole at 1280 and 800 pixels
(screenshots in test-artifacts/)."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from evidence.services import attempt_finish
from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from fleet.plan import services as plan_services
from hands import services as hand_services
from ops import jobs as ops_jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LONG_URL = "https://example.com/acme/" + "a-very-long-repository-path/" * 8 + "pull/1234"
KINDS = ["pull_request", "ci_run", "commit", "design_document_reviewed_by_a_person_at_length"]


def report(hand, view, kind: str = "heartbeat", **said: object) -> None:  # noqa: ANN001
    report_services.attempt_report(
        hand=hand, attempt_id=view.attempt.pk, fence=view.lease.fence, kind=kind,
        process_id="host:1", **said,
    )  # fmt: skip


@pytest.fixture
def fleet(workspace, owner, teammate, make_run):  # noqa: ANN001, ANN201
    """hand-a: lost after a progress report and a blocker; hand-b: late, then reported again and
    live, with a note; hand-c in another lane: finished with long evidence of many kinds."""
    lost = attempt_services.attempt_claim(
        hand=owner, run_id=make_run(title="Lost", heartbeat_interval_s=1, grace_s=2).pk,
        process_id="host:1",
    )  # fmt: skip
    back = attempt_services.attempt_claim(
        hand=teammate, run_id=make_run(title="Back", heartbeat_interval_s=1, grace_s=30).pk,
        process_id="host:1",
    )  # fmt: skip
    report(owner, lost, "progress", percent=30, message="read the code")
    report(owner, lost, "blocker", message="the migrations lock is held")
    report(teammate, back)
    time.sleep(3.5)  # hand-a is past its grace; hand-b is late
    ops_jobs.leases_sweep()  # records both transitions, with the deadlines they passed
    report(teammate, back, "note", message="back after a pause")
    other, _ = hand_services.lane_create(workspace=workspace, slug="docs", name="Docs")
    package, _ = plan_services.work_package_create(lane=other, key="d", title="Docs")
    run = plan_services.run_create(work_package=package, title="Write", brief="b", slots=1)
    third, _ = hand_services.hand_create(workspace=workspace, name="hand-c")
    done = attempt_services.attempt_claim(hand=third, run_id=run.pk, process_id="host:1")
    attempt_finish(
        hand=third, attempt_id=done.attempt.pk, fence=done.lease.fence, process_id="host:1",
        evidence=[{"kind": kind, "url": LONG_URL} for kind in KINDS],
    )  # fmt: skip
    return lost, back, done


def test_the_boards_chart_tells_each_attempts_phases_and_marks(logged_in, fleet, artifacts):
    page = logged_in
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto("/")
    chart = page.locator("#fleet-chart svg")
    chart.wait_for()
    bars = chart.locator("g.bar")
    assert bars.count() == 3
    lost = chart.locator("g.bar", has=page.locator('rect.cap[data-state="lost"]'))
    phases = lost.locator("rect.phase")
    assert [phases.nth(i).get_attribute("data-phase") for i in range(phases.count())] == [
        "live", "late", "stalled", "lost",
    ]  # fmt: skip
    xs = [float(phases.nth(i).get_attribute("x")) for i in range(phases.count())]
    assert xs == sorted(xs)
    back = chart.locator("g.bar", has=page.locator("text", has_text="Back"))
    states = back.locator("rect.phase")
    seen = [states.nth(i).get_attribute("data-phase") for i in range(states.count())]
    # Late for the gap, live again once it reported (and late again as it went quiet).
    assert seen[:3] == ["live", "late", "live"]
    blocker = lost.locator('path[data-mark="blocker"] title')
    assert blocker.text_content().startswith("Blocker report: the migrations lock is held, ")
    assert " UTC (" in blocker.text_content()
    assert back.locator('path[data-mark="note"]').count() == 1
    # The legend draws each colour the bars use.
    for state in ("live", "late", "stalled", "lost", "finished", "released"):
        legend = chart.locator(f'rect[data-legend="{state}"]').get_attribute("fill")
        used = chart.locator(f'rect[data-phase="{state}"], rect.cap[data-state="{state}"]')
        if used.count():
            assert used.first.get_attribute("fill") == legend
    page.locator("#fleet-chart").screenshot(path=str(artifacts / "attempt-bars-1280.png"))


def test_the_boards_chart_follows_the_filters_without_a_reload(logged_in, fleet):
    page = logged_in
    page.goto("/")
    page.locator("#fleet-chart svg g.bar").first.wait_for()
    page.evaluate("window.__notReloaded = true")
    page.get_by_label("Lane", exact=True).select_option("docs")
    bars = page.locator("#fleet-chart svg g.bar")
    expect(bars).to_have_count(1)
    expect(bars.first).to_contain_text("hand-c")
    page.get_by_label("Lane", exact=True).select_option("")
    page.get_by_label("State", exact=True).select_option("lost")
    expect(bars.locator('rect.cap[data-state="lost"]')).to_have_count(1)
    expect(bars).to_have_count(1)
    assert page.evaluate("window.__notReloaded") is True


@pytest.mark.parametrize("width", [1280, 800])
def test_evidence_chips_are_never_cut(logged_in, fleet, artifacts, width):
    page = logged_in
    page.set_viewport_size({"width": width, "height": 900})
    _, _, done = fleet
    page.goto(f"/runs/{done.attempt.run_id}/")
    page.locator(".evidence-url").first.wait_for()
    clipped = page.evaluate(
        """() => {
          const out = [];
          const inside = (el) => {
            const box = el.getBoundingClientRect();
            for (let up = el.parentElement; up; up = up.parentElement) {
              const style = getComputedStyle(up);
              if (style.overflowX === 'visible' && style.overflow === 'visible') continue;
              const outer = up.getBoundingClientRect();
              if (box.right > outer.right + 1 || box.left < outer.left - 1) return false;
            }
            return box.right <= document.documentElement.clientWidth + 1;
          };
          document.querySelectorAll('.evidence-url, .grade').forEach((el) => {
            const whole = el.scrollWidth <= el.clientWidth + 1;
            const said = (el.getAttribute('title') || '').length > 0;
            if (!inside(el) || (!whole && !said)) out.push(el.outerHTML.slice(0, 80));
          });
          return out;
        }"""
    )
    assert clipped == []
    for link in page.locator(".evidence-url").all():
        assert link.get_attribute("title") == LONG_URL and link.inner_text() == LONG_URL
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.locator("#attempts-h").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / f"evidence-chips-{width}.png"), full_page=True)
