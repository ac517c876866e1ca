"""The lane page's schedules: the next planned times (UTC) and the latest try, a supervisor's
form to create one (validated by the same service as the API), switching and deleting; HTML
escaped; a viewer sees but cannot act; the page's queries do not grow with its schedules."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leases import clock
from schedules import jobs
from schedules import services as schedule_services
from schedules.models import Schedule

pytestmark = pytest.mark.django_db

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
FORM = {
    "cron": "0 6 * * *",
    "key_pattern": "daily-{date}",
    "title_pattern": "Daily {date}",
    "runs": json.dumps([{"title": "Walk", "slots": 2}]),
}


@pytest.fixture(autouse=True)
def _frozen():  # noqa: ANN202
    clock.freeze(START)
    yield
    clock.unfreeze()


def make(lane, **changes):  # noqa: ANN001, ANN003, ANN201
    options = {
        "cron": "0 6 * * *",
        "key_pattern": "daily-{date}",
        "title_pattern": "Daily {date}",
        "runs": [{"title": "Walk"}],
        "actor": "sam",
        **changes,
    }
    return schedule_services.schedule_create(lane=lane, **options)


def test_the_lane_page_shows_the_next_planned_times(viewer_client, lane) -> None:
    make(lane)
    html = viewer_client.get("/lanes/rewalk/").content.decode()
    # Relative to the page's time (the database's, frozen), the absolute time on hover.
    assert (
        '<time datetime="2030-01-02T06:00:00+00:00" title="2030-01-02 06:00:00 UTC" '
        'data-when="relative" data-now="2030-01-01T12:00:00+00:00">in 18 h 00 min</time>'
    ) in html
    assert "2030-01-06 06:00" in html
    assert "none yet" in html
    # A viewer sees the schedule but has no form and no buttons.
    assert 'id="schedule-form"' not in html
    assert "Switch off" not in html


def test_the_latest_try_is_shown(viewer_client, lane) -> None:
    make(lane)
    clock.freeze(datetime(2030, 1, 2, 6, 0, tzinfo=UTC))
    jobs.schedules_run()
    html = viewer_client.get("/lanes/rewalk/").content.decode()
    assert "created <code>2030-01-02T06:00Z</code>" in html
    assert "2030-01-03 06:00" in html


def test_a_supervisor_creates_a_schedule_from_the_form(supervisor_client, lane) -> None:
    response = supervisor_client.post("/lanes/rewalk/schedules/new/", FORM, follow=True)
    assert response.status_code == 200
    schedule = Schedule.objects.get()
    assert (schedule.cron, schedule.key_pattern, schedule.created_by) == (
        "0 6 * * *",
        "daily-{date}",
        "sam",
    )
    assert schedule.runs[0]["slots"] == 2
    assert "2030-01-02 06:00" in response.content.decode()


@pytest.mark.parametrize(
    ("changes", "shown"),
    [
        ({"cron": "61 * * * *"}, "five fields"),
        ({"key_pattern": "daily"}, "{date}"),
        ({"runs": "[{"}, "Not JSON"),
        ({"runs": json.dumps([{"slots": 1}])}, "runs[0].title"),
    ],
)
def test_a_bad_schedule_is_refused_with_its_reason(
    supervisor_client, lane, changes: dict[str, str], shown: str
) -> None:
    response = supervisor_client.post(
        "/lanes/rewalk/schedules/new/", {**FORM, **changes}, follow=True
    )
    assert response.status_code == 200
    assert "Refused (validation_error)" in response.content.decode()
    assert shown in response.content.decode()
    assert not Schedule.objects.exists()


def test_a_supervisor_switches_and_deletes_a_schedule(supervisor_client, lane) -> None:
    schedule = make(lane)
    supervisor_client.post(f"/lanes/rewalk/schedules/{schedule.pk}/switch/", {})
    schedule.refresh_from_db()
    assert schedule.active is False
    assert "none while off" in supervisor_client.get("/lanes/rewalk/").content.decode()
    supervisor_client.post(f"/lanes/rewalk/schedules/{schedule.pk}/switch/", {"active": "on"})
    schedule.refresh_from_db()
    assert schedule.active is True
    supervisor_client.post(f"/lanes/rewalk/schedules/{schedule.pk}/delete/", {})
    assert not Schedule.objects.exists()


def test_a_viewer_cannot_act_and_an_outsider_finds_nothing(
    viewer_client, outsider_client, lane
) -> None:
    schedule = make(lane)
    assert viewer_client.post("/lanes/rewalk/schedules/new/", FORM).status_code == 403
    assert viewer_client.post(f"/lanes/rewalk/schedules/{schedule.pk}/delete/").status_code == 403
    assert outsider_client.post(f"/lanes/rewalk/schedules/{schedule.pk}/delete/").status_code == 404
    assert outsider_client.post("/lanes/rewalk/schedules/new/", FORM).status_code == 404
    assert Schedule.objects.count() == 1


def test_html_in_a_template_is_escaped(viewer_client, lane) -> None:
    make(lane, title_pattern="<script>alert(1)</script> {date}")
    html = viewer_client.get("/lanes/rewalk/").content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_the_lane_page_costs_the_same_queries_with_one_schedule_or_many(
    viewer_client, lane
) -> None:
    make(lane)
    jobs.schedules_run()

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert viewer_client.get("/lanes/rewalk/").status_code == 200
        return len(queries)

    one = count()
    for i in range(10):
        make(lane, key_pattern=f"k{i}-{{date}}")
    clock.freeze(datetime(2030, 1, 2, 6, 0, tzinfo=UTC))
    jobs.schedules_run()
    assert count() == one
