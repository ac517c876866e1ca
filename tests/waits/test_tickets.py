"""A waiter keeps its place across calls: a wait that ends denied answers its place (`ticket`),
kept for `ticket_kept_s`; passed back, the next acquire is served from it, ahead of every
request that joined the line after it, however often the waiter comes back. While its waiter is
away the place keeps nobody out, and unused it goes."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from hands import services as hand_services
from leases import clock, queue
from leases.models import Lease, Waiter
from tests.support.api import Api, acquire, error_of, mint


@pytest.fixture
def api_c(workspace: Any) -> Api:
    hand = hand_services.hand_create(workspace=workspace, name="hand-c")[0]
    return Api(mint(hand, ["leases"]), hand)


def release(api: Api, lease: dict[str, Any]) -> None:
    body = {
        "resource": lease["resource"],
        "fence": lease["fence"],
        "process_id": lease["process_id"],
    }
    answer = api.post("/leases/release", body)
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


@pytest.mark.django_db(transaction=True)
def test_a_waiter_back_with_its_ticket_goes_before_one_that_joined_while_it_was_away(
    api_a: Api, api_b: Api, api_c: Api
) -> None:
    held = acquire(api_a, ttl=60).json()
    first = error_of(acquire(api_b, wait_s=0.2), 409, "lease_held")
    answers: dict[str, Any] = {}

    def wait(name: str, api: Api, **extra: Any) -> None:
        try:
            answers[name] = acquire(api, wait_s=10, **extra)
        finally:
            connection.close()  # this thread's own

    # C joins the line while B is away; then B comes back with its ticket. Both wait.
    later = threading.Thread(target=wait, args=("c", api_c))
    later.start()
    clock_wait_until(lambda: Waiter.objects.filter(holder="hand-c").exists())
    back = threading.Thread(target=wait, args=("b", api_b), kwargs={"ticket": first["ticket"]})
    back.start()
    clock_wait_until(lambda: _counting("hand-b"))
    release(api_a, held)
    back.join(15)
    assert answers["b"].status_code == 201, answers["b"].content  # B, from its kept place
    later.join(15)
    assert answers["c"].status_code == 409  # C still behind B when its wait ran out


@pytest.mark.django_db
def test_an_absent_waiters_place_keeps_nobody_out(api_a: Api, api_b: Api, api_c: Api) -> None:
    held = acquire(api_a, ttl=60).json()
    first = error_of(acquire(api_b, wait_s=0.2), 409, "lease_held")
    release(api_a, held)
    # B is away: the name is free, and C takes it rather than leave it idle for B.
    assert acquire(api_c).status_code == 201
    late = error_of(acquire(api_b, ticket=first["ticket"]), 409, "lease_held")
    assert late["holder"] == "hand-c"


@pytest.mark.django_db
def test_a_place_not_taken_up_in_time_is_gone(api_a: Api, api_b: Api) -> None:
    acquire(api_a, ttl=600)
    first = error_of(acquire(api_b, wait_s=0.2), 409, "lease_held")
    assert queue.resume(
        first["ticket"],
        workspace_id=api_b.hand.workspace_id,
        resource="dev-server",
        holder="hand-b",
        process_id="hand-b:1",
        mode="exclusive",
    )
    queue.keep(queue.Ticket(first["ticket"], clock.db_now(), api_b.hand.workspace_id))
    with clock.travel(queue.TICKET_KEEP_S + 1):
        gone = queue.resume(
            first["ticket"],
            workspace_id=api_b.hand.workspace_id,
            resource="dev-server",
            holder="hand-b",
            process_id="hand-b:1",
            mode="exclusive",
        )
    assert gone is None


@pytest.mark.django_db
def test_another_requests_ticket_is_no_place(api_a: Api, api_b: Api, api_c: Api) -> None:
    acquire(api_a, ttl=60)
    first = error_of(acquire(api_b, wait_s=0.2), 409, "lease_held")
    assert (
        queue.resume(
            first["ticket"],
            workspace_id=api_c.hand.workspace_id,
            resource="dev-server",
            holder="hand-c",
            process_id="hand-c:1",
            mode="exclusive",
        )
        is None
    )
    error_of(acquire(api_c, ticket=first["ticket"]), 409, "lease_held")
    assert Waiter.objects.get(id=first["ticket"]).holder == "hand-b"
    assert Lease.objects.get(resource="dev-server").holder == "hand-a"


@pytest.mark.django_db
def test_a_ticket_is_a_positive_integer(api_b: Api) -> None:
    for bad in (0, -1, "7", 1.5, True):
        body = {"resource": "x", "ttl_s": 30, "process_id": "host:1", "ticket": bad}
        error_of(api_b.post("/leases/acquire", body), 400, "validation_error")


def _counting(holder: str) -> bool:
    return Waiter.objects.filter(holder=holder, expires_at__gt=clock.now_expression()).exists()


def clock_wait_until(condition: Any, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)
