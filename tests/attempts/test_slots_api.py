"""Done slots and runs over REST: listing runs to find work, `slots?state=done`, the claim on a
done run, and a supervisor reopening a slot or adding slots (issue 17.1)."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.models import Run
from fleet.plan import services as plan_services
from hands import services as hand_services
from hands.models import Hand
from leases.models import Event
from tests.support.api import PR_URL, Api, error_of, mint

pytestmark = pytest.mark.django_db


def claim(api: Api, run: Run, process: str = "a:1", **body: Any) -> dict[str, Any]:
    response = api.post(f"/runs/{run.pk}/claim", {"process_id": process, **body})
    assert response.status_code == 201, response.content
    return response.json()


def finish(api: Api, attempt: dict[str, Any], process: str = "a:1") -> None:
    response = api.post(
        f"/attempts/{attempt['id']}/finish",
        {
            "fence": attempt["fence"],
            "process_id": process,
            "evidence": [{"kind": "pull_request", "url": PR_URL}],
        },
    )
    assert response.status_code == 200, response.content


def test_a_claim_on_a_done_run_says_the_run_is_done(api_a: Api, api_b: Api, one_slot: Run):
    finish(api_a, claim(api_a, one_slot))
    error = error_of(
        api_b.post(f"/runs/{one_slot.pk}/claim", {"process_id": "b:1"}), 409, "run_closed"
    )
    assert "is done" in error["message"]
    assert error["run_state"] == "done"
    run = api_b.get(f"/runs/{one_slot.pk}").json()
    assert run["state"] == "done" and run["closed_at"] is not None
    slots = api_b.get(f"/runs/{one_slot.pk}/slots", {"state": "done"}).json()
    assert slots == [
        {"index": 0, "state": "done", "holder": None, "fence": 1, "expires_in_s": None}
    ]
    assert api_b.get(f"/runs/{one_slot.pk}/slots", {"state": "open"}).json() == []


def test_a_no_open_slot_denial_counts_the_slots(api_a: Api, api_b: Api, one_slot: Run) -> None:
    claim(api_a, one_slot)
    error = error_of(
        api_b.post(f"/runs/{one_slot.pk}/claim", {"process_id": "b:1"}), 409, "no_open_slot"
    )
    assert (error["slots"], error["held"], error["done"]) == (1, 1, 0)
    assert 99 <= error["next_expires_in_s"] <= 100


def test_a_work_key_lists_the_open_runs_of_its_lane_with_their_slots(
    workspace: Any, owner: Hand, lane: Any, make_run: Any, api_a: Api
) -> None:
    other_lane, _ = hand_services.lane_create(workspace=workspace, slug="payments")
    package, _ = plan_services.work_package_create(lane=other_lane, key="p-1", title="Payments")
    elsewhere = plan_services.run_create(work_package=package, title="Elsewhere", slots=1)
    first = make_run(slots=2, title="First")
    done = make_run(slots=1, title="Done", evidence_required=["pull_request"])
    finish(api_a, claim(api_a, done))
    claim(api_a, first)

    lane_key = Api(mint(owner, ["work"], lane=lane), owner)
    listed = lane_key.get("/runs", {"state": "open"})
    assert listed.status_code == 200, listed.content
    (only,) = listed.json()
    assert (only["id"], only["title"], only["lane"], only["state"]) == (
        first.pk,
        "First",
        "rewalk",
        "open",
    )
    assert only["slots"] == 2
    assert only["slots_by_state"] == {"open": 1, "held": 1, "done": 0}
    assert only["work_package_key"] == first.work_package.key
    every = {run["id"]: run for run in lane_key.get("/runs").json()}
    assert set(every) == {first.pk, done.pk}  # never another lane's
    assert every[done.pk]["slots_by_state"] == {"open": 0, "held": 0, "done": 1}
    # A key of every lane sees them all; the lane filter narrows.
    workspace_key = Api(mint(owner, ["work"]), owner)
    assert {r["id"] for r in workspace_key.get("/runs").json()} == {first.pk, done.pk, elsewhere.pk}
    assert [r["id"] for r in workspace_key.get("/runs", {"lane": "payments"}).json()] == [
        elsewhere.pk
    ]
    assert [r["id"] for r in workspace_key.get("/runs", {"state": "done"}).json()] == [done.pk]
    error_of(workspace_key.get("/runs", {"state": "finished"}), 400, "validation_error")
    error_of(workspace_key.get("/runs", {"lane": "a\x00b"}), 400, "validation_error")
    error_of(Api(mint(owner, ["leases"]), owner).get("/runs"), 403, "scope_denied")


def test_runs_are_listed_in_constant_queries(
    owner: Hand, make_run: Any, django_assert_max_num_queries: Any
) -> None:
    key = Api(mint(owner, ["work"]), owner)
    make_run(slots=3)
    key.get("/runs")  # warm: the key's last_used_at
    with django_assert_max_num_queries(8) as few:
        assert len(key.get("/runs").json()) == 1
    for _ in range(10):
        make_run(slots=3)
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert len(key.get("/runs").json()) == 11


def test_a_supervisor_reopens_a_done_slot_and_adds_slots(
    boss: Api, api_a: Api, api_b: Api, one_slot: Run
) -> None:
    first = claim(api_a, one_slot)
    finish(api_a, first)
    error = error_of(boss.post(f"/runs/{one_slot.pk}/slots/0/reopen", {}), 400, "validation_error")
    assert "reason" in error["fields"]
    reopened = boss.post(f"/runs/{one_slot.pk}/slots/0/reopen", {"reason": "regressed"})
    assert reopened.status_code == 200, reopened.content
    assert reopened.json()["state"] == "open"
    assert boss.get(f"/runs/{one_slot.pk}").json()["state"] == "open"
    again = claim(api_b, one_slot, "b:1")
    assert again["fence"] == first["fence"] + 1
    error = error_of(
        boss.post(f"/runs/{one_slot.pk}/slots/0/reopen", {"reason": "again"}),
        409,
        "slot_not_done",
    )
    assert error["state"] == "held"
    error_of(boss.post(f"/runs/{one_slot.pk}/slots/5/reopen", {"reason": "x"}), 404, "not_found")

    added = boss.post(f"/runs/{one_slot.pk}/slots", {"count": 2, "reason": "more repos"})
    assert added.status_code == 201, added.content
    assert added.json()["slots"] == 3
    assert added.json()["slots_by_state"] == {"open": 2, "held": 1, "done": 0}
    assert Event.objects.filter(kind="slots_added").get().data["reason"] == "more repos"
    # Planning scopes only: a work key may not reopen or add.
    error_of(
        api_a.post(f"/runs/{one_slot.pk}/slots", {"count": 1, "reason": "x"}), 403, "scope_denied"
    )
    error_of(
        api_a.post(f"/runs/{one_slot.pk}/slots/0/reopen", {"reason": "x"}), 403, "scope_denied"
    )


def test_the_schema_documents_done_slots_and_the_new_calls(boss: Api) -> None:
    schema = boss.client.get("/api/v1/schema/", {"format": "json"}).json()
    paths = schema["paths"]
    assert "get" in paths["/api/v1/runs"]
    assert "post" in paths["/api/v1/runs/{run_id}/slots"]
    assert "post" in paths["/api/v1/runs/{run_id}/slots/{index}/reopen"]
    components = schema["components"]["schemas"]
    assert components["SlotStateEnum"]["enum"] == ["open", "held", "done"]
    assert components["RunStateEnum"]["enum"] == ["open", "closed", "done"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/runs/{run}/slots", {"count": "5", "reason": "more"}, "count"),
        ("/runs/{run}/slots", {"count": 5.0, "reason": "more"}, "count"),
        ("/runs/{run}/slots/0/reopen", {"reason": 5}, "reason"),
    ],
)
def test_the_new_supervisor_calls_refuse_a_value_of_the_wrong_json_type(
    boss: Api, api_a: Api, one_slot: Run, path: str, body: dict[str, Any], field: str
) -> None:
    """JSON's types are kept here as everywhere (POST /runs refuses `"slots": "5"`): `"count":
    "5"` adds no slots and `"reason": 5` reopens nothing; DRF's coercing fields would."""
    finish(api_a, claim(api_a, one_slot))
    response = boss.post(path.format(run=one_slot.pk), body)
    assert field in error_of(response, 400, "validation_error")["fields"]


def test_a_run_that_becomes_done_when_reopened_from_closed_says_run_done(
    boss: Api, api_a: Api, one_slot: Run
) -> None:
    """A supervisor closes a run while its last slot is held; the holder finishes (the run stays
    closed); opened again, the run is `done`, with its one `run_done` event (and so its
    webhook): a subscriber hears this run is done."""
    attempt = claim(api_a, one_slot)
    assert boss.patch(f"/runs/{one_slot.pk}", {"state": "closed"}).status_code == 200
    finish(api_a, attempt)
    reopened = boss.patch(f"/runs/{one_slot.pk}", {"state": "open"})
    assert reopened.status_code == 200 and reopened.json()["state"] == "done"
    assert Event.objects.filter(kind="run_done", data__run=one_slot.pk).count() == 1
