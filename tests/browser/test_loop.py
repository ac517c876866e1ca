"""The supervisor's loop in real Chromium: a hand that keeps heartbeating without progress turns
idle on the board without a reload, and a lane's page draws its cost per day with its budget."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from fleet.costs import budgets as budget_services
from fleet.models import Attempt

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_it_badges_an_idle_hand_without_a_reload(logged_in, owner, make_run, artifacts):
    page = logged_in
    run = make_run(slots=1, heartbeat_interval_s=600, grace_s=60, progress_timeout_s=60)
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    # Claimed a little under a minute ago, with no progress since: idle within two seconds.
    Attempt.objects.filter(pk=view.attempt.pk).update(
        claimed_at=view.attempt.claimed_at - timedelta(seconds=58)
    )
    page.goto("/")
    row = page.locator(f'tr[data-attempt="{view.attempt.pk}"]')
    assert row.locator("[data-idle]").count() == 0
    page.evaluate("window.__notReloaded = true")
    badge = row.locator('[data-idle="true"]')
    badge.wait_for()
    assert badge.inner_text().strip().endswith("idle")
    assert row.locator('[data-state="live"]').count() == 1  # a flag beside its state
    assert page.evaluate("window.__notReloaded") is True
    page.screenshot(path=str(artifacts / "board-idle.png"), full_page=True)
    # Every action of the row shows whole inside its cell (none cut off by the column).
    cell = row.locator("td.actions").bounding_box()
    for action in row.locator("td.actions a, td.actions button").all():
        box = action.bounding_box()
        assert box and cell and box["x"] + box["width"] <= cell["x"] + cell["width"] + 1, box
        assert box["y"] + box["height"] <= cell["y"] + cell["height"] + 1, box


def test_it_draws_a_lanes_cost_per_day_and_its_budget(logged_in, owner, lane, make_run, artifacts):
    page = logged_in
    budget_services.budget_create(lane=lane, period="day", action="pause", limit_usd=Decimal(3))
    view = attempt_services.attempt_claim(hand=owner, run_id=make_run().pk, process_id="p")
    report_services.attempt_report(
        hand=owner, attempt_id=view.attempt.pk, fence=1, kind="progress", process_id="p",
        message="spent", tokens_in=900, tokens_out=100, cost_usd=Decimal("1.25"),
    )  # fmt: skip
    page.goto(f"/lanes/{lane.slug}/")
    chart = page.locator("#lane-cost-chart svg")
    chart.wait_for()
    assert chart.get_attribute("role") == "img"
    assert chart.locator("rect[data-day]").count() == 14
    today = chart.locator("rect[data-day]").last
    assert float(today.get_attribute("height")) > 0
    assert today.locator("title").text_content().endswith(": $1.25, 1000 tokens")
    assert chart.locator("line.limit").count() == 1
    assert "$1.25, 1000 tokens" in page.locator("[data-cost-today]").inner_text()
    assert page.locator('tr[data-budget="day"]').inner_text().count("$") >= 2
    page.screenshot(path=str(artifacts / "lane-cost.png"), full_page=True)
