"""The beat job shares each run between the workspaces (issue 33): one period of each workspace
in turn, each workspace at most its share of slots a run (its first period always), the rest in
the next run; so a workspace with heavy schedules and a backlog never delays another's period by
more than one period of its own, and never holds the job for its whole backlog. Judged on the
record of tries (their order) and what each run made, on the database's frozen clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fleet.models import Slot, WorkPackage
from hands import services as hand_services
from leases import clock
from schedules import jobs
from schedules import services as schedule_services
from schedules.models import Schedule, ScheduleTry

pytestmark = pytest.mark.django_db

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _no_leftovers() -> Any:
    jobs._unrecorded.clear()
    yield
    jobs._unrecorded.clear()


def schedules(name: str, count: int, *, since: timedelta, slots: int = 1) -> list[Schedule]:
    """`count` schedules every five minutes in workspace `name`, made `since` before START."""
    workspace = hand_services.workspace_get_or_create(name=name)
    lane, _ = hand_services.lane_create(workspace=workspace, slug="plan", name="Plan")
    clock.freeze(START - since)
    made = [
        schedule_services.schedule_create(
            lane=lane,
            cron="*/5 * * * *",
            key_pattern=f"{name}{i}-{{date}}-{{time}}",
            title_pattern=f"{name} {i}",
            runs=[{"title": "Run", "slots": slots}],
            actor="boss",
        )
        for i in range(count)
    ]
    clock.freeze(START)
    return made


def tried_workspaces() -> list[int]:
    return list(ScheduleTry.objects.order_by("id").values_list("workspace_id", flat=True))


def test_a_light_workspaces_period_is_made_in_the_first_round_whatever_a_heavy_one_has_due() -> (
    None
):
    heavy = schedules("heavy", 6, since=timedelta(hours=2))  # 24 periods each due, the oldest
    (light,) = schedules("light", 1, since=timedelta(minutes=4))  # one, due last
    result = jobs.schedules_run()
    assert result.created == 6 * 24 + 1
    order = tried_workspaces()
    # The heavy workspace's oldest schedule went first, the light one's period second: not after
    # the heavy workspace's 144.
    assert order[:2] == [heavy[0].workspace_id, light.workspace_id]
    # The heavy workspace's own schedules took turns too: its first six tries, one of each.
    first = ScheduleTry.objects.filter(workspace_id=heavy[0].workspace_id).order_by("id")[:6]
    assert sorted(t.schedule_id for t in first) == sorted(s.pk for s in heavy)


def test_a_workspace_makes_at_most_its_share_of_a_run_and_the_rest_in_the_next() -> None:
    heavy = schedules("heavy", 3, since=timedelta(minutes=20), slots=2)  # 4 periods each
    (light,) = schedules("light", 1, since=timedelta(minutes=4), slots=2)  # 1 period
    made_per_run = []
    for _ in range(6):
        before = WorkPackage.objects.filter(workspace_id=heavy[0].workspace_id).count()
        result = jobs.schedules_run(workspace_slots=5)
        made_per_run.append(
            WorkPackage.objects.filter(workspace_id=heavy[0].workspace_id).count() - before
        )
        if len(made_per_run) == 1:
            # Two periods (4 slots) of the heavy workspace; a third would pass its share of 5.
            # The light workspace's share is its own: its period was made all the same.
            assert (result.created, result.deferred) == (3, 10)
            assert WorkPackage.objects.filter(workspace_id=light.workspace_id).count() == 1
    assert made_per_run == [2, 2, 2, 2, 2, 2]
    # Every period made once, and every schedule is past all of them.
    keys = list(WorkPackage.objects.values_list("key", flat=True))
    assert len(keys) == len(set(keys)) == 12 + 1
    assert Slot.objects.count() == 13 * 2
    for schedule in heavy:
        schedule.refresh_from_db()
        assert schedule.periods_after == START
    assert jobs.schedules_run(workspace_slots=5).processed == 0


def test_a_period_larger_than_the_share_is_still_made_one_a_run() -> None:
    schedules("wide", 1, since=timedelta(minutes=6), slots=25)  # 2 periods due
    assert jobs.schedules_run(workspace_slots=1).created == 1
    assert jobs.schedules_run(workspace_slots=1).created == 1
    assert WorkPackage.objects.count() == 2


def test_the_schedules_a_run_takes_begin_with_every_workspaces_oldest() -> None:
    schedules("heavy", 5, since=timedelta(minutes=30))
    (light,) = schedules("light", 1, since=timedelta(minutes=4))
    # A run takes two schedules: not the heavy workspace's two oldest, but each one's oldest.
    result = jobs.schedules_run(limit=2)
    assert result.created == 6 + 1
    assert WorkPackage.objects.filter(workspace_id=light.workspace_id).count() == 1
