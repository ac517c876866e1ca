"""A run names the runs it waits for (`depends_on`) and its priority, at creation and by PATCH:
what is accepted, what is refused (and that a refusal writes nothing), and cycles of every
length refused `dependency_cycle`, naming the cycle."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.models import Run, RunDependency
from hands import services as hand_services
from hands.models import Lane
from leases.models import Refusal
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db


def edges() -> set[tuple[int, int]]:
    return set(RunDependency.objects.values_list("run_id", "depends_on_id"))


def test_a_new_run_waits_for_the_runs_it_names_and_says_so(plan: Any, boss: Api) -> None:
    build = plan("build")
    lint = plan("lint")
    assert (build["priority"], build["depends_on"], build["waiting_for"]) == (2, [], [])
    ship = plan("ship", depends_on=[lint["id"], build["id"]], priority=0)
    assert ship["priority"] == 0
    assert ship["depends_on"] == ship["waiting_for"] == sorted([build["id"], lint["id"]])
    assert edges() == {(ship["id"], build["id"]), (ship["id"], lint["id"])}
    row = RunDependency.objects.filter(run_id=ship["id"]).first()
    assert row is not None and row.workspace_id == Run.objects.get(pk=ship["id"]).workspace_id
    # The same on every read of it.
    assert boss.get(f"/runs/{ship['id']}").json()["depends_on"] == ship["depends_on"]
    listed = {run["id"]: run for run in boss.get("/runs").json()}
    assert listed[ship["id"]]["waiting_for"] == ship["depends_on"]
    assert listed[build["id"]]["depends_on"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"depends_on": "1"}, "depends_on"),
        ({"depends_on": [True]}, "depends_on"),
        ({"depends_on": ["1"]}, "depends_on"),
        ({"depends_on": [1.0]}, "depends_on"),
        ({"depends_on": [0]}, "depends_on"),
        ({"depends_on": [2**63]}, "depends_on"),
        ({"depends_on": list(range(1, 22))}, "depends_on"),
        ({"priority": 5}, "priority"),
        ({"priority": -1}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": "1"}, "priority"),
        ({"priority": 1.0}, "priority"),
        ({"priority": None}, "priority"),
    ],
)
def test_it_refuses_malformed_dependencies_and_priorities(
    boss: Api, package: dict[str, Any], body: dict[str, Any], field: str
) -> None:
    response = boss.post(f"/work-packages/{package['id']}/runs", {"title": "t", **body})
    error = error_of(response, 400, "validation_error")
    assert field in error["fields"]
    assert not Run.objects.exists()


def test_it_refuses_a_run_named_twice_or_unknown_and_creates_nothing(
    boss: Api, package: dict[str, Any], plan: Any
) -> None:
    build = plan("build")
    twice = boss.post(
        f"/work-packages/{package['id']}/runs",
        {"title": "ship", "depends_on": [build["id"], build["id"]]},
    )
    assert "more than once" in error_of(twice, 400, "validation_error")["message"]
    unknown = boss.post(
        f"/work-packages/{package['id']}/runs",
        {"title": "ship", "depends_on": [build["id"], 987654]},
    )
    error = error_of(unknown, 400, "validation_error")
    assert error["fields"] == {"depends_on": ["No run 987654."]}
    assert list(Run.objects.values_list("title", flat=True)) == ["build"]
    assert not RunDependency.objects.exists()


def test_twenty_dependencies_are_the_most(plan: Any) -> None:
    many = [plan(f"step {i}")["id"] for i in range(20)]
    assert plan("all", depends_on=many)["depends_on"] == many


def test_a_run_of_another_workspace_is_no_run(
    boss: Api, package: dict[str, Any], api_outsider: Api
) -> None:
    lane = api_outsider.post("/lanes", {"slug": "theirs"}).json()
    theirs = api_outsider.post(
        f"/lanes/{lane['slug']}/work-packages", {"title": "T", "key": "t"}
    ).json()
    secret = api_outsider.post(f"/work-packages/{theirs['id']}/runs", {"title": "x"}).json()
    response = boss.post(
        f"/work-packages/{package['id']}/runs", {"title": "ship", "depends_on": [secret["id"]]}
    )
    assert error_of(response, 400, "validation_error")["fields"] == {
        "depends_on": [f"No run {secret['id']}."]
    }


def test_patch_sets_priority_and_replaces_dependencies(plan: Any, boss: Api) -> None:
    a, b, c = plan("a"), plan("b"), plan("c")
    ship = plan("ship", depends_on=[a["id"], b["id"]])
    patched = boss.patch(f"/runs/{ship['id']}", {"depends_on": [c["id"], b["id"]], "priority": 4})
    assert patched.status_code == 200, patched.content
    assert patched.json()["depends_on"] == sorted([b["id"], c["id"]])
    assert patched.json()["priority"] == 4
    assert edges() == {(ship["id"], b["id"]), (ship["id"], c["id"])}
    cleared = boss.patch(f"/runs/{ship['id']}", {"depends_on": []}).json()
    assert (cleared["depends_on"], cleared["waiting_for"], cleared["priority"]) == ([], [], 4)
    assert not RunDependency.objects.exists()
    error_of(boss.patch(f"/runs/{ship['id']}", {"priority": 9}), 400, "validation_error")
    error_of(boss.patch(f"/runs/{ship['id']}", {"depends_on": [1.5]}), 400, "validation_error")


def test_it_refuses_a_run_that_would_wait_for_itself(plan: Any, boss: Api) -> None:
    run = plan("loop")
    error = error_of(
        boss.patch(f"/runs/{run['id']}", {"depends_on": [run["id"]]}), 409, "dependency_cycle"
    )
    assert error["cycle"] == [run["id"], run["id"]]
    assert f"run {run['id']} -> run {run['id']}" in error["message"]
    assert not RunDependency.objects.exists()


def test_it_refuses_a_direct_cycle_naming_it_and_changes_nothing(plan: Any, boss: Api) -> None:
    build = plan("build")
    ship = plan("ship", depends_on=[build["id"]])
    response = boss.patch(f"/runs/{build['id']}", {"depends_on": [ship["id"]], "priority": 0})
    error = error_of(response, 409, "dependency_cycle")
    assert error["cycle"] == [build["id"], ship["id"], build["id"]]
    assert f"(run {build['id']} -> run {ship['id']} -> run {build['id']})" in error["message"]
    assert edges() == {(ship["id"], build["id"])}
    # Nothing else in the same PATCH was written either.
    assert Run.objects.get(pk=build["id"]).priority == 2
    refusal = Refusal.objects.get(code="dependency_cycle")
    assert refusal.hand == "boss"


def test_it_refuses_a_long_cycle_and_names_the_shortest(plan: Any, boss: Api) -> None:
    first = plan("r0")
    chain = [first]
    for i in range(1, 8):
        chain.append(plan(f"r{i}", depends_on=[chain[-1]["id"]]))
    # A shortcut: r7 also waits for r5 directly.
    boss.patch(f"/runs/{chain[7]['id']}", {"depends_on": [chain[6]["id"], chain[5]["id"]]})
    before = edges()
    response = boss.patch(f"/runs/{first['id']}", {"depends_on": [chain[7]["id"]]})
    error = error_of(response, 409, "dependency_cycle")
    ids = [run["id"] for run in chain]
    assert error["cycle"] == [ids[0], ids[7], ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]]
    assert edges() == before
    # Waiting for a run further down its own chain is no cycle.
    ok = boss.patch(f"/runs/{chain[7]['id']}", {"depends_on": [chain[1]["id"]]})
    assert ok.status_code == 200, ok.content


def test_a_diamond_is_no_cycle(plan: Any, boss: Api) -> None:
    base = plan("base")
    left = plan("left", depends_on=[base["id"]])
    right = plan("right", depends_on=[base["id"]])
    top = plan("top", depends_on=[left["id"], right["id"]])
    assert top["depends_on"] == sorted([left["id"], right["id"]])
    response = boss.patch(f"/runs/{right['id']}", {"depends_on": [base["id"], left["id"]]})
    assert response.status_code == 200, response.content


def test_a_lane_limited_key_names_only_its_lanes_runs(boss: Api, plan: Any, workspace: Any) -> None:
    build = plan("build")
    assert boss.post("/lanes", {"slug": "other"}).status_code == 201
    lane = Lane.objects.get(workspace=workspace, slug="other")
    hand, _ = hand_services.hand_create(workspace=workspace, name="other-hand")
    other = Api(mint(hand, ["plan"], lane=lane), hand)
    package = other.post("/lanes/other/work-packages", {"title": "O", "key": "o"}).json()
    response = other.post(
        f"/work-packages/{package['id']}/runs", {"title": "mine", "depends_on": [build["id"]]}
    )
    # Another lane's run is named as one that does not exist.
    assert error_of(response, 400, "validation_error")["fields"] == {
        "depends_on": [f"No run {build['id']}."]
    }
    mine = other.post(f"/work-packages/{package['id']}/runs", {"title": "mine"}).json()
    patched = other.patch(f"/runs/{mine['id']}", {"depends_on": [build["id"]]})
    error_of(patched, 400, "validation_error")
    assert not RunDependency.objects.exists()
