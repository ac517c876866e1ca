"""What a schedule and a workspace may plan (issue 33): a period at least five minutes after the
last, at most 20 runs of at most 25 slots each, at most 20 schedules in a lane and 50 in a
workspace. The attack the caps answer: six every-minute schedules of 20 runs x 1,000 slots made
260,044 slot rows in four minutes. Each cap is refused with `400 validation_error` naming its
field, writing nothing; at the cap it is accepted. A schedule stored before the caps is switched
off by the beat job, with the reason on record, and cannot be switched on again until it fits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from drf_spectacular.generators import SchemaGenerator

from apikit.errors import ValidationFailed
from fleet.models import Run, WorkPackage
from hands import services as hand_services
from leases import clock
from leases.models import Refusal
from schedules import jobs
from schedules import services as schedule_services
from schedules.models import Schedule, ScheduleTry
from tests.support.api import Api, error_of
from tests.support.threads import together

pytestmark = pytest.mark.django_db

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
BODY = {
    "cron": "*/5 * * * *",
    "key_pattern": "tick-{date}-{time}",
    "title_pattern": "Tick {date} {time}",
    "runs": [{"title": "Walk", "slots": 2}],
}
# The review's schedule: every minute, 20 runs of 1,000 slots.
FLOOD_RUNS = [{"title": f"Run {i}", "slots": 1000} for i in range(20)]


@pytest.fixture(autouse=True)
def _frozen() -> Any:
    clock.freeze(START)
    yield
    clock.unfreeze()


def create(api: Api, body: dict[str, Any], slug: str = "rewalk") -> Any:
    return api.post(f"/lanes/{slug}/schedules", body)


def make(lane, i: int) -> Schedule:  # noqa: ANN001
    return schedule_services.schedule_create(
        lane=lane, cron="0 6 * * *", key_pattern=f"s{i}-{{date}}", title_pattern="S", actor="boss"
    )


@pytest.mark.hostile
@pytest.mark.parametrize(
    "cron",
    [
        "* * * * *",  # the review's
        "*/4 * * * *",
        "*/7 * * * *",  # :56 and the next hour's :00 are four minutes apart
        "0,1 6 * * *",
        "0,59 0,23 * * *",  # 23:59, then the next day's 00:00
        "0-4 * * * *",
    ],
)
def test_it_refuses_a_schedule_whose_periods_are_closer_than_five_minutes(
    boss: Api, lane, cron: str
) -> None:
    error = error_of(create(boss, {**BODY, "cron": cron}), 400, "validation_error")
    assert error["fields"] == {"cron": ["Periods at least 5 minutes apart."]}
    assert "at least 5 minutes apart" in error["message"]
    assert Schedule.objects.count() == 0
    assert Refusal.objects.filter(code="validation_error").count() == 1


@pytest.mark.parametrize(
    "cron", ["*/5 * * * *", "0,5 6 * * *", "55 23 * * *", "0 * * * *", "@hourly", "0 6 * * *"]
)
def test_it_takes_periods_five_minutes_apart_or_more(boss: Api, lane, cron: str) -> None:
    response = create(boss, {**BODY, "cron": cron})
    assert response.status_code == 201, response.content


@pytest.mark.hostile
def test_it_refuses_a_scheduled_run_over_25_slots_and_takes_one_at_25(boss: Api, lane) -> None:
    runs = [{"title": "Small", "slots": 1}, {"title": "Wide", "slots": 26}]
    error = error_of(create(boss, {**BODY, "runs": runs}), 400, "validation_error")
    assert error["fields"] == {"runs[1].slots": ["At most 25 slots in a scheduled run."]}
    assert Schedule.objects.count() == 0
    # The review's runs, every one of them refused by name.
    error = error_of(create(boss, {**BODY, "runs": FLOOD_RUNS}), 400, "validation_error")
    assert sorted(error["fields"]) == sorted(f"runs[{i}].slots" for i in range(20))
    assert Schedule.objects.count() == 0
    runs[1]["slots"] = 25
    made = create(boss, {**BODY, "runs": runs})
    assert made.status_code == 201, made.content
    # A run made by hand still takes up to 1,000 slots: the cap is the schedule's.
    assert made.json()["runs"][1]["slots"] == 25


@pytest.mark.hostile
def test_it_refuses_21_runs_in_a_period_and_takes_20(boss: Api, lane) -> None:
    runs = [{"title": f"R{i}", "slots": 25} for i in range(21)]
    error = error_of(create(boss, {**BODY, "runs": runs}), 400, "validation_error")
    assert "runs" in error["fields"]
    assert Schedule.objects.count() == 0
    assert create(boss, {**BODY, "runs": runs[:20]}).status_code == 201


@pytest.mark.hostile
def test_a_lane_takes_20_schedules_and_refuses_the_21st(boss: Api, lane, workspace) -> None:
    for i in range(schedule_services.MAX_SCHEDULES_PER_LANE):
        make(lane, i)
    error = error_of(create(boss, BODY), 400, "validation_error")
    assert error["fields"] == {"lane": ["At most 20 schedules in a lane."]}
    assert "lane 'rewalk' has 20 schedules" in error["message"]
    assert Schedule.objects.filter(lane=lane).count() == 20
    # Another lane of the workspace still has room; deleting one makes room again.
    hand_services.lane_create(workspace=workspace, slug="other", name="Other")
    assert create(boss, BODY, slug="other").status_code == 201
    schedule_services.schedule_delete(lane=lane, schedule_id=Schedule.objects.first().pk)
    assert create(boss, BODY).status_code == 201


@pytest.mark.hostile
def test_a_workspace_takes_50_schedules_across_its_lanes_and_refuses_the_51st(
    boss: Api, workspace
) -> None:
    lanes = [
        hand_services.lane_create(workspace=workspace, slug=f"l{n}", name=f"L{n}")[0]
        for n in range(3)
    ]
    for i in range(schedule_services.MAX_SCHEDULES_PER_WORKSPACE):
        make(lanes[i % 3], i)
    error = error_of(create(boss, BODY, slug="l0"), 400, "validation_error")
    assert error["fields"] == {"lane": ["At most 50 schedules in a workspace."]}
    assert Schedule.objects.count() == 50
    # Another workspace's lanes are not counted.
    elsewhere = hand_services.workspace_get_or_create(name="elsewhere")
    other, _ = hand_services.lane_create(workspace=elsewhere, slug="l0", name="L0")
    assert make(other, 0).workspace_id == elsewhere.pk


@pytest.mark.hostile
def test_a_change_that_would_put_a_schedule_over_the_caps_is_refused(boss: Api, lane) -> None:
    schedule_id = create(boss, BODY).json()["id"]
    path = f"/lanes/rewalk/schedules/{schedule_id}"
    error_of(boss.patch(path, {"cron": "* * * * *"}), 400, "validation_error")
    error_of(boss.patch(path, {"runs": FLOOD_RUNS[:1]}), 400, "validation_error")
    schedule = Schedule.objects.get(pk=schedule_id)
    assert (schedule.cron, schedule.runs[0]["slots"]) == ("*/5 * * * *", 2)


def test_the_caps_are_in_the_schemas_limits() -> None:
    limits = SchemaGenerator().get_schema(request=None, public=True)["x-limits"]
    assert {name: limits[name]["value"] for name in limits if "schedule" in name} == {
        "schedule_runs": 20,
        "schedule_run_slots": 25,
        "schedule_min_period_s": 300,
        "schedules_per_lane": 20,
        "schedules_per_workspace": 50,
    }


def flood(lane, **changes: Any) -> Schedule:  # noqa: ANN001
    """A schedule stored before the caps (the review's), as its row was written then."""
    row = {
        "workspace_id": lane.workspace_id,
        "lane": lane,
        "cron": "* * * * *",
        "key_pattern": "m-{date}-{time}",
        "title_pattern": "Minute",
        "runs": [{**run, "brief": "", "evidence_required": []} for run in FLOOD_RUNS],
        "periods_after": START,
        "next_period_at": START + timedelta(minutes=1),
    }
    return Schedule.objects.create(**{**row, **changes})


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({}, "at least 5 minutes apart"),
        ({"runs": [{"title": "One", "slots": 1}]}, "at least 5 minutes apart"),
        ({"cron": "*/5 * * * *", "next_period_at": START + timedelta(minutes=5)}, "slots"),
    ],
)
def test_the_beat_switches_off_a_schedule_stored_over_the_caps_and_makes_nothing(
    boss: Api, lane, changes: dict[str, Any], why: str
) -> None:
    stored = flood(lane, **changes)
    result = jobs.schedules_run()  # nothing due yet: it waits for its period like any other
    assert result.switched_off == 0
    clock.freeze(START + timedelta(minutes=10))
    result = jobs.schedules_run()
    assert (result.switched_off, result.created, result.processed) == (1, 0, 0)
    assert not WorkPackage.objects.exists() and not Run.objects.exists()
    stored.refresh_from_db()
    assert stored.active is False
    failed = ScheduleTry.objects.get(schedule=stored)
    assert failed.outcome == "failed"
    assert failed.error.startswith("switched off, over the caps: ")
    assert why in failed.error
    assert jobs.schedules_run().switched_off == 0  # once
    # Switched on as it is, it is refused: the caps hold for it as for a new one.
    path = f"/lanes/rewalk/schedules/{stored.pk}"
    error_of(boss.patch(path, {"active": True}), 400, "validation_error")
    assert Schedule.objects.get(pk=stored.pk).active is False
    fixed = boss.patch(
        path, {"active": True, "cron": "*/5 * * * *", "runs": [{"title": "One", "slots": 25}]}
    )
    assert fixed.status_code == 200, fixed.content
    clock.freeze(START + timedelta(minutes=15))
    assert jobs.schedules_run().created == 1


def test_a_schedule_fixed_while_the_beat_read_it_is_not_switched_off(lane) -> None:
    stored = flood(lane)
    clock.freeze(START + timedelta(minutes=10))
    read = Schedule.objects.get(pk=stored.pk)
    Schedule.objects.filter(pk=stored.pk).update(
        cron="*/5 * * * *", runs=[{"title": "One", "slots": 1}]
    )
    assert jobs._switch_off(read, "over", at=START) == 0
    assert Schedule.objects.get(pk=stored.pk).active is True
    assert not ScheduleTry.objects.exists()


@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
def test_creates_racing_for_a_lanes_last_places_never_pass_the_cap(workspace) -> None:
    lane, _ = hand_services.lane_create(workspace=workspace, slug="race", name="Race")
    for i in range(schedule_services.MAX_SCHEDULES_PER_LANE - 2):
        make(lane, i)
    refused: list[str] = []

    def body(i: int):  # noqa: ANN202
        def create_one() -> None:
            try:
                schedule_services.schedule_create(
                    lane=lane,
                    cron="0 6 * * *",
                    key_pattern=f"race{i}-{{date}}",
                    title_pattern="R",
                    actor="boss",
                )
            except ValidationFailed as error:
                refused.append(error.message)
            finally:
                connection.close()

        return create_one

    assert together([body(i) for i in range(8)]) == []
    assert Schedule.objects.filter(lane=lane).count() == schedule_services.MAX_SCHEDULES_PER_LANE
    assert len(refused) == 6
