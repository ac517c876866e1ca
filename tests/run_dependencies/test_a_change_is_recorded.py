"""A supervisor's change of a run (`PATCH /runs/{id}`) other than its state is recorded as one
`run_changed` event: who made it, with which key, and each field it changed (`before`, `after`),
read under the run's row lock. A change that changes nothing records nothing (capabilities are a
set: a new order of the same tags changes nothing). The run's
timeline tells it in a sentence; to a lane-limited key a run of another lane it names is null,
as in the run's `depends_on`."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from hands import services as hand_services
from leases.models import Event
from tests.support.api import Api

pytestmark = pytest.mark.django_db

SECRET = "zzb-secret-build"


def _changes(run_id: int) -> list[Event]:
    return list(Event.objects.filter(kind="run_changed", data__run=run_id).order_by("pk"))


def test_a_change_records_who_and_each_field_from_and_to(boss: Api, plan: Any) -> None:
    build, test, ship = plan("build"), plan("test"), plan("ship", depends_on=[])
    first = boss.patch(f"/runs/{ship['id']}", {"priority": 0, "depends_on": [test["id"]]})
    assert first.status_code == 200, first.content
    second = boss.patch(
        f"/runs/{ship['id']}",
        {
            "depends_on": [build["id"], test["id"]],
            "capabilities": ["gpu"],
            "progress_timeout_s": 600,
            "idle_directive": "stop",
        },
    )
    assert second.status_code == 200, second.content

    one, two = _changes(ship["id"])
    assert (one.actor, one.actor_key) == ("boss", boss.key.split("_")[1])
    assert one.data == {
        "run": ship["id"],
        "changed": {
            "priority": {"before": 2, "after": 0},
            "depends_on": {"before": [], "after": [test["id"]]},
        },
    }
    assert two.data["changed"] == {
        "depends_on": {"before": [test["id"]], "after": sorted([build["id"], test["id"]])},
        "capabilities": {"before": [], "after": ["gpu"]},
        "progress_timeout_s": {"before": None, "after": 600},
        "idle_directive": {"before": "none", "after": "stop"},
    }
    # Supervisors read it where they read every event.
    listed = boss.get("/events", {"kind": "run_changed"}).json()
    assert [event["id"] for event in listed] == [two.pk, one.pk]
    assert listed[1]["actor"] == "boss"


def test_a_change_that_changes_nothing_records_nothing(boss: Api, plan: Any) -> None:
    build, ship = plan("build"), plan("ship", priority=1)
    assert boss.patch(f"/runs/{ship['id']}", {"depends_on": [build["id"]]}).status_code == 200
    assert len(_changes(ship["id"])) == 1
    same = boss.patch(
        f"/runs/{ship['id']}",
        {"priority": 1, "depends_on": [build["id"]], "capabilities": [], "idle_directive": "none"},
    )
    assert same.status_code == 200, same.content
    assert len(_changes(ship["id"])) == 1
    # Only what changed is in it.
    changed = boss.patch(f"/runs/{ship['id']}", {"priority": 4, "depends_on": [build["id"]]})
    assert changed.status_code == 200, changed.content
    assert _changes(ship["id"])[-1].data["changed"] == {"priority": {"before": 1, "after": 4}}


def test_the_timeline_tells_the_change(boss: Api, plan: Any) -> None:
    build, ship = plan("build"), plan("ship")
    boss.patch(f"/runs/{ship['id']}", {"priority": 0, "depends_on": [build["id"]]})
    boss.patch(f"/runs/{ship['id']}", {"progress_timeout_s": 900, "capabilities": ["gpu", "py"]})
    entries = [
        e for e in boss.get(f"/runs/{ship['id']}/timeline").json() if e["kind"] == "run_changed"
    ]
    assert [entry["text"] for entry in entries] == [
        f"boss changed the run: priority 2 → 0; waits for no run → run {build['id']}.",
        "boss changed the run: capabilities none → gpu, py; progress timeout none → 900 s.",
    ]
    # Another run's change is not on this run's timeline.
    boss.patch(f"/runs/{build['id']}", {"priority": 3})
    again = boss.get(f"/runs/{ship['id']}/timeline").json()
    assert len([e for e in again if e["kind"] == "run_changed"]) == 2


def test_to_a_lane_limited_key_a_run_of_another_lane_is_null_in_the_change(
    boss: Api, plan: Any, alpha: Api
) -> None:
    assert boss.post("/lanes", {"slug": "zzb-lane"}).status_code == 201
    theirs = boss.post("/lanes/zzb-lane/work-packages", {"title": "B", "key": "b"}).json()
    secret = boss.post(f"/work-packages/{theirs['id']}/runs", {"title": SECRET}).json()
    mine, ship = plan("mine"), plan("ship")
    boss.patch(f"/runs/{ship['id']}", {"depends_on": [secret["id"], mine["id"]]})

    # The workspace-wide key reads both runs.
    (told,) = [
        e for e in boss.get(f"/runs/{ship['id']}/timeline").json() if e["kind"] == "run_changed"
    ]
    assert told["data"]["changed"]["depends_on"]["after"] == sorted([secret["id"], mine["id"]])

    # The lane's key reads its lane's, and counts the other as a run of another lane.
    shown = alpha.get(f"/runs/{ship['id']}/timeline")
    assert shown.status_code == 200, shown.content
    (entry,) = [e for e in shown.json() if e["kind"] == "run_changed"]
    assert entry["data"]["changed"]["depends_on"] == {"before": [], "after": [mine["id"], None]}
    assert entry["text"] == (
        f"boss changed the run: waits for no run → run {mine['id']}, a run of another lane."
    )
    assert SECRET not in shown.content.decode()
    assert f"run {secret['id']}" not in entry["text"]
    exported = alpha.get(f"/runs/{ship['id']}/timeline", {"format": "jsonl"})
    assert f'"after":[{mine["id"]},null]' in b"".join(exported.streaming_content).decode()
    # Its events list holds no supervisor's change (no hand or attempt of its lane in it).
    assert alpha.get("/events", {"kind": "run_changed"}).json() == []


def test_the_same_tags_in_another_order_change_nothing(boss: Api, plan: Any) -> None:
    ship = plan("ship")
    assert boss.patch(f"/runs/{ship['id']}", {"capabilities": ["gpu", "py"]}).status_code == 200
    assert boss.patch(f"/runs/{ship['id']}", {"capabilities": ["py", "gpu"]}).status_code == 200
    assert len(_changes(ship["id"])) == 1


def test_a_directive_named_like_another_lanes_hand_is_not_taken_for_that_hand(
    plan: Any, alpha: Api, workspace: Any
) -> None:
    """The change's values are never read as a hand's name: a lane-limited key that changed the
    directive from `none` reads `none`, whether or not another lane has a hand named so (else
    it could test a guessed name)."""
    other, _ = hand_services.lane_create(workspace=workspace, slug="zzb-lane", name="B")
    hand_services.hand_create(workspace=workspace, name="none", lane=other)
    ship = plan("ship")
    assert alpha.patch(f"/runs/{ship['id']}", {"idle_directive": "pause"}).status_code == 200
    (entry,) = [
        e for e in alpha.get(f"/runs/{ship['id']}/timeline").json() if e["kind"] == "run_changed"
    ]
    assert entry["data"]["changed"]["idle_directive"] == {"before": "none", "after": "pause"}
    assert entry["text"] == "alpha-hand changed the run: idle directive none → pause."


def test_a_lane_limited_page_naming_runs_waited_for_costs_one_query_more_at_most(
    boss: Api, plan: Any, alpha: Api
) -> None:
    build, ship = plan("build"), plan("ship")
    boss.patch(f"/runs/{ship['id']}", {"priority": 0})

    def queries() -> int:
        with CaptureQueriesContext(connection) as done:
            assert alpha.get(f"/runs/{ship['id']}/timeline").status_code == 200
        return len(done)

    alpha.get(f"/runs/{ship['id']}/timeline")
    without = queries()
    for _ in range(5):
        boss.patch(f"/runs/{ship['id']}", {"depends_on": [build["id"]]})
        boss.patch(f"/runs/{ship['id']}", {"depends_on": []})
    assert queries() == without + 1
