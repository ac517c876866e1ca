"""A hand asking again for a node it holds, in the other mode, over REST (the hot path first, then
the service: tests/hotpath_client.py). A tenure keeps the mode it was granted in: asked in the
other mode, the acquire is refused `409 held_in_other_mode`, saying the process holds it so and
must release it to take it the other way, and the tenure stays as it was; asked in the mode
held, it renews (`leases.engine.renew_holder`, `leases.services.other_mode_error`).

History: the history harness (tests/reliability) once saw the hot statement grant a second,
exclusive tenure beside the caller's own live shared one; the fix made the caller's own tenure
of the node stand in the way of a grant (`leases.tree.in_the_way`), and the service then renewed
the shared tenure for the exclusive ask (201, `mode: shared`): the hand believed it held the
node alone while another hand went on to share it (issue 33, item 7)."""

from __future__ import annotations

from typing import Any

import pytest

from hands import services as hand_services
from leases import names
from leases.models import Event, Lease, Waiter
from tests.support.api import Api, error_of, mint, refusals

pytestmark = pytest.mark.django_db

NAME = "repo/src/web.py"


def acquire(api: Api, mode: str, *, process: str = "p", ttl_s: int = 60, **extra: Any) -> Any:
    body = {"resource": NAME, "ttl_s": ttl_s, "process_id": process, "mode": mode, **extra}
    return api.post("/leases/acquire", body)


def granted(response: Any) -> dict[str, Any]:
    assert response.status_code in (200, 201), response.content
    return response.json()


def tenures() -> list[tuple[str, str, int]]:
    """The node's held tenures: (holder, mode, fence), by fence."""
    rows = Lease.objects.filter(node=names.node_of(NAME), status="held").order_by("fence")
    return [(row.holder, row.mode, row.fence) for row in rows]


def row_of(fence: int) -> tuple[Any, Any]:
    lease = Lease.objects.get(node=names.node_of(NAME), fence=fence, status="held")
    return lease.renewed_at, lease.deadline


def test_a_shared_holder_asking_exclusive_is_refused_and_keeps_its_shared_tenure(
    api_a: Api, api_b: Api
) -> None:
    a = api_a.hand.name
    shared = granted(acquire(api_a, "shared"))
    before = row_of(shared["fence"])
    error = error_of(acquire(api_a, "exclusive"), 409, "held_in_other_mode")
    assert (error["resource"], error["fence"], error["mode"]) == (NAME, shared["fence"], "shared")
    assert "release" in error["message"] and "exclusive" in error["message"]
    # Nothing written: the shared tenure as it was, no exclusive one, one grant on record.
    assert tenures() == [(a, "shared", shared["fence"])]
    assert row_of(shared["fence"]) == before
    assert Event.objects.filter(kind="lease_acquired", resource=NAME).count() == 1
    assert len(refusals("held_in_other_mode")) == 1
    # So the hand knows it does not hold the node alone: another hand may share it...
    beside = granted(acquire(api_b, "shared"))
    assert tenures() == [(a, "shared", shared["fence"]), (beside["holder"], "shared", 2)]
    # ...and, once both let go, the exclusive tenure is the hand's, the next fence.
    for api, fence in ((api_a, shared["fence"]), (api_b, beside["fence"])):
        released = api.post("/leases/release", {"resource": NAME, "fence": fence})
        assert released.status_code == 200, released.content
    taken = granted(acquire(api_a, "exclusive"))
    assert (taken["mode"], taken["fence"]) == ("exclusive", 3)


def test_an_exclusive_holder_asking_shared_is_refused_and_keeps_its_exclusive_tenure(
    api_a: Api, api_b: Api
) -> None:
    a = api_a.hand.name
    held = granted(acquire(api_a, "exclusive"))
    before = row_of(held["fence"])
    error = error_of(acquire(api_a, "shared"), 409, "held_in_other_mode")
    assert (error["resource"], error["fence"], error["mode"]) == (NAME, held["fence"], "exclusive")
    assert tenures() == [(a, "exclusive", held["fence"])]
    assert row_of(held["fence"]) == before
    # Still the node's only holder: another hand's shared ask is denied by it.
    denial = error_of(acquire(api_b, "shared"), 409, "lease_held")
    assert (denial["holder"], denial["mode"]) == (a, "exclusive")
    assert Event.objects.filter(kind="lease_acquired", resource=NAME).count() == 1


@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_asking_again_in_the_mode_held_renews_it(api_a: Api, mode: str) -> None:
    first = granted(acquire(api_a, mode, ttl_s=30))
    again = granted(acquire(api_a, mode, ttl_s=90))
    assert (again["fence"], again["mode"]) == (first["fence"], mode)
    assert again["expires_in_s"] > first["expires_in_s"]
    assert tenures() == [(api_a.hand.name, mode, first["fence"])]
    assert Event.objects.filter(kind="lease_acquired", resource=NAME).count() == 1


def test_a_wait_for_the_other_mode_is_refused_at_once_not_left_to_wait_for_itself(
    api_a: Api,
) -> None:
    shared = granted(acquire(api_a, "shared"))
    # No wait ends one's own tenure: refused for what it is, never lease_held after the wait.
    error = error_of(acquire(api_a, "exclusive", wait_s=30), 409, "held_in_other_mode")
    assert error["fence"] == shared["fence"]
    assert not Waiter.objects.exists()
    assert tenures() == [(api_a.hand.name, "shared", shared["fence"])]


def test_the_callers_own_tenure_is_named_before_sharers_whose_windows_end_sooner(
    api_a: Api, workspace
) -> None:
    """The denial's read lists the first five tenures in the way: six others sharing the node,
    each ending before the caller's own, must not hide it (a lease_held naming one of them
    would send the caller to wait for its own tenure)."""
    shared = granted(acquire(api_a, "shared", ttl_s=600))
    for n in range(6):
        hand, _ = hand_services.hand_create(workspace=workspace, name=f"reader-{n}")
        granted(acquire(Api(mint(hand, ["leases"]), hand), "shared", process=f"r{n}", ttl_s=60))
    error = error_of(acquire(api_a, "exclusive"), 409, "held_in_other_mode")
    assert (error["fence"], error["mode"]) == (shared["fence"], "shared")
    assert len(tenures()) == 7


def test_a_take_over_takes_the_hands_other_processes_never_the_callers_own_mode(
    api_a: Api,
) -> None:
    shared = granted(acquire(api_a, "shared", process="p1"))
    error = error_of(
        acquire(api_a, "exclusive", process="p1", take_over=True), 409, "held_in_other_mode"
    )
    assert error["fence"] == shared["fence"]
    assert tenures() == [(api_a.hand.name, "shared", shared["fence"])]
    assert not Event.objects.filter(kind="lease_taken_over").exists()


def test_another_process_of_the_hand_holding_it_in_the_other_mode_is_in_the_way_as_before(
    api_a: Api,
) -> None:
    granted(acquire(api_a, "shared", process="p1"))
    denial = error_of(acquire(api_a, "exclusive", process="p2"), 409, "lease_held")
    assert (denial["own_hand"], denial["process_id"], denial["mode"]) == (True, "p1", "shared")
    taken = granted(acquire(api_a, "exclusive", process="p2", take_over=True))
    assert (taken["mode"], taken["fence"]) == ("exclusive", 2)
