"""Resource leases over HTTP: acquire, renew, release, check, list and break."""

from __future__ import annotations

from datetime import datetime
from unittest import mock

import pytest

from leases import clock
from leases.models import Event, Lease
from leasing import hot
from tests.support.api import Api, error_of, refusals

pytestmark = pytest.mark.django_db


def acquire(api: Api, resource: str = "src/auth/", ttl: float = 60, process: str = "p1", **extra):
    return api.post(
        "/leases/acquire", {"resource": resource, "ttl_s": ttl, "process_id": process, **extra}
    )


def test_it_acquires_a_free_resource_with_the_contract_lease_shape(
    api_a: Api, frozen_clock: datetime
) -> None:
    response = acquire(api_a)
    assert response.status_code == 201
    lease = response.json()
    assert lease == {
        "resource": "src/auth/",
        "kind": "resource",
        "mode": "exclusive",
        "holder": "hand-a",
        "process_id": "p1",
        "fence": 1,
        "state": "live",
        "ttl_s": 60,
        "grace_s": 0,
        "acquired_at": "2030-01-01T12:00:00Z",
        "renewed_at": "2030-01-01T12:00:00Z",
        "expires_at": "2030-01-01T12:01:00Z",
        "expires_in_s": 60,
        "released_at": None,
        "queued_at": None,
        "server_time": "2030-01-01T12:00:00Z",
    }
    assert Event.objects.filter(kind="lease_acquired", resource="src/auth/", fence=1).count() == 1


def test_a_held_resource_answers_lease_held_with_holder_fence_and_time_left(
    api_a: Api, api_b: Api, frozen_clock: datetime
) -> None:
    acquire(api_a)
    clock.advance(20)
    error = error_of(acquire(api_b), 409, "lease_held")
    assert (error["holder"], error["fence"], error["state"]) == ("hand-a", 1, "live")
    assert error["expires_in_s"] == 40
    assert error["lost_in_s"] == 40  # a resource lease has no grace
    # The window is the holder's current one, and the message says so (issue 17.4).
    assert error["message"] == (
        "src/auth/ is held by hand 'hand-a' (fence 1), renewing; its current window ends in "
        "40 s (it is renewed while the holder works): wait, pick other work, or escalate"
    )
    assert [r.hand for r in refusals("lease_held")] == ["hand-b"]
    assert Lease.objects.get(resource="src/auth/").holder == "hand-a"


def test_a_second_acquire_by_the_holder_renews_and_keeps_the_fence(
    api_a: Api, frozen_clock: datetime
) -> None:
    acquire(api_a)
    clock.advance(30)
    lease = acquire(api_a).json()
    assert (lease["fence"], lease["expires_in_s"]) == (1, 60)
    assert Event.objects.filter(kind="lease_acquired").count() == 1


def test_renew_release_and_check_carry_the_fence(
    api_a: Api, api_b: Api, frozen_clock: datetime
) -> None:
    acquire(api_a, ttl=10)
    clock.advance(8)
    renewed = api_a.post("/leases/renew", {"resource": "src/auth/", "fence": 1, "process_id": "p1"})
    assert renewed.status_code == 200
    assert renewed.json()["expires_in_s"] == 10
    check = api_b.post("/leases/check", {"resource": "src/auth/", "fence": 1})
    assert check.status_code == 200
    assert check.json()["valid"] is True
    assert check.json()["lease"]["holder"] == "hand-a"
    error = error_of(
        api_b.post("/leases/check", {"resource": "src/auth/", "fence": 0}), 409, "stale_fence"
    )
    assert error["current_fence"] == 1
    error_of(
        api_a.post("/leases/renew", {"resource": "src/auth/", "fence": 1, "process_id": "p2"}),
        409,
        "process_mismatch",
    )
    error_of(
        api_b.post("/leases/release", {"resource": "src/auth/", "fence": 1}), 403, "not_holder"
    )
    released = api_a.post("/leases/release", {"resource": "src/auth/", "fence": 1})
    assert released.status_code == 200
    body = released.json()
    assert body["released"] is True
    assert (body["lease"]["state"], body["lease"]["holder"]) == ("free", None)
    assert Lease.objects.get(resource="src/auth/").status == "free"
    error_of(api_b.post("/leases/check", {"resource": "src/auth/", "fence": 1}), 409, "lease_lost")
    assert acquire(api_b).json()["fence"] == 2
    error_of(
        api_b.post("/leases/check", {"resource": "nothing-here", "fence": 1}), 404, "not_found"
    )


def test_an_expired_lease_is_refused_and_taken_over_at_once(
    api_a: Api, api_b: Api, frozen_clock: datetime
) -> None:
    acquire(api_a, ttl=5)
    clock.advance(5.001)
    error_of(
        api_a.post("/leases/renew", {"resource": "src/auth/", "fence": 1, "process_id": "p1"}),
        409,
        "lease_lost",
    )
    lease = acquire(api_b).json()
    assert (lease["holder"], lease["fence"]) == ("hand-b", 2)
    error = error_of(
        api_a.post("/leases/release", {"resource": "src/auth/", "fence": 1}), 409, "stale_fence"
    )
    assert error["current_fence"] == 2


def test_slot_resources_cannot_be_acquired_as_resources(api_a: Api, run) -> None:
    error = error_of(acquire(api_a, resource=f"run/{run.pk}/slot/0"), 400, "validation_error")
    assert "resource" in error["fields"]


def test_it_lists_leases_by_prefix_holder_and_state(
    api_a: Api, api_b: Api, boss: Api, frozen_clock: datetime
) -> None:
    acquire(api_a, "src/auth/login.py", ttl=10)
    acquire(api_a, "src/billing/", ttl=100)
    acquire(api_b, "migrations", ttl=100)
    clock.advance(20)  # the first has expired (grace 0: lost)
    everything = api_a.get("/leases").json()
    assert [lease["resource"] for lease in everything] == [
        "migrations",
        "src/billing/",
        "src/auth/login.py",
    ]
    assert all(lease["server_time"] == "2030-01-01T12:00:20Z" for lease in everything)
    assert [x["resource"] for x in api_a.get("/leases", {"prefix": "src/"}).json()] == [
        "src/billing/",
        "src/auth/login.py",
    ]
    assert [x["resource"] for x in api_a.get("/leases", {"holder": "hand-b"}).json()] == [
        "migrations"
    ]
    live = api_a.get("/leases", {"state": "live"}).json()
    assert [(x["resource"], x["expires_in_s"]) for x in live] == [
        ("migrations", 80),
        ("src/billing/", 80),
    ]
    lost = api_a.get("/leases", {"state": "lost"}).json()
    assert [(x["resource"], x["state"]) for x in lost] == [("src/auth/login.py", "lost")]
    error_of(api_a.get("/leases", {"state": "held"}), 400, "validation_error")


def test_a_supervisor_breaks_a_lease_and_the_old_fence_goes_stale(
    api_a: Api, api_b: Api, boss: Api
) -> None:
    acquire(api_a, "migrations")
    error = error_of(
        api_a.post("/leases/break", {"resource": "migrations", "reason": "stuck"}),
        403,
        "scope_denied",
    )
    assert error["required_scope"] == "supervise"
    response = boss.post("/leases/break", {"resource": "migrations", "reason": "stuck"})
    assert response.status_code == 200
    assert (response.json()["state"], response.json()["fence"]) == ("free", 2)
    event = Event.objects.get(kind="lease_broken")
    assert (event.actor, event.hand, event.data["reason"]) == ("boss", "hand-a", "stuck")
    stale = error_of(
        api_a.post("/leases/renew", {"resource": "migrations", "fence": 1, "process_id": "p1"}),
        409,
        "stale_fence",
    )
    assert stale["current_fence"] == 2
    assert acquire(api_b, "migrations").json()["fence"] == 3
    error_of(boss.post("/leases/break", {"resource": "nothing", "reason": "x"}), 404, "not_found")
    error = error_of(
        boss.post("/leases/break", {"resource": "migrations"}), 400, "validation_error"
    )
    assert "reason" in error["fields"]


def test_breaking_a_slot_lease_ends_its_attempt_as_lost(api_a: Api, boss: Api, run) -> None:
    attempt = api_a.post(f"/runs/{run.pk}/claim", {"process_id": "a"}).json()
    resource = attempt["lease"]["resource"]
    assert boss.post("/leases/break", {"resource": resource, "reason": "wedged"}).status_code == 200
    assert api_a.get(f"/attempts/{attempt['id']}").json()["state"] == "lost"
    error_of(
        api_a.post(
            f"/attempts/{attempt['id']}/reports",
            {"fence": attempt["fence"], "process_id": "a", "kind": "heartbeat"},
        ),
        409,
        "lease_lost",
    )


def test_a_renewal_is_one_statement(api_a: Api, django_assert_num_queries) -> None:
    """The key checked and the lease renewed by one statement (`leasing.hot.run_statement`,
    through psycopg itself), and nothing through Django once the key's workspace is known and
    its last use is fresh."""
    acquire(api_a)  # reads the key's workspace, for good
    api_a.get("/me")  # last_used_at is fresh for the minute
    with (
        mock.patch.object(hot, "run_statement", wraps=hot.run_statement) as statements,
        django_assert_num_queries(0),
    ):
        renewed = api_a.post(
            "/leases/renew", {"resource": "src/auth/", "fence": 1, "process_id": "p1"}
        )
    assert renewed.status_code == 200, renewed.content
    assert statements.call_count == 1
