"""A waiter keeps its place across calls: a wait that ends denied answers its place (`ticket`),
kept for `ticket_kept_s`; passed back, the next acquire is served from it, before every request
that came after it, however often the waiter comes back. Unused, the place goes."""

from __future__ import annotations

from typing import Any

import pytest

from leases import clock, queue
from leases.models import Lease, Waiter
from tests.support.api import Api, acquire, error_of, mint


@pytest.fixture
def api_c(workspace: Any) -> Api:
    from hands import services as hand_services

    hand = hand_services.hand_create(workspace=workspace, name="hand-c")[0]
    return Api(mint(hand, ["leases"]), hand)


def release(api: Api, lease: dict[str, Any]) -> None:
    answer = api.post(
        "/leases/release",
        {"resource": lease["resource"], "fence": lease["fence"], "process_id": lease["process_id"]},
    )
    assert answer.status_code == 200, answer.content


@pytest.mark.django_db
def test_a_wait_that_ends_denied_keeps_its_place_and_says_so(api_a: Api, api_b: Api) -> None:
    acquire(api_a, ttl=60)
    denied = error_of(acquire(api_b, wait_s=0.2), 409, "lease_held")
    assert isinstance(denied["ticket"], int)
    assert denied["ticket_kept_s"] == queue.TICKET_KEEP_S
    assert Waiter.objects.filter(id=denied["ticket"], holder="hand-b").exists()
    # A denial of a request that did not wait has no place to keep.
    assert "ticket" not in error_of(acquire(api_b), 409, "lease_held")


@pytest.mark.django_db
def test_a_waiter_that_comes_back_with_its_ticket_goes_before_a_later_arrival(
    api_a: Api, api_b: Api, api_c: Api
) -> None:
    held = acquire(api_a, ttl=60).json()
    first = error_of(acquire(api_b, wait_s=0.2), 409, "lease_held")
    # C arrives while B is between two calls, and waits too: behind B.
    later = error_of(acquire(api_c, wait_s=0.2), 409, "lease_held")
    assert later["position"] == 2 and later["ahead"] == ["hand-a", "hand-b"]
    # B comes back with its ticket, again and again: it keeps its place each time.
    again = error_of(acquire(api_b, wait_s=0.2, ticket=first["ticket"]), 409, "lease_held")
    assert again["ticket"] == first["ticket"] and again["position"] == 1
    release(api_a, held)
    # The way is clear, but B's place comes first: C, without waiting, is denied...
    denied = error_of(acquire(api_c, ticket=later["ticket"]), 409, "lease_held")
    assert denied["ahead"] == ["hand-b"]
    # ...and B, with its ticket, is served.
    granted = acquire(api_b, ticket=first["ticket"])
    assert granted.status_code == 201, granted.content
    assert granted.json()["queued_at"] is not None
    assert Lease.objects.get(resource="dev-server").holder == "hand-b"
    assert not Waiter.objects.filter(id=first["ticket"]).exists()


@pytest.mark.django_db
def test_a_place_not_taken_up_in_time_is_gone(api_a: Api, api_b: Api, api_c: Api) -> None:
    held = acquire(api_a, ttl=600).json()
    first = error_of(acquire(api_b, wait_s=0.2), 409, "lease_held")
    with clock.travel(queue.TICKET_KEEP_S + 1):
        release(api_a, held)
        # B's place no longer counts: C, a newcomer, is served, and B's ticket is a newcomer's.
        assert acquire(api_c).status_code == 201
        late = error_of(acquire(api_b, ticket=first["ticket"]), 409, "lease_held")
        assert late["holder"] == "hand-c"


@pytest.mark.django_db
def test_another_requests_ticket_is_no_place(api_a: Api, api_b: Api, api_c: Api) -> None:
    acquire(api_a, ttl=60)
    first = error_of(acquire(api_b, wait_s=0.2), 409, "lease_held")
    taken = error_of(acquire(api_c, ticket=first["ticket"]), 409, "lease_held")
    # C asked from B's place: it was not C's, so C stands behind B, as a newcomer would.
    assert taken["ahead"] == ["hand-a", "hand-b"]
    assert Waiter.objects.get(id=first["ticket"]).holder == "hand-b"


@pytest.mark.django_db
def test_a_ticket_is_a_positive_integer(api_b: Api) -> None:
    for bad in (0, -1, "7", 1.5, True):
        body = {"resource": "x", "ttl_s": 30, "process_id": "host:1", "ticket": bad}
        error_of(api_b.post("/leases/acquire", body), 400, "validation_error")
