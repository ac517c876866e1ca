"""The beat job: each period's package and runs, made once, at the period's exact time (the
database's clock, frozen at the boundaries), with bounded catch-up, and retried after a failure
with every try on record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from django.conf import settings
from django.db import OperationalError

from fleet.models import Run, WorkPackage
from fleet.plan import services as plan_services
from leases import clock
from ops import jobs as ops_jobs
from ops.models import JobRun
from schedules import jobs, periods
from schedules import services as schedule_services
from schedules.models import Schedule, ScheduleTry

pytestmark = pytest.mark.django_db

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SIX = datetime(2030, 1, 2, 6, 0, tzinfo=UTC)
RUNS = [
    {"title": "Walk", "brief": "Walk the lane", "slots": 2},
    {"title": "Check", "evidence_required": ["pull_request"]},
]


@pytest.fixture
def schedule(lane) -> Schedule:
    clock.freeze(START)
    return schedule_services.schedule_create(
        lane=lane,
        cron="0 6 * * *",
        key_pattern="daily-{date}",
        title_pattern="Rewalk {date}",
        runs=RUNS,
        actor="boss",
    )


@pytest.fixture(autouse=True)
def _no_leftovers() -> Any:
    jobs._unrecorded.clear()
    yield
    jobs._unrecorded.clear()


def at(moment: datetime) -> jobs.PlanResult:
    clock.freeze(moment)
    return jobs.schedules_run()


def tries() -> list[tuple[str, str]]:
    return list(ScheduleTry.objects.order_by("id").values_list("date_key", "outcome"))


def test_nothing_is_made_a_millisecond_before_the_period(schedule) -> None:
    result = at(SIX - timedelta(milliseconds=1))
    assert result.processed == 0
    assert not WorkPackage.objects.exists()
    assert tries() == []


def test_the_period_is_made_at_its_exact_time_with_its_runs(schedule, lane) -> None:
    result = at(SIX)
    assert (result.created, result.failed) == (1, 0)
    package = WorkPackage.objects.get()
    assert (package.lane, package.key, package.title) == (
        lane,
        "daily-2030-01-02",
        "Rewalk 2030-01-02",
    )
    runs = list(Run.objects.filter(work_package=package).order_by("id"))
    assert [(r.title, r.slot_count, r.evidence_required) for r in runs] == [
        ("Walk", 2, []),
        ("Check", 1, ["pull_request"]),
    ]
    assert runs[0].brief == "Walk the lane"
    assert tries() == [("2030-01-02T06:00Z", "created")]
    row = ScheduleTry.objects.get()
    assert (row.at, row.work_package) == (SIX, package)
    schedule.refresh_from_db()
    assert schedule.periods_after == SIX
    assert schedule.next_period_at == SIX + timedelta(days=1)


def test_beats_after_the_period_make_nothing_more(schedule) -> None:
    at(SIX)
    for moment in (
        SIX,
        SIX + timedelta(seconds=30),
        SIX + timedelta(days=1) - timedelta(microseconds=1),
    ):
        assert at(moment).processed == 0
    assert WorkPackage.objects.count() == 1
    assert Run.objects.count() == 2
    assert len(tries()) == 1


def test_it_catches_up_every_period_since_the_last_one_oldest_first(schedule) -> None:
    at(SIX)
    result = at(SIX + timedelta(days=3, hours=1))
    assert (result.created, result.bounded) == (3, 0)
    assert list(WorkPackage.objects.order_by("id").values_list("key", flat=True)) == [
        "daily-2030-01-02",
        "daily-2030-01-03",
        "daily-2030-01-04",
        "daily-2030-01-05",
    ]
    assert Run.objects.count() == 8


def test_catch_up_is_bounded_to_the_latest_periods(lane) -> None:
    clock.freeze(START)
    # Every five minutes, the shortest period a schedule may have (periods.MIN_PERIOD_S).
    schedule_services.schedule_create(
        lane=lane,
        cron="*/5 * * * *",
        key_pattern="m-{date}-{time}",
        title_pattern="Five minutes",
        actor="boss",
    )
    result = at(START + timedelta(hours=3))
    assert (result.created, result.bounded) == (periods.MAX_CATCH_UP, 1)
    keys = list(WorkPackage.objects.order_by("id").values_list("key", flat=True))
    assert keys[0] == "m-2030-01-01-1305"
    assert keys[-1] == "m-2030-01-01-1500"
    # The rest is made period by period again.
    assert at(START + timedelta(hours=3, minutes=5)).created == 1


def test_a_package_already_there_is_left_alone_and_recorded_as_existing(schedule, lane) -> None:
    made, _ = plan_services.work_package_create(lane=lane, key="daily-2030-01-02", title="By hand")
    result = at(SIX)
    assert (result.created, result.existing) == (0, 1)
    assert WorkPackage.objects.get().title == "By hand"
    assert not Run.objects.exists()
    assert tries() == [("2030-01-02T06:00Z", "existing")]
    assert ScheduleTry.objects.get().work_package == made


def test_a_failure_between_the_steps_makes_nothing_and_the_next_tick_retries(schedule) -> None:
    real = plan_services.run_create
    calls = []

    def second_run_fails(**kwargs: Any) -> Run:
        calls.append(kwargs["title"])
        if len(calls) == 2:
            raise OperationalError("server closed the connection unexpectedly")
        return real(**kwargs)

    with mock.patch.object(plan_services, "run_create", second_run_fails):
        result = at(SIX)
    assert (result.created, result.failed) == (0, 1)
    # The package and the first run rolled back with the failure.
    assert not WorkPackage.objects.exists()
    assert not Run.objects.exists()
    schedule.refresh_from_db()
    assert schedule.periods_after == START
    failed = ScheduleTry.objects.get()
    assert failed.outcome == "failed"
    assert "OperationalError: server closed the connection" in failed.error
    result = at(SIX + timedelta(seconds=30))
    assert result.created == 1
    assert Run.objects.count() == 2
    assert tries() == [("2030-01-02T06:00Z", "failed"), ("2030-01-02T06:00Z", "created")]


def test_a_failed_period_stops_its_schedule_so_no_later_one_passes_it(schedule) -> None:
    with mock.patch.object(
        plan_services, "work_package_create", side_effect=OperationalError("down")
    ):
        result = at(SIX + timedelta(days=2))
    assert (result.failed, result.created) == (1, 0)
    assert tries() == [("2030-01-02T06:00Z", "failed")]
    schedule.refresh_from_db()
    assert schedule.periods_after == START
    assert at(SIX + timedelta(days=2)).created == 3


def test_a_failure_the_database_cannot_record_is_written_on_the_next_run(schedule) -> None:
    real_save = ScheduleTry.save

    def unreachable(self: ScheduleTry, *args: Any, **kwargs: Any) -> None:
        if self.outcome == "failed":
            raise OperationalError("the database is unreachable")
        real_save(self, *args, **kwargs)

    with (
        mock.patch.object(plan_services, "work_package_create", side_effect=OperationalError("x")),
        mock.patch.object(ScheduleTry, "save", unreachable),
    ):
        result = at(SIX)
    assert result.failed == 1
    assert tries() == []
    assert len(jobs._unrecorded) == 1
    result = at(SIX + timedelta(minutes=1))
    assert (result.recorded_late, result.created) == (1, 1)
    assert tries() == [("2030-01-02T06:00Z", "failed"), ("2030-01-02T06:00Z", "created")]
    # The failed try carries the database's time of the run that failed.
    assert ScheduleTry.objects.order_by("id").first().at == SIX
    assert jobs._unrecorded == []


def test_an_outage_at_the_start_of_a_run_fails_the_run_and_the_next_tick_makes_it(
    schedule,
) -> None:
    clock.freeze(SIX)
    with (
        mock.patch.object(ops_jobs, "db_now", side_effect=OperationalError("down")),
        pytest.raises(OperationalError),
    ):
        ops_jobs.schedules_plan()
    assert not WorkPackage.objects.exists()
    result = ops_jobs.schedules_plan()
    assert result.created == 1
    assert JobRun.objects.get(name="plan_schedules").last_processed == 1


def test_a_switched_off_schedule_makes_nothing(schedule, lane) -> None:
    schedule_services.schedule_update(lane=lane, schedule_id=schedule.pk, changes={"active": False})
    assert at(SIX + timedelta(days=3)).processed == 0
    assert not WorkPackage.objects.exists()


def test_a_period_of_an_expression_changed_meanwhile_makes_nothing(schedule, lane) -> None:
    stale = Schedule.objects.get(pk=schedule.pk)
    clock.freeze(SIX - timedelta(hours=1))
    schedule_services.schedule_update(
        lane=lane, schedule_id=schedule.pk, changes={"cron": "0 7 * * *"}
    )
    assert jobs.period_try(schedule=stale, period=SIX, at=SIX) is None
    assert not WorkPackage.objects.exists()
    assert at(SIX + timedelta(hours=1)).created == 1
    assert tries() == [("2030-01-02T07:00Z", "created")]


def test_the_job_is_on_the_beat_schedule() -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["plan-schedules"]
    assert entry["task"] == "schedules.plan"
    assert entry["schedule"] == settings.GC_SCHEDULE_INTERVAL_S
