"""Claims that fit the hand (issue 22.6): a run's `capabilities`, a hand's, the claim refused
`capability_missing` when the hand lacks one, and the runs a hand's key lists."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import Attempt, Run
from fleet.plan import services as plan_services
from hands import services as hand_services
from hands.models import Hand
from leases.models import Event, Lease, Refusal
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu_run(make_run: Any) -> Run:
    return make_run(slots=1, title="Train", capabilities=["GPU ", "python", "gpu"])


def test_it_stores_a_runs_capabilities_normalised(boss: Api, lane: Any) -> None:
    package = boss.post("/lanes/rewalk/work-packages", {"title": "P", "key": "p"}).json()
    response = boss.post(
        f"/work-packages/{package['id']}/runs",
        {"title": "Train", "capabilities": [" Python", "GPU", "python", "c++"]},
    )
    assert response.status_code == 201, response.content
    assert response.json()["capabilities"] == ["python", "gpu", "c++"]
    run = Run.objects.get(pk=response.json()["id"])
    assert run.capabilities == ["python", "gpu", "c++"]
    assert boss.get(f"/runs/{run.pk}").json()["capabilities"] == ["python", "gpu", "c++"]


@pytest.mark.parametrize(
    "tags",
    [
        "gpu",
        [""],
        ["   "],
        ["has space"],
        ["-leading"],
        ["x" * 33],
        [1],
        [f"t{i}" for i in range(21)],
        ["nul\x00"],
    ],
)
def test_it_refuses_bad_tags_and_writes_nothing(boss: Api, lane: Any, tags: Any) -> None:
    package = boss.post("/lanes/rewalk/work-packages", {"title": "P", "key": "p"}).json()
    before = Run.objects.count()
    response = boss.post(
        f"/work-packages/{package['id']}/runs", {"title": "Train", "capabilities": tags}
    )
    error = error_of(response, 400, "validation_error")
    assert "capabilities" in error["fields"]
    assert Run.objects.count() == before


def test_twenty_distinct_tags_of_32_characters_are_accepted(boss: Api, lane: Any) -> None:
    tags = [f"{i:02d}" + "x" * 30 for i in range(20)]
    response = boss.post("/hands", {"name": "wide", "capabilities": [*tags, tags[0].upper()]})
    assert response.status_code == 201, response.content
    assert response.json()["capabilities"] == tags


def test_a_hand_is_created_with_capabilities_and_a_supervisor_changes_them(
    boss: Api, lane: Any
) -> None:
    created = boss.post("/hands", {"name": "gpu-box", "capabilities": ["GPU", "Python"]})
    assert created.status_code == 201, created.content
    assert created.json()["capabilities"] == ["gpu", "python"]
    again = boss.post("/hands", {"name": "gpu-box", "capabilities": ["browser"]})
    assert again.status_code == 200
    assert again.json()["capabilities"] == ["gpu", "python"]  # a create never changes them
    changed = boss.patch("/hands/gpu-box", {"capabilities": ["browser", " Browser"]})
    assert changed.status_code == 200, changed.content
    assert changed.json()["capabilities"] == ["browser"]
    assert Hand.objects.get(name="gpu-box").capabilities == ["browser"]
    assert boss.get("/hands/gpu-box").json()["capabilities"] == ["browser"]
    error_of(boss.patch("/hands/gpu-box", {"capabilities": ["a b"]}), 400, "validation_error")
    error_of(boss.patch("/hands/nobody", {"capabilities": []}), 404, "not_found")
    assert Hand.objects.get(name="gpu-box").capabilities == ["browser"]


def test_only_a_hands_key_changes_capabilities_and_only_in_its_workspace_and_lane(
    workspace: Any, lane: Any, owner: Hand, teammate: Hand, api_a: Api, api_outsider: Api
) -> None:
    error_of(api_a.patch("/hands/hand-a", {"capabilities": ["gpu"]}), 403, "scope_denied")
    error_of(api_outsider.patch("/hands/hand-b", {"capabilities": ["gpu"]}), 404, "not_found")
    other, _ = hand_services.lane_create(workspace=workspace, slug="payments")
    boss_hand, _ = hand_services.hand_create(workspace=workspace, name="lane-boss", lane=lane)
    lane_boss = Api(mint(boss_hand, ["hands"], lane=lane), boss_hand)
    hand_services.hand_create(workspace=workspace, name="payer", lane=other)
    error_of(lane_boss.patch("/hands/payer", {"capabilities": ["gpu"]}), 404, "not_found")
    assert Hand.objects.get(name="payer").capabilities == []
    assert Hand.objects.get(pk=owner.pk).capabilities == []
    assert Hand.objects.get(pk=teammate.pk).capabilities == []


def test_a_claim_by_a_hand_lacking_a_capability_is_refused_naming_them(
    api_a: Api, owner: Hand, gpu_run: Run
) -> None:
    owner.capabilities = ["python"]
    owner.save(update_fields=["capabilities"])
    response = api_a.post(f"/runs/{gpu_run.pk}/claim", {"process_id": "a:1"})
    error = error_of(response, 409, "capability_missing")
    assert error["missing"] == ["gpu"]
    assert error["capabilities"] == ["gpu", "python"]
    assert error["hand_capabilities"] == ["python"]
    assert "gpu" in error["message"] and "hand-a" in error["message"]
    assert Attempt.objects.count() == 0
    assert Lease.objects.get(resource=f"run/{gpu_run.pk}/slot/0").fence == 0
    assert not Event.objects.filter(kind="claimed").exists()
    refusal = Refusal.objects.get(code="capability_missing")
    assert refusal.hand == "hand-a"
    assert refusal.request_id == response["X-Request-ID"]
    # Naming the slot is refused the same way.
    named = api_a.post(f"/runs/{gpu_run.pk}/claim", {"process_id": "a:1", "slot": 0})
    error_of(named, 409, "capability_missing")


def test_a_hand_with_every_capability_claims(api_a: Api, owner: Hand, gpu_run: Run) -> None:
    owner.capabilities = ["python", "gpu", "browser"]
    owner.save(update_fields=["capabilities"])
    response = api_a.post(f"/runs/{gpu_run.pk}/claim", {"process_id": "a:1"})
    assert response.status_code == 201, response.content
    assert Event.objects.filter(kind="claimed").count() == 1


def test_a_supervisors_change_decides_the_next_claim(
    boss: Api, api_a: Api, owner: Hand, gpu_run: Run
) -> None:
    error_of(
        api_a.post(f"/runs/{gpu_run.pk}/claim", {"process_id": "a:1"}), 409, "capability_missing"
    )
    assert boss.patch("/hands/hand-a", {"capabilities": ["gpu", "python"]}).status_code == 200
    assert api_a.post(f"/runs/{gpu_run.pk}/claim", {"process_id": "a:1"}).status_code == 201


def test_a_run_patched_to_need_nothing_takes_any_hand(boss: Api, api_a: Api, gpu_run: Run) -> None:
    patched = boss.patch(f"/runs/{gpu_run.pk}", {"capabilities": []})
    assert patched.status_code == 200, patched.content
    assert patched.json()["capabilities"] == [] and patched.json()["state"] == "open"
    assert api_a.post(f"/runs/{gpu_run.pk}/claim", {"process_id": "a:1"}).status_code == 201


def test_a_run_patch_needs_state_or_capabilities(boss: Api, gpu_run: Run) -> None:
    error_of(boss.patch(f"/runs/{gpu_run.pk}", {}), 400, "validation_error")
    both = boss.patch(f"/runs/{gpu_run.pk}", {"state": "closed", "capabilities": ["docker"]})
    assert both.status_code == 200, both.content
    gpu_run.refresh_from_db()
    assert (gpu_run.state, gpu_run.capabilities) == ("closed", ["docker"])


def test_a_capability_check_comes_after_a_closed_run(boss: Api, api_a: Api, gpu_run: Run) -> None:
    boss.patch(f"/runs/{gpu_run.pk}", {"state": "closed"})
    error_of(api_a.post(f"/runs/{gpu_run.pk}/claim", {"process_id": "a:1"}), 409, "run_closed")


def test_a_work_key_lists_only_the_runs_its_hand_can_take(
    api_a: Api, boss: Api, owner: Hand, make_run: Any
) -> None:
    plain = make_run(title="Plain")
    python = make_run(title="Python", capabilities=["python"])
    gpu = make_run(title="GPU", capabilities=["python", "gpu"])
    listed = [run["id"] for run in api_a.get("/runs", {"state": "open"}).json()]
    assert listed == [plain.pk]
    owner.capabilities = ["python"]
    owner.save(update_fields=["capabilities"])
    listed = [run["title"] for run in api_a.get("/runs").json()]
    assert listed == ["Python", "Plain"]
    # A supervisor's (planner's) key sees every run, each naming what it needs.
    every = {run["id"]: run["capabilities"] for run in boss.get("/runs").json()}
    assert every == {plain.pk: [], python.pk: ["python"], gpu.pk: ["python", "gpu"]}


def test_me_shows_the_hands_capabilities(api_a: Api, owner: Hand) -> None:
    owner.capabilities = ["browser"]
    owner.save(update_fields=["capabilities"])
    assert api_a.get("/me").json()["capabilities"] == ["browser"]


def test_the_runs_listing_keeps_its_query_count_as_runs_grow(
    api_a: Api, owner: Hand, make_run: Any
) -> None:
    owner.capabilities = ["python"]
    owner.save(update_fields=["capabilities"])
    for i in range(3):
        make_run(title=f"r{i}", capabilities=["python"])
    api_a.get("/me")  # the key's once-a-minute last_used_at stamp, out of the count
    # The key, the page of runs (the fit in SQL), their slots, the database time: the same
    # with 3 runs and with 23.
    with CaptureQueriesContext(connection) as few:
        assert len(api_a.get("/runs").json()) == 3
    for i in range(20):
        make_run(title=f"more{i}", capabilities=["python"] if i % 2 else ["gpu"])
    with CaptureQueriesContext(connection) as many:
        assert len(api_a.get("/runs").json()) == 13
    assert len(many) == len(few) <= 4, [q["sql"] for q in many.captured_queries]


def test_plan_services_refuse_bad_capabilities(workspace: Any, lane: Any) -> None:
    package, _ = plan_services.work_package_create(lane=lane, key="svc", title="S")
    run = plan_services.run_create(work_package=package, title="ok", capabilities=["a"])
    with pytest.raises(Exception) as refused:
        plan_services.run_set_capabilities(
            workspace_id=workspace.pk, run_id=run.pk, capabilities=["bad tag"]
        )
    assert getattr(refused.value, "code", "") == "validation_error"
    run.refresh_from_db()
    assert run.capabilities == ["a"]
