"""Schedules over REST: created, listed, changed and deleted under their lane, validated at
write time (the cron expression by croniter, the runs by the run-create API's own rules)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from django.db import OperationalError

from fleet.plan import services as plan_services
from hands import services as hand_services
from leases import clock
from schedules import jobs
from schedules.models import Schedule
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
BODY = {
    "cron": "0 6 * * *",
    "key_pattern": "daily-{date}",
    "title_pattern": "Rewalk of {date}",
    "runs": [{"title": "Walk", "brief": "Walk it", "slots": 2, "evidence_required": ["pr"]}],
}


@pytest.fixture(autouse=True)
def _frozen() -> Any:
    clock.freeze(START)
    yield
    clock.unfreeze()


def create(api: Api, body: dict[str, Any] | None = None, slug: str = "rewalk") -> Any:
    return api.post(f"/lanes/{slug}/schedules", BODY if body is None else body)


def test_it_creates_a_schedule_with_its_next_planned_times(boss: Api, lane) -> None:
    response = create(boss)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["cron"] == "0 6 * * *"
    assert body["lane"] == "rewalk"
    assert body["active"] is True
    assert body["planned"][:2] == ["2030-01-02T06:00:00Z", "2030-01-03T06:00:00Z"]
    assert len(body["planned"]) == 5
    # The run template is stored as the run-create API's validation leaves it.
    assert body["runs"] == [
        {
            "title": "Walk",
            "brief": "Walk it",
            "slots": 2,
            "evidence_required": ["pr"],
            "evidence_grades": {},
            "capabilities": [],
        }
    ]
    schedule = Schedule.objects.get(pk=body["id"])
    assert schedule.periods_after == START
    assert schedule.next_period_at == datetime(2030, 1, 2, 6, 0, tzinfo=UTC)
    assert schedule.created_by == "boss"


@pytest.mark.parametrize(
    ("cron", "why"),
    [
        ("61 * * * *", "five fields"),
        ("* * * *", "five fields"),
        ("0 0 * * * *", "five fields"),
        ("every day", "five fields"),
        ("0 0 31 2 *", "never fires"),
        # Random (croniter's R) or hashed (H) values would name other periods at each reading.
        ("R 6 * * *", "five fields"),
        ("0 R(1-5) * * *", "five fields"),
        ("H 6 * * *", "five fields"),
        ("@reboot", "five fields"),
        ("", "cron"),
    ],
)
def test_it_refuses_a_cron_expression_croniter_cannot_read(
    boss: Api, lane, cron: str, why: str
) -> None:
    error = error_of(create(boss, {**BODY, "cron": cron}), 400, "validation_error")
    assert why in error["message"] or "cron" in error["fields"]
    assert Schedule.objects.count() == 0


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"key_pattern": "daily"}, "key_pattern"),
        ({"key_pattern": "daily-{day}"}, "key_pattern"),
        ({"key_pattern": "x{date}" + "y" * 195}, "key_pattern"),
        # Fires twice a day: a key without {time} would name two periods.
        ({"cron": "0 6,18 * * *"}, "key_pattern"),
        ({"title_pattern": "{nope}"}, "title_pattern"),
    ],
)
def test_it_refuses_a_template_that_cannot_name_each_period(
    boss: Api, lane, changes: dict[str, str], field: str
) -> None:
    error = error_of(create(boss, {**BODY, **changes}), 400, "validation_error")
    assert field in error["fields"]
    assert Schedule.objects.count() == 0


def test_twice_a_day_works_with_time_in_the_key(boss: Api, lane) -> None:
    body = {**BODY, "cron": "0 6,18 * * *", "key_pattern": "walk-{date}-{time}"}
    response = create(boss, body)
    assert response.status_code == 201, response.content
    assert response.json()["planned"][:2] == ["2030-01-01T18:00:00Z", "2030-01-02T06:00:00Z"]


@pytest.mark.parametrize(
    "run",
    [
        {"brief": "no title"},
        {"title": "x", "slots": 0},
        {"title": "x", "slots": "2"},
        {"title": "x", "evidence_grades": {"pr": "excellent"}},
        {"title": "x", "heartbeat_interval_s": 0},
    ],
)
def test_it_validates_runs_as_the_run_create_api_does(boss: Api, lane, make_run, run) -> None:
    error = error_of(create(boss, {**BODY, "runs": [run]}), 400, "validation_error")
    assert any(name.startswith("runs") for name in error["fields"]), error
    # The same body to the run-create API is refused too.
    package = make_run().work_package
    direct = boss.post(f"/work-packages/{package.pk}/runs", run)
    assert direct.status_code == 400
    assert Schedule.objects.count() == 0


def test_it_lists_a_lanes_schedules_in_a_fixed_number_of_queries(
    boss: Api, lane, django_assert_num_queries
) -> None:
    for i in range(3):
        assert create(boss, {**BODY, "key_pattern": f"k{i}-{{date}}"}).status_code == 201
    boss.get("/lanes/rewalk/schedules")
    # The key, the lane, one page of schedules with their lane: 3 rows or 9 alike.
    with django_assert_num_queries(3):
        assert len(boss.get("/lanes/rewalk/schedules").json()) == 3
    for i in range(3, 9):
        assert create(boss, {**BODY, "key_pattern": f"k{i}-{{date}}"}).status_code == 201
    with django_assert_num_queries(3):
        assert len(boss.get("/lanes/rewalk/schedules").json()) == 9


def test_it_changes_a_schedule_and_a_new_expression_starts_from_now(boss: Api, lane) -> None:
    schedule_id = create(boss).json()["id"]
    clock.freeze(START + timedelta(days=3))
    response = boss.patch(
        f"/lanes/rewalk/schedules/{schedule_id}", {"cron": "30 7 * * 1", "title_pattern": "W"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["cron"] == "30 7 * * 1"
    assert body["title_pattern"] == "W"
    # 2030-01-04 is a Friday: the next Monday is the 7th.
    assert body["planned"][0] == "2030-01-07T07:30:00Z"
    assert Schedule.objects.get(pk=schedule_id).periods_after == START + timedelta(days=3)


def test_switched_off_it_plans_nothing_and_switched_on_it_starts_from_now(boss: Api, lane) -> None:
    schedule_id = create(boss).json()["id"]
    off = boss.patch(f"/lanes/rewalk/schedules/{schedule_id}", {"active": False})
    assert off.json()["planned"] == []
    clock.freeze(START + timedelta(days=10))
    on = boss.patch(f"/lanes/rewalk/schedules/{schedule_id}", {"active": True})
    assert on.json()["planned"][0] == "2030-01-12T06:00:00Z"
    assert Schedule.objects.get(pk=schedule_id).periods_after == START + timedelta(days=10)


def test_a_bad_change_is_refused_and_changes_nothing(boss: Api, lane) -> None:
    schedule_id = create(boss).json()["id"]
    error_of(
        boss.patch(f"/lanes/rewalk/schedules/{schedule_id}", {"cron": "nope"}),
        400,
        "validation_error",
    )
    error_of(
        boss.patch(f"/lanes/rewalk/schedules/{schedule_id}", {"runs": [{"slots": 1}]}),
        400,
        "validation_error",
    )
    schedule = Schedule.objects.get(pk=schedule_id)
    assert schedule.cron == "0 6 * * *"
    assert schedule.runs[0]["title"] == "Walk"


def test_it_deletes_a_schedule(boss: Api, lane) -> None:
    schedule_id = create(boss).json()["id"]
    assert (
        boss.client.delete(
            f"/api/v1/lanes/rewalk/schedules/{schedule_id}", headers=boss._headers(None)
        ).status_code
        == 204
    )
    assert not Schedule.objects.exists()
    error_of(boss.get(f"/lanes/rewalk/schedules/{schedule_id}"), 404, "not_found")


def test_nothing_crosses_lanes_or_workspaces(boss: Api, api_outsider: Api, lane, workspace) -> None:
    schedule_id = create(boss).json()["id"]
    other, _ = hand_services.lane_create(workspace=workspace, slug="other", name="Other")
    error_of(boss.get(f"/lanes/other/schedules/{schedule_id}"), 404, "not_found")
    error_of(api_outsider.get("/lanes/rewalk/schedules"), 404, "not_found")
    error_of(api_outsider.patch(f"/lanes/rewalk/schedules/{schedule_id}", {}), 404, "not_found")
    # A key limited to another lane sees neither the lane nor its schedules.
    planner, _ = hand_services.hand_create(workspace=workspace, name="planner")
    limited = Api(mint(planner, ["plan"], lane=other), planner)
    error_of(limited.get("/lanes/rewalk/schedules"), 404, "not_found")
    error_of(create(limited), 404, "not_found")
    assert Schedule.objects.count() == 1


def test_it_needs_the_plan_scope_to_write(boss: Api, lane, owner) -> None:
    worker = Api(mint(owner, ["work"]), owner)
    error_of(create(worker), 403, "scope_denied")
    error_of(worker.get("/lanes/rewalk/schedules"), 403, "scope_denied")
    assert Schedule.objects.count() == 0


def test_a_retried_create_with_its_idempotency_key_makes_one_schedule(boss: Api, lane) -> None:
    headers = {"Idempotency-Key": "sched-1"}
    first = boss.post("/lanes/rewalk/schedules", BODY, headers=headers)
    again = boss.post("/lanes/rewalk/schedules", BODY, headers=headers)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Schedule.objects.count() == 1
    other = boss.post("/lanes/rewalk/schedules", {**BODY, "cron": "0 7 * * *"}, headers=headers)
    error_of(other, 409, "idempotency_conflict")


def test_it_lists_a_schedules_tries_newest_first(
    boss: Api, lane, django_assert_num_queries
) -> None:
    schedule_id = create(boss).json()["id"]
    clock.freeze(datetime(2030, 1, 2, 6, 0, tzinfo=UTC))
    with mock.patch.object(
        plan_services, "work_package_create", side_effect=OperationalError("down")
    ):
        jobs.schedules_run()
    jobs.schedules_run()
    boss.get(f"/lanes/rewalk/schedules/{schedule_id}/tries")
    # The key, the lane, the schedule, one page of tries.
    with django_assert_num_queries(4):
        tries = boss.get(f"/lanes/rewalk/schedules/{schedule_id}/tries").json()
    assert [(t["date_key"], t["outcome"]) for t in tries] == [
        ("2030-01-02T06:00Z", "created"),
        ("2030-01-02T06:00Z", "failed"),
    ]
    assert tries[0]["error"] is None and tries[0]["work_package"] is not None
    assert tries[1]["error"] == "OperationalError: down"
    assert tries[1]["at"] == "2030-01-02T06:00:00Z"
