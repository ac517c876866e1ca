"""To a lane-limited key another lane's runs are "counted, never named" (docs/api.md, "Runs
that wait for runs"; `Dependency.seen`). A cycle that runs through another lane is still
refused, and its runs of the other lane are "a run of another lane" in the sentence and null in
`cycle`, in the answer and in the refusal the key reads back from `GET /refusals`: neither the
id of a run the key is told does not exist, nor that it waits for the key's own run. A
workspace-wide key is told the whole cycle."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.api import Api, error_of

pytestmark = pytest.mark.django_db


def _cycle_through_lane_b(boss: Api, plan: Any) -> tuple[dict, dict, dict]:
    """alpha's `ship` waits for lane B's run, which waits for alpha's `build`."""
    assert boss.post("/lanes", {"slug": "zzb-lane"}).status_code == 201
    theirs = boss.post("/lanes/zzb-lane/work-packages", {"title": "B", "key": "b"}).json()
    build, ship = plan("build"), plan("ship")
    secret = boss.post(
        f"/work-packages/{theirs['id']}/runs", {"title": "zzb", "depends_on": [build["id"]]}
    ).json()
    assert boss.patch(f"/runs/{ship['id']}", {"depends_on": [secret["id"]]}).status_code == 200
    return build, ship, secret


def test_a_cycle_through_another_lane_is_refused_without_naming_its_run(
    boss: Api, alpha: Api, plan: Any
) -> None:
    build, ship, secret = _cycle_through_lane_b(boss, plan)
    # To alpha, lane B's run does not exist.
    assert alpha.get(f"/runs/{secret['id']}").status_code == 404

    # build -> ship would close build -> ship -> (lane B's run) -> build.
    response = alpha.patch(f"/runs/{build['id']}", {"depends_on": [ship["id"]]})
    error = error_of(response, 409, "dependency_cycle")
    named = re.compile(rf"\brun {secret['id']}\b")
    assert not named.search(error["message"]), error["message"]
    assert error["cycle"] == [build["id"], ship["id"], None, build["id"]]
    assert (
        f"run {build['id']} -> run {ship['id']} -> a run of another lane -> run {build['id']}"
        in error["message"]
    )
    recorded = alpha.get("/refusals", {"code": "dependency_cycle"})
    assert recorded.status_code == 200 and recorded.json(), recorded.content
    assert not named.search(recorded.content.decode()), recorded.content
    # Nothing was written.
    assert boss.get(f"/runs/{build['id']}").json()["depends_on"] == []


def test_a_workspace_wide_key_is_told_the_whole_cycle(boss: Api, plan: Any) -> None:
    build, ship, secret = _cycle_through_lane_b(boss, plan)
    error = error_of(
        boss.patch(f"/runs/{build['id']}", {"depends_on": [ship["id"]]}), 409, "dependency_cycle"
    )
    assert error["cycle"] == [build["id"], ship["id"], secret["id"], build["id"]]
    assert f"run {ship['id']} -> run {secret['id']} -> run {build['id']}" in error["message"]
