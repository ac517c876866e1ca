"""A run of lane alpha may wait for a run of another lane (a workspace-wide key planned it). To
alpha's lane-limited key another lane is as if it did not exist: the wait is counted (null in
`depends_on` and `waiting_for`, "a run of another lane" in a refusal), never named, and its
ready queue holds only alpha's runs."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.models import Run
from hands.models import Lane
from tests.support.api import Api, error_of

pytestmark = pytest.mark.django_db

SECRET = "zzb-secret-build"


def test_another_lanes_dependency_is_counted_never_named(
    boss: Api, plan: Any, alpha: Api, workspace: Any
) -> None:
    assert boss.post("/lanes", {"slug": "zzb-lane"}).status_code == 201
    theirs = boss.post("/lanes/zzb-lane/work-packages", {"title": "B", "key": "b"}).json()
    secret = boss.post(f"/work-packages/{theirs['id']}/runs", {"title": SECRET}).json()
    mine = plan("mine")
    ship = plan("ship", depends_on=[secret["id"], mine["id"]])
    # The workspace-wide key reads both.
    assert boss.get(f"/runs/{ship['id']}").json()["depends_on"] == sorted(
        [secret["id"], mine["id"]]
    )
    shown = alpha.get(f"/runs/{ship['id']}")
    assert SECRET not in shown.content.decode()
    assert shown.json()["depends_on"] == [mine["id"], None]
    assert shown.json()["waiting_for"] == [mine["id"], None]
    listed = alpha.get("/runs")
    assert SECRET not in listed.content.decode()
    assert {run["id"] for run in listed.json()} == {mine["id"], ship["id"]}
    response = alpha.post(f"/runs/{ship['id']}/claim", {"process_id": "alpha:1"})
    assert SECRET not in response.content.decode()
    error = error_of(response, 409, "run_waiting")
    assert error["waiting_for"] == [
        {"run": mine["id"], "title": "mine", "state": "open"},
        {"run": None, "title": None, "state": None},
    ]
    assert "a run of another lane" in error["message"]
    # The ready queue: alpha's only.
    queue = alpha.get("/runs", {"ready": "true"}).json()
    assert [run["id"] for run in queue] == [mine["id"]]
    everyone = [run["id"] for run in boss.get("/runs", {"ready": "true"}).json()]
    assert everyone == [secret["id"], mine["id"]]
    # Nor can alpha name it in a change.
    error_of(
        alpha.patch(f"/runs/{ship['id']}", {"depends_on": [secret["id"]]}),
        400,
        "validation_error",
    )
    # Nor drop it: its change replaces only what it can see.
    replaced = alpha.patch(f"/runs/{ship['id']}", {"depends_on": []})
    assert replaced.status_code == 200, replaced.content
    assert replaced.json()["depends_on"] == [None]
    assert boss.get(f"/runs/{ship['id']}").json()["depends_on"] == [secret["id"]]
    assert Lane.objects.filter(workspace=workspace).count() == 2
    assert Run.objects.count() == 3
