"""A lane's schedule in real Chromium: a supervisor creates one from the lane page's form and
the page shows its next planned times, in UTC (issue 22, item 5)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from leases import clock
from schedules.models import Schedule

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
    # 2030-01-01 is a Tuesday: weekdays at 07:30 UTC from the next day.
    assert planned.all_inner_texts() == [
        "2030-01-02 07:30",
        "2030-01-03 07:30",
        "2030-01-04 07:30",
        "2030-01-07 07:30",
        "2030-01-08 07:30",
    ]
    assert Schedule.objects.get().runs[0]["slots"] == 2
    page.screenshot(path=str(artifacts / "lane-schedules.png"), full_page=True)
