"""A tenure is held by a process identity (DESIGN rule 6): two processes of one hand are two
holders. The second is denied like another hand ("held by your own hand in another process"),
unless it takes the tenure over (`take_over: true`: a new fence, `lease_taken_over`), which the
first learns at its next renewal (`lease_lost`). A process's own leases on one line of the tree
never conflict."""

from __future__ import annotations

from typing import Any

import pytest

from hands.models import Hand
from leases.models import Event, Lease, LeaseStatus
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db

# Two processes of one hand (a harness session's own sentence: tests/harnesses).
FIRST, SECOND = "build-box:4711", "build-box:4712"


def acquire(api: Api, resource: str, process: str, **extra: Any) -> Any:
    return api.post(
        "/leases/acquire", {"resource": resource, "ttl_s": 30, "process_id": process, **extra}
    )


def take(api: Api, resource: str, process: str, **extra: Any) -> dict[str, Any]:
    answer = acquire(api, resource, process, **extra)
    assert answer.status_code == 201, answer.content
    return answer.json()


@pytest.fixture
def hand_a(owner: Hand) -> Api:
    """hand-a's one key."""
    return Api(mint(owner, ["work", "leases"]), owner)


def test_it_denies_the_same_hand_from_another_process_and_says_so(hand_a: Api) -> None:
    first = take(hand_a, "src/app.py", FIRST)
    error = error_of(acquire(hand_a, "src/app.py", SECOND), 409, "lease_held")
    assert error["holder"] == "hand-a" and error["fence"] == first["fence"] == 1
    assert error["own_hand"] is True and error["process_id"] == FIRST
    assert error["message"].startswith(
        f"src/app.py is held by your own hand 'hand-a' in another process ('{FIRST}') (fence 1)"
    )
    assert "take_over: true" in error["message"]
    # Nothing moved: the first process still holds it, at its fence, and only one grant happened.
    lease = Lease.objects.get(resource="src/app.py")
    assert (lease.status, lease.process_id, lease.fence) == (LeaseStatus.HELD, FIRST, 1)
    assert Event.objects.filter(kind="lease_acquired").count() == 1
    # The first process's renewal still works; the second's is refused.
    renewed = hand_a.post(
        "/leases/renew", {"resource": "src/app.py", "fence": 1, "process_id": FIRST}
    )
    assert renewed.status_code == 200, renewed.content
    error_of(
        hand_a.post("/leases/renew", {"resource": "src/app.py", "fence": 1, "process_id": SECOND}),
        409,
        "process_mismatch",
    )


def test_the_same_process_asking_again_renews(hand_a: Api) -> None:
    take(hand_a, "src/app.py", FIRST)
    again = take(hand_a, "src/app.py", FIRST)
    assert (again["fence"], again["process_id"]) == (1, FIRST)
    assert Event.objects.filter(kind="lease_acquired").count() == 1


def test_another_process_is_in_the_way_on_the_line_of_the_tree(hand_a: Api) -> None:
    take(hand_a, "src/", FIRST)
    # Below the first process's directory: in the way, as another hand's would be.
    below = error_of(acquire(hand_a, "src/app.py", SECOND), 409, "lease_held")
    assert (below["resource"], below["own_hand"], below["process_id"]) == ("src/", True, FIRST)
    # Above it, likewise.
    above = error_of(acquire(hand_a, "src", SECOND), 409, "lease_held")
    assert above["process_id"] == FIRST
    # Beside it: nothing in the way.
    assert take(hand_a, "docs/guide.md", SECOND)["fence"] == 1


def test_one_process_own_leases_on_a_line_of_the_tree_never_conflict(hand_a: Api) -> None:
    take(hand_a, "src/", FIRST)
    assert take(hand_a, "src/app.py", FIRST)["fence"] == 1
    assert take(hand_a, "src/lib/", FIRST, mode="shared")["fence"] == 1
    assert take(hand_a, "src/lib/util.py", FIRST)["fence"] == 1
    assert Lease.objects.filter(status=LeaseStatus.HELD, process_id=FIRST).count() == 4


def test_shared_tenures_of_two_processes_of_one_hand_are_two_holders(hand_a: Api) -> None:
    take(hand_a, "docs/", FIRST, mode="shared")
    error = error_of(acquire(hand_a, "docs/", SECOND, mode="shared"), 409, "lease_held")
    assert (error["mode"], error["process_id"]) == ("shared", FIRST)
    # A shared tenure of the first process on a directory above does not stand in the way of
    # the second's shared one below it: shared tenures coexist, whoever holds them.
    assert take(hand_a, "docs/guide/", SECOND, mode="shared")["fence"] == 1
    taken = take(hand_a, "docs/", SECOND, mode="shared", take_over=True)
    assert (taken["process_id"], taken["mode"], taken["fence"]) == (SECOND, "shared", 2)
    event = Event.objects.get(kind="lease_taken_over")
    assert (event.fence, event.data["taken_fence"], event.data["mode"]) == (2, 1, "shared")


def test_take_over_moves_the_tenure_with_a_new_fence_and_an_event(hand_a: Api) -> None:
    take(hand_a, "src/app.py", FIRST)
    taken = take(hand_a, "src/app.py", SECOND, take_over=True)
    assert (taken["holder"], taken["process_id"], taken["fence"]) == ("hand-a", SECOND, 2)
    lease = Lease.objects.get(resource="src/app.py")
    assert (lease.status, lease.process_id, lease.fence) == (LeaseStatus.HELD, SECOND, 2)
    event = Event.objects.get(kind="lease_taken_over")
    assert (event.hand, event.actor, event.resource, event.fence) == (
        "hand-a",
        "hand-a",
        "src/app.py",
        2,
    )
    assert event.data == {
        "taken_resource": "src/app.py",
        "taken_fence": 1,
        "from_process_id": FIRST,
        "process_id": SECOND,
        "mode": "exclusive",
    }
    # The new tenure starts on record as every tenure does (`fences/verify` reads it so).
    grant = Event.objects.get(kind="lease_acquired", fence=2)
    assert grant.data["taken_over"] == [1]
    # Asking to take over what the process holds already is a renewal, no event.
    again = take(hand_a, "src/app.py", SECOND, take_over=True)
    assert again["fence"] == 2
    assert Event.objects.filter(kind="lease_taken_over").count() == 1


def test_the_first_process_learns_at_its_next_renewal_that_it_lost_the_tenure(
    hand_a: Api,
) -> None:
    take(hand_a, "src/app.py", FIRST)
    kept = take(hand_a, "src/kept.py", FIRST)
    take(hand_a, "src/app.py", SECOND, take_over=True)
    error = error_of(
        hand_a.post("/leases/renew", {"resource": "src/app.py", "fence": 1, "process_id": FIRST}),
        409,
        "lease_lost",
    )
    assert error["current_fence"] == 2
    assert "taken over" in error["message"] and SECOND in error["message"]
    # Its renew-all, naming what it believes it holds, says which it lost and why.
    answer = hand_a.post(
        "/leases/renew-all",
        {
            "process_id": FIRST,
            "held": [
                {"resource": "src/app.py", "fence": 1},
                {"resource": "src/kept.py", "fence": 1},
            ],
        },
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert [lease["resource"] for lease in body["renewed"]] == [kept["resource"]]
    [lost] = body["not_renewed"]
    assert (lost["resource"], lost["fence"], lost["code"]) == ("src/app.py", 1, "lease_lost")
    assert "taken over" in lost["message"]
    assert (lost["lease"]["process_id"], lost["lease"]["fence"]) == (SECOND, 2)
    # Without `held` the renew-all cannot know: the lease is in neither list (as documented).
    plain = hand_a.post("/leases/renew-all", {"process_id": FIRST}).json()
    assert [lease["resource"] for lease in plain["renewed"]] == ["src/kept.py"]
    assert plain["not_renewed"] == []
    # The new holder's renewals are unaffected.
    mine = hand_a.post("/leases/renew-all", {"process_id": SECOND}).json()
    assert [(lease["resource"], lease["fence"]) for lease in mine["renewed"]] == [("src/app.py", 2)]
    # The old fence is stale for every fenced call.
    error_of(
        hand_a.post("/leases/check", {"resource": "src/app.py", "fence": 1}), 409, "stale_fence"
    )


def test_take_over_never_takes_another_hands_tenure(hand_a: Api, api_b: Api) -> None:
    take(api_b, "src/app.py", FIRST)
    error = error_of(acquire(hand_a, "src/app.py", SECOND, take_over=True), 409, "lease_held")
    assert error["holder"] == "hand-b" and "own_hand" not in error
    lease = Lease.objects.get(resource="src/app.py")
    assert (lease.holder, lease.process_id, lease.fence) == ("hand-b", FIRST, 1)
    assert not Event.objects.filter(kind="lease_taken_over").exists()


def test_a_take_over_refused_for_another_reason_takes_nothing(hand_a: Api, api_b: Api) -> None:
    take(hand_a, "docs/", FIRST, mode="shared")
    api_b.post(
        "/leases/acquire", {"resource": "docs/", "ttl_s": 10, "process_id": "b:1", "mode": "shared"}
    )
    # An exclusive take-over would end the first process's shared tenure, but hand-b's is in
    # the way too: refused (named first: its window ends first), and the first process's
    # tenure stands as it was.
    error = error_of(acquire(hand_a, "docs/", SECOND, take_over=True), 409, "lease_held")
    assert (error["holder"], error["others"]) == ("hand-b", 1)
    mine = Lease.objects.get(resource="docs/", shared_by="hand-a")
    assert (mine.status, mine.process_id, mine.fence) == (LeaseStatus.HELD, FIRST, 1)
    assert not Event.objects.filter(kind="lease_taken_over").exists()


def test_take_over_of_a_free_name_is_an_acquire(hand_a: Api) -> None:
    taken = take(hand_a, "src/new.py", SECOND, take_over=True)
    assert taken["fence"] == 1
    assert not Event.objects.filter(kind="lease_taken_over").exists()


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_take_over_must_be_a_boolean(api_a: Api, value: object) -> None:
    error = error_of(acquire(api_a, "src/app.py", FIRST, take_over=value), 400, "validation_error")
    assert "take_over" in error["fields"]


@pytest.mark.parametrize("name", [" a", "run/1/slot/0"])
def test_held_names_are_checked(api_a: Api, name: str) -> None:
    """A name no resource lease may have (a run's slot is its attempt's, never renewed here)."""
    error = error_of(
        api_a.post(
            "/leases/renew-all", {"process_id": FIRST, "held": [{"resource": name, "fence": 1}]}
        ),
        400,
        "validation_error",
    )
    assert "held" in error["fields"]


def test_a_held_name_never_leased_is_answered_not_found(api_a: Api) -> None:
    body = api_a.post(
        "/leases/renew-all", {"process_id": FIRST, "held": [{"resource": "nothing", "fence": 3}]}
    ).json()
    assert body["not_renewed"] == [
        {
            "resource": "nothing",
            "fence": 3,
            "lease": None,
            "code": "not_found",
            "message": "no lease on 'nothing'",
        }
    ]


def test_take_over_takes_the_other_process_tenures_along_the_line(hand_a: Api) -> None:
    """A crashed session held a directory and a file below it: both are in the way of the file,
    and both are the new session's to take (else the denial's own advice would loop)."""
    take(hand_a, "src/", FIRST)
    take(hand_a, "src/a.py", FIRST)
    take(hand_a, "lib/b.py", FIRST)  # off the line: stays the first process's
    taken = take(hand_a, "src/a.py", SECOND, take_over=True)
    assert (taken["process_id"], taken["fence"]) == (SECOND, 2)
    ended = Event.objects.filter(kind="lease_taken_over").order_by("id")
    # Each event is the new tenure's (resource, fence) and names the tenure it ended.
    assert sorted(
        (event.resource, event.fence, event.data["taken_resource"], event.data["taken_fence"])
        for event in ended
    ) == [("src/a.py", 2, "src/", 1), ("src/a.py", 2, "src/a.py", 1)]
    assert Lease.objects.get(resource="src/").status == LeaseStatus.FREE
    assert Lease.objects.get(resource="lib/b.py").process_id == FIRST


def test_another_process_of_the_hand_cannot_release_the_tenure(hand_a: Api) -> None:
    """The denial names the fence; a release naming another process is refused, so a tenure moves
    between processes only by a take-over, on the record."""
    held = take(hand_a, "src/app.py", FIRST)
    denied = error_of(acquire(hand_a, "src/app.py", SECOND), 409, "lease_held")
    assert denied["fence"] == held["fence"]
    body = {"resource": "src/app.py", "fence": held["fence"], "process_id": SECOND}
    error_of(hand_a.post("/leases/release", body), 409, "process_mismatch")
    lease = Lease.objects.get(resource="src/app.py")
    assert (lease.status, lease.process_id) == (LeaseStatus.HELD, FIRST)
    body["process_id"] = FIRST
    assert hand_a.post("/leases/release", body).status_code == 200
    # Retried by its own process, the release answers as the first did.
    assert hand_a.post("/leases/release", body).status_code == 200
    # Named by another process once released, it is not that process's to have released.
    body["process_id"] = SECOND
    error_of(hand_a.post("/leases/release", body), 409, "lease_lost")
