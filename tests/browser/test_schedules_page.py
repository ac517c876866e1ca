"""A lane's schedule in real Chromium: a supervisor creates one from the lane page's form and
the page shows its next planned times, in UTC; and a GitHub integration, whose secret is shown
once (issue 22, item 5)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from leases import clock
from schedules.models import GitHubIntegration, Schedule

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_lane_page_shows_a_new_schedules_next_planned_times(logged_in, lane, artifacts):
    # The live server runs in this process: the database's clock, as the job and the page see
    # it, is frozen for both.
    clock.freeze(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))
    page = logged_in
    page.goto("/lanes/rewalk/")
    page.get_by_text("No schedules in this lane.").wait_for()
    page.get_by_text("New schedule").click()
    page.get_by_label("Cron").fill("30 7 * * 1-5")
    page.get_by_label("Key pattern").fill("walk-{date}")
    page.get_by_label("Title pattern").fill("Walk of {date}")
    page.get_by_label("Runs").fill('[{"title": "Walk", "slots": 2}]')
    page.get_by_role("button", name="Create the schedule").click()
    page.get_by_text("Schedule 30 7 * * 1-5 makes walk-{date}.").wait_for()
    planned = page.locator("#schedules ol.planned time")
    # 2030-01-01 is a Tuesday: weekdays at 07:30 UTC from the next day. Each reads as words
    # from the page's time ("in 19 h 30 min", ticking), the absolute time on hover.
    assert [time.get_attribute("title") for time in planned.all()] == [
        "2030-01-02 07:30:00 UTC",
        "2030-01-03 07:30:00 UTC",
        "2030-01-04 07:30:00 UTC",
        "2030-01-07 07:30:00 UTC",
        "2030-01-08 07:30:00 UTC",
    ]
    assert planned.first.inner_text().startswith("in 19 h ")
    assert Schedule.objects.get().runs[0]["slots"] == 2
    page.screenshot(path=str(artifacts / "lane-schedules.png"), full_page=True)


def test_a_new_github_integrations_secret_is_shown_once(logged_in, lane, artifacts):
    page = logged_in
    page.goto("/lanes/rewalk/")
    page.get_by_text("No GitHub integrations in this lane.").wait_for()
    page.get_by_text("New GitHub integration").click()
    page.get_by_label("Repository").fill("acme/app")
    page.get_by_label("Label").fill("agent")
    page.get_by_role("button", name="Create the integration").click()
    page.get_by_text("Copy the secret now: it is shown only once").wait_for()
    integration = GitHubIntegration.objects.get()
    assert page.locator("#integration-secret").inner_text() == integration.secret
    assert (
        page.locator("#integration-payload-url")
        .inner_text()
        .endswith(f"/api/v1/integrations/github/{integration.pk}")
    )
    page.screenshot(path=str(artifacts / "lane-integration-secret.png"), full_page=True)

    page.get_by_role("link", name="Back to Rewalk").click()
    row = page.locator(f'#integrations tr[data-integration="{integration.pk}"]')
    row.wait_for()
    assert "labelled agent" in row.inner_text()
    assert "acme/app" in row.inner_text()
    assert integration.secret not in page.content()

    page.get_by_role("button", name=f"Delete GitHub integration {integration.pk}").click()
    page.get_by_text(f"GitHub integration {integration.pk} is deleted").wait_for()
    assert not GitHubIntegration.objects.exists()
