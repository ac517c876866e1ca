"""Handoffs (issue 22, part 2): a refused hand asks; the holder sees it in its renewal or
heartbeat, declines or releases; the asker reads the answer; a supervisor grants by breaking."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from leases import clock
from leases.models import Event, HandoffRequest, Lease
from tests.support.api import Api, claim, error_of, mint, refusals, report

pytestmark = pytest.mark.django_db

TAKE = {"resource": "src/auth/", "ttl_s": 60, "process_id": "p1"}


def take(api: Api, resource: str = "src/auth/") -> dict:
    answer = api.post("/leases/acquire", {**TAKE, "resource": resource})
    assert answer.status_code == 201, answer.content
    return answer.json()


def ask(api: Api, status: int = 201, **body) -> dict:  # noqa: ANN003
    answer = api.post("/leases/handoff", {"reason": "I need to fix the login bug", **body})
    assert answer.status_code == status, answer.content
    return answer.json()


def renew(api: Api, lease: dict) -> dict:
    answer = api.post(
        "/leases/renew",
        {"resource": lease["resource"], "fence": lease["fence"], "process_id": "p1"},
    )
    assert answer.status_code == 200, answer.content
    return answer.json()


def kinds() -> list[str]:
    return list(
        Event.objects.filter(kind__startswith="handoff_")
        .order_by("id")
        .values_list("kind", flat=True)
    )


def test_it_asks_for_the_tenure_in_the_way_and_the_holder_sees_it_once_asked(
    api_a: Api, api_b: Api
) -> None:
    lease = take(api_a)
    assert renew(api_a, lease)["handoff_requests"] == []
    asked = ask(api_b, resource="src/auth/login.py")
    assert asked["holder"] == "hand-a" and asked["from"] == "hand-b"
    assert asked["resource"] == "src/auth/" and asked["wanted"] == "src/auth/login.py"
    assert asked["fence"] == lease["fence"] and asked["status"] == "open"
    assert "hand hand-b asks for `src/auth/`" in asked["message"]
    assert Lease.objects.get(resource="src/auth/").handoff_open == 1
    pending = renew(api_a, lease)["handoff_requests"]
    assert [(p["id"], p["from"], p["reason"]) for p in pending] == [
        (asked["id"], "hand-b", "I need to fix the login bug")
    ]
    event = Event.objects.get(kind="handoff_requested")
    assert (event.actor, event.hand, event.resource, event.fence) == (
        "hand-b",
        "hand-a",
        "src/auth/",
        lease["fence"],
    )
    assert event.data["handoff"] == asked["id"]


def test_it_answers_a_repeated_ask_with_the_open_request(api_a: Api, api_b: Api) -> None:
    take(api_a)
    first = ask(api_b, resource="src/auth/")
    again = ask(api_b, 200, resource="src/auth/", reason="another reason")
    assert again["id"] == first["id"] and again["reason"] == first["reason"]
    assert HandoffRequest.objects.count() == 1
    assert Lease.objects.get(resource="src/auth/").handoff_open == 1
    assert kinds() == ["handoff_requested"]


def test_it_refuses_an_ask_for_your_own_lease_or_a_free_one(api_a: Api, api_b: Api) -> None:
    take(api_a)
    error_of(
        api_a.post("/leases/handoff", {"resource": "src/auth/", "reason": "x"}),
        409,
        "handoff_own_lease",
    )
    error_of(
        api_b.post("/leases/handoff", {"resource": "docs/", "reason": "x"}),
        409,
        "handoff_not_needed",
    )
    # A slot is asked for by its run and index, never as a resource.
    error_of(
        api_b.post("/leases/handoff", {"resource": "run/1/slot/0", "reason": "x"}),
        400,
        "validation_error",
    )
    assert refusals("handoff_own_lease") and refusals("handoff_not_needed")
    assert not HandoffRequest.objects.exists()


def test_it_refuses_bad_input_with_a_contract_code(api_a: Api, api_b: Api, run) -> None:
    take(api_a)
    for body in (
        {"resource": "src/auth/"},  # no reason
        {"reason": "x"},  # nothing named
        {"resource": "src/auth/", "run": run.pk, "slot": 0, "reason": "x"},
        {"run": run.pk, "reason": "x"},
        {"resource": "/abs", "reason": "x"},
        {"resource": "src/auth/", "reason": "x" * 3000},
    ):
        error_of(api_b.post("/leases/handoff", body), 400, "validation_error")
    error_of(api_b.get("/leases/handoffs", {"role": "nobody"}), 400, "validation_error")
    assert not HandoffRequest.objects.exists()


def test_the_holder_declines_and_the_asker_reads_the_answer(api_a: Api, api_b: Api) -> None:
    lease = take(api_a)
    asked = ask(api_b, resource="src/auth/")
    path = f"/leases/handoff/{asked['id']}"
    # Only the holder declines; the asker withdraws instead.
    error_of(api_b.post(f"{path}/decline", {"reason": "mine"}), 403, "not_holder")
    declined = api_a.post(f"{path}/decline", {"reason": "halfway through a migration"})
    assert declined.status_code == 200, declined.content
    assert declined.json()["status"] == "declined"
    seen = api_b.get(path).json()
    assert seen["status"] == "declined" and seen["answer"] == "halfway through a migration"
    assert "declined: halfway through a migration" in seen["message"]
    assert renew(api_a, lease)["handoff_requests"] == []
    assert Lease.objects.get(resource="src/auth/").handoff_open == 0
    error_of(api_a.post(f"{path}/decline", {"reason": "again"}), 409, "handoff_answered")
    assert kinds() == ["handoff_requested", "handoff_declined"]
    # Asking again after a decline is a new request.
    assert ask(api_b, resource="src/auth/")["id"] != asked["id"]


def test_a_release_answers_every_open_request_released(api_a: Api, api_b: Api, boss: Api) -> None:
    lease = take(api_a)
    first, second = ask(api_b, resource="src/auth/"), ask(boss, resource="src/auth/x.py")
    released = api_a.post("/leases/release", {"resource": "src/auth/", "fence": lease["fence"]})
    assert released.status_code == 200
    for asked, api in ((first, api_b), (second, boss)):
        seen = api.get(f"/leases/handoff/{asked['id']}").json()
        assert (seen["status"], seen["ended_by"]) == ("released", "released"), seen
    assert Lease.objects.get(resource="src/auth/").handoff_open == 0
    assert kinds() == ["handoff_requested"] * 2 + ["handoff_released"] * 2
    error_of(
        api_a.post(f"/leases/handoff/{first['id']}/decline", {"reason": "late"}),
        409,
        "handoff_answered",
    )


def test_a_request_lapses_when_the_tenure_ends_otherwise(
    api_a: Api, api_b: Api, frozen_clock: datetime
) -> None:
    take(api_a)
    asked = ask(api_b, resource="src/auth/")
    clock.freeze(frozen_clock + timedelta(seconds=60))
    assert api_b.get(f"/leases/handoff/{asked['id']}").json()["status"] == "open"
    clock.freeze(frozen_clock + timedelta(seconds=60.001))
    assert api_b.get(f"/leases/handoff/{asked['id']}").json()["status"] == "lapsed"
    taken = take(api_b)
    assert taken["fence"] == 2
    assert Lease.objects.get(resource="src/auth/").handoff_open == 0  # a grant resets the count
    assert renew(api_b, taken)["handoff_requests"] == []


def test_the_asker_withdraws_and_the_holder_stops_seeing_it(api_a: Api, api_b: Api) -> None:
    lease = take(api_a)
    asked = ask(api_b, resource="src/auth/")
    error_of(api_a.post(f"/leases/handoff/{asked['id']}/withdraw"), 404, "not_found")
    withdrawn = api_b.post(f"/leases/handoff/{asked['id']}/withdraw")
    assert withdrawn.status_code == 200 and withdrawn.json()["status"] == "withdrawn"
    assert renew(api_a, lease)["handoff_requests"] == []
    error_of(api_b.post(f"/leases/handoff/{asked['id']}/withdraw"), 409, "handoff_answered")
    assert kinds() == ["handoff_requested", "handoff_withdrawn"]


def test_a_supervisor_grants_by_breaking_the_lease(
    api_a: Api, api_b: Api, boss: Api, workspace
) -> None:
    lease = take(api_a)
    asked = ask(api_b, resource="src/auth/")
    error_of(
        api_b.post(f"/leases/handoff/{asked['id']}/grant", {"reason": "x"}), 403, "scope_denied"
    )
    granted = boss.post(f"/leases/handoff/{asked['id']}/grant", {"reason": "b's fix is urgent"})
    assert granted.status_code == 200, granted.content
    body = granted.json()
    assert (
        body["handoff"]["status"] == "granted" and body["handoff"]["answer"] == "b's fix is urgent"
    )
    assert body["lease"]["fence"] == lease["fence"] + 1 and body["lease"]["state"] == "free"
    assert kinds() == ["handoff_requested", "handoff_granted"]
    assert Event.objects.filter(kind="lease_broken", resource="src/auth/").count() == 1
    error_of(
        api_a.post(
            "/leases/renew", {"resource": "src/auth/", "fence": lease["fence"], "process_id": "p1"}
        ),
        409,
        "stale_fence",
    )
    # Granted once: a second grant breaks nothing.
    take(api_b)
    again = boss.post(f"/leases/handoff/{asked['id']}/grant", {"reason": "again"})
    error_of(again, 409, "handoff_answered")
    assert Event.objects.filter(kind="lease_broken").count() == 1


def test_a_grant_of_a_tenure_that_ended_breaks_nothing(api_a: Api, api_b: Api, boss: Api) -> None:
    lease = take(api_a)
    asked = ask(api_b, resource="src/auth/")
    request = HandoffRequest.objects.get(pk=asked["id"])
    api_a.post("/leases/release", {"resource": "src/auth/", "fence": lease["fence"]})
    HandoffRequest.objects.filter(pk=request.pk).update(status="open")  # as if read before
    take(api_b)
    from fleet.attempts import services as attempt_services
    from leases.errors import HandoffAnswered

    with pytest.raises(HandoffAnswered):
        attempt_services.lease_break(
            workspace_id=request.workspace_id,
            resource="src/auth/",
            actor="boss",
            reason="x",
            handoff=request,
        )
    assert Lease.objects.get(resource="src/auth/").holder == "hand-b"
    assert not Event.objects.filter(kind="lease_broken").exists()


def test_nobody_but_the_asker_the_holder_or_a_supervisor_reads_a_request(
    api_a: Api, api_b: Api, boss: Api, api_outsider: Api, teammate, workspace
) -> None:
    from hands import services as hand_services

    take(api_a)
    asked = ask(api_b, resource="src/auth/")
    path = f"/leases/handoff/{asked['id']}"
    third, _ = hand_services.hand_create(workspace=workspace, name="hand-c")
    for api in (Api(mint(third, ["leases"]), third), api_outsider):
        error_of(api.get(path), 404, "not_found")
        error_of(api.post(f"{path}/decline", {"reason": "x"}), 404, "not_found")
    for api in (api_a, api_b, boss):
        assert api.get(path).status_code == 200
    error_of(api_outsider.post(f"{path}/grant", {"reason": "x"}), 404, "not_found")


def test_a_hand_lists_its_requests_asked_and_received(api_a: Api, api_b: Api, boss: Api) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def listed_with_queries() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as queries:
            listed = boss.get("/leases/handoffs", {"role": "workspace"})
        assert listed.status_code == 200
        return len(listed.json()), len(queries)

    take(api_a)
    take(api_b, "docs/")
    mine = ask(api_b, resource="src/auth/")
    theirs = ask(api_a, resource="docs/")
    both = api_b.get("/leases/handoffs").json()
    assert [r["id"] for r in both] == [theirs["id"], mine["id"]]
    assert [r["id"] for r in api_b.get("/leases/handoffs", {"role": "asked"}).json()] == [
        mine["id"]
    ]
    received = api_b.get("/leases/handoffs", {"role": "received"}).json()
    assert [r["id"] for r in received] == [theirs["id"]]
    error_of(api_b.get("/leases/handoffs", {"role": "workspace"}), 403, "scope_denied")
    boss.get("/me")  # the key's once-a-minute stamp, out of the count
    few, few_queries = listed_with_queries()
    for index in range(5):
        take(boss, f"x/{index}/")
        ask(api_b, resource=f"x/{index}/")
    # The page, the leases of its open requests, the clock: the same whatever the rows.
    many, many_queries = listed_with_queries()
    assert (few, many) == (2, 7) and many_queries == few_queries


def test_a_slot_is_asked_for_by_run_and_index_and_seen_in_the_heartbeat(
    api_a: Api, api_b: Api, run
) -> None:
    attempt = claim(api_a, run)
    assert report(api_a, attempt).json()["handoff_requests"] == []
    error_of(
        api_b.post("/leases/handoff", {"run": run.pk, "slot": 1, "reason": "x"}),
        409,
        "handoff_not_needed",
    )
    error_of(
        api_a.post("/leases/handoff", {"run": run.pk, "slot": 0, "reason": "x"}),
        409,
        "handoff_own_lease",
    )
    error_of(
        api_b.post("/leases/handoff", {"run": run.pk, "slot": 9, "reason": "x"}),
        400,
        "validation_error",
    )
    error_of(
        api_b.post("/leases/handoff", {"run": 999999, "slot": 0, "reason": "x"}), 404, "not_found"
    )
    asked = ask(api_b, run=run.pk, slot=0)
    assert asked["kind"] == "slot" and asked["resource"] == f"run/{run.pk}/slot/0"
    pending = report(api_a, attempt).json()["handoff_requests"]
    assert [p["id"] for p in pending] == [asked["id"]]
    released = api_a.post(
        f"/attempts/{attempt['id']}/release",
        {"fence": attempt["fence"], "process_id": "host-a:1", "reason": "b asked"},
    )
    assert released.status_code == 200
    seen = api_b.get(f"/leases/handoff/{asked['id']}").json()
    assert (seen["status"], seen["ended_by"]) == ("released", "released")


def test_a_lane_limited_key_asks_only_for_slots_of_its_lane(
    api_a: Api, teammate, workspace, run
) -> None:
    from hands import services as hand_services

    other, _ = hand_services.lane_create(workspace=workspace, slug="other", name="Other")
    claim(api_a, run)
    limited = Api(mint(teammate, ["work"], lane=other), teammate)
    error_of(
        limited.post("/leases/handoff", {"run": run.pk, "slot": 0, "reason": "x"}), 404, "not_found"
    )
    error_of(
        limited.post("/leases/handoff", {"resource": "src/", "reason": "x"}), 403, "scope_denied"
    )


def test_a_granted_slot_ends_its_attempt_as_lost(api_a: Api, api_b: Api, boss: Api, run) -> None:
    attempt = claim(api_a, run)
    asked = ask(api_b, run=run.pk, slot=0)
    granted = boss.post(f"/leases/handoff/{asked['id']}/grant", {"reason": "reassigned"})
    assert granted.status_code == 200, granted.content
    assert api_a.get(f"/attempts/{attempt['id']}").json()["state"] == "lost"
    assert claim(api_b, run, slot=0)["fence"] == attempt["fence"] + 2


def test_asks_per_tenure_are_bounded(api_a: Api, workspace) -> None:
    from hands import services as hand_services
    from leases.handoffs import MAX_OPEN_PER_TENURE

    take(api_a)
    for index in range(MAX_OPEN_PER_TENURE + 1):
        hand, _ = hand_services.hand_create(workspace=workspace, name=f"asker-{index}")
        api = Api(mint(hand, ["leases"]), hand)
        if index < MAX_OPEN_PER_TENURE:
            ask(api, resource="src/auth/")
        else:
            error_of(
                api.post("/leases/handoff", {"resource": "src/auth/", "reason": "x"}),
                409,
                "handoff_limit",
            )
    assert HandoffRequest.objects.filter(status="open").count() == MAX_OPEN_PER_TENURE
    assert Lease.objects.get(resource="src/auth/").handoff_open == MAX_OPEN_PER_TENURE


def test_a_shared_tenure_is_asked_only_by_an_exclusive_asker(api_a: Api, api_b: Api) -> None:
    assert (
        api_a.post("/leases/acquire", {**TAKE, "resource": "docs/", "mode": "shared"}).status_code
        == 201
    )
    shared = {"resource": "docs/", "mode": "shared", "reason": "x"}
    error_of(api_b.post("/leases/handoff", shared), 409, "handoff_not_needed")
    asked = ask(api_b, resource="docs/")
    assert asked["holder"] == "hand-a" and asked["resource"] == "docs/"


def test_nothing_crosses_workspaces(api_a: Api, api_outsider: Api) -> None:
    lease = take(api_a)
    error_of(
        api_outsider.post("/leases/handoff", {"resource": "src/auth/", "reason": "x"}),
        409,
        "handoff_not_needed",
    )
    assert renew(api_a, lease)["handoff_requests"] == []
    assert api_outsider.get("/leases/handoffs").json() == []


def test_a_finish_answers_a_slots_requests_released_by_finishing(
    api_a: Api, api_b: Api, run
) -> None:
    from tests.support.api import finish

    attempt = claim(api_a, run)
    asked = ask(api_b, run=run.pk, slot=0)
    assert finish(api_a, attempt).status_code == 200
    seen = api_b.get(f"/leases/handoff/{asked['id']}").json()
    assert (seen["status"], seen["ended_by"]) == ("released", "finished")
    assert "acquire" in seen["message"]


def test_a_decline_after_the_tenure_is_lost_is_refused_as_lapsed(
    api_a: Api, api_b: Api, frozen_clock: datetime
) -> None:
    take(api_a)
    asked = ask(api_b, resource="src/auth/")
    clock.freeze(frozen_clock + timedelta(seconds=61))
    error = error_of(
        api_a.post(f"/leases/handoff/{asked['id']}/decline", {"reason": "late"}),
        409,
        "handoff_answered",
    )
    assert error["status"] == "lapsed"
    assert HandoffRequest.objects.get(pk=asked["id"]).status == "open"
    assert kinds() == ["handoff_requested"]
